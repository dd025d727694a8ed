"""The one progress bar of the long-running commands: a ``rich`` bar on stderr, or nothing.

It shows the title, the bar, ``done/total``, elapsed time, the time remaining and one free text
field (rate, last evaluation, ...). ``enabled=False`` makes every method a no-op, so a loop calls
it the same way with ``--no-progress``. Example::

    with ProgressBar(True, total=10_000, title="iql x3") as bar:
        for step in range(0, 10_000, 1000):
            ...
            bar.update(step + 1000, "1,250 steps/s  score 41.2±3.0")
"""

from __future__ import annotations


class ProgressBar:
    """``update(completed, info)`` sets the position, ``advance(n)`` moves it; ``close()`` stops."""

    def __init__(self, enabled: bool, total: int, title: str, start: int = 0):
        self._bar = None
        if not enabled:
            return
        import sys

        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                             console=Console(file=sys.stderr), transient=False)
        self._bar.start()
        self._task = self._bar.add_task(title, total=int(total), completed=int(start), info="")

    def update(self, completed: int, info: str | None = None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=int(completed), **({} if info is None else {"info": info}))

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=int(n))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rate_text(rate: float, unit: str = "steps/s") -> str:
    """``1,234 steps/s``."""
    return f"{rate:,.0f} {unit}"
