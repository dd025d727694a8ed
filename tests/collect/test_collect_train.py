"""SAC behaviour-policy training: the zoo on disk, snapshots round-trip, and (slow) solving Pendulum.

SAC's own loss tests live in tests/algos/test_sac.py."""

import json

import jax
import numpy as np
import pytest


def test_behavior_policy_samples_env_actions_with_their_log_probs():
    from offrl.algos import sac
    from offrl.collect.zoo import BehaviorPolicy

    agent = sac.create(sac.Config(hidden_dims=(32,)), 4, 2, jax.random.PRNGKey(0))
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 3.0])
    policy = BehaviorPolicy(agent.actor.params["params"], 4, 2, (32,), low, high)
    obs = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (64, 4)), np.float32)
    a, logp, mean, std = policy.sample(jax.random.PRNGKey(2), obs)
    assert a.shape == (64, 2) and logp.shape == (64,) and np.all((a >= low) & (a <= high))
    np.testing.assert_allclose(logp, policy.log_prob(obs, a), atol=2e-3)
    # the env-unit density is the [-1, 1] density divided by the Jacobian prod((high - low) / 2) = 2 * 1.5
    assert policy.log_scale == pytest.approx(np.log(3.0))
    np.testing.assert_allclose(policy.deterministic(obs), policy.to_env(np.tanh(mean)), atol=1e-5)
    act = policy.rollout_policy(stochastic=True)
    actions, carry, extras = act(policy.params, None, obs, jax.random.PRNGKey(2))
    np.testing.assert_allclose(np.asarray(actions), a, atol=1e-6)
    assert carry is None and set(extras) == {"action_log_probs", "action_mean", "action_std"}


def test_train_behavior_writes_loadable_zoo(pendulum_zoo):
    from offrl.collect.zoo import load_policy, load_zoo_index, read_replay

    index = load_zoo_index(pendulum_zoo)
    assert [s["step"] for s in index["snapshots"]] == [0, 500, 1000, 1500, 2000]
    assert index["env_steps_per_s"] > 0 and index["action_low"] == [-2.0] and index["action_high"] == [2.0]
    replay = read_replay(pendulum_zoo)
    assert len(replay["rewards"]) == 2000
    assert replay["timeouts"].sum() == 10 and not replay["terminals"].any()  # Pendulum truncates at 200 steps
    assert np.all(np.abs(replay["actions"]) <= 2.0)
    # steps before start_steps (100) all come from the untouched initial actor = snapshot 0
    policy0 = load_policy(pendulum_zoo, 0)
    logp = policy0.log_prob(replay["observations"][:100], replay["actions"][:100])
    np.testing.assert_allclose(logp, replay["infos/action_log_probs"][:100], atol=2e-3)
    facts = json.loads((pendulum_zoo / "snapshots" / "step_0002000.json").read_text())
    assert facts["step"] == 2000 and len(facts["returns"]) == 2
    # save -> load -> same deterministic actions
    policy = load_policy(pendulum_zoo, 2000)
    obs = replay["observations"][:5]
    again = load_policy(pendulum_zoo, 2000)
    np.testing.assert_array_equal(policy.deterministic(obs), again.deterministic(obs))
    assert not np.allclose(policy.deterministic(obs), policy0.deterministic(obs))


def test_load_policy_names_missing_step(pendulum_zoo):
    from offrl.collect.zoo import load_policy
    from offrl.errors import ConfigError

    with pytest.raises(ConfigError, match="no snapshot at step 123"):
        load_policy(pendulum_zoo, 123)


@pytest.mark.slow
def test_sac_solves_pendulum(tmp_path):
    """~5000 env steps: Pendulum-v1 return above -300 (usually about -150)."""
    from offrl.collect.train import TrainBehaviorConfig, train_behavior

    config = TrainBehaviorConfig(steps=5000, start_steps=1000, snapshot_every=1000, eval_episodes=5, seed=0)
    index = train_behavior("Pendulum-v1", tmp_path / "zoo", config, progress=False)
    best = max(s["deterministic_return_mean"] for s in index["snapshots"])
    assert best > -300, index["snapshots"]
