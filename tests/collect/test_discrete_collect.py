"""Discrete behaviour policies: a tiny DQN zoo on CartPole, tiers with exact epsilon-greedy log-probs,
the doctor's action histogram."""

import numpy as np
import pytest

from offrl.collect.discrete import DQNBehaviorConfig, train_dqn_behavior
from offrl.collect.zoo import epsilon_greedy_log_probs

EPS = 0.2


def test_epsilon_greedy_log_probs_by_hand():
    q = np.array([[1.0, 3.0, 2.0], [0.0, -1.0, -2.0]])
    got = epsilon_greedy_log_probs(q, np.array([1, 2]), 0.3)
    np.testing.assert_allclose(got, np.log([0.7 + 0.1, 0.1]))


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    config = DQNBehaviorConfig(steps=600, start_steps=100, update_every=10, snapshot_every=200, eval_episodes=2,
                               epsilon=EPS, seed=0)
    train_dqn_behavior("CartPole-v1", out, config, progress=False)
    return out


def test_tier_dataset_from_a_dqn_zoo_has_exact_log_probs(zoo):
    from offrl.collect.tiers import build_tier_dataset, select_snapshots
    from offrl.collect.zoo import load_policy, load_zoo_index

    index = load_zoo_index(zoo)
    assert index["algorithm"] == "DQN" and index["num_actions"] == 2 and len(index["snapshots"]) == 4
    ds = build_tier_dataset(zoo, "expert", size=300, seed=0)
    assert ds.metadata["num_actions"] == 2 and "action_low" not in ds.metadata
    acts = ds.actions.reshape(-1)
    assert set(np.unique(acts)) <= {0.0, 1.0} and len(np.unique(acts)) == 2
    logp = ds.infos["action_log_probs"]
    np.testing.assert_allclose(np.unique(np.round(logp, 5)), np.round(np.log([EPS / 2, 1 - EPS / 2]), 5))
    policy = load_policy(zoo, select_snapshots(index)["expert"]["step"])
    np.testing.assert_allclose(policy.log_prob(ds.observations, acts), logp, rtol=1e-6)
    greedy_taken = acts == ds.infos["greedy_actions"]
    assert 0.8 < greedy_taken.mean() < 0.97  # 1 - eps/2 = 0.9 in expectation


def test_replay_tier_and_doctor_histogram(zoo):
    from offrl.collect.tiers import build_tier_dataset
    from offrl.data.doctor import inspect_dataset

    ds = build_tier_dataset(zoo, "medium-replay", size=10_000, seed=0)
    assert len(ds) == ds.metadata["replay_stop_step"] and "greedy_actions" in ds.infos
    report = inspect_dataset(ds)
    hist = report["action_histogram"]
    counts = np.bincount(ds.actions.reshape(-1).astype(int), minlength=2)
    assert hist["num_actions"] == 2 and hist["counts"] == counts.tolist() and hist["unseen_actions"] == []


def test_doctor_warns_about_actions_never_logged():
    from offrl.data import Dataset
    from offrl.data.doctor import inspect_dataset

    rng = np.random.default_rng(0)
    ds = Dataset.from_arrays(rng.standard_normal((200, 3)), rng.integers(0, 2, (200, 1)), rng.standard_normal(200),
                             np.arange(200) % 50 == 49, metadata={"num_actions": 4})
    report = inspect_dataset(ds)
    assert report["action_histogram"]["unseen_actions"] == [2, 3]
    assert any("[2, 3] never appear" in w for w in report["warnings"])


# ---------------------------------------------------------------------- optional discrete envs
def _train_tiny(env_id, out):
    import json

    from offrl.cli import main

    rc = main(["collect", "train-behavior", "--env", env_id, "--steps", "300", "--start-steps", "100",
               "--snapshot-every", "150", "--eval-episodes", "1", "--update-every", "10", "--out", str(out), "--quiet"])
    assert rc in (0, None)
    return json.loads((out / "zoo.json").read_text())


def test_lunar_lander_behavior_zoo(tmp_path):
    pytest.importorskip("Box2D", reason="LunarLander-v3 needs pip install 'offrl[box2d]'")
    pytest.importorskip("pygame", reason="gymnasium's box2d envs import pygame: pip install 'offrl[box2d]'")
    index = _train_tiny("LunarLander-v3", tmp_path)
    assert index["algorithm"] == "DQN" and index["num_actions"] == 4 and index["obs_dim"] == 8
    assert [s["step"] for s in index["snapshots"]] == [0, 150, 300]


def test_minatar_behavior_zoo_with_flattened_grids(tmp_path):
    pytest.importorskip("minatar", reason="MinAtar games need pip install 'offrl[minatar]'")
    from offrl.collect.zoo import read_replay

    index = _train_tiny("MinAtar/Breakout-v1", tmp_path)
    assert index["num_actions"] == 3 and index["observation_shape"] == [10, 10, 4] and index["obs_dim"] == 400
    replay = read_replay(tmp_path)
    assert replay["observations"].shape == (300, 400) and set(np.unique(replay["observations"])) <= {0.0, 1.0}
    assert replay["observations"].any(axis=1).all()  # every grid shows the paddle and the ball


def test_minatar_id_without_the_package_is_one_clear_error(monkeypatch):
    import sys

    from offrl.envs import check_env_id
    from offrl.errors import ConfigError

    from gymnasium.envs.registration import registry

    monkeypatch.delitem(registry, "MinAtar/Seaquest-v0", raising=False)  # registered by an earlier test
    monkeypatch.setitem(sys.modules, "minatar.gym", None)  # as if minatar were not installed
    with pytest.raises(ConfigError, match=r"pip install 'offrl\[minatar\]'"):
        check_env_id("MinAtar/Seaquest-v0")
