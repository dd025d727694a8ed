"""OGBench envs through offrl.rollout, and OGBench-style datasets from its oracles (needs ogbench)."""

import importlib.util
import sys

import numpy as np
import pytest

import offrl.data as data
from offrl.errors import ConfigError


def test_an_ogbench_id_without_the_package_is_refused_in_one_line(monkeypatch):
    from offrl.envs import make_env

    monkeypatch.setitem(sys.modules, "ogbench", None)      # import ogbench now raises ImportError
    with pytest.raises(ConfigError, match=r"needs the ogbench package; install it with pip install 'offrl\[ogbench\]'"):
        make_env("cube-notregistered-singletask-task1-v0")


def test_oracle_flags_are_checked():
    from offrl.collect.ogbench import OracleConfig, check_oracle_env

    with pytest.raises(ConfigError, match="max-episode-steps"):
        OracleConfig(max_episode_steps=1)
    with pytest.raises(ConfigError, match="pass --env cube-double-v0"):
        check_oracle_env("cube-double-singletask-task2-v0")
    with pytest.raises(ConfigError, match="state-based manipulation envs only"):
        check_oracle_env("antmaze-large-navigate-v0")


needs_ogbench = pytest.mark.skipif(importlib.util.find_spec("ogbench") is None,
                                   reason="OGBench envs need the ogbench package (pip install 'offrl[ogbench]')")


@needs_ogbench
def test_random_policy_rollout_in_an_ogbench_singletask_env():
    import jax

    from offrl.envs import check_env_id
    from offrl.rollout import VectorEnv, run_episodes

    check_env_id("cube-single-singletask-task1-v0")
    env = VectorEnv("cube-single-singletask-task1-v0", num_envs=2)
    assert (env.obs_dim, env.action_dim, env.max_episode_steps) == (28, 5, 200)
    rng = np.random.default_rng(0)
    act = lambda params, carry, obs, key: (rng.uniform(-1, 1, (len(obs), 5)).astype(np.float32), carry)  # noqa: E731
    out = run_episodes(env, act, None, seeds=[0, 1], key=jax.random.PRNGKey(0), max_steps=25)
    env.close()
    # single task, one cube: r = 1[cube within 4 cm of the target] - 1 at every step, so in {-1, 0}.
    assert out["rewards"].shape == (2, 25) and set(np.unique(out["rewards"])) <= {-1.0, 0.0}
    assert out["length"].tolist() == [25, 25] and out["return"].tolist() == out["rewards"].sum(1).tolist()


@needs_ogbench
def test_oracle_collection_writes_a_file_the_loader_reads_back(tmp_path):
    from offrl.collect.ogbench import OracleConfig, collect_oracle
    from offrl.data.ogbench import save_ogbench

    T = 30
    train, val, facts = collect_oracle("cube-single-v0", OracleConfig(episodes=2, val_episodes=1, max_episode_steps=T))
    assert sorted(train) == ["actions", "observations", "qpos", "qvel", "terminals"]
    assert len(train["terminals"]) == 2 * T and len(val["terminals"]) == T
    assert np.flatnonzero(train["terminals"]).tolist() == [T - 1, 2 * T - 1]
    # qpos is the state the action was taken in: the observation's cube position is (xyz - centre) * 10.
    np.testing.assert_allclose(train["observations"][:, 19:22], (train["qpos"][:, 14:17] - [0.425, 0.0, 0.0]) * 10, atol=1e-4)
    assert np.abs(train["actions"]).max() <= 1.0
    # the plan oracle moves the arm: the end effector (obs[12:15]) travels well beyond a standing arm.
    assert np.linalg.norm(np.diff(train["observations"][:T, 12:15], axis=0), axis=1).sum() > 0.5
    path = save_ogbench(train, tmp_path / "cube-single-play-v0.npz")
    with np.load(path) as raw:
        assert raw["terminals"].dtype == bool and raw["observations"].dtype == np.float32
    ds = data.load(tmp_path / "cube-single-play-singletask-task2-v0.npz")
    assert len(ds) == 2 * (T - 1) and ds.num_episodes >= 2
    keep = ~train["terminals"]
    np.testing.assert_array_equal(ds.observations, train["observations"][keep])
    np.testing.assert_array_equal(ds.next_observations, train["observations"][np.flatnonzero(keep) + 1])
    assert set(np.unique(ds.rewards)) <= {-1.0, 0.0} and ds.metadata["env_id"] == "cube-single-singletask-task2-v0"
    assert facts["attempts"] == 1


@needs_ogbench
def test_collect_oracle_command_puzzle_noisy(tmp_path, monkeypatch, capsys):
    from offrl.cli import main

    monkeypatch.setenv("OFFRL_HOME", str(tmp_path))
    rc = main(["collect", "oracle", "--env", "puzzle-3x3-v0", "--dataset-type", "noisy", "--episodes", "1",
               "--max-episode-steps", "20", "--p-random-action", "0.2", "--quiet"])
    assert rc == 0
    ds = data.load("puzzle-3x3-noisy-singletask-task1-v0")
    assert len(ds) == 19 and ds.infos["button_states"].shape == (19, 9)
    # the reward is minus the buttons off task 1's goal, computed here from the stored button states.
    goal = np.array([1, 1, 0, 1, 0, 1, 0, 1, 1])
    np.testing.assert_array_equal(ds.rewards, -(ds.infos["button_states"] != goal).sum(1))
    again = ["collect", "oracle", "--env", "puzzle-3x3-v0", "--dataset-type", "noisy", "--episodes", "1",
             "--max-episode-steps", "20", "--quiet"]
    assert main(again) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
