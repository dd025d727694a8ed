"""The run folder's bookkeeping, shared by the JAX engine and the preference trainers.

A run folder holds ``config.json``, ``metrics.jsonl`` (one JSON row per logged step, and per
seed for RL runs), ``metrics.csv``, ``checkpoints/`` and ``plots/``. Two rules live here once:

* **resume truncation**: a resumed run keeps only the metric rows up to its checkpoint's step
  (:func:`truncate_metrics`), so the log of a killed-and-resumed run equals the uninterrupted one;
* **the finite check**: the first metric that became NaN or infinite, with where it happened
  (:func:`first_non_finite`), which both trainers turn into one clear error;
* **nothing written is lost**: whole files are written to ``NAME.tmp`` and renamed over
  (:func:`atomic_write`), so a full disk or a kill leaves the previous version intact and no
  partial file; the append-only ``metrics.jsonl`` is only ever appended to (a failed append is
  cut back to where it started) and rewritten, atomically, only when a resume drops rows; a full
  disk or a read-only folder is one :class:`~offrl.errors.RunFolderError` sentence
  (:func:`storage_error`, :func:`disk_errors`, :func:`check_writable`) instead of an ``OSError``.

Nothing here imports JAX or torch.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import shutil
import warnings
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from offrl.errors import ConfigError, OffrlError, RunFolderError

_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}


class RunFolderWarning(UserWarning):
    """Something repaired or skipped in a run folder (a torn last log line, a stale lock)."""


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def storage_error(exc: OSError, where: str | Path, needed: int | None = None) -> RunFolderError | None:
    """The one-sentence :class:`RunFolderError` for a full disk or a folder that cannot be
    written (``where`` is the folder named to the user, ``needed`` the bytes the write wanted),
    or ``None`` when ``exc`` is another ``OSError`` (a bug or a missing file: not translated)."""
    where = Path(where)
    if exc.errno in _DISK_FULL:
        free = _free_bytes(where)
        amount = f": {needed / 1e6:.1f} MB needed" if needed else ""
        left = f", {free / 1e6:.1f} MB free" if free is not None else ""
        return RunFolderError(f"no space left on the device holding {where}{amount}{left}; free some space or "
                              "choose another --out (files already written there are intact).")
    if exc.errno in _NOT_WRITABLE:
        why = "read-only file system" if exc.errno == errno.EROFS else "permission denied"
        return RunFolderError(f"{where} is read-only ({why}); make it writable or copy the run folder somewhere writable.")
    return None


def os_error_sentence(exc: OSError) -> RunFolderError | None:
    """:func:`storage_error` for an ``OSError`` caught far from its write (the CLI's last
    resort): the folder named is the one holding ``exc.filename``, when it has one."""
    if exc.errno not in _DISK_FULL | _NOT_WRITABLE:
        return None
    where = Path(os.fsdecode(exc.filename)).parent if exc.filename else Path("the output folder")
    return storage_error(exc, where)


@contextlib.contextmanager
def disk_errors(where: str | Path, needed: int | None = None) -> Iterator[None]:
    """Turn a full disk or an unwritable folder inside the block into :func:`storage_error`'s sentence."""
    try:
        yield
    except OSError as exc:
        error = storage_error(exc, where, needed)
        if error is None:
            raise
        raise error from None


def check_writable(folder: str | Path) -> None:
    """Refuse, in one sentence, a run folder this process cannot write (read-only mount,
    permissions) before anything in it is touched. A folder that does not exist yet is checked
    at its nearest existing parent."""
    folder = Path(folder)
    target = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if target is None or not target.is_dir():
        return
    probe = target / f".offrl-write-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
    except OSError as exc:
        error = storage_error(exc, folder)
        if error is None:
            raise
        raise error from None
    probe.unlink(missing_ok=True)


def atomic_write(path: str | Path, data: bytes | str, where: str | Path | None = None) -> None:
    """Write ``data`` to ``path`` through ``path.tmp`` + ``fsync`` + rename: readers see the old
    file or the new one, never a partial one. On a full disk or a read-only folder the partial
    ``.tmp`` is removed and :func:`storage_error`'s sentence is raised (naming ``where``, default
    the file's folder); the old ``path`` is untouched. New files get the mode the umask gives."""
    path = Path(path)
    data = data.encode() if isinstance(data, str) else bytes(data)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        error = storage_error(exc, where if where is not None else path.parent, len(data))
        if error is None:
            raise
        raise error from None


