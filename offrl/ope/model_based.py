"""Model-based off-policy evaluation: the target policy rolled out in a learned dynamics ensemble.

The ensemble (:mod:`offrl.dynamics`) is fitted on the logged transitions in the data's own units
(actions, rewards and observations as logged, so the target policy acts in the model as in the
data). Each elite ``e`` is a model ``M_e``; from every episode start ``s_i0`` of the data the
target policy ``pi`` runs ``H`` steps in each elite, ``K`` times::

    G_eik = sum_{t<H} gamma^t r_t * alive_t,   a_t ~ pi(.|s_t),   (s_{t+1} - s_t, r_t) ~ M_e(s_t, a_t)
    J_e(s_i0) = mean_k G_eik,       J^ = mean_e mean_i J_e(s_i0)

``alive_t`` is 0 after a predicted terminal (the env's registered termination function, or the
learned head). ``H`` is the data's longest episode unless ``model_horizon`` is set; Paduraru
(2013) and Fu et al. (2021, DOPE) found such model-based estimates among the most accurate.

The interval joins the two sources of doubt: the model (which elite is right) and the start
states (which ``s_0`` the data happened to hold). Bootstrap replicate ``b`` draws one elite
``e_b`` uniformly and ``n`` start states with replacement, ``J_b = mean_{i in sample} J_{e_b}(s_i0)``;
the interval is the percentile interval of the ``J_b``. ``ess`` reports the number of start
states (no weights are involved).

Example::

    result = model_estimate(dataset, policy, ModelOPESettings(), discount=0.99)
    result.estimate, result.ci
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from offrl.errors import ConfigError
from offrl.ope.estimators import OPEResult


def _fit_config():
    from offrl.dynamics import DynamicsSettings

    return DynamicsSettings()


def fitted_model(dataset, settings, seed: int = 0):
    """The ensemble fitted on ``dataset``'s logged transitions (``termination="auto"``: its env's function)."""
    import jax
    import jax.numpy as jnp

    from offrl import dynamics as dyn

    if settings.termination == "auto":
        settings = dataclasses.replace(settings, termination=dyn.termination_for_env(dataset.metadata.get("env_id")))
    n = len(dataset)
    dyn.holdout_size(settings, n)
    arrays = {"observations": jnp.asarray(dataset.observations.reshape(n, -1), jnp.float32),
              "actions": jnp.asarray(dataset.actions.reshape(n, -1), jnp.float32),
              "rewards": jnp.asarray(dataset.rewards, jnp.float32),
              "next_observations": jnp.asarray(dataset.next_observations.reshape(n, -1), jnp.float32),
              "masks": jnp.asarray(1.0 - dataset.terminals.astype(np.float32))}
    model = dyn.init_dynamics(settings, arrays["observations"].shape[1], arrays["actions"].shape[1],
                              jax.random.PRNGKey(seed))
    model, _ = jax.jit(dyn.fit_dynamics)(model, arrays, jax.random.PRNGKey(seed + 1))
    return model


def fit_record(model) -> dict:
    """What a report keeps of a fitted ensemble: ``epochs``, the elites, each member's
    held-out MSE and the elites' mean (``holdout_mse``), on the standardised targets ``(s' - s, r)``
    (1.0: no better than predicting the training mean), the settings, and ``rollout_seconds`` per
    policy (filled as the policies are rolled out)."""
    mse = np.asarray(model.holdout_mse, np.float64)
    elites = np.asarray(model.elites)
    return {"epochs": int(model.epochs), "elites": elites.tolist(),
            "holdout_mse": float(mse[elites].mean()), "holdout_mse_members": mse.tolist(),
            "settings": dataclasses.asdict(model.settings), "rollout_seconds": {}}


def _member_step(model, observations, actions, key):
    """One step of every elite on its own rows: ``observations (E, R, d)`` -> next, rewards, terminals."""
    import jax

    from offrl import dynamics as dyn

    mean, std, prob = dyn.predict_elites(model, observations, actions)
    sample = mean + std * jax.random.normal(key, mean.shape)
    next_obs, rewards = dyn.clip_to_data(model, observations + sample[..., :-1], sample[..., -1])
    fn = dyn.terminal_function(model)
    terminals = fn(observations, actions, next_obs) if fn is not None else prob > 0.5
    return next_obs, rewards, terminals


def member_returns(model, policy, start_observations, horizon: int, discount: float, samples: int = 1,
                   seed: int = 0) -> np.ndarray:
    """``J_e(s_i0)``, ``(elites, starts)``: the mean over ``samples`` discounted ``horizon``-step returns of
    ``policy`` (``policy.sample(obs, rng)``, NumPy) in each elite from each start (module docstring)."""
    import jax
    import jax.numpy as jnp

    if horizon < 1:
        raise ConfigError(f"the model rollout horizon is {horizon}; it must be at least 1 (e.g. --model-horizon 200).")
    E = int(model.elites.shape[0])
    n, d = start_observations.shape
    obs = jnp.broadcast_to(jnp.asarray(start_observations, jnp.float32), (E, samples, n, d)).reshape(E, samples * n, d)
    step = jax.jit(_member_step)
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    total = np.zeros((E, samples * n))
    alive = np.ones((E, samples * n), bool)
    for t in range(horizon):
        actions = policy.sample(np.asarray(obs).reshape(E * samples * n, d), rng).reshape(E, samples * n, -1)
        key, step_key = jax.random.split(key)
        obs, rewards, terminals = step(model, obs, jnp.asarray(actions, jnp.float32), step_key)
        total += discount**t * np.asarray(rewards) * alive
        alive &= ~np.asarray(terminals)
    return total.reshape(E, samples, n).mean(1)


def interval(returns: np.ndarray, confidence: float, num_bootstrap: int, seed: int) -> tuple[float, float]:
    """Percentile interval of ``J_b = mean_{i ~ starts} J_{e_b}(s_i0)`` with ``e_b`` a uniform elite."""
    E, n = returns.shape
    rng = np.random.default_rng(seed)
    members = rng.integers(0, E, num_bootstrap)
    starts = rng.integers(0, n, (num_bootstrap, n))
    replicates = returns[members[:, None], starts].mean(1)
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(replicates, [alpha, 1 - alpha])
    return float(low), float(high)


@dataclass(frozen=True)
class ModelOPESettings:
    """The model estimator's settings (``OPEConfig.model_*`` fields)."""

    horizon: int | None = None      #: steps per rollout (None: the data's longest episode)
    samples: int = 1                #: rollouts per start state per elite
    dynamics: object = dataclasses.field(default_factory=_fit_config)


