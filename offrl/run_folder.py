"""The run folder's bookkeeping, shared by the JAX engine and the preference trainers.

A run folder holds ``config.json``, ``metrics.jsonl`` (one JSON row per logged step, and per
seed for RL runs), ``metrics.csv``, ``checkpoints/`` and ``plots/``. Two rules live here once:

* **resume truncation**: a resumed run keeps only the metric rows up to its checkpoint's step
  (:func:`truncate_metrics`), so the log of a killed-and-resumed run equals the uninterrupted one;
* **the finite check**: the first metric that became NaN or infinite, with where it happened
  (:func:`first_non_finite`), which both trainers turn into one clear error.

Nothing here imports JAX or torch.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Mapping

import numpy as np

from offrl.errors import ConfigError


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
    """The rows of a ``metrics.jsonl`` (null read back as NaN); ``[]`` when it does not exist."""
    path = Path(path)
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows.append({k: (float("nan") if v is None else v) for k, v in row.items()})
    return rows


def truncate_metrics(path: str | Path, step: int) -> list[dict]:
    """Keep the rows of ``metrics.jsonl`` at ``path`` whose ``step`` is at most ``step`` (the
    checkpoint a run resumes from), rewrite the file with them, and return them."""
    path = Path(path)
    rows = [r for r in read_metrics(path) if r.get("step", 0) <= step]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(jsonable(r)) + "\n")
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
            with open(self.folder / "metrics.jsonl", "a") as fh:
                for row in rows:
                    fh.write(json.dumps(jsonable(row)) + "\n")
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
        with open(self.folder / "metrics.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(self.rows)

    def close(self) -> None:
        self.write_csv()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
