"""AWAC: hand-computed loss numbers and a short bandit run that must learn."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import losses
from offrl.algos import awac
from offrl.algos.common import Batch


def test_normalized_weights_are_batch_softmax_times_batch_size():
    # A = [0, ln 2], lambda = 1: softmax = [1/3, 2/3], times B = 2 -> [2/3, 4/3].
    w = losses.advantage_weights(jnp.array([0.0, math.log(2.0)]), 1.0, normalize_over_batch=True)
    np.testing.assert_allclose(w, [2 / 3, 4 / 3], rtol=1e-6)
    # lambda divides the advantage: A = [0, 2 ln 2] with lambda = 2 gives the same weights.
    w2 = losses.advantage_weights(jnp.array([0.0, 2 * math.log(2.0)]), 1.0 / 2.0, normalize_over_batch=True)
    np.testing.assert_allclose(w2, w, rtol=1e-6)
    # Shifting every advantage by a constant does not change normalised weights (no overflow at 1000).
    w3 = losses.advantage_weights(jnp.array([1000.0, 1000.0 + math.log(2.0)]), 1.0, normalize_over_batch=True)
    np.testing.assert_allclose(w3, w, rtol=1e-4)  # float32 rounding of 1000 + ln 2


def test_unnormalized_weights_are_clipped_exponentials():
    w = losses.advantage_weights(jnp.log(jnp.array([1.0, 2.0, 4.0])), 1.0, max_weight=1.5)
    np.testing.assert_allclose(w, [1.0, 1.5, 1.5], rtol=1e-6)


def test_weighted_log_likelihood_loss_value_and_constant_weights():
    log_probs, weights = jnp.array([-1.0, -2.0]), jnp.array([0.5, 1.5])
    # -mean(0.5 * -1, 1.5 * -2) = -(-0.5 - 3) / 2 = 1.75
    assert float(losses.weighted_nll(log_probs, weights)) == pytest.approx(1.75)
    grad_w = jax.grad(losses.weighted_nll, argnums=1)(log_probs, weights)
    np.testing.assert_array_equal(grad_w, 0.0)
    grad_lp = jax.grad(losses.weighted_nll)(log_probs, weights)
    np.testing.assert_allclose(grad_lp, [-0.25, -0.75])


# One small configuration, one compiled update shared by the tests below.
CONFIG = awac.Config(hidden_dims=(32, 32), batch_size=128,
                     actor_lr=1e-3, critic_lr=1e-3, actor_weight_decay=0.0)
UPDATE = jax.jit(awac.update)
CREATE = jax.jit(awac.create, static_argnums=(0, 1, 2))


def bandit_batches(num_batches: int, seed: int = 0):
    """Contextual bandit (masks = 0): data actions uniform on [-1, 1], reward ``-4 (a - 0.5)^2``."""
    rng = np.random.default_rng(seed)
    for _ in range(num_batches):
        obs = rng.normal(size=(CONFIG.batch_size, 2)).astype(np.float32)
        actions = rng.uniform(-1, 1, size=(CONFIG.batch_size, 1)).astype(np.float32)
        yield Batch(obs, actions, -4.0 * (actions[:, 0] - 0.5) ** 2, obs, np.zeros(CONFIG.batch_size, np.float32))


def test_critic_target_has_no_entropy_term_and_respects_masks():
    """With masks = 0 the critic regresses on r exactly: no entropy bonus, no bootstrap."""
    agent = CREATE(CONFIG, 2, 1, jax.random.PRNGKey(0))
    batch = next(bandit_batches(1, seed=1))
    q = agent.critic.apply_fn(agent.critic.params, batch.observations, batch.actions)
    expected = jnp.sum(jnp.mean((q - batch.rewards) ** 2, axis=-1))
    _, metrics = UPDATE(agent, batch)
    assert float(metrics["critic_loss"]) == pytest.approx(float(expected), rel=1e-4)


def test_awac_learns_the_best_action_of_a_bandit():
    """Behaviour cloning of uniform actions would give a mean near 0; advantage weighting must
    move the policy towards the best action 0.5."""
    agent = CREATE(CONFIG, 2, 1, jax.random.PRNGKey(0))
    for batch in bandit_batches(600):
        agent, metrics = UPDATE(agent, batch)
    assert np.isfinite(float(metrics["critic_loss"])) and np.isfinite(float(metrics["actor_loss"]))
    obs = np.random.default_rng(2).normal(size=(256, 2)).astype(np.float32)
    mean_action = float(awac.act(agent, jnp.asarray(obs)).mean())
    assert 0.3 < mean_action < 0.7, mean_action