def model_estimate(dataset, policy, settings: ModelOPESettings, discount: float, confidence: float = 0.95,
                   num_bootstrap: int = 1000, seed: int = 0, model=None) -> OPEResult:
    """The model-based estimate of ``policy``'s value on ``dataset`` (module docstring); ``model``: a fitted
    ensemble to reuse (fitted here when None)."""
    starts, ends = dataset.episode_bounds()
    horizon = settings.horizon if settings.horizon is not None else int((np.asarray(ends) - np.asarray(starts)).max())
    if horizon < 1:
        raise ConfigError(f"the model rollout horizon is {horizon}; it must be at least 1 (e.g. --model-horizon 200).")
    model = fitted_model(dataset, settings.dynamics, seed) if model is None else model
    start_obs = dataset.observations[np.asarray(starts)].reshape(len(starts), -1)
    returns = member_returns(model, policy, start_obs, horizon, discount, settings.samples, seed)
    low, high = interval(returns, confidence, num_bootstrap, seed)
    return OPEResult(estimator="model", estimate=float(returns.mean()), ci_low=low, ci_high=high,
                     ci_method="bootstrap", confidence=confidence, ess=float(len(starts)), max_weight_share=1.0 / len(starts),
                     num_episodes=int(len(starts)), estimated_behavior=False, clipped=False)
