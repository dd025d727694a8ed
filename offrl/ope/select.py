"""Choosing a policy without the environment: the highest off-policy estimate wins.

``choose(report, by)`` returns the candidate with the largest estimate of estimator ``by``.
With true values (``--check``) :func:`selection_regret` compares three rules by the true value
they lose against the best candidate: the OPE choice, the choice by the runs' own online
evaluations (their last ``eval/return`` during training, when recorded) and the candidate
trained longest (the "last checkpoint").
"""

from __future__ import annotations

import math

import numpy as np

from offrl.errors import OffrlError


def choose(report, by: str) -> str:
    if by not in next(iter(report.results.values())):
        raise OffrlError(f"--by {by!r} was not computed; add it to --estimators.")
    values = report.estimates(by)
    return report.policies[int(np.argmax(values))]


def selection_regret(report, by: str, truth: dict) -> dict[str, dict]:
    """``{rule: {"choice", "true_value", "regret"}}`` for the OPE, online and last-checkpoint rules."""
    true = {p: truth[p]["value"] for p in report.policies}
    best = max(true.values())
    rules = {f"ope ({by})": choose(report, by)}
    online = {p: report.meta[p].get("online_return") for p in report.policies}
    if all(v is not None and math.isfinite(v) for v in online.values()):
        rules["online evaluation"] = max(report.policies, key=lambda p: online[p])
    steps = {p: report.meta[p].get("step") for p in report.policies}
    if all(s is not None for s in steps.values()):
        rules["last checkpoint"] = max(report.policies, key=lambda p: steps[p])
    return {rule: {"choice": p, "true_value": true[p], "regret": best - true[p]} for rule, p in rules.items()}
