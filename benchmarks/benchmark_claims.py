"""Read finished `offrl benchmark` folders and print what the textbook claims need, per cell:
the last evaluation's normalized score, the critic's estimate of the start states' value, the
discounted return actually obtained, and their gap (``eval/q_overestimation``), mean over seeds.

    python benchmarks/benchmark_claims.py /work/bench/hopper-cpu /work/bench/hopper-td3
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def last_eval(metrics_path: Path) -> dict:
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    evals = [r for r in rows if "eval/normalized_score" in r]
    if not evals:
        return {}
    last = max(r["step"] for r in evals)
    at = [r for r in evals if r["step"] == last]
    out = {"step": last}
    for key in ("eval/normalized_score", "eval/q_estimate", "eval/discounted_return", "eval/q_overestimation"):
        values = [r[key] for r in at if r.get(key) is not None]
        out[key] = (float(np.mean(values)), float(np.std(values))) if values else None
    return out


def main(folders) -> None:
    print("| cell | step | normalized score | Q estimate (start states) | discounted return | Q - return |")
    print("|---|---|---|---|---|---|")
    for folder in folders:
        for cell in sorted((Path(folder) / "cells").iterdir()):
            if not (cell / "cell.json").exists():
                continue
            e = last_eval(cell / "metrics.jsonl")
            fmt = lambda v: "-" if v is None else f"{v[0]:.1f} ± {v[1]:.1f}"  # noqa: E731
            print(f"| {cell.name} | {e.get('step')} | {fmt(e.get('eval/normalized_score'))} | {fmt(e.get('eval/q_estimate'))} | "
                  f"{fmt(e.get('eval/discounted_return'))} | {fmt(e.get('eval/q_overestimation'))} |")


if __name__ == "__main__":
    main(sys.argv[1:])
