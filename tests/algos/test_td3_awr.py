"""TD3-AWR: the actor loss by hand (and its TD3+BC limit), the weights, and a real run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import data, engine, losses
from offrl.algos import td3_awr


def test_actor_loss_by_hand():
    q = jnp.array([2.0, -4.0])                       # mean|Q| = 3, mean Q = -1 -> Q term = 1/3
    pi, a = jnp.array([[0.5, 0.0], [0.0, 0.0]]), jnp.array([[0.0, 0.0], [1.0, 1.0]])
    weights = jnp.array([2.0, 0.5])                 # per-row squared errors (means over dims): 0.125, 1.0
    loss = td3_awr.awr_bc_actor_loss(q, pi, a, weights, bc_coef=0.4)
    assert float(loss) == pytest.approx(1.0 / 3.0 + 0.4 * (2.0 * 0.125 + 0.5 * 1.0) / 2.0, rel=1e-6)


def test_zero_advantages_give_td3_bc_with_alpha_2_5():
    key1, key2, key3 = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(key1, (16,)) * 10.0
    pi, a = jnp.tanh(jax.random.normal(key2, (16, 3))), jnp.tanh(jax.random.normal(key3, (16, 3)))
    ours = td3_awr.awr_bc_actor_loss(q, pi, a, jnp.ones(16), bc_coef=0.4)
    td3_bc = losses.td3_bc_actor_loss(q, pi, a, alpha=2.5)
    assert float(ours) == pytest.approx(float(td3_bc) / 2.5, rel=1e-5)


def test_weights_are_constants_in_the_actor_gradient():
    pi, a, q = jnp.zeros((2, 1)), jnp.ones((2, 1)), jnp.ones(2)
    grad = jax.grad(lambda w: td3_awr.awr_bc_actor_loss(q, pi, a, w, 1.0))(jnp.ones(2))
    np.testing.assert_array_equal(grad, [0.0, 0.0])


def test_td3_awr_beats_a_random_policy_on_bundled_pendulum():
    run = engine.train("td3_awr", data.load("pendulum-medium-expert-v0"), steps=3000, eval_every=3000, log_every=1000,
                       eval_episodes=5, progress=False,
                       config_overrides={"hidden_dims": "64,64", "batch_size": "256", "reward_scaling": "0.1"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"TD3-AWR reached only {score:.1f} (random actor = 0, data about 63)"
