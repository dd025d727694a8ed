"""Figures for ``offrl ope``: estimates with their intervals per policy, and (with ``--check``)
estimates against the true values."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_estimates(report, out: str | Path, truth: dict | None = None) -> Path:
    """One group of error bars per policy (one bar per estimator); true values as black bars."""
    plt = _pyplot()
    policies, estimators = report.policies, list(next(iter(report.results.values())))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(policies) * max(1, len(estimators)) / 3), 4.5))
    width = 0.8 / max(1, len(estimators))
    x = np.arange(len(policies))
    for j, name in enumerate(estimators):
        rows = [report.results[p][name] for p in policies]
        mid = np.array([r.estimate for r in rows])
        err = np.array([[r.estimate - r.ci_low for r in rows], [r.ci_high - r.estimate for r in rows]])
        ax.errorbar(x + (j - (len(estimators) - 1) / 2) * width, mid, yerr=np.maximum(err, 0), fmt="o", capsize=3, label=name)
    if truth:
        ax.scatter(x, [truth[p]["value"] for p in policies], marker="_", s=900, color="black", zorder=5, label="true value")
    ax.set_xticks(x, policies, rotation=20, ha="right")
    ax.set_ylabel(f"estimated value (discount {report.config['discount']:g})")
    note = "; behaviour estimated by BC" if report.estimated_behavior else ""
    ax.set_title(f"off-policy estimates with {report.config['confidence']:.0%} {report.config['ci']} intervals{note}")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_check(report, truth: dict, out: str | Path) -> Path:
    """Estimate vs true value, one panel per estimator, with the identity line."""
    plt = _pyplot()
    estimators = list(next(iter(report.results.values())))
    cols = min(4, len(estimators))
    rows = int(np.ceil(len(estimators) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    true = np.array([truth[p]["value"] for p in report.policies])
    for ax, name in zip(axes.flat, estimators):
        r = [report.results[p][name] for p in report.policies]
        mid = np.array([x.estimate for x in r])
        err = np.maximum(np.array([[x.estimate - x.ci_low for x in r], [x.ci_high - x.estimate for x in r]]), 0)
        ax.errorbar(true, mid, yerr=err, fmt="o", capsize=3)
        lo, hi = min(true.min(), mid.min()), max(true.max(), mid.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("true value", fontsize=8)
    for ax in list(axes.flat)[len(estimators):]:
        ax.axis("off")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
