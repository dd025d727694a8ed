"""prepare_data: action rescaling, observation normalisation, reward scaling, masks; CQL's dual step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import engine
from offrl.algos import cql
from offrl.algos.common import apply_overrides
from offrl.data import Dataset
from offrl.errors import ConfigError


def _dataset():
    obs = np.array([[0.0, 10.0], [2.0, 10.0], [4.0, 30.0], [6.0, 30.0]], np.float32)
    actions = np.array([[-2.0], [0.0], [1.0], [2.0]], np.float32)
    rewards = np.array([1.0, 2.0, -1.0, -2.0], np.float32)
    terminals = np.array([False, True, False, False])
    timeouts = np.array([False, False, False, True])
    return Dataset.from_arrays(obs, actions, rewards, terminals, timeouts=timeouts, next_observations=obs,
                               metadata={"env_id": "Pendulum-v1"})


def test_actions_are_rescaled_from_env_bounds_and_masks_keep_timeouts_bootstrapping():
    config = cql.Config(normalize_observations=False)
    data, info = engine.prepare_data(_dataset(), config, env_id="Pendulum-v1")
    assert info.action_low == [-2.0] and info.action_high == [2.0]
    np.testing.assert_allclose(np.asarray(data["actions"])[:, 0], [-1.0, 0.0, 0.5, 1.0])
    np.testing.assert_allclose(np.asarray(data["masks"]), [1.0, 0.0, 1.0, 1.0])  # the timeout still bootstraps
    np.testing.assert_allclose(info.to_env_action(np.array([[0.5]])), [[1.0]])


def test_observation_normalisation_and_returns_reward_scaling():
    config = apply_overrides(cql.Config(), {"normalize_observations": "true", "reward_scaling": "returns", "reward_bias": "-1"})
    data, info = engine.prepare_data(_dataset(), config, env_id="Pendulum-v1")
    obs = np.asarray(data["observations"])
    np.testing.assert_allclose(obs.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(info.obs_mean, [3.0, 20.0])
    # episode returns 3 and -3: scale = 1000 / 6, then the bias
    assert info.reward_scale == pytest.approx(1000 / 6)
    np.testing.assert_allclose(np.asarray(data["rewards"]), np.array([1, 2, -1, -2]) * 1000 / 6 - 1, rtol=1e-6)
    with pytest.raises(ConfigError, match="reward_scaling"):
        engine.prepare_data(_dataset(), apply_overrides(cql.Config(), {"reward_scaling": "lots"}))


def test_cql_lagrange_multiplier_rises_when_the_gap_exceeds_its_target():
    agent = cql.create(cql.Config(hidden_dims=(8,), lagrange=True, target_action_gap=1.0), 2, 1, jax.random.PRNGKey(0))
    params = agent.log_cql_alpha.params
    # loss = -0.5 * sum alpha' (cql_alpha * gap - target): its gradient is negative (alpha' grows) when the gap is too big
    grad_big = jax.grad(lambda p: cql.cql_alpha_loss(p, agent, jnp.array([1.0, 1.0]))[0])(params)["value"]
    grad_small = jax.grad(lambda p: cql.cql_alpha_loss(p, agent, jnp.array([0.0, 0.0]))[0])(params)["value"]
    assert float(grad_big) < 0 < float(grad_small)
    # alpha' = 1 at init: -0.5 * 2 * (5 * 1 - 1) = -4
    assert float(cql.cql_alpha_loss(params, agent, jnp.array([1.0, 1.0]))[0]) == pytest.approx(-4.0)
