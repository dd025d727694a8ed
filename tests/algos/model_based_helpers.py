"""Shared pieces of the model-based algorithm tests: an ensemble whose members predict hand-chosen constants
(the contract test's small model sizes are in test_algorithm_behaviour.tiny_config)."""

import jax
import jax.numpy as jnp
import numpy as np

from offrl import data, dynamics as dyn, engine

#: the sizes of MOPO's and MOBILE's real runs on bundled Pendulum (small model and networks, 1,000 rollout
#: starts every 100 updates, tau = 0.05)
PENDULUM = {"ensemble_size": "5", "num_elites": "3", "model_hidden_dims": "64,64", "hidden_dims": "64,64",
            "rollout_starts": "1000", "rollout_every": "100", "model_max_epochs": "40", "actor_lr": "3e-4",
            "entropy_alpha_lr": "3e-4", "tau": "0.05"}


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


def pendulum_run(algo: str) -> tuple[float, list[float]]:
    """12k updates of ``algo`` on pendulum-medium-v0 with :data:`PENDULUM`: (mean final score, mean Q per log)."""
    run = engine.train(algo, data.load("pendulum-medium-v0"), steps=12_000, eval_every=12_000, log_every=2_000,
                       eval_episodes=5, progress=False, config_overrides=PENDULUM)
    score = float(np.mean(run.final_scores))
    q = [float(np.mean(r["q"])) for r in run.metrics if "q" in r]
    print(f"{algo}: score {score:.1f}, mean Q on the batches {q}")
    return score, q
