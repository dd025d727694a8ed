"""MOBILE: the contract test, the Bellman-inconsistency penalty by hand and on a hand-set ensemble."""

import jax
import jax.numpy as jnp
import numpy as np
import test_algorithm_behaviour as shared
from model_based_helpers import constant_ensemble

from offrl.algos import mobile
from offrl.algos.common import Batch

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
    """Elites that agree on s' and differ in reward (1, 2, 4), a critic that is 0: u = std(1, 2, 4);
    the non-elite member (reward 40) does not count."""
    config = mobile.Config(ensemble_size=4, num_elites=3, model_hidden_dims=(4,), rollout_starts=4, batch_size=8,
                           termination="none", successor_samples=5)
    means = [[0.0, 0.0, 1.0], [0.0, 0.0, 2.0], [0.0, 0.0, 4.0], [0.0, 0.0, 40.0]]
    model = constant_ensemble(config, 2, 1, means=means, raw_logvars=np.full((4, 3), -30.0), elites=[0, 1, 2])
    agent = mobile.create(config, 2, 1, jax.random.PRNGKey(0))
    zero_critic = jax.tree_util.tree_map(jnp.zeros_like, agent.target_critic_params)
    agent = agent.replace(dynamics=model, target_critic_params=zero_critic)
    obs = jax.random.normal(jax.random.PRNGKey(1), (8, 2))
    batch = Batch(obs, jnp.zeros((8, 1)), jnp.zeros(8), obs, jnp.ones(8))
    u = mobile.penalty(agent, batch, jax.random.PRNGKey(2))
    np.testing.assert_allclose(np.asarray(u), np.std([1.0, 2.0, 4.0], ddof=1), atol=0.01)  # reward noise: exp(-5) / sqrt(5) per elite

