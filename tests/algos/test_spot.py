"""SPOT: the negative ELBO and the actor loss by hand, the penalty's gradient, and a real run."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import algos, data, engine
from offrl.algos import spot


def test_negative_elbo_by_hand():
    recon, actions = jnp.array([[0.5, 0.0], [0.0, 0.0]]), jnp.zeros((2, 2))
    mean = jnp.array([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    log_std = jnp.array([[0.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0]])
    # row 0: recon mean(0.25, 0) = 0.125, KL 0; row 1: recon 0,
    # KL = -0.5 * mean(1 + 0 - 1 - 1, 1 - 2 - 0 - e^-2, 0, 0) = 0.125 * (2 + e^-2)
    expected = [0.125, 0.5 * 0.125 * (2 + math.exp(-2))]
    np.testing.assert_allclose(spot.negative_elbo(recon, actions, mean, log_std, 0.5), expected, rtol=1e-6)


def test_actor_loss_by_hand_and_normaliser_is_constant():
    q, penalty = jnp.array([2.0, -4.0]), jnp.array([1.0, 3.0])
    assert float(spot.spot_actor_loss(q, penalty, 0.1)) == pytest.approx(1.0 / 3.0 + 0.1 * 2.0, rel=1e-6)
    grad = jax.grad(lambda q: spot.spot_actor_loss(q, penalty, 0.1))(q)
    np.testing.assert_allclose(grad, [-1.0 / 6.0, -1.0 / 6.0], rtol=1e-6)  # -1 / (B mean|Q|)


def test_declared_finetunable_with_an_exploration_policy():
    spec = algos.algorithm_spec("spot")
    assert spec.finetunable and spec.explore is not None
    agent = spot.create(spot.Config(hidden_dims=(8,), vae_hidden_dims=(8,)), 3, 2, jax.random.PRNGKey(0))
    obs = jnp.zeros((4000, 3))
    noisy = spec.explore(agent, obs, jax.random.PRNGKey(1)) - spot.act(agent, obs)
    assert float(jnp.std(noisy)) == pytest.approx(0.1, rel=0.05)


def test_spot_beats_a_random_policy_on_bundled_pendulum():
    run = engine.train("spot", data.load("pendulum-medium-expert-v0"), steps=3000, eval_every=3000, log_every=1000,
                       eval_episodes=5, progress=False,
                       config_overrides={"hidden_dims": "64,64", "vae_hidden_dims": "64,64", "batch_size": "256",
                                         "reward_scaling": "0.1", "warmup_steps": "1000", "actor_lr": "3e-4"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"SPOT reached only {score:.1f} (random actor = 0, data about 63)"
