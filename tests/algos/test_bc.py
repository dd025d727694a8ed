"""BC: the default and the Gaussian option both clone a controller whose torque saturates.

The data: Pendulum-v1 rolled by a swing-up controller with a doubled gain (its torque hits the
+-2 bound much of the time) plus Gaussian action noise, clipped to the bounds. A clone that
under-delivers torque where the controller saturates cannot pump the pendulum up, so the
return separates a faithful clone (about -150, the controller's own level) from a broken one
(-700 and below: the former default, a Gaussian likelihood with a state-dependent std, returned
-1006 here, see offrl/algos/bc.py for why).
"""

import sys
from pathlib import Path

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import engine
from offrl.algos import bc
from offrl.algos.common import Batch
from offrl.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from pendulum_data import swing_up_action  # noqa: E402

STEPS = 3000


def saturated_pendulum_dataset(episodes: int = 20, gain: float = 4.0, noise: float = 1.0, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    env = gym.make("Pendulum-v1")
    rows = {k: [] for k in ("obs", "act", "rew", "nxt", "term", "tout")}
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed * 1000 + ep)
        done = False
        while not done:
            action = np.clip(gain * swing_up_action(obs) + noise * rng.standard_normal(1), -2.0, 2.0).astype(np.float32)
            nxt, reward, term, trunc, _ = env.step(action)
            for k, v in zip(rows, (obs, action, reward, nxt, term, trunc and not term)):
                rows[k].append(v)
            obs, done = nxt, term or trunc
    env.close()
    return Dataset.from_arrays(np.array(rows["obs"]), np.array(rows["act"]), np.array(rows["rew"]),
                               np.array(rows["term"]), timeouts=np.array(rows["tout"]),
                               next_observations=np.array(rows["nxt"]), metadata={"env_id": "Pendulum-v1"})


@pytest.fixture(scope="module")
def saturated():
    return saturated_pendulum_dataset()


def test_the_data_saturates_often_and_the_controller_swings_up(saturated):
    at_bound = np.mean(np.abs(saturated.actions) >= 2.0 - 1e-6)
    assert at_bound > 0.25, at_bound
    assert saturated.episode_returns().mean() > -250


@pytest.mark.parametrize("overrides", [{}, {"loss": "gaussian"}], ids=["default-mse", "gaussian-shared-std"])
def test_bc_clones_a_saturating_controller(saturated, overrides):
    run = engine.train("bc", saturated, env="Pendulum-v1", steps=STEPS, eval_every=STEPS, log_every=1000,
                       eval_episodes=5, progress=False, config_overrides={"hidden_dims": "64,64", **overrides})
    ret = float(np.mean(run.evaluations()[-1]["eval/return"]))
    assert ret > -300, f"BC {overrides or 'default'} returned {ret:.1f}; the controller's data averages {saturated.episode_returns().mean():.1f}"


def test_the_default_is_deterministic_mse_and_the_gaussian_std_is_shared():
    config = bc.Config()
    assert config.loss == "mse" and not config.state_dependent_std
    agent = bc.create(bc.Config(loss="gaussian", hidden_dims=(8,)), obs_dim=3, action_dim=2, key=jax.random.PRNGKey(0))
    mean, log_std = agent.actor.apply_fn(agent.actor.params, jnp.ones((5, 3)) * jnp.arange(5.0)[:, None])
    assert mean.shape == log_std.shape == (5, 2)
    np.testing.assert_array_equal(log_std, jnp.broadcast_to(log_std[0], (5, 2)))
    np.testing.assert_array_equal(bc.act(agent, jnp.ones((1, 3))), agent.actor.apply_fn(agent.actor.params, jnp.ones((1, 3)))[0])


def test_gaussian_loss_is_the_negative_log_likelihood_by_hand():
    # One sample, one dimension: mu = tanh(f) at the net's output; with a = mu + 2 sigma the
    # NLL is 0.5 * 4 + log sigma + 0.5 log(2 pi).
    agent = bc.create(bc.Config(loss="gaussian", hidden_dims=(4,)), obs_dim=2, action_dim=1, key=jax.random.PRNGKey(1))
    obs = jnp.array([[0.3, -0.2]])
    mean, log_std = agent.actor.apply_fn(agent.actor.params, obs)
    actions = mean + 2.0 * jnp.exp(log_std)
    batch = Batch(obs, actions, jnp.zeros(1), obs, jnp.ones(1))
    loss, aux = bc.actor_loss(agent.actor.params, agent, batch)
    expected = 2.0 + float(log_std[0, 0]) + 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(aux["mse"], 4.0 * np.exp(2 * float(log_std[0, 0])), rtol=1e-5)
