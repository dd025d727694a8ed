"""Shared pieces of the model-based algorithm tests: small model settings for the contract test and
an ensemble whose members predict hand-chosen constants."""

import jax
import jax.numpy as jnp
import numpy as np

from offrl import dynamics as dyn
from offrl.algos.common import apply_overrides

#: the contract test's sizes for the model: a 3-member ensemble, small rollouts, a short fit.
MODEL_OVERRIDES = {"rollout_starts": "64", "rollout_every": "10", "model_hidden_dims": "32,32", "ensemble_size": "3",
                   "num_elites": "2", "model_max_epochs": "20"}


def run_contract_test(name, tiny_data, tmp_path, monkeypatch):
    """The shared behaviour test (tests/algos/test_algorithm_behaviour.py) with the model's sizes shrunk."""
    import test_algorithm_behaviour as shared

    original = shared.tiny_config
    monkeypatch.setattr(shared, "tiny_config", lambda module: apply_overrides(original(module), MODEL_OVERRIDES))
    shared.test_algorithm_behaviour(name, tiny_data, tmp_path)


def soft_bounded_logvar(raw):
    """The member's log-variance for a raw output ``raw`` with the initial bounds 0.5 and -10."""
    softplus = lambda x: np.log1p(np.exp(x))  # noqa: E731
    v = 0.5 - softplus(0.5 - raw)
    return -10.0 + softplus(v + 10.0)


def constant_ensemble(settings, obs_dim, action_dim, means, raw_logvars, elites=None):
    """A :class:`offrl.dynamics.Dynamics` whose member ``i`` predicts ``(s' - s, r)`` mean ``means[i]``
    and log-variance ``soft_bounded_logvar(raw_logvars[i])`` everywhere (zero kernels, set biases)."""
    model = dyn.init_dynamics(settings, obs_dim, action_dim, jax.random.PRNGKey(0))
    member = dict(model.params["params"]["VmapGaussianMember_0"])
    last = f"Dense_{len(settings.model_hidden_dims)}"
    member = {k: ({"kernel": jnp.zeros_like(v["kernel"]), "bias": v["bias"]} if k.startswith("Dense_") else v)
              for k, v in member.items()}
    m = settings.ensemble_size
    bias = jnp.concatenate([jnp.asarray(means, jnp.float32), jnp.asarray(raw_logvars, jnp.float32),
                            jnp.full((m, 1), -20.0)], -1)
    member[last] = {"kernel": member[last]["kernel"], "bias": bias}
    model = model.replace(params={"params": {"VmapGaussianMember_0": member}})
    if elites is not None:
        model = model.replace(elites=jnp.asarray(elites))
    return model
