"""Trajectory off-policy estimators of a target policy's value from logged episodes.

Each estimator estimates ``J(pi_e) = E_{pi_e}[sum_t gamma^t r_t]`` of one target policy
``pi_e``, and its parts must describe that same policy: ``rho`` uses its density, ``Q`` must be
fitted for it (FQE's backup averages over ``a' ~ pi_e(.|s')``) and ``V(s) = E_{a~pi_e} Q(s, a)``
is its expectation, not ``Q`` at one action. For a deterministic continuous policy
``pi_e`` is the Gaussian around its action truncated to the action box
(:mod:`offrl.ope.policies`); a truly deterministic one (``std = 0``) gives every logged action
density 0, so IS, DR and WDR are undefined for it and a positive std is required.

Notation: episode ``i`` has steps ``t = 0..T_i-1`` with reward ``r_it``, per-step ratio
``rho_it = pi_e(a_it|s_it) / pi_b(a_it|s_it)`` and cumulative weight
``w_it = prod_{k<=t} rho_ik`` (``w_i,-1 = 1``); ``G_i = sum_t gamma^t r_it``. Episodes are
padded to a ``(N, T)`` layout with ``r = 0`` and ``rho = 1`` after their end, so an ended
episode keeps its final weight and adds nothing (the usual absorbing-state convention).

* IS (Precup et al. 2000): ``mean_i w_iT G_i``; unbiased.
* PDIS, per-decision IS: ``mean_i sum_t gamma^t w_it r_it``; unbiased.
* WIS, self-normalised IS: ``sum_i w_iT G_i / sum_i w_iT``; biased, consistent.
* WPDIS: ``sum_t gamma^t sum_i w_it r_it / sum_i w_it``; biased, consistent.
* clipped IS: IS with every per-step ratio clipped, ``min(rho_it, c)``; biased down for
  non-negative rewards, with variance bounded by ``c^{2T}`` instead of unbounded.
* DR (Jiang & Li 2016): ``mean_i sum_t gamma^t [w_it (r_it - Q(s_it, a_it)) + w_i,t-1 V(s_it)]``
  with ``V(s) = E_{a~pi_e} Q(s, a)``; unbiased for any ``Q`` (with ``Q`` fixed independently of
  the weights' randomness, e.g. fitted on other data or exact): the control variate
  ``w_i,t-1 V(s_it) - w_it Q(s_it, a_it)`` has mean 0 because ``E_b[rho_t Q(s_t, a_t) | s_t] = V(s_t)``.
  A ``Q`` time-varying in ``t`` is allowed (``q_taken`` and ``v`` are per step). An unbiased
  Monte-Carlo ``V`` (the mean of ``Q(s, a_k)`` over ``a_k ~ pi_e``) keeps DR unbiased.
* WDR (Thomas & Brunskill 2016): DR with ``w_it`` replaced by ``w_it / sum_j w_jt``, summed.
* DM, the direct method: ``mean_i V(s_i0)`` (with ``Q`` from FQE); as good as ``Q``.

Every estimator is a ratio of sums over episodes, ``sum_k (sum_i A_ik) / (sum_i D_ik)``
(``D = 1`` for the plain ones), so a bootstrap replicate is one matrix product of resampling
counts with ``A`` and ``D``; no Python loop touches steps or episodes.

Intervals: ``bootstrap`` (percentile, resampling episodes; the default), ``t`` (Student-t on
per-episode linearised values) or ``hoeffding`` (needs a range for the per-episode values;
without ``value_range`` the observed range is used, which is not a guarantee).
Seed ensembles (Q from ``S`` independently initialised FQE critics): the row's estimate is the
mean of the ``S`` seeds' estimates ``J_s`` (DM, DR and WDR are linear in ``Q`` and ``V``, so this is
the estimate with the seeds' mean ``Q``); :func:`seed_half_width` is the Student-t half-width of that
mean, ``h = t_{S-1, (1+confidence)/2} * sd_s(J_s) / sqrt(S)``, and :func:`combined_interval` adds it to
the interval over episodes in quadrature, ``[J - sqrt((J - lo)^2 + h^2), J + sqrt((hi - J)^2 + h^2)]``:
the initialisation and the data are independent sources of error, so their variances add.

``ess = (sum_i w_iT)^2 / sum_i w_iT^2`` and ``max_weight_share = max_i w_iT / sum_i w_iT`` show
when the weights have collapsed onto a few episodes: IS variance grows exponentially with
the horizon.

Example::

    episodes = make_episodes(ds.rewards, target_logp, ds.infos["action_log_probs"], *ds.episode_bounds(), discount=0.99)
    result = estimate(episodes, "wpdis")
    result.estimate, result.ci, result.ess
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from offrl.errors import OffrlError

ESTIMATORS = ("is", "pdis", "wis", "wpdis", "clipped_is", "dr", "wdr", "dm")
NEEDS_Q = ("dr", "wdr", "dm")
CI_METHODS = ("bootstrap", "t", "hoeffding")
DEFAULT_CLIP = 2.0


@dataclass(frozen=True)
class Episodes:
    """Logged episodes padded to ``(N, T)``; ``q_taken = Q(s_t, a_t)`` and ``v = V(s_t)``
    (both 0 on padding) are needed by DR, WDR and DM only."""

    rewards: np.ndarray
    log_ratios: np.ndarray
    mask: np.ndarray
    discount: float
    q_taken: np.ndarray | None = None
    v: np.ndarray | None = None
    estimated_behavior: bool = False

    @property
    def num_episodes(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def horizon(self) -> int:
        return int(self.rewards.shape[1])


@dataclass(frozen=True)
class OPEResult:
    """One estimator's answer for one policy."""

    estimator: str
    estimate: float
    ci_low: float
    ci_high: float
    ci_method: str
    confidence: float
    ess: float
    max_weight_share: float
    num_episodes: int
    estimated_behavior: bool
    clipped: bool
    clip: float | None = None

    @property
    def ci(self) -> tuple[float, float]:
        return (self.ci_low, self.ci_high)

    def to_dict(self) -> dict:
        return asdict(self)


