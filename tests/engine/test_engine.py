"""The engine: scan == loop, determinism, resume == uninterrupted, divergence guard, evaluation."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY

from offrl import engine
from offrl.algos import get_algorithm
from offrl.algos.common import Batch, apply_overrides
from offrl.errors import ConfigError, DivergenceError


def _leaves_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def test_scan_over_k_updates_equals_python_loop(pendulum_small):
    module = get_algorithm("iql")
    config = apply_overrides(module.Config(), TINY)
    data, info = engine.prepare_data(pendulum_small, config)
    agents, data_keys = engine.create_agents(module, config, info.obs_dim, info.action_dim, seed=0, seeds=1)
    scanned, metrics = engine.Trainer(module, config.batch_size, seeds=1).run(agents, data_keys, data, 5)

    agent = jax.tree_util.tree_map(lambda x: x[0], agents)
    update = jax.jit(module.update)
    n = data["rewards"].shape[0]
    losses = []
    for _ in range(5):
        idx = jax.random.randint(jax.random.fold_in(data_keys[0], agent.step), (config.batch_size,), 0, n)
        agent, m = update(agent, Batch.from_rows({k: v[idx] for k, v in data.items()}))
        losses.append(float(m["critic_loss"]))
    np.testing.assert_allclose(np.asarray(metrics["critic_loss"][0]), losses, rtol=1e-5)
    for x, y in zip(jax.tree_util.tree_leaves(scanned.critic.params), jax.tree_util.tree_leaves(agent.critic.params)):
        np.testing.assert_allclose(np.asarray(x)[0], np.asarray(y), rtol=1e-5, atol=1e-6)
    assert int(scanned.step[0]) == 5


def test_same_seed_gives_bit_identical_runs_and_seeds_differ(pendulum_small):
    kwargs = dict(steps=20, seeds=2, log_every=10, eval_every=20, eval_episodes=0, progress=False, config_overrides=TINY)
    a = engine.train("iql", pendulum_small, **kwargs)
    b = engine.train("iql", pendulum_small, **kwargs)
    assert _leaves_equal(a.agent, b.agent)
    w = np.asarray(jax.tree_util.tree_leaves(a.agent.actor.params)[0])
    assert not np.array_equal(w[0], w[1]), "the two vmapped seeds should be independent"
    assert [r["critic_loss"] for r in a.metrics] == [r["critic_loss"] for r in b.metrics]


def test_seed_zero_of_a_vmapped_td3_bc_run_matches_the_single_seed_run(pendulum_small):
    """The vmapped path (shared step counter, real ``lax.cond`` for the delayed actor step)
    computes what the plain one-seed path computes for the same seed."""
    kwargs = dict(steps=30, log_every=15, eval_every=30, eval_episodes=0, progress=False, config_overrides=TINY)
    one = engine.train("td3_bc", pendulum_small, seeds=1, **kwargs)
    two = engine.train("td3_bc", pendulum_small, seeds=2, **kwargs)
    assert np.asarray(two.agent.step).tolist() == [30, 30]
    for x, y in zip(jax.tree_util.tree_leaves(one.agent), jax.tree_util.tree_leaves(two.agent)):
        np.testing.assert_allclose(np.asarray(x)[0], np.asarray(y)[0], rtol=1e-5, atol=1e-6)
    a0, a1 = (np.asarray(jax.tree_util.tree_leaves(two.agent.actor.params)[0])[i] for i in (0, 1))
    assert not np.array_equal(a0, a1)


def test_resume_reproduces_the_uninterrupted_run(tmp_path, pendulum_small):
    kwargs = dict(steps=60, seeds=1, log_every=20, eval_every=20, eval_episodes=0, progress=False, config_overrides=TINY)
    full = engine.train("iql", pendulum_small, out=tmp_path / "full", **kwargs)
    engine.train("iql", pendulum_small, out=tmp_path / "killed", stop_at=40, **kwargs)
    assert json.loads((tmp_path / "killed" / "checkpoints" / "latest.json").read_text())["step"] == 40
    resumed = engine.train("iql", pendulum_small, out=tmp_path / "killed", resume=True, **kwargs)
    assert resumed.step == 60
    assert _leaves_equal(full.agent, resumed.agent)
    assert [r["step"] for r in resumed.metrics] == [20, 40, 60]
    reloaded = engine.load_run(tmp_path / "killed")
    assert _leaves_equal(reloaded.agent, full.agent)
    with pytest.raises(ConfigError, match="already holds a run"):
        engine.train("iql", pendulum_small, out=tmp_path / "full", **kwargs)


def test_divergence_names_the_loss_and_step_and_keeps_the_last_good_checkpoint(tmp_path, pendulum_small):
    kwargs = dict(steps=40, seeds=1, log_every=20, eval_every=20, eval_episodes=0, progress=False, out=tmp_path / "run")
    engine.train("td3", pendulum_small, stop_at=20, config_overrides=TINY, **kwargs)
    # A resume keeps the run's config (--set cannot change it), so the divergence is planted in config.json.
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    record["config"]["reward_scaling"] = "1e30"
    (tmp_path / "run" / "config.json").write_text(json.dumps(record))
    with pytest.raises(DivergenceError, match=r"'(critic|actor)_loss' became .* at step (2\d|3\d|40) .*step 20"):
        engine.train("td3", pendulum_small, resume=True, config_overrides=TINY, **kwargs)
    run = engine.load_run(tmp_path / "run")
    assert run.step == 20
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(run.agent.critic.params))


def test_unknown_config_field_lists_the_valid_ones(pendulum_small):
    with pytest.raises(ConfigError, match="unknown config field 'expectil'.*valid fields: .*expectile"):
        engine.train("iql", pendulum_small, steps=10, config_overrides={"expectil": "0.8"}, progress=False)
    with pytest.raises(ConfigError, match="unknown algorithm 'sac'"):
        engine.train("sac", pendulum_small, steps=10, progress=False)


def test_evaluation_logs_scores_and_the_extrapolation_monitor(tmp_path, pendulum_small):
    run = engine.train("iql", pendulum_small, steps=20, seeds=2, log_every=10, eval_every=10, eval_episodes=2,
                       out=tmp_path / "run", progress=False, config_overrides=TINY, tensorboard=True)
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    evals = run.evaluations()
    assert [r["step"] for r in evals] == [10, 10, 20, 20]
    for row in evals:
        for key in ("eval/return", "eval/normalized_score", "eval/q_estimate", "eval/discounted_return", "eval/q_ratio"):
            assert np.isfinite(row[key]), key
        assert row["eval/length"] == 200
        expected = 100 * (row["eval/return"] - (-1211.5)) / (-132.5 - (-1211.5))
        assert row["eval/normalized_score"] == pytest.approx(expected)
        assert row["eval/q_ratio"] == pytest.approx(row["eval/q_estimate"] / row["eval/discounted_return"])
    assert len(run.final_scores) == 2
    summary = run.summary()
    assert summary["seeds"] == 2 and summary["score_mean"] == pytest.approx(np.mean(run.final_scores))
    folder = tmp_path / "run"
    assert (folder / "config.json").exists() and (folder / "metrics.csv").exists()
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4 and "eval/q_estimate" in json.loads(lines[-1])
    header = (folder / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "eval/normalized_score" in header and "critic_loss" in header
    assert (folder / "plots" / "learning_curves.png").stat().st_size > 1000
    assert (folder / "plots" / "q_vs_return.png").stat().st_size > 1000
    # offrl.engine.evaluate reloads the run and reports mean ± std over seeds
    result = engine.evaluate(folder, episodes=1)
    assert len(result["per_seed"]) == 2 and np.isfinite(result["normalized_score"][0])


def test_missing_wandb_is_a_clear_error(tmp_path, pendulum_small, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # behaves as if not installed
    with pytest.raises(ConfigError, match="--wandb needs the wandb package"):
        engine.train("bc", pendulum_small, steps=10, out=tmp_path / "run", wandb=True, progress=False)
