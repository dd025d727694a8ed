"""How good is an estimator, given the true values (SCOPE-RL's and the DOPE benchmark's metrics).

* absolute error ``|J_hat - J|`` and relative error ``|J_hat - J| / |J|`` per policy;
* Spearman rank correlation between estimates and true values across policies (Pearson
  correlation of the ranks, ties sharing their average rank);
* regret@k: ``max_i J_i - max_{i in top-k by J_hat} J_i``, the true value lost by deploying the
  best of the estimator's top ``k`` instead of the truly best policy (0 is perfect).

The DOPE protocol (Fu et al. 2021) states the error and the regret relative to the set's value
range ``max_i J_i - min_i J_i`` (:func:`dope_metrics`), and :func:`subset_intervals` gives each
metric a percentile interval over random policy subsets: ``num`` subsets of ``size`` distinct
policies drawn uniformly without replacement, the metric computed on each (the range of the
subset normalises it), and the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles.
:func:`paired_difference` compares two estimators on the same subsets: the interval of
``m_A(subset) - m_B(subset)`` for each metric, and the share of subsets on which A is better
(DOPE's question whether model-based OPE ranks better than FQE).
"""

from __future__ import annotations

import numpy as np


def absolute_error(estimates, true_values) -> np.ndarray:
    return np.abs(np.asarray(estimates, float) - np.asarray(true_values, float))


def relative_error(estimates, true_values) -> np.ndarray:
    true_values = np.asarray(true_values, float)
    return absolute_error(estimates, true_values) / np.maximum(np.abs(true_values), 1e-12)


def ranks(values) -> np.ndarray:
    """Ranks from 1 (smallest); tied values share their average rank."""
    values = np.asarray(values, float)
    order = np.argsort(values, kind="stable")
    out = np.empty(len(values))
    out[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        tied = values == v
        out[tied] = out[tied].mean()
    return out


def spearman(estimates, true_values) -> float:
    """Spearman's rank correlation; NaN when either side is constant or fewer than 2 policies."""
    a, b = ranks(estimates), ranks(true_values)
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def regret_at_k(estimates, true_values, k: int = 1) -> float:
    estimates, true_values = np.asarray(estimates, float), np.asarray(true_values, float)
    top = np.argsort(-estimates, kind="stable")[:k]
    return float(true_values.max() - true_values[top].max())


def estimator_metrics(estimates, true_values, k: int = 1) -> dict[str, float]:
    return {"abs_error": float(absolute_error(estimates, true_values).mean()),
            "rel_error": float(relative_error(estimates, true_values).mean()),
            "spearman": spearman(estimates, true_values), f"regret@{k}": regret_at_k(estimates, true_values, k)}


def dope_metrics(estimates, true_values) -> dict[str, float]:
    """Mean absolute error, Spearman and regret@1, the error and regret also as fractions of the
    value range ``max J - min J`` (NaN when the range is 0)."""
    estimates, true_values = np.asarray(estimates, float), np.asarray(true_values, float)
    span = float(true_values.max() - true_values.min())
    mae, regret = float(absolute_error(estimates, true_values).mean()), regret_at_k(estimates, true_values, 1)
    return {"mae": mae, "mae/range": mae / span if span > 0 else float("nan"), "spearman": spearman(estimates, true_values),
            "regret@1": regret, "regret@1/range": regret / span if span > 0 else float("nan"), "range": span}


def subset_metrics(estimates, true_values, size: int, num: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    """Each :func:`dope_metrics` entry on ``num`` random subsets of ``size`` policies, ``(num,)`` per key;
    the subsets depend on ``(len(true_values), size, num, seed)`` only, so two estimators share them."""
    estimates, true_values = np.asarray(estimates, float), np.asarray(true_values, float)
    n = len(true_values)
    if not 2 <= size <= n:
        raise ValueError(f"subset size {size} must be between 2 and the number of policies {n}")
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(num):
        idx = rng.choice(n, size, replace=False)
        rows.append(dope_metrics(estimates[idx], true_values[idx]))
    return {key: np.array([r[key] for r in rows]) for key in rows[0]}


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if not len(values):
        return float("nan"), float("nan")
    low, high = np.percentile(values, [100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2])
    return float(low), float(high)


def subset_intervals(estimates, true_values, size: int, num: int = 1000, confidence: float = 0.95,
                     seed: int = 0) -> dict[str, tuple[float, float]]:
    """Percentile interval of each :func:`dope_metrics` entry over ``num`` random subsets of
    ``size`` policies (NaNs, e.g. Spearman on a subset with a constant side, are left out)."""
    rows = subset_metrics(estimates, true_values, size, num, seed)
    return {key: _percentiles(values, confidence) for key, values in rows.items()}


#: for each :func:`dope_metrics` entry, +1 when larger is better, -1 when smaller is.
BETTER = {"mae": -1, "mae/range": -1, "spearman": 1, "regret@1": -1, "regret@1/range": -1}


def paired_difference(estimates_a, estimates_b, true_values, size: int, num: int = 1000, confidence: float = 0.95,
                      seed: int = 0) -> dict[str, dict[str, float]]:
    """Per metric of :data:`BETTER`: ``difference`` ``m_A - m_B`` on all policies, its percentile
    ``interval`` over the shared random subsets, and ``a_better``, the share of subsets where A's
    metric is strictly better (ties and NaNs count as not better)."""
    all_a, all_b = dope_metrics(estimates_a, true_values), dope_metrics(estimates_b, true_values)
    rows_a = subset_metrics(estimates_a, true_values, size, num, seed)
    rows_b = subset_metrics(estimates_b, true_values, size, num, seed)
    out = {}
    for key, sign in BETTER.items():
        diff = rows_a[key] - rows_b[key]
        with np.errstate(invalid="ignore"):
            better = np.nan_to_num(sign * diff, nan=0.0) > 0
        out[key] = {"difference": all_a[key] - all_b[key], "interval": _percentiles(diff, confidence),
                    "a_better": float(better.mean())}
    return out
