"""MOBILE: the Bellman-inconsistency penalty and the critic's target (deterministic and soft backup) by hand
and on a hand-set ensemble; old run folders load with the deterministic backup."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_algorithm_behaviour as shared
from model_based_helpers import constant_ensemble, pendulum_run

from offrl.algos import mobile
from offrl.algos.common import Batch, config_from_dict, config_to_dict

tiny_data = shared.tiny_data


def test_bellman_uncertainty_by_hand():
    """S = 2 samples, E = 3 elites, N = 1 row, gamma = 0.5."""
    rewards = jnp.array([[[1.0], [2.0], [0.0]], [[3.0], [2.0], [0.0]]])
    masks = jnp.array([[[1.0], [1.0], [0.0]], [[1.0], [0.0], [1.0]]])
    next_q = jnp.array([[[4.0], [2.0], [8.0]], [[0.0], [6.0], [2.0]]])
    # estimates: elite 0: mean(1 + 2, 3 + 0) = 3; elite 1: mean(2 + 1, 2 + 0) = 2.5; elite 2: mean(0, 0 + 1) = 0.5
    estimates = np.array([3.0, 2.5, 0.5])
    expected = np.sqrt(np.sum((estimates - estimates.mean()) ** 2) / 2)
    np.testing.assert_allclose(np.asarray(mobile.bellman_uncertainty(rewards, masks, next_q, 0.5)), [expected], rtol=1e-6)


def test_penalty_of_a_tiny_ensemble_is_the_spread_of_its_rewards():
    """Elites that agree on s' and differ in reward (1, 2, 4), a critic that is 0 and the
    deterministic backup (no entropy term): u = std(1, 2, 4); the non-elite member (reward 40)
    does not count."""
    config = mobile.Config(ensemble_size=4, num_elites=3, model_hidden_dims=(4,), rollout_starts=4, batch_size=8,
                           termination="none", successor_samples=5, soft_backup=False)
    means = [[0.0, 0.0, 1.0], [0.0, 0.0, 2.0], [0.0, 0.0, 4.0], [0.0, 0.0, 40.0]]
    model = constant_ensemble(config, 2, 1, means=means, raw_logvars=np.full((4, 3), -30.0), elites=[0, 1, 2])
    agent = mobile.create(config, 2, 1, jax.random.PRNGKey(0))
    zero_critic = jax.tree_util.tree_map(jnp.zeros_like, agent.target_critic_params)
    agent = agent.replace(dynamics=model, target_critic_params=zero_critic)
    obs = jax.random.normal(jax.random.PRNGKey(1), (8, 2))
    batch = Batch(obs, jnp.zeros((8, 1)), jnp.zeros(8), obs, jnp.ones(8))
    u = mobile.penalty(agent, batch, jax.random.PRNGKey(2))
    np.testing.assert_allclose(np.asarray(u), np.std([1.0, 2.0, 4.0], ddof=1), atol=0.01)  # reward noise: exp(-5) / sqrt(5) per elite



def test_bellman_uncertainty_with_the_entropy_term_by_hand():
    """The soft backup subtracts alpha log pi(a'_ij|s'_ij) from each Q'_ij before the mean over samples:
    S = 2, E = 3, N = 1, gamma = 0.5, alpha = 0.5."""
    rewards = jnp.array([[[1.0], [2.0], [0.0]], [[3.0], [2.0], [0.0]]])
    masks = jnp.array([[[1.0], [1.0], [0.0]], [[1.0], [0.0], [1.0]]])
    next_q = jnp.array([[[4.0], [2.0], [8.0]], [[0.0], [6.0], [2.0]]])
    log_probs = jnp.array([[[2.0], [-2.0], [4.0]], [[0.0], [8.0], [-4.0]]])
    # V' = Q' - 0.5 log pi: [[3, 3, 6], [0, 2, 4]]
    # estimates: elite 0: mean(1 + 1.5, 3 + 0) = 2.75; elite 1: mean(2 + 1.5, 2 + 0) = 2.75; elite 2: mean(0, 0 + 2) = 1
    estimates = np.array([2.75, 2.75, 1.0])
    expected = np.sqrt(np.sum((estimates - estimates.mean()) ** 2) / 2)
    u = mobile.bellman_uncertainty(rewards, masks, next_q, 0.5, log_probs, 0.5)
    np.testing.assert_allclose(np.asarray(u), [expected], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(mobile.bellman_uncertainty(rewards, masks, next_q, 0.5, log_probs, 0.0)),
                               np.asarray(mobile.bellman_uncertainty(rewards, masks, next_q, 0.5)), rtol=1e-6)


def _agreeing_ensemble_agent(soft_backup: bool, successors: int = 10):
    """Elites that agree (reward 1, no state change), a zero critic, a state-independent policy
    u ~ N(0, e^-4) squashed by tanh, alpha = 0.5, gamma = 0.99, beta = 2."""
    config = mobile.Config(ensemble_size=4, num_elites=3, model_hidden_dims=(4,), rollout_starts=4, batch_size=8,
                           termination="none", successor_samples=successors, discount=0.99, penalty_coef=2.0,
                           soft_backup=soft_backup)
    means = [[0.0, 0.0, 1.0]] * 3 + [[0.0, 0.0, 40.0]]
    model = constant_ensemble(config, 2, 1, means=means, raw_logvars=np.full((4, 3), -30.0), elites=[0, 1, 2])
    agent = mobile.create(config, 2, 1, jax.random.PRNGKey(0))
    actor = jax.tree_util.tree_map(jnp.zeros_like, agent.actor.params)
    actor["params"]["Dense_1"]["bias"] = jnp.full((1,), -4.0)  # the log-std head
    zero_critic = jax.tree_util.tree_map(jnp.zeros_like, agent.target_critic_params)
    return agent.replace(dynamics=model, target_critic_params=zero_critic, actor=agent.actor.replace(params=actor),
                         log_entropy_alpha=agent.log_entropy_alpha.replace(params={"value": jnp.log(0.5)}))


def _mixed_batch(n=4096):
    obs = jax.random.normal(jax.random.PRNGKey(1), (n, 2))
    masks = jnp.ones(n).at[:8].set(0.0)
    return Batch(obs, jnp.zeros((n, 1)), jnp.full(n, -2.0), obs, masks, extras={"is_model": jnp.arange(n) >= 64})


def test_deterministic_target_of_a_tiny_ensemble_is_r_minus_beta_u():
    """A zero critic and elites that agree: V' = 0, u is only the reward noise (sigma e^-5 / sqrt(10) per
    elite), so y = r - beta u on model rows and y = r on real rows."""
    agent = _agreeing_ensemble_agent(soft_backup=False)
    batch = _mixed_batch()
    y, u = mobile.critic_target(agent, batch, jax.random.PRNGKey(2), jax.random.PRNGKey(3))
    y, u, is_model = np.asarray(y), np.asarray(u), np.asarray(batch.extras["is_model"])
    assert np.all(u[~is_model] == 0.0) and 0.0 < u[is_model].max() < 0.01, u.max()
    np.testing.assert_allclose(y, -2.0 - 2.0 * u, rtol=0, atol=1e-6)


def test_soft_target_of_a_tiny_ensemble_carries_the_entropy_bonus():
    """The same ensemble with the soft backup: V'(s') = -alpha log pi(a'|s'). With log pi = 4 - log(2 pi) / 2
    - eps^2 / 2 + O(e^-8) (eps ~ N(0, 1)): E[log pi] = 2.5814, Var[log pi] = 1/2, so
    E[y + beta u] = r - gamma alpha 2.5814 (rows with mask 1), and u is the spread over 3 elites of
    means of S = 10 such terms: E[u^2] = (gamma alpha)^2 Var[log pi] / S."""
    agent = _agreeing_ensemble_agent(soft_backup=True)
    batch = _mixed_batch()
    y, u = mobile.critic_target(agent, batch, jax.random.PRNGKey(2), jax.random.PRNGKey(3))
    y, u, is_model = np.asarray(y), np.asarray(u), np.asarray(batch.extras["is_model"])
    gamma, alpha, S = 0.99, 0.5, 10
    mean_log_prob = 4.0 - 0.5 * np.log(2 * np.pi) - 0.5
    assert np.all(u[~is_model] == 0.0)
    # 4,032 model rows: the relative standard error of mean(u^2) is 1 / sqrt(4032) = 1.6%
    np.testing.assert_allclose(np.mean(u[is_model] ** 2), (gamma * alpha) ** 2 * 0.5 / S, rtol=0.07)
    live = np.asarray(batch.masks) == 1.0
    backup = y + 2.0 * u  # r + gamma V'(s')
    # standard error: gamma alpha sqrt(1/2) / sqrt(4088) = 0.0055
    np.testing.assert_allclose(backup[live].mean(), -2.0 - gamma * alpha * mean_log_prob, atol=0.03)
    np.testing.assert_allclose(backup[~live], -2.0, atol=1e-6)  # terminal rows: no bootstrap, no entropy


def test_a_saved_config_without_soft_backup_loads_as_the_deterministic_backup():
    saved = config_to_dict(mobile.Config(soft_backup=True))
    del saved["soft_backup"]
    assert config_from_dict(mobile.Config, saved).soft_backup is False
    assert config_from_dict(mobile.Config, config_to_dict(mobile.Config(soft_backup=True))).soft_backup is True


@pytest.mark.slow
def test_mobile_with_the_soft_backup_beats_a_random_policy_on_bundled_pendulum():
    """pendulum-medium-v0 (normalised 0 = random actor, 100 = expert; the data scores 20.6), 12k updates with
    MOPO's small real-run sizes and the soft backup: the critics stay below the reward bound and the policy
    swings up (6 vmapped seeds of the same setting: 100.1 +- 0.5; with the deterministic backup 37.4 +- 49.1,
    docs/models.md)."""
    assert mobile.Config().soft_backup is True      # the default: this test is the reason for it
    score, q = pendulum_run("mobile")
    assert max(q) < 0.0, f"Q rose above the reward bound 0: {q}"
    assert score > 50, f"MOBILE reached only {score:.1f} (random actor = 0, data 20.6)"
