"""SAC: loss numbers, scan == loop, act log-probs, snapshots round-trip, and (slow) solving Pendulum."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.collect import sac
from offrl.nets import tanh_gaussian_log_prob


def _batch(key, n, obs_dim=3, action_dim=1, masks=1.0):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return sac.Batch(jax.random.normal(k1, (n, obs_dim)), jax.random.uniform(k2, (n, action_dim), minval=-1, maxval=1),
                     jax.random.normal(k3, (n,)), jax.random.normal(k4, (n, obs_dim)), jnp.full((n,), masks))


def test_temperature_loss_hand_computed():
    agent = sac.create(sac.SACConfig(init_temperature=2.0, hidden_dims=(8,)), 3, 1, jax.random.PRNGKey(0))
    assert agent.target_entropy == -1.0
    # -log(2) * mean([-1 + (-1), -3 + ... ]) : log_probs + H = [-1 - 1, -3 - 1]? no: H_target = -1 -> [-2, -4]
    loss, info = sac.temperature_loss(agent.temperature.params, agent, jnp.array([-1.0, -3.0]))
    assert np.isclose(float(loss), -np.log(2.0) * np.mean([-2.0, -4.0]), atol=1e-6)
    assert np.isclose(float(info["alpha"]), 2.0, atol=1e-6)


def test_critic_loss_without_bootstrap_is_half_summed_mse_to_reward():
    agent = sac.create(sac.SACConfig(hidden_dims=(16, 16)), 3, 1, jax.random.PRNGKey(1))
    batch = _batch(jax.random.PRNGKey(2), 7, masks=0.0)  # terminal everywhere: y = r
    loss, _ = sac.critic_loss(agent.critic.params, agent, batch, jax.random.PRNGKey(3))
    q = np.asarray(agent.critic.apply_fn({"params": agent.critic.params}, batch.observations, batch.actions))
    expected = 0.5 * sum(np.mean((q[j] - np.asarray(batch.rewards)) ** 2) for j in range(2))
    assert q.shape == (2, 7)
    assert np.isclose(float(loss), expected, rtol=1e-5)


def test_critic_target_bootstraps_with_entropy_bonus():
    agent = sac.create(sac.SACConfig(hidden_dims=(16,), discount=0.9, init_temperature=0.5), 3, 1, jax.random.PRNGKey(4))
    batch = _batch(jax.random.PRNGKey(5), 5)
    key = jax.random.PRNGKey(6)
    loss, _ = sac.critic_loss(agent.critic.params, agent, batch, key)
    mean, log_std = agent.actor.apply_fn({"params": agent.actor.params}, batch.next_observations)
    from offrl.nets import tanh_gaussian_sample

    a2, logp2 = tanh_gaussian_sample(key, mean, log_std)
    q2 = np.asarray(agent.critic.apply_fn({"params": agent.target_critic_params}, batch.next_observations, a2)).min(0)
    y = np.asarray(batch.rewards) + 0.9 * (q2 - 0.5 * np.asarray(logp2))
    q = np.asarray(agent.critic.apply_fn({"params": agent.critic.params}, batch.observations, batch.actions))
    assert np.isclose(float(loss), 0.5 * ((q - y[None]) ** 2).mean(1).sum(), rtol=1e-5)


def test_scan_of_updates_equals_python_loop():
    agent = sac.create(sac.SACConfig(hidden_dims=(32, 32), batch_size=16), 3, 1, jax.random.PRNGKey(7))
    batches = [_batch(jax.random.PRNGKey(10 + i), 16) for i in range(4)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *batches)
    scanned, metrics = sac.update_many(agent, stacked)
    looped = agent
    for b in batches:
        looped, last = jax.jit(sac.update)(looped, b)
    for a, b in zip(jax.tree_util.tree_leaves(scanned), jax.tree_util.tree_leaves(looped)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-5)
    assert int(scanned.step) == 4
    assert all(np.isfinite(float(v)) for v in metrics.values())
    changed = jax.tree_util.tree_map(lambda x, y: float(jnp.abs(x - y).max()), scanned.actor.params, agent.actor.params)
    assert max(jax.tree_util.tree_leaves(changed)) > 0


def test_act_returns_log_prob_of_its_action():
    actor_def = sac.make_actor(sac.SACConfig(hidden_dims=(32,)), 2)
    params = actor_def.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))["params"]
    act_stochastic, act_deterministic = sac.make_act_fns(actor_def)
    obs = jax.random.normal(jax.random.PRNGKey(1), (64, 4))
    a, logp, mean, std = act_stochastic(params, jax.random.PRNGKey(2), obs)
    assert a.shape == (64, 2) and logp.shape == (64,) and np.all(np.abs(np.asarray(a)) <= 1)
    recomputed = tanh_gaussian_log_prob(mean, jnp.log(std), a)
    np.testing.assert_allclose(np.asarray(logp), np.asarray(recomputed), atol=1e-3)
    np.testing.assert_allclose(np.asarray(act_deterministic(params, obs)), np.tanh(np.asarray(mean)), atol=1e-6)


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