class Terms(NamedTuple):
    """``estimate = sum_k sum_i numer[i, k] / sum_i denom[i, k]``."""

    numer: np.ndarray
    denom: np.ndarray


# ---------------------------------------------------------------------- layout
def pad_episodes(starts: np.ndarray, ends: np.ndarray, values: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """Rows ``[starts[i], ends[i])`` of ``values`` as row ``i`` of a ``(N, T)`` array
    (``T = max length``), ``fill`` after each episode's end."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    lengths = ends - starts
    horizon = int(lengths.max()) if len(lengths) else 0
    steps = np.arange(horizon)
    mask = steps[None, :] < lengths[:, None]
    index = np.where(mask, starts[:, None] + steps[None, :], 0)
    values = np.asarray(values)
    if len(values) == 0:
        return np.full((len(starts), horizon), fill, dtype=np.float64)
    return np.where(mask, values[index], fill)


def episode_mask(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    lengths = np.asarray(ends) - np.asarray(starts)
    horizon = int(lengths.max()) if len(lengths) else 0
    return np.arange(horizon)[None, :] < lengths[:, None]


def make_episodes(rewards, target_log_probs, behavior_log_probs, starts, ends, discount: float,
                  q_taken=None, v=None, estimated_behavior: bool = False) -> Episodes:
    """Pad flat per-transition arrays into :class:`Episodes`; refuses a zero behaviour
    probability of a logged action (its weight would be infinite or NaN)."""
    behavior_log_probs = np.asarray(behavior_log_probs, np.float64)
    target_log_probs = np.asarray(target_log_probs, np.float64)
    bad = np.flatnonzero(~np.isfinite(behavior_log_probs))
    if len(bad):
        raise OffrlError(f"the behaviour log-probability at row {bad[0]} is {behavior_log_probs[bad[0]]} (a zero probability "
                         "for an action the data contains), so its importance weight is undefined; fix action_log_probs or "
                         "use --behavior estimated.")
    bad = np.flatnonzero(np.isnan(target_log_probs) | (target_log_probs == np.inf))
    if len(bad):
        raise OffrlError(f"the target policy's log-probability at row {bad[0]} is {target_log_probs[bad[0]]}; "
                         "check that the policy's actions are finite for the dataset's observations.")
    if not 0.0 < discount <= 1.0:
        raise OffrlError(f"--discount {discount} is out of range; use a value in (0, 1].")
    pad = lambda x: None if x is None else pad_episodes(starts, ends, np.asarray(x, np.float64))  # noqa: E731
    return Episodes(pad(rewards), pad(target_log_probs - behavior_log_probs), episode_mask(starts, ends),
                    float(discount), pad(q_taken), pad(v), bool(estimated_behavior))


# ---------------------------------------------------------------------- weights
def cumulative_log_weights(log_ratios: np.ndarray, clip: float | None = None) -> np.ndarray:
    """``log w_t = sum_{k<=t} log min(rho_k, clip)`` along the last axis."""
    if clip is not None:
        log_ratios = np.minimum(log_ratios, np.log(clip))
    return np.cumsum(log_ratios, axis=-1)


def discount_factors(horizon: int, gamma: float) -> np.ndarray:
    return gamma ** np.arange(horizon, dtype=np.float64)


def effective_sample_size(log_weights: np.ndarray) -> tuple[float, float]:
    """``((sum w)^2 / sum w^2, max w / sum w)`` for weights given by their logs (no overflow)."""
    top = log_weights.max() if log_weights.size else -np.inf
    if not np.isfinite(top):
        return 0.0, float("nan")
    w = np.exp(log_weights - top)
    total = w.sum()
    return float(total**2 / (w**2).sum()), float(w.max() / total)


def _shifted(log_w: np.ndarray) -> np.ndarray:
    """``exp(log_w - max_i log_w)`` per column: self-normalised ratios are unchanged by it."""
    top = log_w.max(axis=0, keepdims=True)
    return np.exp(log_w - np.where(np.isfinite(top), top, 0.0))


def _mean_terms(per_episode: np.ndarray) -> Terms:
    return Terms(per_episode[:, None], np.ones((len(per_episode), 1)))


# ---------------------------------------------------------------------- estimators
def terms(episodes: Episodes, name: str, clip: float | None = None) -> Terms:
    """The ratio-of-sums terms of estimator ``name`` (see the module docstring)."""
    r, gam = episodes.rewards, discount_factors(episodes.horizon, episodes.discount)
    log_w = cumulative_log_weights(episodes.log_ratios, clip=clip if name == "clipped_is" else None)
    n = episodes.num_episodes
    if name in NEEDS_Q and (episodes.q_taken is None or episodes.v is None):
        raise OffrlError(f"estimator '{name}' needs a Q-function (q_taken and v); fit one with FQE or drop '{name}' from --estimators.")
    if name in ("is", "clipped_is"):
        final = log_w[:, -1] if episodes.horizon else np.zeros(n)
        return _mean_terms(np.exp(final) * (r @ gam))
    if name == "pdis":
        return _mean_terms((np.exp(log_w) * r) @ gam)
    if name == "wis":
        w = _shifted(log_w[:, -1:]) if episodes.horizon else np.ones((n, 1))
        return Terms(w * (r @ gam)[:, None], w)
    if name == "wpdis":
        w = _shifted(log_w)
        return Terms(w * r * gam, w)
    log_w_prev = np.concatenate([np.zeros((n, 1)), log_w[:, :-1]], axis=1)
    q, v = episodes.q_taken, episodes.v
    if name == "dr":
        return _mean_terms(((np.exp(log_w) * (r - q) + np.exp(log_w_prev) * v)) @ gam)
    if name == "wdr":
        w, w_prev = _shifted(log_w), _shifted(log_w_prev)
        return Terms(np.concatenate([w * (r - q) * gam, w_prev * v * gam], axis=1), np.concatenate([w, w_prev], axis=1))
    if name == "dm":
        return _mean_terms(v[:, 0] if episodes.horizon else np.zeros(n))
    raise OffrlError(f"unknown estimator '{name}'; choose from {', '.join(ESTIMATORS)}, fqe.")


def ratio_of_sums(parts: Terms, counts: np.ndarray | None = None) -> np.ndarray:
    """``sum_k (c @ numer)_k / (c @ denom)_k`` for each row of resampling counts ``c``
    (``counts=None``: the data itself). A column whose weights are all zero adds nothing."""
    if counts is None:
        num, den = parts.numer.sum(0, keepdims=True), parts.denom.sum(0, keepdims=True)
    else:
        num, den = counts @ parts.numer, counts @ parts.denom
    ratio = np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den != 0)
    return ratio.sum(-1)


def point_estimate(episodes: Episodes, name: str, clip: float | None = DEFAULT_CLIP) -> float:
    return float(ratio_of_sums(terms(episodes, name, clip))[0])


def linearised_values(parts: Terms) -> np.ndarray:
    """Per-episode values ``psi_i`` whose mean is the estimate and whose spread is its
    first-order (delta-method) spread: ``psi_i = est + sum_k (A_ik - r_k D_ik) / mean_i D_ik``."""
    num, den = parts.numer.sum(0), parts.denom.sum(0)
    ratio = np.divide(num, den, out=np.zeros_like(num), where=den != 0)
    mean_den = den / len(parts.denom)
    scale = np.divide(1.0, mean_den, out=np.zeros_like(mean_den), where=mean_den != 0)
    return ratio.sum() + ((parts.numer - ratio * parts.denom) * scale).sum(-1)


def confidence_interval(parts: Terms, method: str = "bootstrap", confidence: float = 0.95, num_bootstrap: int = 1000,
                        seed: int = 0, value_range: tuple[float, float] | None = None) -> tuple[float, float]:
    """A two-sided ``confidence`` interval for :func:`ratio_of_sums` of ``parts``."""
    n = len(parts.numer)
    if n < 2:
        return (float("nan"), float("nan"))
    alpha = 1.0 - confidence
    if method == "bootstrap":
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=num_bootstrap).astype(np.float64)
        reps = ratio_of_sums(parts, counts)
        lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
        return (float(lo), float(hi))
    psi = linearised_values(parts)
    mean = float(psi.mean())
    if method == "t":
        from scipy import stats

        half = float(stats.t.ppf(1 - alpha / 2, n - 1) * psi.std(ddof=1) / np.sqrt(n))
    elif method == "hoeffding":
        lo, hi = value_range if value_range is not None else (float(psi.min()), float(psi.max()))
        half = float((hi - lo) * np.sqrt(np.log(2.0 / alpha) / (2.0 * n)))
    else:
        raise OffrlError(f"--ci {method!r} is not an interval method; choose from {', '.join(CI_METHODS)}.")
    return (mean - half, mean + half)


def estimate(episodes: Episodes, name: str, ci: str = "bootstrap", confidence: float = 0.95, num_bootstrap: int = 1000,
             seed: int = 0, clip: float = DEFAULT_CLIP, value_range: tuple[float, float] | None = None) -> OPEResult:
    """Estimator ``name`` with its interval, ESS and largest weight's share."""
    if name not in ESTIMATORS:
        raise OffrlError(f"unknown estimator '{name}'; choose from {', '.join(ESTIMATORS)}, fqe.")
    if ci not in CI_METHODS:
        raise OffrlError(f"--ci {ci!r} is not an interval method; choose from {', '.join(CI_METHODS)}.")
    if not 0.0 < confidence < 1.0:
        raise OffrlError(f"--confidence {confidence} is out of range; use a value in (0, 1), e.g. 0.95.")
    parts = terms(episodes, name, clip)
    value = float(ratio_of_sums(parts)[0])
    low, high = confidence_interval(parts, ci, confidence, num_bootstrap, seed, value_range)
    if name == "dm" or episodes.horizon == 0:
        ess, share = float("nan"), float("nan")
    else:
        final = cumulative_log_weights(episodes.log_ratios, clip if name == "clipped_is" else None)[:, -1]
        ess, share = effective_sample_size(final)
    clipped = name == "clipped_is"
    return OPEResult(name, value, low, high, ci, confidence, ess, share, episodes.num_episodes,
                     episodes.estimated_behavior and name != "dm", clipped, clip if clipped else None)



def seed_half_width(per_seed, confidence: float = 0.95) -> float:
    """``t_{S-1, (1+confidence)/2} * sd(J_s) / sqrt(S)`` (``ddof = 1``): the half-width of a
    ``confidence`` interval for the mean of ``S`` seeds' estimates; 0 for one seed."""
    values = np.asarray(per_seed, np.float64)
    if values.size < 2:
        return 0.0
    from scipy import stats

    return float(stats.t.ppf((1 + confidence) / 2, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size))


def combined_interval(estimate: float, low: float, high: float, seed_half: float) -> tuple[float, float]:
    """The interval over episodes ``[low, high]`` widened by the seeds' half-width ``h`` in quadrature:
    ``[J - sqrt(max(J - low, 0)^2 + h^2), J + sqrt(max(high - J, 0)^2 + h^2)]``; unchanged when ``h = 0``."""
    if seed_half == 0.0:
        return (float(low), float(high))
    below, above = max(estimate - low, 0.0), max(high - estimate, 0.0)
    return (float(estimate - np.hypot(below, seed_half)), float(estimate + np.hypot(above, seed_half)))
