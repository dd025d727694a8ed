"""The discrete family's losses against numbers worked out by hand."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from offrl.algos.discrete_common import (bcq_allowed, categorical_cross_entropy, discrete_cql_penalty, dqn_target,
                                         huber, masked_argmax, q_td_loss, take)

LN3, LN4 = math.log(3.0), math.log(4.0)


def test_categorical_cross_entropy():
    # softmax([0, ln 3]) = [1/4, 3/4]: -log(3/4) for action 1, -log(1/4) for action 0
    logits = jnp.array([[0.0, LN3], [0.0, LN3]])
    assert float(categorical_cross_entropy(logits, jnp.array([1, 0]))) == pytest.approx((-math.log(0.75) + LN4) / 2, rel=1e-5)


def test_huber_and_td_loss():
    np.testing.assert_allclose(huber(jnp.array([0.5, -2.0, 3.0])), [0.125, 1.5, 2.5])
    q, target = jnp.array([1.0, 3.0]), jnp.zeros(2)
    assert float(q_td_loss(q, target, use_huber=True)) == pytest.approx((0.5 + 2.5) / 2)
    assert float(q_td_loss(q, target, use_huber=False)) == pytest.approx((1 + 9) / 2)
    assert float(q_td_loss(jnp.stack([q, q]), target, use_huber=False)) == pytest.approx(10.0)  # summed over heads


def test_dqn_and_double_dqn_targets():
    rewards, masks = jnp.array([1.0, 0.0]), jnp.array([1.0, 0.0])
    next_target = jnp.array([[1.0, 5.0], [2.0, 3.0]])
    np.testing.assert_allclose(dqn_target(rewards, masks, next_target, 0.5), [1 + 0.5 * 5, 0.0])
    online = jnp.array([[10.0, 0.0], [0.0, 1.0]])  # picks action 0 in the first row: Q'(s', 0) = 1
    np.testing.assert_allclose(dqn_target(rewards, masks, next_target, 0.5, online), [1 + 0.5 * 1, 0.0])


def test_discrete_cql_penalty():
    q_all = jnp.array([[0.0, LN3], [0.0, LN3]])  # logsumexp = ln 4
    assert float(discrete_cql_penalty(q_all, jnp.array([0, 0]))) == pytest.approx(LN4, rel=1e-5)
    assert float(discrete_cql_penalty(q_all, jnp.array([1, 1]))) == pytest.approx(math.log(4 / 3), rel=1e-5)
    assert float(discrete_cql_penalty(jnp.stack([q_all, q_all]), jnp.array([0, 0]))) == pytest.approx(2 * LN4, rel=1e-5)


def test_bcq_mask_and_masked_argmax():
    logits = jnp.log(jnp.array([[0.6, 0.3, 0.1]]))  # ratios to the best: 1, 0.5, 1/6
    np.testing.assert_array_equal(bcq_allowed(logits, 0.3), [[True, True, False]])
    np.testing.assert_array_equal(bcq_allowed(logits, 0.6), [[True, False, False]])
    np.testing.assert_array_equal(bcq_allowed(logits, 0.0), [[True, True, True]])
    assert int(masked_argmax(jnp.array([[1.0, 5.0, 3.0]]), jnp.array([[True, False, True]]))[0]) == 2


def test_take_broadcasts_over_an_ensemble_axis():
    values = jnp.arange(12.0).reshape(2, 2, 3)  # (heads, batch, actions)
    np.testing.assert_array_equal(take(values, jnp.array([2, 0])), [[2.0, 3.0], [8.0, 9.0]])
