"""How good is an estimator, given the true values (SCOPE-RL's and the DOPE benchmark's metrics).

* absolute error ``|J_hat - J|`` and relative error ``|J_hat - J| / |J|`` per policy;
* Spearman rank correlation between estimates and true values across policies (Pearson
  correlation of the ranks, ties sharing their average rank);
* regret@k: ``max_i J_i - max_{i in top-k by J_hat} J_i``, the true value lost by deploying the
  best of the estimator's top ``k`` instead of the truly best policy (0 is perfect).
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
