"""Choosing a policy without the environment: the highest off-policy estimate wins.

``choose(report, by)`` returns the candidate with the largest estimate of estimator ``by``
among those it can trust: when ``by`` uses FQE's Q (``fqe``, ``dr``, ``wdr``), a candidate whose
FQE diverged (:func:`offrl.ope.fqe.diverged`) is left out, and :func:`excluded_message` says so in
one line (every candidate diverged: an error, since no Q-based choice is left);
:func:`near_tie` says in one line when that choice's interval overlaps the runner-up's
``[lo_1, hi_1] ∩ [lo_2, hi_2] != {}``, by how much the estimates differ (``est_1 - est_2``) and
by how much the intervals overlap (``min(hi_1, hi_2) - max(lo_1, lo_2)``).
With true values (``--check``) :func:`selection_regret` compares three rules by the true value
they lose against the best candidate: the OPE choice, the choice by the runs' own online
evaluations (their last ``eval/return`` during training, when recorded) and the candidate
trained longest (the "last checkpoint").

:func:`select_checkpoint` applies ``choose`` to the kept checkpoints of one run
(``offrl train --select-by``) and records the choice in ``RUN/selected.json``.
"""

from __future__ import annotations

import math

import numpy as np

from offrl.errors import OffrlError


def excluded(report, by: str) -> dict[str, dict]:
    """The candidates ``choose(report, by)`` leaves out: those whose FQE diverged, when ``by`` uses Q."""
    from offrl.ope.evaluate import Q_ESTIMATORS

    return report.diverged() if by in Q_ESTIMATORS else {}


def excluded_message(report, by: str) -> str | None:
    """One line naming the candidates left out of the choice by ``by`` and why (None when none are)."""
    left_out = excluded(report, by)
    if not left_out:
        return None
    parts = [f"{name} (FQE diverged at step {d['step']} by its {d['reason']}; frozen at step {d['frozen_at']})"
             for name, d in left_out.items()]
    return f"excluded from the choice by {by}: " + ", ".join(parts) + "."


def choose(report, by: str) -> str:
    if by not in next(iter(report.results.values())):
        raise OffrlError(f"--by {by!r} was not computed; add it to --estimators.")
    left_out = excluded(report, by)
    if len(left_out) == len(report.policies):
        raise OffrlError(f"FQE diverged for every candidate, so no {by} estimate can choose among them; "
                         "choose with an importance-sampling estimator instead (e.g. --by wpdis).")
    values = np.where([p in left_out for p in report.policies], -np.inf, report.estimates(by))
    return report.policies[int(np.argmax(values))]


def tie_message(candidates, by: str) -> str | None:
    """The near-tie line for candidate rows with ``name``, ``estimate``, ``ci_low``, ``ci_high``
    (``None`` when the best's interval is clear of the runner-up's, or with fewer than two)."""
    ranked = sorted(candidates, key=lambda c: c["estimate"], reverse=True)
    if len(ranked) < 2:
        return None
    best, runner = ranked[:2]
    overlap = min(best["ci_high"], runner["ci_high"]) - max(best["ci_low"], runner["ci_low"])
    if not overlap >= 0:                                  # clear of each other, or NaN intervals
        return None
    gap = best["estimate"] - runner["estimate"]
    return (f"near-tie: {best['name']} ({by} {best['estimate']:.2f}, CI [{best['ci_low']:.2f}, {best['ci_high']:.2f}]) leads "
            f"{runner['name']} ({runner['estimate']:.2f}, CI [{runner['ci_low']:.2f}, {runner['ci_high']:.2f}]) by {gap:.2f}, "
            f"but the intervals overlap by {overlap:.2f}; the data do not separate them.")


def near_tie(report, by: str) -> str | None:
    """:func:`tie_message` for the candidates of ``report`` ranked by ``by``."""
    left_out = excluded(report, by)
    return tie_message([{"name": p, **{k: getattr(report.results[p][by], k) for k in ("estimate", "ci_low", "ci_high")}}
                        for p in report.policies if p not in left_out], by)


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


