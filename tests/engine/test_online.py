"""The online learner's offline -> online switch: the optimiser moments survive it, and the online
learning rate starts where the offline schedule stopped and warms up linearly (carry_over)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import TINY

from offrl import engine
from offrl.algos import get_algorithm
from offrl.algos.common import apply_overrides
from offrl.engine.online import carry_over

OFFLINE_STEPS, WARMUP = 10, 8


def _adam_states(opt_state):
    is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
    return [x for x in jax.tree_util.tree_leaves(opt_state, is_leaf=is_adam) if is_adam(x)]


def _seed0(tree):
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x)[0], tree)


@pytest.fixture(scope="module")
def switch(pendulum_small):
    """IQL trained OFFLINE_STEPS updates (2 seeds) with the actor's cosine schedule over 10 or 20 steps,
    and its online agents: cosine off, carried over with a warm-up of WARMUP updates."""
    module = get_algorithm("iql")
    out = {}
    for schedule_steps in (OFFLINE_STEPS, 2 * OFFLINE_STEPS):
        config = apply_overrides(module.Config(), {**TINY, "schedule_steps": str(schedule_steps)})
        data, info = engine.prepare_data(pendulum_small, config)
        agents, keys = engine.create_agents(module, config, info.obs_dim, info.action_dim, seed=0, seeds=2)
        trained, _ = engine.Trainer(module, config.batch_size, 2).run(agents, keys, data, OFFLINE_STEPS)
        online = dataclasses.replace(config, cosine_actor_lr=False)
        fresh, _ = engine.create_agents(module, online, info.obs_dim, info.action_dim, seed=0, seeds=2)
        out[schedule_steps] = (config, trained, fresh, carry_over(fresh, trained, WARMUP))
    return out


def test_adam_moments_and_parameters_survive_the_switch(switch):
    config, trained, fresh, carried = switch[OFFLINE_STEPS]
    structure = jax.tree_util.tree_structure
    assert structure(fresh.actor.opt_state) != structure(trained.actor.opt_state)  # the schedule was dropped
    before, after = _adam_states(trained.actor.opt_state), _adam_states(carried.actor.opt_state)
    assert len(before) == len(after) == 1
    for name in ("mu", "nu"):
        old, new = jax.tree_util.tree_leaves(getattr(before[0], name)), jax.tree_util.tree_leaves(getattr(after[0], name))
        assert len(old) == len(new) and all(np.array_equal(a, b) for a, b in zip(old, new))
        assert any(np.abs(np.asarray(a)).max() > 0 for a in old)  # trained moments, not a fresh zero state
    np.testing.assert_array_equal(np.asarray(after[0].count), [OFFLINE_STEPS, OFFLINE_STEPS])
    for a, b in zip(jax.tree_util.tree_leaves(trained.actor.params), jax.tree_util.tree_leaves(carried.actor.params)):
        np.testing.assert_array_equal(a, b)
    # the critic's optimiser did not change structure: its whole state is the trained one
    for a, b in zip(jax.tree_util.tree_leaves(trained.critic.opt_state), jax.tree_util.tree_leaves(carried.critic.opt_state)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.asarray(carried.step), np.asarray(trained.step))


@pytest.mark.parametrize("schedule_steps", [OFFLINE_STEPS, 2 * OFFLINE_STEPS])
def test_online_rate_starts_at_the_offline_schedule_and_warms_up_linearly(switch, schedule_steps):
    """eta_k = eta_off + (eta - eta_off) min(1, k / WARMUP), with eta_off the cosine schedule's value at
    count OFFLINE_STEPS: 0.5 eta (1 + cos(pi * 10 / S)) = 0 for S = 10 and 0.5 eta for S = 20.
    Each online update is compared with optax.adam at that rate from the same moments."""
    config, trained, fresh, carried = switch[schedule_steps]
    eta = config.actor_lr
    eta_off = 0.5 * eta * (1.0 + np.cos(np.pi * OFFLINE_STEPS / schedule_steps))
    assert eta_off == pytest.approx({OFFLINE_STEPS: 0.0, 2 * OFFLINE_STEPS: 0.5 * eta}[schedule_steps], abs=1e-12)
    params = _seed0(carried.actor.params)
    grads = jax.tree_util.tree_map(lambda p: jax.random.normal(jax.random.PRNGKey(p.size), p.shape), params)
    inner, warmup = _seed0(carried.actor.opt_state)
    adam_state = _adam_states(inner)[0]
    for k in (0, WARMUP // 2, WARMUP, 3 * WARMUP):
        update, _ = carried.actor.tx.update(grads, (inner, optax.ScaleByScheduleState(count=jnp.asarray(k))), params)
        rate = eta_off + (eta - eta_off) * min(1.0, k / WARMUP)
        expected, _ = optax.adam(rate).update(grads, (adam_state, optax.EmptyState()), params)
        for u, e in zip(jax.tree_util.tree_leaves(update), jax.tree_util.tree_leaves(expected)):
            np.testing.assert_allclose(np.asarray(u), np.asarray(e), rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(carried.actor.opt_state[1].count), [0, 0])  # online update 0 comes next


def test_no_warmup_gives_the_configured_rate_at_once_with_the_moments_kept(switch):
    config, trained, fresh, _ = switch[OFFLINE_STEPS]
    carried = carry_over(fresh, trained, 0)
    assert jax.tree_util.tree_structure(carried.actor.opt_state) == jax.tree_util.tree_structure(fresh.actor.opt_state)
    for a, b in zip(jax.tree_util.tree_leaves(_adam_states(trained.actor.opt_state)[0].mu),
                    jax.tree_util.tree_leaves(_adam_states(carried.actor.opt_state)[0].mu)):
        np.testing.assert_array_equal(a, b)
