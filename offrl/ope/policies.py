"""Target policies as densities over the dataset's actions, for importance weights.

Importance weights need ``pi_e(a|s)`` in the same units as the behaviour policy's logged
``action_log_probs``: offrl's collected tiers log the density of the *env-unit* action.

The continuous target policy every estimator estimates (IS family, FQE/DM, DR, WDR and the
``--check`` rollouts alike) is the Gaussian truncated to the action box, per dimension ``d``::

    pi(a|s) = prod_d N(a_d; mu_d(s), sigma_d(s)^2) / Z_d(s)   for low_d <= a_d <= high_d, else 0
    Z_d(s)  = Phi((high_d - mu_d(s)) / sigma_d(s)) - Phi((low_d - mu_d(s)) / sigma_d(s))

with ``mu(s)`` the policy's action clipped to the box (the action the env executes).
Truncation rather than clipping keeps ``pi`` a density on the box: clipping
``mu + sigma * eps`` would put point masses on the bounds, which a behaviour policy with a
density (such as the tiers' tanh-squashed Gaussians) never logs, so importance sampling could
not see them. Every action the truncated policy takes is executed unchanged by the env.

* A deterministic policy ``a = mu(s)`` has no density; it is evaluated as the truncated
  Gaussian above with ``sigma_d = std * (high_d - low_d) / 2``, i.e. ``std`` is stated in the
  normalised ``[-1, 1]`` action units (default 0.1, 5% of the action range). Its estimates are
  the value of this smoothed policy, which tends to the deterministic policy's value as
  ``std -> 0`` (for a value continuous in the action) while the importance weights grow more
  extreme. ``std = 0`` is refused: a deterministic continuous policy puts probability 0 on
  every logged action, so IS, DR and WDR are undefined for it.
* A stochastic Gaussian policy uses its own ``std_fn`` (env units), truncated the same way.
* A tabular (discrete) policy is a ``(S, A)`` table over state indices.

``log_prob(observations, actions)`` returns one log-density per row, ``distribution(observations)``
the ``(mu, sigma)`` in env units that FQE samples its next actions from, and
``sample(observations, rng)`` one action per row (the ``--check`` rollouts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from offrl.errors import OffrlError

DEFAULT_TARGET_STD = 0.1


def gaussian_log_density(actions: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """``sum_d log N(a_d; mean_d, std_d^2)`` over the last axis."""
    z = (np.asarray(actions, np.float64) - mean) / std
    return np.sum(-0.5 * z**2 - np.log(std) - 0.5 * math.log(2 * math.pi), axis=-1)


def _standard_bounds(mean, std, low, high):
    """``((low - mean) / std, (high - mean) / std)``, with ``mean`` inside ``[low, high]``."""
    return (np.asarray(low, np.float64) - mean) / std, (np.asarray(high, np.float64) - mean) / std


def truncated_gaussian_log_density(actions, mean, std, low, high) -> np.ndarray:
    """``sum_d log [N(a_d; mean_d, std_d^2) / Z_d]`` over the last axis, ``-inf`` outside the box
    (``Z_d`` of the module docstring; infinite bounds give the plain Gaussian)."""
    from scipy.special import log_ndtr

    actions = np.asarray(actions, np.float64)
    alpha, beta = _standard_bounds(mean, std, low, high)
    # log(Phi(beta) - Phi(alpha)) with alpha <= 0 <= beta, stable in both tails
    log_z = log_ndtr(beta) + np.log1p(-np.exp(log_ndtr(alpha) - log_ndtr(beta)))
    inside = np.all((actions >= low) & (actions <= high), axis=-1)
    with np.errstate(invalid="ignore"):
        logp = gaussian_log_density(actions, mean, std) - log_z.sum(-1)
    return np.where(inside, logp, -np.inf)


def truncated_gaussian_quantile(u, mean, std, low, high) -> np.ndarray:
    """The action at quantiles ``u`` in (0, 1) of the truncated Gaussian (inverse CDF):
    ``mean + std * Phi^-1(Phi(alpha) + u (Phi(beta) - Phi(alpha)))``, clipped to the box."""
    from scipy.special import ndtr, ndtri

    alpha, beta = _standard_bounds(mean, std, low, high)
    lo, hi = ndtr(alpha), ndtr(beta)
    return np.clip(mean + std * ndtri(lo + np.asarray(u) * (hi - lo)), low, high)


@dataclass
class GaussianPolicy:
    """A continuous target policy: ``mean_fn(obs) -> env-unit actions (B, d)``; ``std_fn(obs)``
    (env units) for a stochastic policy, else ``std`` in normalised units around the mean; either
    way the truncated Gaussian of the module docstring."""

    mean_fn: Callable[[np.ndarray], np.ndarray]
    action_low: np.ndarray
    action_high: np.ndarray
    std: float = DEFAULT_TARGET_STD
    std_fn: Callable[[np.ndarray], np.ndarray] | None = None
    name: str = "policy"
    meta: dict = field(default_factory=dict)
    discrete: bool = False

    @property
    def action_dim(self) -> int:
        return int(np.asarray(self.action_low).shape[-1])

    @property
    def deterministic(self) -> bool:
        return self.std_fn is None

    def mean(self, observations: np.ndarray, batch_size: int = 65536) -> np.ndarray:
        """``mu(s)``: the policy's env-unit action, clipped to the action box."""
        obs = np.asarray(observations, np.float32)
        parts = [np.asarray(self.mean_fn(obs[i:i + batch_size]), np.float64) for i in range(0, len(obs), batch_size)]
        out = np.concatenate(parts) if parts else np.zeros((0, self.action_dim))
        return np.clip(out, self.action_low, self.action_high)

    def stds(self, observations: np.ndarray) -> np.ndarray:
        """``sigma(s)`` in env units (see the module docstring)."""
        if self.std_fn is not None:
            return np.asarray(self.std_fn(np.asarray(observations, np.float32)), np.float64)
        if not self.std > 0:
            raise OffrlError(f"policy '{self.name}' is deterministic with target std {self.std:g}: importance weights need a "
                             "density, so pass a positive --target-std (e.g. 0.1).")
        half_range = (np.asarray(self.action_high, np.float64) - np.asarray(self.action_low, np.float64)) / 2
        return np.broadcast_to(self.std * half_range, (len(observations), self.action_dim))

    def log_prob(self, observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
        actions = np.asarray(actions)
        if actions.ndim != 2 or actions.shape[1] != self.action_dim:
            raise OffrlError(f"policy '{self.name}' acts in {self.action_dim} dimensions but the dataset's actions have shape "
                             f"{actions.shape[1:]}; evaluate it on data from its own environment.")
        mean, std = self.distribution(observations)
        return truncated_gaussian_log_density(actions, mean, std, self.action_low, self.action_high)

    def distribution(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mu(s), sigma(s))`` in env units, each ``(N, d)``, of the truncated Gaussian ``pi(.|s)``."""
        return self.mean(observations), self.stds(observations)

    def sample(self, observations: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One action per row from ``pi(.|s)`` (the truncated Gaussian)."""
        mean, std = self.distribution(observations)
        u = rng.uniform(size=mean.shape)
        return truncated_gaussian_quantile(u, mean, std, self.action_low, self.action_high)

    def describe(self) -> str:
        if not self.deterministic:
            return "stochastic Gaussian, truncated to the action box"
        return f"deterministic, as a Gaussian with std {self.std:g} (normalised units) truncated to the action box"


@dataclass
class TabularPolicy:
    """``pi(a|s) = probs[s, a]`` over state indices (one-hot or index observations)."""

    probs: np.ndarray
    name: str = "tabular"
    meta: dict = field(default_factory=dict)
    discrete: bool = True

    @property
    def num_actions(self) -> int:
        return int(self.probs.shape[1])

    def probabilities(self, observations: np.ndarray) -> np.ndarray:
        from offrl.ope.tabular import state_index

        return self.probs[state_index(observations)]

    def log_prob(self, observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
        index = np.asarray(actions).reshape(len(actions), -1)[:, 0].astype(int)
        with np.errstate(divide="ignore"):
            return np.log(self.probabilities(observations)[np.arange(len(index)), index])

    def describe(self) -> str:
        return "tabular"


def load_policies(paths, std: float = DEFAULT_TARGET_STD, seed: int = 0) -> list[GaussianPolicy]:
    """Candidates from run folders, ``RUN@STEP`` and export folders: a run that kept several
    checkpoints (``offrl train --keep-checkpoints``) gives one candidate per checkpoint, named
    ``RUN@STEP``; a run with only its latest checkpoint gives one, named ``RUN``."""
    from offrl.checkpoint import checkpoint_steps

    policies = []
    for entry in paths:
        path, step = split_step(entry)
        steps = checkpoint_steps(path / "checkpoints") if step is None and (path / "config.json").exists() else []
        if len(steps) > 1:
            policies += [load_policy(path, std, seed, step=s) for s in steps]
        else:
            policies.append(load_policy(path, std, seed, step=step))
    return policies


def split_step(entry: str | Path) -> tuple[Path, int | None]:
    """``"runs/iql@3000"`` -> ``(Path("runs/iql"), 3000)``; a plain path -> ``(path, None)``."""
    text = str(entry)
    head, sep, tail = text.rpartition("@")
    if sep and not Path(text).exists():
        if not tail.isdigit():
            raise OffrlError(f"{text!r}: the part after '@' must be a checkpoint step, e.g. {head}@5000.")
        return Path(head), int(tail)
    return Path(text), None


def load_policy(path: str | Path, std: float = DEFAULT_TARGET_STD, seed: int = 0, step: int | None = None) -> GaussianPolicy:
    """A run folder (its latest checkpoint, or checkpoint ``step``; seed ``seed``) or an exported
    NumPy policy folder."""
    path = Path(path)
    if not std > 0:
        raise OffrlError(f"--target-std {std} must be positive (it is the Gaussian std around a deterministic policy's action).")
    if (path / "config.json").exists():
        from offrl.engine import load_run

        run = load_run(path, step=step)
        seeds = int(np.asarray(run.agent.step).shape[0])
        if not 0 <= seed < seeds:
            raise OffrlError(f"--seed {seed} is out of range for {path}; it trained seeds 0..{seeds - 1}.")
        info = run.info
        meta = {"kind": "run", "algo": run.algo, "step": run.step, "seed": seed, "env_id": info.env_id, "obs_dim": info.obs_dim,
                "online_return": _last_online_return(run, seed)}
        name = _name(path) if step is None else f"{_name(path)}@{run.step}"
        return GaussianPolicy(lambda obs: run.act(obs, seed=seed), np.asarray(info.action_low, np.float64),
                              np.asarray(info.action_high, np.float64), std, name=name, meta=meta)
    if step is not None:
        raise OffrlError(f"{path}@{step}: only a run folder (with config.json) has checkpoints to choose by step.")
    if (path / "policy.json").exists() or path.name in ("policy.json", "policy.npz"):
        from offrl.policy import load_numpy_policy

        policy = load_numpy_policy(path)
        meta = {"kind": "export", "obs_dim": policy.obs_dim, **{k: policy.meta.get(k) for k in ("algo", "step", "seed", "env_id")}}
        return GaussianPolicy(policy, policy.action_low.astype(np.float64), policy.action_high.astype(np.float64), std,
                              name=_name(path if path.is_dir() else path.parent), meta=meta)
    if not path.exists():
        raise OffrlError(f"{path} does not exist; pass a run folder (from `offrl train`) or an export folder (from `offrl export`).")
    raise OffrlError(f"{path} is neither a run folder (config.json) nor an exported policy (policy.json); "
                     "pass the --out folder of `offrl train` or of `offrl export`.")


def _name(path: Path) -> str:
    parts = path.resolve().parts
    return "/".join(parts[-2:]) if path.name in ("export",) else path.name


def _last_online_return(run, seed: int) -> float | None:
    rows = [r for r in run.evaluations() if r.get("seed") == seed and int(r["step"]) <= run.step]
    return float(rows[-1]["eval/return"]) if rows else None


def check_policy_matches(policy, dataset) -> None:
    """Refuse a continuous policy whose observation or action size differs from the data's."""
    if getattr(policy, "discrete", False):
        return
    if policy.action_dim != dataset.action_dim:
        raise OffrlError(f"policy '{policy.name}' outputs {policy.action_dim}-dimensional actions but the dataset "
                         f"{dataset.source} has {dataset.action_dim}; evaluate it on data from its own environment.")
    obs_dim = policy.meta.get("obs_dim")
    if obs_dim is not None and int(obs_dim) != dataset.obs_dim:
        raise OffrlError(f"policy '{policy.name}' reads {obs_dim}-dimensional observations but the dataset "
                         f"{dataset.source} has {dataset.obs_dim}; evaluate it on data from its own environment.")
