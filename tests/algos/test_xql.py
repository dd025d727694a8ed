"""XQL: the Gumbel regression loss against hand-computed numbers and its minimiser, and a short real run."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import engine
from offrl.algos import xql

from _pendulum import pendulum_medium


def test_gumbel_loss_on_a_few_numbers():
    # z = [0, 1, -1], M = 1: exp(-1) * mean(e^z - z - 1) = exp(-1) * (0 + (e - 2) + e^-1) / 3
    loss = xql.gumbel_loss(jnp.array([0.0, 1.0, -1.0]), jnp.zeros(3), beta=1.0)
    np.testing.assert_allclose(loss, math.exp(-1) * (math.e - 2 + math.exp(-1)) / 3, rtol=1e-6)
    # beta divides the residual: target 2, value 0, beta 2 -> z = 1, M = 1: e^0 - e^-1 - e^-1
    np.testing.assert_allclose(xql.gumbel_loss(jnp.array([2.0]), jnp.zeros(1), beta=2.0), 1 - 2 * math.exp(-1), rtol=1e-6)


def test_the_rescaling_floor_and_the_clip():
    # every z below -1: M = -1, so the loss is e^{+1} times the plain Gumbel loss
    z = np.array([-5.0, -6.0])
    plain = np.mean(np.exp(z) - z - 1)
    np.testing.assert_allclose(xql.gumbel_loss(jnp.asarray(z), jnp.zeros(2), 1.0), math.e * plain, rtol=1e-6)
    # z = [min(100, 7), 0], M = 7: ((1 - 7 e^-7 - e^-7) + 0) / 2; the clipped row gives no gradient
    target = jnp.array([100.0, 0.0])
    np.testing.assert_allclose(xql.gumbel_loss(target, jnp.zeros(2), 1.0, max_clip=7.0), (1 - 8 * math.exp(-7)) / 2, rtol=1e-6)
    grad = jax.grad(lambda v: xql.gumbel_loss(target, v, 1.0, max_clip=7.0))(jnp.zeros(2))
    assert grad[0] == 0.0
    # d/dv of e^-7 (e^{-v} + v - 1) / 2 at v = 0 is 0: the unclipped row sits at its own optimum
    np.testing.assert_allclose(grad[1], 0.0, atol=1e-7)


def test_the_minimiser_is_the_log_partition_of_q():
    q = jnp.array([1.0, 2.0, 4.0])
    beta = 2.0
    v_star = beta * math.log(np.mean(np.exp(np.asarray(q) / beta)))
    dloss = jax.grad(lambda v: xql.gumbel_loss(q, jnp.full(3, v), beta))
    np.testing.assert_allclose(dloss(v_star), 0.0, atol=1e-6)
    assert dloss(v_star + 0.5) > 0 > dloss(v_star - 0.5)
    # it lies between the mean and the max of q, and moves towards the max as beta falls
    assert float(np.mean(q)) < v_star < 4.0
    assert 1.0 * math.log(np.mean(np.exp(np.asarray(q)))) > v_star


def test_xql_beats_a_random_policy_on_pendulum():
    """The noisy swing-up controller data of tests/engine (normalised: random 0, controller 100)."""
    data = pendulum_medium()
    run = engine.train("xql", data, steps=4000, eval_every=4000, log_every=1000, eval_episodes=5, progress=False,
                       config_overrides={"hidden_dims": "64,64", "gumbel_temperature": "5"})
    score = float(np.mean(run.final_scores))
    assert score > 15, f"XQL reached only {score:.1f} (random = 0, controller = 100)"


@pytest.mark.parametrize("field,value", [("gumbel_temperature", 0.0), ("max_clip", -1.0)])
def test_out_of_range_fields_are_refused(field, value):
    from offrl.algos.common import apply_overrides
    from offrl.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        apply_overrides(xql.Config(), {field: value})


def test_a_grid_over_the_gumbel_temperature_is_one_compiled_program():
    from offrl.algos import xql
    from offrl.sweeps.grid import parse_grid, plan_programs

    plan = plan_programs(xql.Config, parse_grid(xql.Config, ["gumbel_temperature=1,2,5", "tau=0.005,0.01"]))
    assert plan.traced == ("gumbel_temperature", "tau") and [len(p.members) for p in plan.programs] == [6]
