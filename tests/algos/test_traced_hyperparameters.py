"""Traced hyperparameters: every field in an algorithm's ``SPEC.traced_fields`` given through
``agent.hparams`` changes one update exactly as the same value in the static config does
(the contract :mod:`offrl.sweeps` relies on to train a grid as one vmapped program)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.algos import ALGORITHMS, algorithm_names
from offrl.algos.common import Batch, traceable_fields

#: a valid value different from every algorithm's default, per traceable field
OTHER_VALUE = {"discount": 0.5, "tau": 0.3, "expectile": 0.95, "awr_inverse_temperature": 0.5, "max_weight": 1.05,
               "policy_noise": 0.9, "noise_clip": 0.05, "alpha": 0.3, "cql_alpha": 0.5, "logsumexp_temperature": 3.0,
               "target_action_gap": 1.0, "actor_lr": 1e-2, "critic_lr": 1e-2, "value_lr": 1e-2,
               "actor_bc_weight": 0.3, "critic_bc_weight": 0.3, "gumbel_temperature": 0.7,
               "diversity_weight": 0.3, "advantage_temperature": 0.3, "lmbda": 0.2, "mmd_sigma": 2.0,
               "mmd_epsilon": 0.5, "bc_coef": 0.9, "support_weight": 0.9}
BASE = {"cql": {"lagrange": True}, "cal_ql": {"lagrange": True},  # so target_action_gap is used
        "td3": {"alpha": 2.5},  # plain TD3 (alpha None) has no BC term to weight
        "crr": {"target_update_interval": None},  # Polyak targets, so tau is read
        "spot": {"warmup_steps": 0}, "plas": {"warmup_steps": 0}}  # past the VAE warm-up, so the actor's fields are read

TRACEABLE = sorted((name, field) for name in algorithm_names() for field in traceable_fields(name))


def _batch(obs_dim=3, action_dim=2, n=16):
    rng = np.random.default_rng(0)
    f = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    return Batch(f(n, obs_dim), jnp.tanh(f(n, action_dim)), 5.0 * f(n), f(n, obs_dim), jnp.ones(n),
                 extras={"mc_returns": f(n), "next_actions": jnp.tanh(f(n, action_dim)), "next_action_known": jnp.ones(n)})


def _config(module, name, **changes):
    return dataclasses.replace(module.Config(), hidden_dims=(8, 8), batch_size=16, **{**BASE.get(name, {}), **changes})


def _after(module, config, hparams=None):
    agent = module.create(config, 3, 2, jax.random.PRNGKey(0))
    if hparams is not None:
        agent = agent.replace(hparams={k: jnp.asarray(v, jnp.float32) for k, v in hparams.items()})
    agent, _ = jax.jit(module.update)(agent, _batch())
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(agent.replace(hparams={}))]


def test_the_traceable_algorithms():
    assert {name for name, _ in TRACEABLE} >= {"iql", "td3", "td3_bc", "cql", "cal_ql"}
    assert ("cal_ql", "discount") not in TRACEABLE  # its MC returns are computed with the static discount


FAST = {"iql", "td3_bc", "cql", "rebrac", "xql", "edac", "crr"}  # td3 and cal_ql share these updates; they run with -m slow


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted({name for name, _ in TRACEABLE})])
def test_all_traced_values_equal_static_values(name):
    """Every traceable field changed at once (fast); the per-field test below is marked slow."""
    module = ALGORITHMS[name]
    values = {field: OTHER_VALUE[field] for field in traceable_fields(module)}
    static = _after(module, _config(module, name, **values))
    traced = _after(module, _config(module, name), values)
    for a, b in zip(static, traced):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name, field", TRACEABLE)
def test_traced_value_equals_static_value(name, field):
    module = ALGORITHMS[name]
    value = OTHER_VALUE[field]
    static = _after(module, _config(module, name, **{field: value}))
    traced = _after(module, _config(module, name), {field: value})
    default = _after(module, _config(module, name))
    assert any(not np.allclose(a, b) for a, b in zip(static, default)), f"{field} does not change {name}'s update"
    for a, b in zip(static, traced):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
