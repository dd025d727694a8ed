"""SAC: loss numbers against hand computations, scan == loop, sampled log-probs, config aliases,
and a one-step bandit it must solve."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState

from offrl.algos import ALGORITHM_NAMES, sac
from offrl.algos.common import Batch, apply_overrides
from offrl.nets import tanh_gaussian_log_prob, tanh_gaussian_sample

# Eager op-by-op dispatch is slow on a shared CPU: compile the pieces the tests call, for one small config.
CREATE = jax.jit(sac.create, static_argnums=(0, 1, 2))
UPDATE = jax.jit(sac.update)
SOFT_TARGET = jax.jit(sac.soft_target)
CRITIC_LOSS = jax.jit(sac.critic_loss)
ACTOR_LOSS = jax.jit(sac.actor_loss)
SMALL = sac.Config(hidden_dims=(16,), discount=0.9, initial_entropy_alpha=0.5, tau=0.1, batch_size=16)


def _batch(key, n, obs_dim=3, action_dim=1, masks=1.0):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return Batch(jax.random.normal(k1, (n, obs_dim)), jax.random.uniform(k2, (n, action_dim), minval=-1, maxval=1),
                 jax.random.normal(k3, (n,)), jax.random.normal(k4, (n, obs_dim)), jnp.full((n,), masks))


def _linear_critic_agent(slopes):
    """An agent whose critics are ``Q_k(s, a) = slopes[k] * sum_j a_j`` (no parameters used)."""
    slopes = jnp.asarray(slopes, jnp.float32)
    agent = CREATE(SMALL, 3, 1, jax.random.PRNGKey(0))
    critic = TrainState.create(apply_fn=lambda params, obs, actions: slopes[:, None] * jnp.sum(actions, -1)[None],
                               params={"unused": jnp.zeros(())}, tx=optax.sgd(0.0))
    return agent.replace(critic=critic, target_critic_params=critic.params)


def test_entropy_alpha_loss_hand_computed():
    agent = CREATE(SMALL, 3, 1, jax.random.PRNGKey(0))
    np.testing.assert_allclose(agent.log_entropy_alpha.params["value"], math.log(0.5), rtol=1e-6)
    # alpha = 2, H_target = -1: log pi + H = [-2, -4]; L = -log(2) * mean([-2, -4]) = 3 log 2
    loss, _ = sac.entropy_alpha_loss({"value": jnp.log(2.0)}, jnp.array([-1.0, -3.0]), -1.0)
    assert float(loss) == pytest.approx(3 * math.log(2.0), rel=1e-6)


def test_critic_loss_without_bootstrap_is_half_summed_mse_to_reward():
    agent = CREATE(SMALL, 3, 1, jax.random.PRNGKey(1))
    batch = _batch(jax.random.PRNGKey(2), 7, masks=0.0)  # terminal everywhere: y = r
    target = SOFT_TARGET(agent, batch, jax.random.PRNGKey(3))
    np.testing.assert_allclose(target, batch.rewards, rtol=1e-6)
    loss, _ = CRITIC_LOSS(agent.critic.params, agent, batch, target)
    q = np.asarray(agent.critic.apply_fn(agent.critic.params, batch.observations, batch.actions))
    assert q.shape == (2, 7)
    expected = 0.5 * sum(np.mean((q[k] - np.asarray(batch.rewards)) ** 2) for k in range(2))
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_soft_target_hand_computed_with_linear_critics():
    """Q'_k(s', a') = c_k a' with c = (2, 3): min_k = 2 a' for a' > 0 and 3 a' for a' < 0;
    y = r + 0.9 * m * (min_k Q'_k - 0.5 log pi(a'|s'))."""
    agent = _linear_critic_agent([2.0, 3.0])
    batch = _batch(jax.random.PRNGKey(5), 6)
    batch = batch._replace(masks=jnp.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]))
    key = jax.random.PRNGKey(6)
    target = SOFT_TARGET(agent, batch, key)
    mean, log_std = agent.actor.apply_fn(agent.actor.params, batch.next_observations)
    a2, logp2 = (np.asarray(x) for x in tanh_gaussian_sample(key, mean, log_std))
    a2 = a2[:, 0]
    min_q = np.where(a2 > 0, 2.0 * a2, 3.0 * a2)
    expected = np.asarray(batch.rewards) + 0.9 * np.asarray(batch.masks) * (min_q - 0.5 * logp2)
    np.testing.assert_allclose(target, expected, rtol=1e-5, atol=1e-6)


