"""BCQ: hand-computed loss numbers, the perturbation bound, and a bandit run that must stay in the data's support."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.algos import bcq
from offrl.algos.common import Batch


def test_vae_loss_terms_by_hand():
    recon, actions = jnp.array([[0.5, 0.0]]), jnp.array([[0.0, 0.0]])
    # reconstruction: mean(0.25, 0) = 0.125; standard-normal posterior: KL = 0.
    loss, rec, kl = bcq.vae_loss_terms(recon, actions, jnp.zeros((1, 2)), jnp.zeros((1, 2)), kl_weight=0.5)
    assert (float(rec), float(kl), float(loss)) == pytest.approx((0.125, 0.0, 0.125))
    # mu = 1, sigma = 1 in one of two latent dims: KL = -0.5 * mean(1 + 0 - 1 - 1, 0) = 0.25.
    loss, rec, kl = bcq.vae_loss_terms(recon, actions, jnp.array([[1.0, 0.0]]), jnp.zeros((1, 2)), kl_weight=0.5)
    assert (float(kl), float(loss)) == pytest.approx((0.25, 0.125 + 0.125))
    # sigma = e^-1, mu = 0 in one dim: KL = -0.5 * mean(1 - 2 - e^-2, 0) = 0.25 * (1 + e^-2).
    _, _, kl = bcq.vae_loss_terms(recon, actions, jnp.zeros((1, 2)), jnp.array([[-1.0, 0.0]]), kl_weight=0.5)
    assert float(kl) == pytest.approx(0.25 * (1 + np.exp(-2)), rel=1e-6)


def test_soft_clipped_double_q():
    q = jnp.array([[1.0, 4.0], [3.0, 2.0]])  # (num_qs, B)
    # lambda * min + (1 - lambda) * max = 0.75 * [1, 2] + 0.25 * [3, 4]
    np.testing.assert_allclose(bcq.soft_clipped_q(q, 0.75), [1.5, 2.5])
    np.testing.assert_allclose(bcq.soft_clipped_q(q, 1.0), [1.0, 2.0])


def test_perturbation_stays_within_phi_and_the_action_box():
    net = bcq.Perturbation(action_dim=3, hidden_dims=(16,), phi=0.05)
    obs, actions = jnp.ones((64, 4)) * 10.0, jnp.linspace(-1, 1, 192).reshape(64, 3)
    params = jax.jit(net.init)(jax.random.PRNGKey(0), obs, actions)
    params = jax.tree_util.tree_map(lambda p: p * 50.0, params)  # saturate the tanh
    perturbed = jax.jit(net.apply)(params, obs, actions)
    assert float(jnp.abs(perturbed - actions).max()) <= 0.05 + 1e-6
    assert float(jnp.abs(perturbed - actions).max()) > 0.04  # the bound is reached, not trivially 0
    assert float(jnp.abs(perturbed).max()) <= 1.0


def test_default_latent_dim_is_twice_the_action_dim():
    config = bcq.Config(hidden_dims=(8,), vae_hidden_dims=(8,))
    agent = jax.eval_shape(lambda k: bcq.create(config, 3, 2, k), jax.random.PRNGKey(0))
    assert agent.vae.params["params"]["enc_mean"]["kernel"].shape == (8, 4)


def test_bcq_stays_in_the_data_support_while_maximising_q():
    """Bandit with r = a and data actions only near 0.3: an unconstrained maximiser of the learned Q
    would go to a = 1, BCQ must stay within Phi of the data and use the perturbation to move up."""
    config = bcq.Config(hidden_dims=(32, 32), vae_hidden_dims=(64, 64),
                        batch_size=128)
    update = jax.jit(bcq.update)
    agent = jax.jit(bcq.create, static_argnums=(0, 1, 2))(config, 2, 1, jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    for _ in range(500):
        obs = rng.normal(size=(config.batch_size, 2)).astype(np.float32)
        actions = (0.3 + 0.02 * rng.normal(size=(config.batch_size, 1))).astype(np.float32)
        agent, metrics = update(agent, Batch(obs, actions, actions[:, 0], obs, np.zeros(config.batch_size, np.float32)))
    assert np.isfinite(float(metrics["critic_loss"])) and float(metrics["recon_loss"]) < 0.01
    obs = rng.normal(size=(256, 2)).astype(np.float32)
    chosen = np.asarray(jax.jit(bcq.act)(agent, obs))[:, 0]
    assert chosen.shape == (256,)
    assert np.all(chosen > 0.22) and np.all(chosen < 0.42), (chosen.min(), chosen.max())
    assert chosen.mean() > 0.31, chosen.mean()  # the perturbation pushes towards higher Q
