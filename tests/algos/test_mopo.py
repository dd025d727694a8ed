"""MOPO: the contract test, the uncertainty-penalised model rewards on a hand-set ensemble."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_algorithm_behaviour as shared
from model_based_helpers import constant_ensemble, pendulum_run, soft_bounded_logvar

from offrl import data
from offrl.algos import model_based, mopo


tiny_data = shared.tiny_data



def test_penalised_rewards_by_hand():
    std = jnp.array([[[3.0, 4.0]], [[1.0, 1.0]]])  # members' norms 5 and sqrt(2) -> u = 5
    np.testing.assert_allclose(np.asarray(mopo.penalised_rewards(jnp.array([2.0]), std, 0.5)), [2.0 - 2.5])


def test_model_rows_carry_r_minus_lambda_u_of_a_tiny_ensemble():
    """Two members predicting constant (ds, r) with known variances: the model rows' rewards are
    the sampled reward minus lambda * max_i ||sigma_i||, sigma_i in the data's units."""
    config = mopo.Config(ensemble_size=2, num_elites=1, model_hidden_dims=(4,), rollout_starts=8, rollout_every=1,
                         rollout_length=2, batch_size=16, real_ratio=0.25, penalty_coef=2.0, termination="none")
    raw = np.array([[-1.0, 0.0], [-3.0, -2.0]])  # obs_dim 1: (ds, r) per member
    model = constant_ensemble(config, 1, 1, means=[[0.1, 1.0], [0.5, -1.0]], raw_logvars=raw, elites=[0])
    model = model.replace(target_std=jnp.array([2.0, 3.0]), fitted=jnp.ones((), bool))
    sigma = np.exp(0.5 * soft_bounded_logvar(raw)) * np.array([2.0, 3.0])
    u = np.max(np.linalg.norm(sigma, axis=-1))
    agent = mopo.create(config, 1, 1, jax.random.PRNGKey(0)).replace(dynamics=model, step=jnp.ones((), jnp.int32))
    data = {"observations": jnp.zeros((32, 1)), "actions": jnp.zeros((32, 1)), "rewards": jnp.full(32, 7.0),
            "next_observations": jnp.zeros((32, 1)), "masks": jnp.ones(32)}
    batch = mopo.sample(data, jax.random.PRNGKey(1), 16)
    agent, mixed, metrics = model_based.model_batch(agent, batch, reward_penalty=config.penalty_coef)
    assert int(agent.buffer.size) == 16  # 8 starts x 2 steps, all alive
    is_model = np.asarray(mixed.extras["is_model"])
    assert is_model.sum() == 12
    np.testing.assert_allclose(np.asarray(mixed.rewards)[~is_model], 7.0)
    np.testing.assert_allclose(np.asarray(agent.buffer.data.uncertainty)[:16], u, rtol=1e-5)
    # elite 0's reward: mean 1.0 * target_std 3.0 (target_mean 0), noise sigma_0[1]
    np.testing.assert_allclose(np.asarray(mixed.rewards)[is_model], 3.0 - 2.0 * u, atol=4 * sigma[0, 1])
    # the model rows' successors follow elite 0: ds = 0.1 * 2.0 per step
    filled = agent.buffer.data
    np.testing.assert_allclose(np.asarray(filled.next_observations - filled.observations)[:16], 0.2,
                               atol=4 * sigma[0, 0])


@pytest.mark.slow
def test_mopo_beats_a_random_policy_on_bundled_pendulum():
    """pendulum-medium-v0 (normalised 0 = random actor, 100 = expert; the data scores 20.6), 12k updates with
    small networks and tau = 0.05 (values propagate in about 1 / (tau (1 - gamma)) = 2,000 updates): the
    LayerNorm critics stay below the reward bound and the policy swings up. Without LayerNorm the same run
    drifts to Q > 0 and scores about -50."""
    score, q = pendulum_run("mopo")
    assert max(q) < 0.0, f"Q rose above the reward bound 0: {q}"
    assert score > 30, f"MOPO reached only {score:.1f} (random actor = 0, data 20.6)"
