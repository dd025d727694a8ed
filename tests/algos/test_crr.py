"""CRR: the advantage filter in both forms by hand, V(s) from policy samples, target copies, and a real run."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import data, engine
from offrl.algos import crr
from offrl.algos.common import Batch


def test_binary_filter_keeps_exactly_the_positive_advantages():
    adv = jnp.array([-1.0, 0.0, 1e-3, 2.0])
    np.testing.assert_array_equal(crr.advantage_filter(adv, "binary", 1.0, 20.0), [0.0, 0.0, 1.0, 1.0])


def test_exponential_filter_by_hand_and_clipped():
    adv = jnp.array([-1.0, 0.0, 0.5, 10.0])
    # beta = 0.5: exp(-2), exp(0), exp(1), exp(20) -> clipped at 20
    expected = [math.exp(-2.0), 1.0, math.e, 20.0]
    np.testing.assert_allclose(crr.advantage_filter(adv, "exp", 0.5, 20.0), expected, rtol=1e-6)


def test_filter_is_a_constant_for_the_gradient():
    grad = jax.grad(lambda a: crr.advantage_filter(a, "exp", 1.0, 20.0).sum())(jnp.array([0.3, -0.2]))
    np.testing.assert_array_equal(grad, [0.0, 0.0])


def test_state_value_mean_and_max():
    q = jnp.array([[1.0, 2.0, 6.0], [-3.0, 0.0, 0.0]])
    np.testing.assert_allclose(crr.state_value(q, "mean"), [3.0, -1.0])
    np.testing.assert_allclose(crr.state_value(q, "max"), [6.0, 0.0])


def test_hard_target_copies_only_on_the_interval_and_polyak_otherwise():
    cfg = crr.Config(target_update_interval=3)
    target, online = {"w": jnp.zeros(2)}, {"w": jnp.ones(2)}
    assert float(crr.update_target(target, online, jnp.int32(2), cfg)["w"][0]) == 0.0
    assert float(crr.update_target(target, online, jnp.int32(3), cfg)["w"][0]) == 1.0
    soft = crr.Config(target_update_interval=None, tau=0.25)
    assert float(crr.update_target(target, online, jnp.int32(2), soft)["w"][0]) == pytest.approx(0.25)


def test_actor_loss_is_the_filtered_negative_log_likelihood():
    cfg = crr.Config(hidden_dims=(8,))
    agent = crr.create(cfg, 3, 2, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
    actions = jnp.tanh(jax.random.normal(jax.random.PRNGKey(2), (5, 2)))
    batch = Batch(obs, actions, jnp.zeros(5), obs, jnp.ones(5))
    weights = jnp.array([0.0, 1.0, 2.0, 0.0, 1.0])
    loss, _ = crr.actor_loss(agent.actor.params, agent, batch, weights)
    mean, log_std = agent.actor.apply_fn(agent.actor.params, obs)
    std = np.exp(np.asarray(log_std))
    log_probs = np.sum(-0.5 * ((np.asarray(actions) - np.asarray(mean)) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi), -1)
    assert float(loss) == pytest.approx(-np.mean(np.asarray(weights) * log_probs), rel=1e-5)


@pytest.mark.parametrize("after", [False, True])
def test_advantage_uses_the_critic_before_or_after_its_step(after):
    """``advantage_after_critic_step`` picks which critic weights the actor: the one the update
    started with (offrl's default) or the one after this update's critic step (d3rlpy's order)."""
    cfg = crr.Config(hidden_dims=(16,), batch_size=8, advantage_after_critic_step=after)
    agent = crr.create(cfg, 3, 2, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (8, 3))
    batch = Batch(obs, jnp.tanh(obs[:, :2]), obs[:, 0], obs, jnp.ones(8))
    new, metrics = crr.update(agent, batch)

    def mean_advantage(critic_params):
        _, _, value_key = jax.random.split(agent.rng, 3)           # the update's own key for the policy samples
        mean, log_std = agent.actor.apply_fn(agent.actor.params, obs)
        sampled = crr.sample_actions(value_key, jnp.repeat(mean, 4, axis=0), jnp.repeat(log_std, 4, axis=0))
        q_data = agent.critic.apply_fn(critic_params, obs, batch.actions).min(0)
        q_pi = agent.critic.apply_fn(critic_params, jnp.repeat(obs, 4, axis=0), sampled).min(0).reshape(8, 4)
        return float((q_data - q_pi.mean(-1)).mean())

    used, other = (new.critic.params, agent.critic.params) if after else (agent.critic.params, new.critic.params)
    assert float(metrics["adv"]) == pytest.approx(mean_advantage(used), rel=1e-5, abs=1e-6)
    assert abs(mean_advantage(used) - mean_advantage(other)) > 1e-5     # the two orders are distinguishable here


def test_log_std_floor_is_a_config_field():
    agent = crr.create(crr.Config(hidden_dims=(4,), log_std_min=-20.0), 3, 2, jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(lambda p: p * 0.0, agent.actor.params)
    params["params"]["Dense_1"]["bias"] = jnp.full((2,), -12.0)          # the log-std head: -12, inside -20's floor
    _, log_std = agent.actor.apply_fn(params, jnp.zeros((1, 3)))
    np.testing.assert_allclose(log_std, -12.0)
    _, log_std = crr.create(crr.Config(hidden_dims=(4,)), 3, 2, jax.random.PRNGKey(0)).actor.apply_fn(params, jnp.zeros((1, 3)))
    np.testing.assert_allclose(log_std, -5.0)                              # offrl's default floor


def test_crr_beats_a_random_policy_on_bundled_pendulum():
    """Pendulum's rewards (-16..0 per step) are 0.1x-scaled so advantages are of order 1, the scale
    beta = 1 assumes (unscaled, exp(A) with |A| ~ 10 keeps a handful of rows and scores about 1)."""
    run = engine.train("crr", data.load("pendulum-medium-expert-v0"), steps=3000, eval_every=3000, log_every=1000,
                       eval_episodes=5, progress=False, config_overrides={"hidden_dims": "64,64", "batch_size": "256", "reward_scaling": "0.1"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"CRR reached only {score:.1f} (random actor = 0, data about 63)"
