"""Check the field's textbook claims on finished `offrl benchmark` folders.

Reads every finished cell of the folders given (cells of one dataset from different folders are
pooled) and prints, then writes to ``--out`` (``.md`` and ``.png``):

* per cell: the last evaluation's normalized score, the critic's estimate of the start states'
  value ``Q(s0, pi(s0))``, the discounted return actually obtained, and their gap
  (``eval/q_overestimation``, agent reward units), mean ± std over seeds;
* **ordering** ``BC < BCQ < CQL ≈ IQL`` on each medium / medium-replay dataset present: each
  link is "held" when the means are in that order (for ``≈``: when they are within the larger of
  the two seed stds), and is marked "within std" when an ordered pair's gap is smaller than that
  std, i.e. the seeds do not separate them;
* **BC on expert-heavy data**: on each medium-expert / expert dataset, BC's gap to the best
  algorithm there, in that algorithm's seed stds;
* **overestimation**: for TD3 (no constraint) and CQL cells, Q(s0) against the realised
  discounted return over training (figure) and at the last evaluation.

    python benchmarks/benchmark_claims.py RESULTS/hopper-main RESULTS/hopper-cql \\
        RESULTS/hopper-td3 --out benchmarks/results/benchmark-claims-hopper-2026-12-01
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

KEYS = ("eval/normalized_score", "eval/q_estimate", "eval/discounted_return", "eval/q_overestimation")
ORDER = [("bc", "<", "bcq"), ("bcq", "<", "cql"), ("cql", "≈", "iql")]


def evaluations(metrics_path: Path) -> dict[int, dict[str, list[float]]]:
    """``{step: {key: [value per seed]}}`` of a cell's evaluation rows."""
    out: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in metrics_path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "eval/normalized_score" not in row:
            continue
        for key in KEYS:
            if row.get(key) is not None:
                out[int(row["step"])][key].append(float(row[key]))
    return out


def load_cells(folders) -> dict[tuple[str, str], dict]:
    """``{(dataset, algo): cell}`` with the cell's evaluations and its last one's mean and std."""
    cells = {}
    for folder in folders:
        for path in sorted((Path(folder) / "cells").iterdir()):
            if not (path / "cell.json").exists():
                continue
            record = json.loads((path / "cell.json").read_text())
            evals = evaluations(path / "metrics.jsonl")
            if not evals:
                continue
            last = evals[max(evals)]
            stats = {k: (float(np.mean(v)), float(np.std(v))) for k, v in last.items() if v}
            dataset = f"{record['env']}-{record['tier']}"
            cells[(dataset, record["algo"])] = {"path": str(path), "step": max(evals), "evals": evals, "last": stats,
                                                "wall_s": record.get("wall_s"), "seeds": record.get("seeds")}
    return cells


def fmt(v) -> str:
    return "-" if v is None else f"{v[0]:.1f} ± {v[1]:.1f}"


def ordering(cells, dataset: str) -> list[str]:
    lines = []
    for a, rel, b in ORDER:
        if (dataset, a) not in cells or (dataset, b) not in cells:
            lines.append(f"| {dataset} | {a.upper()} {rel} {b.upper()} | - | - | not run |")
            continue
        (ma, sa), (mb, sb) = cells[(dataset, a)]["last"]["eval/normalized_score"], cells[(dataset, b)]["last"]["eval/normalized_score"]
        spread = max(sa, sb)
        if rel == "<":
            verdict = "held" if mb > ma else "did not hold"
            if abs(mb - ma) <= spread:
                verdict += " (within std)"
        else:
            verdict = "held" if abs(mb - ma) <= spread else f"did not hold ({'CQL' if ma > mb else 'IQL'} higher)"
        lines.append(f"| {dataset} | {a.upper()} {rel} {b.upper()} | {ma:.1f} ± {sa:.1f} vs {mb:.1f} ± {sb:.1f} | "
                     f"{mb - ma:+.1f} | {verdict} |")
    return lines


def expert_heavy(cells, dataset: str) -> str | None:
    here = {algo: c["last"]["eval/normalized_score"] for (d, algo), c in cells.items() if d == dataset}
    if "bc" not in here or len(here) < 2:
        return None
    best = max((a for a in here if a != "bc"), key=lambda a: here[a][0])
    gap = here[best][0] - here["bc"][0]
    std = max(here[best][1], here["bc"][1], 1e-9)
    verdict = "BC best" if gap <= 0 else ("competitive (within std)" if gap <= std else f"trails by {gap / std:.1f} std")
    return f"| {dataset} | {fmt(here['bc'])} | {best.upper()} {fmt(here[best])} | {gap:+.1f} | {verdict} |"


