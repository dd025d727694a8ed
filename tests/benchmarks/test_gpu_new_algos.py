"""benchmarks/gpu_new_algos.py (gpu.sh's fourth section): it runs, and it names the 16 algorithms of issues 23 and 24."""

from __future__ import annotations

import json

import pytest
from benchmark_script import load

from offrl.algos import ALGORITHMS

script = load("benchmarks/gpu_new_algos.py", "gpu_new_algos")


def test_it_covers_every_new_algorithm():
    assert len(script.NEW_ALGOS) == 16 and set(script.NEW_ALGOS) <= set(ALGORITHMS)


def test_quick_run_writes_a_rate_and_a_projection_per_algorithm(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    assert script.main(["--quick", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["algo"] for r in rows] == ["rebrac", "mopo", "fql"]
    for r in rows:
        assert r["updates_per_s"] > 0 and r["projected_1m_min"] == pytest.approx(1e6 / r["updates_per_s"] / 60)
    assert "1M updates" in capsys.readouterr().out


def test_an_unknown_algorithm_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        script.main(["--algos", "rebrac,nope"])
    assert e.value.code == 2 and "unknown nope" in capsys.readouterr().err