SELECTED = "selected.json"


def select_checkpoint(run, by: str = "fqe", dataset=None, config=None, seed: int = 0, progress=None) -> dict:
    """Rank every kept checkpoint of run folder ``run`` by estimator ``by`` on ``dataset``
    (default: the run's own, ``settings["dataset"]``) for trained seed ``seed``, write
    ``RUN/selected.json`` and return its record: the chosen ``step``, ``by``, every candidate's
    ``step``, ``estimate``, ``ci_low``, ``ci_high``, ``ess``, ``diverged``, and ``near_tie``
    (:func:`near_tie`'s line or None) and ``excluded`` (:func:`excluded_message`'s line or None).

    Example::

        offrl.train("iql", "pendulum-medium-v0", steps=50_000, eval_every=5_000, out="runs/iql", keep_checkpoints=True)
        select_checkpoint("runs/iql", by="fqe")["step"]      # then load_run("runs/iql", step=...)
    """
    import json
    from dataclasses import replace
    from pathlib import Path

    from offrl.checkpoint import checkpoint_steps
    from offrl.ope.evaluate import OPE_ESTIMATORS, OPEConfig, evaluate_policies
    from offrl.ope.policies import load_policy

    folder = Path(run)
    if by not in OPE_ESTIMATORS:
        raise OffrlError(f"--select-by {by!r} is not an estimator; choose one of {', '.join(OPE_ESTIMATORS)} (e.g. fqe).")
    if not (folder / "config.json").exists():
        raise OffrlError(f"{folder} is not a run folder (no config.json); pass the --out folder of `offrl train`.")
    steps = checkpoint_steps(folder / "checkpoints")
    if not steps:
        raise OffrlError(f"{folder} has no checkpoint to select from; train it first.")
    if dataset is None:
        from offrl.data import load

        source = json.loads((folder / "config.json").read_text())["settings"]["dataset"]
        try:
            dataset = load(source)
        except OffrlError as exc:
            raise OffrlError(f"cannot reload the run's dataset {source!r} ({exc}); pass the dataset explicitly.") from None
    config = replace(config or OPEConfig(), estimators=(by,))
    policies = [load_policy(folder, config.target_std, seed, step=s) for s in steps]
    report = evaluate_policies(policies, dataset, config, progress=progress)
    choice = choose(report, by)
    left_out = excluded(report, by)
    candidates = [{"name": p.name, "step": int(p.meta["step"]), **{k: getattr(report.results[p.name][by], k)
                   for k in ("estimate", "ci_low", "ci_high", "ess")}, "diverged": p.name in left_out} for p in policies]
    chosen = next(c for c in candidates if c["name"] == choice)
    record = {"step": chosen["step"], "by": by, "seed": seed, "estimate": chosen["estimate"], "ci_low": chosen["ci_low"],
              "ci_high": chosen["ci_high"], "dataset": getattr(dataset, "source", None), "estimated_behavior": report.estimated_behavior,
              "target": report.target[choice], "candidates": candidates, "near_tie": tie_message([c for c in candidates if not c["diverged"]], by),
              "excluded": excluded_message(report, by),
              "config": report.config}
    (folder / SELECTED).write_text(json.dumps(record, indent=2, default=str))
    return record


def selected_step(run) -> int:
    """The checkpoint step recorded in ``RUN/selected.json`` (by ``offrl train --select-by``)."""
    import json
    from pathlib import Path

    path = Path(run) / SELECTED
    if not path.exists():
        raise OffrlError(f"{run} has no {SELECTED}; train it with --select-by fqe|dr|wis (or drop --selected).")
    try:
        return int(json.loads(path.read_text())["step"])
    except (ValueError, KeyError, TypeError):
        raise OffrlError(f"{path} is not a valid selection record (no integer 'step'); rerun `offrl train --resume --select-by`.") from None