def append_bytes(path: str | Path, data: bytes, where: str | Path | None = None) -> None:
    """Append ``data`` to ``path`` all or nothing: if the disk fills part-way the file is cut back
    to its size before the call (earlier rows are never touched) and the sentence is raised."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        error = storage_error(exc, where if where is not None else path.parent, len(data))
        if error is None:
            raise
        raise error from None
    try:
        start = os.fstat(fd).st_size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            error = storage_error(exc, where if where is not None else path.parent, len(data))
            if error is None:
                raise
            raise error from None
    finally:
        os.close(fd)


def jsonable(row: Mapping) -> dict:
    """``row`` with non-finite floats made JSON-safe (NaN -> null, +-inf -> +-1e308)."""
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            out[k] = None if math.isnan(v) else (1e308 if v > 0 else -1e308)
        else:
            out[k] = v
    return out


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` (null read back as NaN); ``[]`` when it does not exist.

    A torn last line (a row cut off by a kill) is skipped with a :class:`RunFolderWarning`; a bad
    line elsewhere is refused in one sentence naming its 1-based line number."""
    path = Path(path)
    rows = []
    if not path.exists():
        return rows
    lines = path.read_bytes().split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError:
            if i == last:
                warnings.warn(f"{path} line {i + 1} is cut off (the run was killed while writing it); skipping it.",
                              RunFolderWarning, stacklevel=2)
                continue
            raise OffrlError(f"{path} line {i + 1} is not a JSON object; the log is damaged: fix or remove that line.") from None
        rows.append({k: (float("nan") if v is None else v) for k, v in row.items()})
    return rows


def truncate_metrics(path: str | Path, step: int) -> list[dict]:
    """Keep the rows of ``metrics.jsonl`` at ``path`` whose ``step`` is at most ``step`` (the
    checkpoint a run resumes from) and return them. The file is rewritten (atomically) only when
    rows are dropped; otherwise it is left exactly as it was."""
    path = Path(path)
    every = read_metrics(path)
    rows = [r for r in every if r.get("step", 0) <= step]
    if path.exists() and len(rows) == len(every):
        raw = path.read_bytes()
        if not raw or raw.endswith(b"\n"):  # nothing to drop and no torn last line to cut
            return rows
    with disk_errors(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "".join(json.dumps(jsonable(r)) + "\n" for r in rows))
    return rows


def first_non_finite(metrics: Mapping[str, object]) -> tuple[str, tuple[int, ...], float] | None:
    """``(name, index, value)`` of the first NaN/inf among ``metrics`` (arrays or scalars), or ``None``.

    "First" is the smallest position along the last axis (the step within a chunk for the
    engine's ``(seeds, steps)`` metrics), ties broken by the metric's order.
    """
    first = None
    for name, values in metrics.items():
        values = np.asarray(values, dtype=np.float64)
        bad = np.argwhere(~np.isfinite(values))
        if len(bad):
            index = tuple(int(i) for i in bad[0])
            position = index[-1] if index else 0
            if first is None or position < first[0]:
                first = (position, name, index, float(values[index] if index else values))
    return None if first is None else first[1:]


class MetricsLog:
    """``metrics.jsonl`` (appended as rows arrive) and ``metrics.csv`` next to it, plus optional
    TensorBoard / Weights & Biases writers (rows carry ``step`` and, for RL runs, ``seed``)."""

    def __init__(self, folder: Path | None, rows: list[dict] | None = None, tensorboard: bool = False,
                 wandb: bool = False, run_config: dict | None = None):
        self.folder = folder
        self.rows: list[dict] = list(rows or [])
        self._tb = self._wandb = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise ConfigError("--tensorboard needs the tensorboardX package; pip install tensorboardX (or offrl[logging]).") from None
            self._tb = SummaryWriter(str(folder / "tensorboard")) if folder else None
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                raise ConfigError("--wandb needs the wandb package; pip install wandb (or offrl[logging]).") from None
            self._wandb = wandb_module.init(project="offrl", config=run_config, dir=str(folder) if folder else None)

    def add(self, rows: list[dict]) -> None:
        self.rows.extend(rows)
        if self.folder is not None:
            append_bytes(self.folder / "metrics.jsonl", "".join(json.dumps(jsonable(row)) + "\n" for row in rows).encode())
        for row in rows:
            prefix = f"seed{row['seed']}/" if "seed" in row else ""
            scalars = {k: v for k, v in row.items() if k not in ("step", "seed") and isinstance(v, (int, float))}
            if self._tb is not None:
                for k, v in scalars.items():
                    self._tb.add_scalar(f"{prefix}{k}", v, row["step"])
            if self._wandb is not None:
                self._wandb.log({f"{prefix}{k}": v for k, v in scalars.items()}, step=int(row["step"]))

    def write_csv(self) -> None:
        if self.folder is None:
            return
        columns: list[str] = []
        for row in self.rows:
            columns.extend(k for k in row if k not in columns)
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=columns)
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write(self.folder / "metrics.csv", text.getvalue())

    def close(self) -> None:
        self.write_csv()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
