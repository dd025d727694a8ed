"""BRAC: the KL estimate against the closed form on Gaussians, both penalties' targets, and a real run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import data, engine
from offrl.algos import brac
from offrl.algos.common import Batch


def gaussian_kl(m1, s1, m2, s2):
    """Closed-form KL(N(m1, s1^2) || N(m2, s2^2)) summed over dimensions (NumPy)."""
    return np.sum(np.log(s2 / s1) + (s1**2 + (m1 - m2) ** 2) / (2 * s2**2) - 0.5, axis=-1)


def test_sample_kl_by_hand():
    log_p, log_q = jnp.array([[-1.0, -2.0], [0.0, 0.0]]), jnp.array([[-3.0, -2.0], [1.0, -1.0]])
    np.testing.assert_allclose(brac.sample_kl(log_p, log_q), [1.0, 0.0])


def test_divergence_estimate_matches_the_closed_form_kl_of_two_gaussians():
    m1, s1 = np.array([[0.3, -0.2], [0.0, 0.5]]), np.array([[0.5, 1.0], [0.2, 0.3]])
    m2, s2 = np.array([[0.0, 0.0], [0.4, 0.5]]), np.array([[1.0, 0.5], [0.3, 0.3]])
    d, actions = brac.policy_divergence(jax.random.PRNGKey(0), jnp.asarray(m1), jnp.log(jnp.asarray(s1)),
                                        jnp.asarray(m2), jnp.log(jnp.asarray(s2)), n=200_000)
    exact = gaussian_kl(m1, s1, m2, s2)  # tanh is a bijection: the squashed KL equals it
    assert exact[0] > 0.5 and exact[1] > 0.5
    np.testing.assert_allclose(np.asarray(d), exact, rtol=0.02)
    assert actions.shape == (2, 200_000, 2) and float(jnp.abs(actions).max()) <= 1.0


def test_identical_policies_have_zero_divergence_and_it_is_differentiable():
    mean, log_std = jnp.array([[0.1, 0.2]]), jnp.array([[-0.5, 0.0]])
    d, _ = brac.policy_divergence(jax.random.PRNGKey(1), mean, log_std, mean, log_std, n=8)
    assert float(d[0]) == pytest.approx(0.0, abs=1e-6)
    grad = jax.grad(lambda m: brac.policy_divergence(jax.random.PRNGKey(1), m, log_std, mean, log_std, 8)[0].sum())
    assert np.all(np.isfinite(grad(mean + 0.3)))


def _one_update(penalty):
    cfg = brac.Config(penalty=penalty, hidden_dims=(8,), warmup_steps=0, alpha=5.0)
    agent = brac.create(cfg, 3, 2, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (16, 3))
    actions = jnp.tanh(jax.random.normal(jax.random.PRNGKey(2), (16, 2)))
    return jax.jit(brac.update)(agent, Batch(obs, actions, jnp.zeros(16), obs, jnp.ones(16)))[1]


def test_value_penalty_lowers_the_target_and_policy_penalty_does_not():
    value, policy = _one_update("value"), _one_update("policy")
    # same keys, same networks: only the target differs, by alpha * D(s') with D > 0
    assert float(value["divergence"]) == pytest.approx(float(policy["divergence"]))
    assert float(value["divergence"]) > 0
    assert float(value["critic_loss"]) > float(policy["critic_loss"])


@pytest.mark.parametrize("penalty", ["value", pytest.param("policy", marks=pytest.mark.slow)])
def test_brac_beats_a_random_policy_on_bundled_pendulum(penalty):
    run = engine.train("brac", data.load("pendulum-medium-expert-v0"), steps=3000, eval_every=3000, log_every=1000,
                       eval_episodes=5, progress=False,
                       config_overrides={"hidden_dims": "64,64", "batch_size": "256", "reward_scaling": "0.1",
                                         "warmup_steps": "1000", "penalty": penalty})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"BRAC-{penalty[0]} reached only {score:.1f} (random actor = 0, data about 63)"