def test_actor_loss_hand_computed_with_linear_critics():
    """L_pi = mean(alpha log pi(a~|s) - min_k c_k a~), alpha = 0.5, c = (1, -1): min = -|a~|."""
    agent = _linear_critic_agent([1.0, -1.0])
    batch = _batch(jax.random.PRNGKey(7), 5)
    key = jax.random.PRNGKey(8)
    loss, aux = ACTOR_LOSS(agent.actor.params, agent, batch, key)
    mean, log_std = agent.actor.apply_fn(agent.actor.params, batch.observations)
    a, logp = (np.asarray(x) for x in tanh_gaussian_sample(key, mean, log_std))
    assert float(loss) == pytest.approx(np.mean(0.5 * logp + np.abs(a[:, 0])), rel=1e-5)
    np.testing.assert_allclose(aux["log_probs"], logp, rtol=1e-6)


def test_update_moves_alpha_the_right_way_and_polyak_averages_the_targets():
    agent = CREATE(SMALL, 3, 1, jax.random.PRNGKey(9))
    new, metrics = UPDATE(agent, _batch(jax.random.PRNGKey(10), 16))
    # entropy of the fresh policy is far above H_target = -1: alpha must fall
    assert float(metrics["entropy"]) > -1.0
    assert float(new.log_entropy_alpha.params["value"]) < math.log(0.5)
    for t_new, t_old, online in zip(*(jax.tree_util.tree_leaves(p) for p in
                                      (new.target_critic_params, agent.target_critic_params, new.critic.params))):
        np.testing.assert_allclose(t_new, 0.1 * online + 0.9 * t_old, rtol=1e-5, atol=1e-7)
    assert int(new.step) == 1 and all(np.isfinite(float(v)) for v in metrics.values())


def test_scan_of_updates_equals_python_loop():
    agent = CREATE(SMALL, 3, 1, jax.random.PRNGKey(7))
    batches = [_batch(jax.random.PRNGKey(10 + i), 16) for i in range(4)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *batches)
    scanned, metrics = jax.jit(lambda a, b: jax.lax.scan(sac.update, a, b))(agent, stacked)
    looped = agent
    for b in batches:
        looped, _ = UPDATE(looped, b)
    for a, b in zip(jax.tree_util.tree_leaves(scanned), jax.tree_util.tree_leaves(looped)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-5)
    assert int(scanned.step) == 4
    assert all(np.all(np.isfinite(np.asarray(v))) for v in metrics.values())
    changed = jax.tree_util.tree_map(lambda x, y: float(jnp.abs(x - y).max()), scanned.actor.params, agent.actor.params)
    assert max(jax.tree_util.tree_leaves(changed)) > 0


def test_sample_actions_returns_the_log_prob_of_its_action():
    agent = CREATE(SMALL, 3, 1, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
    a, logp, mean, std = jax.jit(sac.sample_actions)(agent, obs, jax.random.PRNGKey(2))
    assert a.shape == (64, 1) and logp.shape == (64,) and np.all(np.abs(np.asarray(a)) <= 1)
    np.testing.assert_allclose(logp, tanh_gaussian_log_prob(mean, jnp.log(std), a), atol=1e-3)
    np.testing.assert_allclose(jax.jit(sac.act)(agent, obs), np.tanh(np.asarray(mean)), atol=1e-6)
    assert jax.jit(sac.q_value)(agent, obs, a).shape == (64,)


def test_old_field_names_are_accepted_with_a_warning_and_sac_is_not_an_offline_algorithm():
    with pytest.warns(FutureWarning, match="initial_entropy_alpha"):
        config = apply_overrides(sac.Config(), {"init_temperature": "0.2"})
    assert config.initial_entropy_alpha == 0.2
    with pytest.warns(FutureWarning, match="entropy_alpha_lr"):
        assert apply_overrides(sac.Config(), {"temperature_lr": "1e-3"}).entropy_alpha_lr == 1e-3
    assert "sac" not in ALGORITHM_NAMES


def test_solves_a_one_step_bandit():
    """Reward -(a - 0.5)^2 and every step terminal: the deterministic action must approach 0.5."""
    agent = CREATE(sac.Config(hidden_dims=(32, 32), actor_lr=3e-3, critic_lr=3e-3, entropy_alpha_lr=3e-3,
                              initial_entropy_alpha=0.1), 1, 1, jax.random.PRNGKey(0))

    def step(agent, key):
        actions = jax.random.uniform(key, (64, 1), minval=-1, maxval=1)
        obs = jnp.ones((64, 1))
        batch = Batch(obs, actions, -(actions[:, 0] - 0.5) ** 2, obs, jnp.zeros(64))
        return sac.update(agent, batch)

    agent, metrics = jax.jit(lambda a: jax.lax.scan(step, a, jax.random.split(jax.random.PRNGKey(1), 600)))(agent)
    assert float(sac.act(agent, jnp.ones((1, 1)))[0, 0]) == pytest.approx(0.5, abs=0.1)
    assert float(metrics["critic_loss"][-100:].mean()) < float(metrics["critic_loss"][:100].mean())
