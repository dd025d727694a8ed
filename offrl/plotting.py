"""Learning curves and the extrapolation monitor, drawn to PNG with matplotlib.

``plot_runs([run_a, run_b], "plots/")`` writes ``learning_curves.png`` (evaluation score,
mean ± std over seeds, one line per run) and ``q_vs_return.png`` (the critic's estimate
``Q(s0, pi(s0))`` beside the discounted return actually realised from ``s0``, per run, and
their difference).
Naive offline Q-learning shows the estimate climbing away from a flat realised return; CQL's
estimate stays below it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def metric_by_step(rows: list[dict], key: str):
    """``steps, mean, std`` of ``key`` over seeds at each logged step that has it."""
    table: dict[int, list[float]] = {}
    for row in rows:
        value = row.get(key)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        table.setdefault(int(row["step"]), []).append(float(value))
    steps = np.array(sorted(table))
    values = [np.array(table[s]) for s in steps]
    mean = np.array([v.mean() for v in values])
    std = np.array([v.std() for v in values])
    return steps, mean, std


def _label(run) -> str:
    name = Path(run.path).name if run.path else run.algo
    return f"{name} ({run.algo}, {run.settings.get('seeds', 1)} seeds)"


def _band(ax, steps, mean, std, label, color=None, style="-"):
    line = ax.plot(steps, mean, style, label=label, color=color)[0]
    ax.fill_between(steps, mean - std, mean + std, alpha=0.2, color=line.get_color())
    return line.get_color()


def plot_runs(runs, out: str | Path, baselines: dict[str, float] | None = None) -> list[Path]:
    """Draw the two figures for ``runs`` (:class:`offrl.engine.Run` objects) into ``out``.

    ``baselines`` maps a label to a score drawn as a dashed horizontal line on the learning
    curves (e.g. ``{"behaviour (dataset mean)": 59.2}``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    use_score = all(len(metric_by_step(r.metrics, "eval/normalized_score")[0]) for r in runs)
    key = "eval/normalized_score" if use_score else "eval/return"
    for run in runs:
        steps, mean, std = metric_by_step(run.metrics, key)
        if len(steps):
            _band(ax, steps, mean, std, _label(run))
    for i, (label, value) in enumerate((baselines or {}).items()):
        if value is not None and math.isfinite(value):
            ax.axhline(value, color="grey", ls="--" if i == 0 else ":", label=label)
    ax.set_xlabel("gradient steps")
    ax.set_ylabel("normalized score" if use_score else "return")
    ax.set_title("Evaluation (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "learning_curves.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    fig, (ax_q, ax_r) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in runs:
        steps_q, q_mean, q_std = metric_by_step(run.metrics, "eval/q_estimate")
        steps_g, g_mean, g_std = metric_by_step(run.metrics, "eval/discounted_return")
        if not len(steps_g):
            continue
        color = None
        if len(steps_q):
            color = _band(ax_q, steps_q, q_mean, q_std, f"{_label(run)}: Q(s0, pi(s0))")
        color = _band(ax_q, steps_g, g_mean, g_std, f"{_label(run)}: realised return", color=color, style="--")
        steps_r, r_mean, r_std = metric_by_step(run.metrics, "eval/q_overestimation")
        if len(steps_r):
            _band(ax_r, steps_r, r_mean, r_std, _label(run), color=color)
    ax_q.set_xlabel("gradient steps")
    ax_q.set_ylabel("discounted value at the start state")
    ax_q.set_title("Critic estimate (solid) vs realised return (dashed)")
    ax_q.grid(alpha=0.3)
    if ax_q.get_legend_handles_labels()[1]:  # no critic, no realised-return curve: nothing to label
        ax_q.legend(fontsize=7)
    ax_r.axhline(0.0, color="black", lw=0.8)
    ax_r.set_xlabel("gradient steps")
    ax_r.set_ylabel("> 0: the critic promises more than the policy gets")
    ax_r.set_title("Overestimation: Q estimate - realised return")
    ax_r.grid(alpha=0.3)
    if ax_r.get_legend_handles_labels()[1]:  # the zero line has no label
        ax_r.legend(fontsize=7)
    fig.tight_layout()
    path = out / "q_vs_return.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


def plot_panels(panels: dict[str, list], out: str | Path) -> list[Path]:
    """One panel per name in ``panels`` (e.g. ``"hopper-medium"``), one line per run (labelled by
    algorithm): ``learning_curves.png`` (evaluation score, mean ± std over seeds) and
    ``q_vs_return.png`` (``Q(s0, pi(s0))`` minus the realised discounted return)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(panels)
    cols = min(3, max(1, len(names)))
    rows = max(1, math.ceil(len(names) / cols))
    written = []
    for filename, key, ylabel in (("learning_curves.png", "eval/normalized_score", "normalized score"),
                                  ("q_vs_return.png", "eval/q_overestimation", "Q estimate - realised return")):
        fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.4 * rows), squeeze=False)
        for ax, name in zip(axes.flat, names):
            for i, run in enumerate(panels[name]):
                this_key = key
                if key == "eval/normalized_score" and not len(metric_by_step(run.metrics, key)[0]):
                    this_key = "eval/return"
                steps, mean, std = metric_by_step(run.metrics, this_key)
                if len(steps):
                    _band(ax, steps, mean, std, run.algo.upper(), color=f"C{i}")
            if key == "eval/q_overestimation":
                ax.axhline(0.0, color="black", lw=0.8)
            ax.set_title(name, fontsize=10)
            ax.set_xlabel("gradient steps", fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[1]:
                ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(names):]:
            ax.axis("off")
        fig.tight_layout()
        path = out / filename
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def plot_finetune(runs, out: str | Path, offline_step: int, labels: list[str] | None = None) -> list[Path]:
    """``finetune.png``: evaluation return across the offline/online boundary (a vertical line at
    ``offline_step``; offline x = gradient steps, online x = offline_step + env steps), and the
    Q-vs-return monitor continuing online. ``runs``: one fine-tuning run or a list of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = runs if isinstance(runs, (list, tuple)) else [runs]
    labels = labels or [_label(r) for r in runs]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig, (ax, ax_q) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run, label in zip(runs, labels):
        steps, mean, std = metric_by_step(run.metrics, "eval/return")
        if len(steps):
            color = _band(ax, steps, mean, std, label)
            steps_q, q_mean, q_std = metric_by_step(run.metrics, "eval/q_overestimation")
            if len(steps_q):
                _band(ax_q, steps_q, q_mean, q_std, label, color=color)
    for axis in (ax, ax_q):
        axis.axvline(offline_step, color="black", ls=":", lw=1.2, label="online starts")
        axis.set_xlabel("offline gradient steps, then + online env steps")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    ax.set_ylabel("evaluation return")
    ax.set_title("Return across the offline -> online boundary")
    ax_q.axhline(0.0, color="black", lw=0.8)
    ax_q.set_ylabel("Q(s0, pi(s0)) - realised return")
    ax_q.set_title("Overestimation, offline and online")
    fig.tight_layout()
    path = out / "finetune.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
