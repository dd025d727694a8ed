"""offrl sweep: grid parsing, programs, and every member equal to its single run."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

TINY = {"hidden_dims": "16,16", "batch_size": "16"}
from offrl.algos import iql
from offrl.errors import ConfigError
from offrl.sweeps.grid import configurations, folder_name, parse_grid, plan_programs

STEPS = 12


def test_parse_grid_converts_and_accepts_old_names():
    with pytest.warns(FutureWarning):
        grid = parse_grid(iql.Config, ["expectile=0.6,0.9", "temperature=1,3,10", "hidden_dims=8,8;16"])
    assert grid == {"expectile": [0.6, 0.9], "awr_inverse_temperature": [1.0, 3.0, 10.0], "hidden_dims": [(8, 8), (16,)]}
    assert len(configurations(grid)) == 12
    assert configurations(grid)[1] == {"expectile": 0.6, "awr_inverse_temperature": 1.0, "hidden_dims": (16,)}
    assert folder_name({"expectile": 0.6, "hidden_dims": (8, 8)}) == "expectile=0.6_hidden_dims=8x8"


@pytest.mark.parametrize("items, words", [
    (["expectile=0.6,abc"], ["--grid expectile", "'abc'"]),
    (["expectile=0.6,1.5"], ["--grid expectile", "'1.5'"]),
    (["expectile"], ["FIELD=V1,V2"]),
    (["expectiles=0.6"], ["--grid expectiles", "valid fields"]),
    (["expectile=0.6", "expectile=0.7"], ["given twice"]),
])
def test_bad_grid_items_name_the_item(items, words):
    with pytest.raises(ConfigError) as exc:
        parse_grid(iql.Config, items)
    assert all(w in str(exc.value) for w in words), str(exc.value)


def test_plan_traces_what_it_can_and_splits_the_rest():
    grid = parse_grid(iql.Config, ["expectile=0.6,0.9", "awr_inverse_temperature=1,3", "hidden_dims=8;16"])
    plan = plan_programs(iql.Config, grid)
    assert plan.traced == ("expectile", "awr_inverse_temperature") and plan.static == ("hidden_dims",)
    assert [len(p.members) for p in plan.programs] == [4, 4]
    assert [p.static for p in plan.programs] == [{"hidden_dims": (8,)}, {"hidden_dims": (16,)}]
    assert "2 separate programs" in plan.describe() and "hidden_dims" in plan.describe()
    only = plan_programs(iql.Config, grid, traced=["expectile"])
    assert len(only.programs) == 4 and only.static == ("awr_inverse_temperature", "hidden_dims")
    with pytest.raises(ConfigError, match="--traced hidden_dims: iql cannot trace"):
        plan_programs(iql.Config, grid, traced=["hidden_dims"])


def _params(agent):
    return jax.tree_util.tree_leaves((agent.actor.params, agent.critic.params, agent.value.params, agent.target_critic_params))


@pytest.fixture(scope="module")
def swept(pendulum_tiny, tmp_path_factory):
    from offrl.sweeps import sweep

    out = tmp_path_factory.mktemp("sweep") / "iql"
    result = sweep("iql", pendulum_tiny, grid={"expectile": [0.6, 0.9], "awr_inverse_temperature": [3.0]}, seeds=2,
                   steps=STEPS, eval_every=STEPS, eval_episodes=0, log_every=STEPS // 2, out=out,
                   config_overrides=TINY, progress=False, echo=lambda *_: None)
    return result, out


def test_each_member_equals_its_single_run(swept, pendulum_tiny):
    """The key correctness test: configuration c's seed s in the one vmapped program ends with the
    parameters of `offrl train` run alone with that configuration (expectile 0.9: both seeds,
    vmapped; expectile 0.6: seed 0 alone, unvmapped)."""
    from offrl.engine import load_run, train

    result, out = swept
    assert [r.point for r in result.results] == [{"expectile": 0.6, "awr_inverse_temperature": 3.0},
                                                 {"expectile": 0.9, "awr_inverse_temperature": 3.0}]
    finals = [_params(load_run(r.folder).agent) for r in result.results]
    for r in result.results:
        loaded = load_run(r.folder)
        assert loaded.config.expectile == r.point["expectile"] and loaded.step == STEPS
    both = train("iql", pendulum_tiny, steps=STEPS, seeds=2, eval_every=STEPS, eval_episodes=0, log_every=STEPS // 2,
                 config_overrides={**TINY, "expectile": "0.9"}, progress=False)
    for a, b in zip(finals[1], _params(both.agent)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    one = train("iql", pendulum_tiny, steps=STEPS, seeds=1, eval_every=STEPS, eval_episodes=0, log_every=STEPS // 2,
                config_overrides={**TINY, "expectile": "0.6"}, progress=False)
    for a, b in zip(finals[0], _params(one.agent)):
        np.testing.assert_allclose(np.asarray(a)[0], np.asarray(b)[0], rtol=1e-5, atol=1e-6)
    # the two configurations really differ (the traced expectile reached the value loss)
    assert not np.allclose(np.asarray(finals[0][-1]), np.asarray(finals[1][-1]))


def test_sweep_folder_holds_results_and_refuses_to_overwrite(swept, pendulum_tiny):
    from offrl.sweeps import sweep

    result, out = swept
    record = json.loads((out / "sweep.json").read_text())
    assert record["traced"] == ["expectile", "awr_inverse_temperature"] and record["programs"] == 1
    assert [r["folder"] for r in record["results"]] == ["expectile=0.6_awr_inverse_temperature=3.0",
                                                        "expectile=0.9_awr_inverse_temperature=3.0"]
    rows = [json.loads(line) for line in (out / record["results"][0]["folder"] / "metrics.jsonl").read_text().splitlines()]
    assert sorted({(r["step"], r["seed"]) for r in rows}) == [(6, 0), (6, 1), (12, 0), (12, 1)]
    with pytest.raises(ConfigError, match="already holds a sweep"):
        sweep("iql", pendulum_tiny, grid=["expectile=0.6,0.9"], seeds=1, steps=2, out=out, progress=False)


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    for extra, words in ((["--grid", "expectile=0.6,abc"], "--grid expectile"),
                         (["--grid", "hidden_dims=8;16", "--traced", "hidden_dims"], "--traced hidden_dims"),
                         (["--grid", "expectile=0.6,0.9", "--devices", "64"], "--devices 64: only")):
        proc = subprocess.run([sys.executable, "-m", "offrl", "sweep", "--algo", "iql", "--dataset", str(tmp_path / "none.npz"),
                               "--out", str(tmp_path / "s"), *extra], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], proc.stderr
    assert not (tmp_path / "s").exists()
