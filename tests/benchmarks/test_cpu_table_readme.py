"""``benchmarks/cpu_table_readme.py``: the README's table is rebuilt from the finished cells only,
between its markers, and a README without them is refused."""

from __future__ import annotations

import json
from pathlib import Path

from benchmark_script import load


def _module():
    return load("benchmarks/cpu_table_readme.py", "cpu_table_readme")


def _table(tmp_path: Path) -> Path:
    folder = tmp_path / "table"
    record = {"envs": ["hopper"], "tiers": ["medium", "medium-replay"], "algos": ["bc", "cql"], "seeds": 3, "steps": 30000,
              "algo_steps": {"cql": 20000}, "overrides": {"cql": {"hidden_dims": "128,128"}}}
    (folder / "cells" / "hopper-medium-cql").mkdir(parents=True)
    (folder / "benchmark.json").write_text(json.dumps(record))
    cell = {"env": "hopper", "tier": "medium", "algo": "cql", "seeds": 3, "steps": 20000, "settings": {"hidden_dims": "128,128"},
            "metric": "eval/normalized_score", "last_step": 20000, "last_mean": 51.25, "last_std": 3.0, "best_step": 15000,
            "best_mean": 55.0, "best_std": 2.0, "wall_s": 600.0, "updates_per_s": 100.0, "dataset": "x"}
    (folder / "cells" / "hopper-medium-cql" / "cell.json").write_text(json.dumps(cell))
    return folder


def test_readme_table_holds_finished_cells_and_nothing_else(tmp_path):
    folder = _table(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\nbefore\n<!-- cpu-table:begin -->\nold table\n<!-- cpu-table:end -->\nafter\n")
    assert _module().main(["--table", str(folder), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# title\n\nbefore\n<!-- cpu-table:begin -->\n1 of 4 cells finished") and text.endswith("<!-- cpu-table:end -->\nafter\n")
    assert "old table" not in text
    assert "| hopper-medium | - | 51.2 ± 3.0 (10 min) |" in text
    assert "| hopper-medium-replay | - | - |" in text
    assert "BC 30k, CQL 20k; settings other than the defaults: CQL hidden_dims=128,128." in text
    assert (folder / "results.md").exists() and (folder / "results.csv").exists()


def test_readme_without_markers_is_refused_and_kept(tmp_path, capsys):
    folder = _table(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    assert _module().main(["--table", str(folder), "--readme", str(readme)]) == 2
    assert "must hold exactly one <!-- cpu-table:begin -->" in capsys.readouterr().err
    assert readme.read_text() == "no markers here\n"


def test_beside_adds_another_folders_algorithms_on_the_same_datasets(tmp_path, capsys):
    folder = _table(tmp_path)
    other = tmp_path / "other"
    (other / "cells" / "hopper-medium-iql").mkdir(parents=True)
    (other / "cells" / "walker2d-medium-iql").mkdir(parents=True)
    (other / "benchmark.json").write_text(json.dumps({"envs": ["hopper", "walker2d"], "tiers": ["medium"], "algos": ["iql", "bc"],
                                                       "seeds": 3, "steps": 30000}))
    for env, score in (("hopper", 47.1), ("walker2d", 7.3)):
        cell = {"env": env, "tier": "medium", "algo": "iql", "last_mean": score, "last_std": 4.0, "wall_s": 480.0}
        (other / "cells" / f"{env}-medium-iql" / "cell.json").write_text(json.dumps(cell))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- new:begin -->\n<!-- new:end -->\n<!-- cpu-table:begin -->\nkept\n<!-- cpu-table:end -->\n")
    assert _module().main(["--table", str(folder), "--readme", str(readme), "--marker", "new", "--beside", f"{other}:iql"]) == 0
    text = readme.read_text()
    assert "| dataset | BC | CQL | IQL |" in text
    assert "| hopper-medium | - | 51.2 ± 3.0 (10 min) | 47.1 ± 4.0 (8 min) |" in text
    assert "| hopper-medium-replay | - | - | - |" in text
    assert "walker2d" not in text                       # the other folder's datasets outside this table are not shown
    assert "<!-- cpu-table:begin -->\nkept\n" in text    # the other block is untouched
    assert _module().main(["--table", str(folder), "--readme", str(readme), "--beside", "nofolder"]) == 2
    assert "must be FOLDER:ALGO" in capsys.readouterr().err


def test_a_finished_peer_run_is_shown_in_its_cell(tmp_path):
    folder = _table(tmp_path)
    cell = folder / "cells" / "hopper-medium-cql"
    (cell / "peer-d3rlpy-request.json").write_text("{}")
    (cell / "peer-d3rlpy.json").write_text(json.dumps({"peer": "d3rlpy", "last_mean": 40.04, "last_std": 5.0, "best_mean": 45.0,
                                                       "best_std": 1.0, "wall_s": 1500.0, "unmatched": []}))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- cpu-table:begin -->\n<!-- cpu-table:end -->\n")
    assert _module().main(["--table", str(folder), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "| hopper-medium | - | 51.2 ± 3.0 (10 min); d3rlpy 40.0 ± 5.0 (25 min) |" in text
    assert "After a semicolon: the same cell run by d3rlpy" in text
