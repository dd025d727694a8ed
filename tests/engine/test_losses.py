"""Every loss in offrl.losses against numbers worked out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import losses


def test_bc_nll_is_negative_mean_log_prob():
    assert float(losses.bc_nll(jnp.array([-1.0, -3.0]))) == pytest.approx(2.0)


def test_bc_mse_averages_over_rows_and_dims():
    assert float(losses.bc_mse(jnp.array([[0.5, -0.5], [1.0, 0.0]]), jnp.zeros((2, 2)))) == pytest.approx((0.25 + 0.25 + 1.0) / 4)


def test_td_loss_sums_over_ensemble_and_stops_target_gradient():
    q = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    target = jnp.array([1.0, 1.0])
    # critic 1: mean(0, 1) = 0.5; critic 2: mean(4, 9) = 6.5
    assert float(losses.td_loss(q, target)) == pytest.approx(7.0)
    grad_target = jax.grad(lambda t: losses.td_loss(q, t))(target)
    np.testing.assert_array_equal(grad_target, 0.0)
    # d/dq = 2 (q - y) / B
    np.testing.assert_allclose(jax.grad(lambda q: losses.td_loss(q, target))(q), [[0.0, 1.0], [2.0, 3.0]])


def test_expectile_loss_weights_positive_errors_by_tau():
    # u = target - value = [2, -1]: 0.7 * 4 = 2.8 and 0.3 * 1 = 0.3 -> mean 1.55
    value = jnp.array([1.0, 1.0])
    assert float(losses.expectile_loss(jnp.array([3.0, 0.0]), value, 0.7)) == pytest.approx(1.55)
    # tau = 0.5 is half the mean squared error
    assert float(losses.expectile_loss(jnp.array([3.0, 0.0]), value, 0.5)) == pytest.approx(0.5 * (4 + 1) / 2)


def test_awr_loss_exponentiates_advantages_without_clipping():
    log_probs = jnp.array([-1.0, -2.0])
    adv = jnp.array([0.0, np.log(2.0)])
    # weights [1, 2]: -mean(1 * -1, 2 * -2) = 2.5
    assert float(losses.awr_loss(log_probs, adv, 1.0)) == pytest.approx(2.5)
    # large advantages are not clipped: exp(10) weight
    assert float(losses.awr_loss(jnp.array([-1.0]), jnp.array([10.0]), 1.0)) == pytest.approx(np.exp(10.0), rel=1e-5)
    # the weights are constants: d/dlog_pi = -w / B; no gradient into the advantages
    np.testing.assert_allclose(jax.grad(losses.awr_loss)(log_probs, adv, 1.0), [-0.5, -1.0], rtol=1e-6)
    np.testing.assert_array_equal(jax.grad(losses.awr_loss, argnums=1)(log_probs, adv, 1.0), 0.0)


def test_cql_penalty_is_mean_difference():
    assert float(losses.cql_penalty(jnp.array([3.0, 5.0]), jnp.array([1.0, 2.0]))) == pytest.approx(2.5)
    # summed over an ensemble axis
    assert float(losses.cql_penalty(jnp.array([[3.0, 5.0], [1.0, 1.0]]), jnp.array([[1.0, 2.0], [0.0, 0.0]]))) == pytest.approx(3.5)


def test_importance_logsumexp_divides_by_sampling_density():
    # exp(0 - 0) + exp(ln 3 - ln 3) = 2
    q = jnp.array([0.0, np.log(3.0)])
    assert float(losses.importance_logsumexp(q, jnp.array([0.0, np.log(3.0)]))) == pytest.approx(np.log(2.0))
    # uniform density on [-1, 1]^2 is 1/4: log sum exp(q + log 4) = log(4 (1 + 3))
    assert float(losses.importance_logsumexp(q, jnp.full(2, -2 * np.log(2.0)))) == pytest.approx(np.log(16.0), rel=1e-6)
    # temperature T: T log sum exp(q / T)
    assert float(losses.importance_logsumexp(jnp.array([2.0, 2.0]), jnp.zeros(2), 2.0)) == pytest.approx(2 * np.log(2 * np.e))


def test_td3_bc_actor_loss_normalises_q():
    q = jnp.array([2.0, -4.0])
    pi = jnp.array([[0.0], [1.0]])
    a = jnp.zeros((2, 1))
    # lambda = 2.5 / mean|q| = 2.5 / 3; -lambda * mean(q) = 2.5 / 3; mse = 0.5
    assert float(losses.td3_bc_actor_loss(q, pi, a, 2.5)) == pytest.approx(2.5 / 3 + 0.5)


def test_sac_actor_and_entropy_alpha_losses():
    q, logp = jnp.array([1.0, 2.0]), jnp.array([-1.0, -3.0])
    assert float(losses.sac_actor_loss(q, logp, jnp.array(0.5))) == pytest.approx(-2.5)
    # -mean(0.5 * (logp + (-1))) = -mean(0.5 * [-2, -4]) = 1.5
    assert float(losses.entropy_alpha_loss(jnp.array(0.5), logp, -1.0)) == pytest.approx(1.5)


def test_soft_update_is_polyak_average():
    out = losses.soft_update({"w": jnp.zeros(2)}, {"w": jnp.full(2, 10.0)}, 0.1)
    np.testing.assert_allclose(out["w"], [1.0, 1.0])