def plot(cells, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({d for d, _ in cells})
    over = [(d, a) for (d, a) in sorted(cells) if a in ("td3", "cql")
            and all(e.get("eval/q_estimate") for e in cells[(d, a)]["evals"].values())]
    panels = len(datasets) + len(over)
    ncols = min(4, panels)
    nrows = -(-panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.6 * nrows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax, dataset in zip(axes, datasets):
        algos = sorted((a for d, a in cells if d == dataset), key=lambda a: cells[(dataset, a)]["last"]["eval/normalized_score"][0])
        means = [cells[(dataset, a)]["last"]["eval/normalized_score"][0] for a in algos]
        stds = [cells[(dataset, a)]["last"]["eval/normalized_score"][1] for a in algos]
        ax.bar([a.upper() for a in algos], means, yerr=stds, capsize=3, color="tab:blue")
        ax.set(title=f"{dataset} (step {max(cells[(dataset, a)]['step'] for a in algos)})", ylabel="normalized score")
        ax.tick_params(axis="x", labelrotation=45)
    for ax, (dataset, algo) in zip(axes[len(datasets):], over):
        evals = cells[(dataset, algo)]["evals"]
        steps = sorted(evals)
        for key, label in (("eval/q_estimate", "Q(s0, pi(s0))"), ("eval/discounted_return", "realised discounted return")):
            m = np.array([np.mean(evals[s][key]) for s in steps])
            sd = np.array([np.std(evals[s][key]) for s in steps])
            ax.plot(steps, m, marker="o", label=label)
            ax.fill_between(steps, m - sd, m + sd, alpha=0.2)
        ax.set(title=f"{dataset}: {algo.upper()}", xlabel="updates", ylabel="agent reward units")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="finished `offrl benchmark` --out folders")
    parser.add_argument("--out", default=None, help="also write OUT.md and OUT.png")
    args = parser.parse_args(argv)
    cells = load_cells(args.folders)
    lines = ["## Cells (last evaluation, mean ± std over seeds)", "",
             "| cell | step | seeds | normalized score | Q estimate (start states) | discounted return | Q - return | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for (dataset, algo), c in sorted(cells.items()):
        s = c["last"]
        wall = "-" if c["wall_s"] is None else f"{c['wall_s']:.0f}"
        lines.append(f"| {dataset}-{algo} | {c['step']} | {c['seeds']} | {fmt(s.get('eval/normalized_score'))} | "
                     f"{fmt(s.get('eval/q_estimate'))} | {fmt(s.get('eval/discounted_return'))} | "
                     f"{fmt(s.get('eval/q_overestimation'))} | {wall} |")
    datasets = sorted({d for d, _ in cells})
    lines += ["", "## Ordering BC < BCQ < CQL ≈ IQL (medium, medium-replay)", "",
              "| dataset | claim | scores | difference | verdict |", "|---|---|---|---|---|"]
    for d in datasets:
        if d.endswith("-medium") or d.endswith("-medium-replay"):
            lines += ordering(cells, d)
    heavy = [row for d in datasets if d.endswith("-medium-expert") or d.endswith("-expert")
             for row in [expert_heavy(cells, d)] if row]
    if heavy:
        lines += ["", "## BC on expert-heavy data", "", "| dataset | BC | best other | gap | verdict |", "|---|---|---|---|---|", *heavy]
    over = [(d, a) for (d, a) in sorted(cells) if a in ("td3", "cql")
            and any(e.get("eval/q_overestimation") for e in cells[(d, a)]["evals"].values())]
    if over:
        steps = sorted({s for key in over for s in cells[key]["evals"]})
        lines += ["", "## Overestimation: Q(s0, pi(s0)) - realised discounted return, over training", "",
                  "| cell | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
        for key in over:
            evals = cells[key]["evals"]
            values = [evals[s].get("eval/q_overestimation") if s in evals else None for s in steps]
            lines.append(f"| {key[0]}-{key[1]} | " + " | ".join("-" if not v else f"{np.mean(v):+.1f}" for v in values) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.with_suffix(".md").write_text(text + "\n")
        plot(cells, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
