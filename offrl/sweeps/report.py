"""A sweep's results: per-configuration scores, the best configuration, table, files, heatmap."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class ConfigurationResult:
    point: dict          # the grid values of this configuration
    scores: list         # final normalized score per seed (raw return without references)
    folder: Path | None
    run: Any = None      # the offrl.engine.Run (not serialised)

    @property
    def mean(self) -> float:
        return float(np.mean(self.scores)) if self.scores else float("nan")

    @property
    def std(self) -> float:
        return float(np.std(self.scores)) if self.scores else float("nan")


def configuration_result(point: dict, run) -> ConfigurationResult:
    return ConfigurationResult(dict(point), [float(s) for s in run.final_scores], run.path, run)


@dataclass
class SweepResult:
    algo: str
    dataset: str
    grid: dict
    traced: tuple
    programs: int
    results: list = field(default_factory=list)
    wall_s: float = float("nan")
    folder: Path | None = None

    @property
    def best(self) -> ConfigurationResult | None:
        """The configuration with the highest mean final score (``None`` without evaluations)."""
        scored = [r for r in self.results if math.isfinite(r.mean)]
        return max(scored, key=lambda r: r.mean) if scored else None

    def to_dict(self) -> dict:
        best = self.best
        return {"algo": self.algo, "dataset": self.dataset, "grid": {k: [_json(v) for v in vs] for k, vs in self.grid.items()},
                "traced": list(self.traced), "programs": self.programs, "wall_s": self.wall_s,
                "results": [{"config": {k: _json(v) for k, v in r.point.items()}, "score_mean": r.mean, "score_std": r.std,
                             "scores": r.scores, "folder": r.folder.name if r.folder else None} for r in self.results],
                "best": None if best is None else {k: _json(v) for k, v in best.point.items()}}

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sweep.json").write_text(json.dumps(self.to_dict(), indent=2))
        with open(folder / "sweep.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow([*self.grid, "score_mean", "score_std", "folder"])
            for r in self.results:
                writer.writerow([*(_json(r.point[k]) for k in self.grid), r.mean, r.std, r.folder.name if r.folder else ""])
        if len(self.grid) == 2 and any(math.isfinite(r.mean) for r in self.results):
            heatmap(self, folder / "heatmap.png")

    def print_table(self, console=None) -> None:
        from rich.console import Console
        from rich.table import Table

        console = console or Console()
        table = Table(title=f"{self.algo} sweep on {self.dataset}: {len(self.results)} configurations, "
                            f"{self.programs} program(s), {self.wall_s:.1f} s" + (f" -> {self.folder}" if self.folder else ""))
        for name in self.grid:
            table.add_column(name, justify="right")
        table.add_column("score (mean ± std over seeds)", justify="right")
        table.add_column("run folder")
        best = self.best
        for r in self.results:
            cell = "-" if not math.isfinite(r.mean) else f"{r.mean:.2f} ± {r.std:.2f}"
            table.add_row(*(_cell(r.point.get(k)) for k in self.grid), cell, r.folder.name if r.folder else "-",
                          style="bold green" if r is best else None)
        console.print(table)
        if best is None:
            console.print("no evaluation ran (no environment or --eval-episodes 0): no best configuration.")
        else:
            console.print(f"best: {', '.join(f'{k}={v}' for k, v in best.point.items())}  score {best.mean:.2f} ± {best.std:.2f}")


def heatmap(result: SweepResult, path: Path) -> Path:
    """Mean score over a 2-D grid (rows: first field, columns: second)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_name, cols_name = list(result.grid)
    rows, cols = result.grid[rows_name], result.grid[cols_name]
    values = np.full((len(rows), len(cols)), np.nan)
    for r in result.results:
        if r.point.get(rows_name) in rows and r.point.get(cols_name) in cols:
            values[rows.index(r.point[rows_name]), cols.index(r.point[cols_name])] = r.mean
    fig, ax = plt.subplots(figsize=(1.2 * len(cols) + 2.5, 0.8 * len(rows) + 2))
    image = ax.imshow(values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(cols_name)
    ax.set_ylabel(rows_name)
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(values[i, j]):
                ax.text(j, i, f"{values[i, j]:.1f}", ha="center", va="center", color="w")
    fig.colorbar(image, ax=ax, label="final score (mean over seeds)")
    ax.set_title(f"{result.algo} on {result.dataset}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _json(value):
    return list(value) if isinstance(value, tuple) else value
