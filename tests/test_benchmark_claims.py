"""`benchmarks/benchmark_claims.py` reads finished benchmark cells and judges the textbook claims.

Cells are written by hand here, so every verdict is known in advance."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def claims():
    spec = importlib.util.spec_from_file_location("benchmark_claims", ROOT / "benchmarks" / "benchmark_claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_cell(folder: Path, env: str, tier: str, algo: str, scores_by_step: dict[int, list[float]],
               q: dict[int, list[float]] | None = None) -> None:
    cell = folder / "cells" / f"{env}-{tier}-{algo}"
    cell.mkdir(parents=True)
    (cell / "cell.json").write_text(json.dumps({"env": env, "tier": tier, "algo": algo, "seeds": 2, "wall_s": 12.0}))
    rows = []
    for step, scores in scores_by_step.items():
        for seed, score in enumerate(scores):
            row = {"step": step, "seed": seed, "eval/normalized_score": score, "eval/discounted_return": 10.0}
            if q is not None:
                row["eval/q_estimate"] = q[step][seed]
                row["eval/q_overestimation"] = q[step][seed] - 10.0
            rows.append(json.dumps(row))
    (cell / "metrics.jsonl").write_text("\n".join(rows) + "\n")


def test_ordering_verdicts_and_overestimation(claims, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    write_cell(a, "hopper", "medium", "bc", {5: [40.0, 42.0]})
    write_cell(a, "hopper", "medium", "bcq", {5: [50.0, 52.0]})        # BC < BCQ, gap 10 >> std 1: held
    write_cell(b, "hopper", "medium", "cql", {5: [49.0, 53.0]})        # BCQ < CQL: 51 vs 51 -> did not hold, within std
    write_cell(b, "hopper", "medium", "iql", {5: [70.0, 72.0]})        # CQL ≈ IQL: gap 20 > std 2 -> IQL higher
    write_cell(b, "hopper", "medium", "td3", {5: [1.0, 1.0], 10: [2.0, 2.0]}, q={5: [30.0, 30.0], 10: [60.0, 62.0]})
    write_cell(a, "hopper", "expert", "bc", {5: [80.0, 90.0]})
    write_cell(a, "hopper", "expert", "iql", {5: [86.0, 88.0]})        # BC 85 ± 5 vs 87 ± 1: within std
    cells = claims.load_cells([a, b])
    assert cells[("hopper-medium", "td3")]["step"] == 10
    order = claims.ordering(cells, "hopper-medium")
    assert "| BC < BCQ |" in order[0] and order[0].endswith("| +10.0 | held |")
    assert order[1].endswith("did not hold (within std) |")
    assert order[2].endswith("did not hold (IQL higher) |")
    assert claims.expert_heavy(cells, "hopper-expert").endswith("| +2.0 | competitive (within std) |")
    claims.main([str(a), str(b), "--out", str(tmp_path / "claims")])
    text = (tmp_path / "claims.md").read_text()
    assert "| hopper-medium-td3 | +20.0 | +51.0 |" in text          # Q - return at steps 5 and 10
    assert "| hopper-medium-replay | BC < BCQ | - | - | not run |" not in text   # no medium-replay cells at all
    assert (tmp_path / "claims.png").stat().st_size > 0
