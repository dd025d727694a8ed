"""The dataset doctor: what kind of data a file holds, how good it is, and what to train on it.

``inspect_dataset(ds)`` returns a JSON-serialisable report; :func:`render` prints it with
rich and :func:`write_report` saves PNG plots, ``summary.md`` and ``report.json``.

The package is three parts: :mod:`~offrl.data.doctor.stats` (numbers computed from the data),
:mod:`~offrl.data.doctor.tier` (the decision rule: the *kind* of data from scale-free
evidence, its *level* from reference returns, the tier and the recommendation; the rule is
written out there) and :mod:`~offrl.data.doctor.render` (terminal, plots, Markdown).

Example::

    from offrl.data import load
    from offrl.data.doctor import inspect_dataset, render
    report = inspect_dataset(load("pendulum-medium-expert-v0"))
    report["tier"]["kind"], report["tier"]["estimate"], report["recommendation"]["algorithm"]
    render(report)
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from offrl.data.dataset import Dataset
from offrl.data.doctor.render import render, sparkline, summary_markdown, tier_headline, write_report
from offrl.data.doctor.stats import (value_histogram, summary_stats, action_autocorrelation, action_coverage, action_histogram,
                                     action_predictability, behavior_shift,
                                     bimodality, duplicate_transitions, return_order_fit, return_trend, spearman,
                                     state_coverage)
from offrl.data.doctor.tier import KINDS, TIERS, estimate_tier, kind_of_data, level_of_data, recommend

__all__ = ["inspect_dataset", "render", "write_report", "summary_markdown", "tier_headline", "sparkline",
           "action_autocorrelation", "action_coverage", "action_histogram", "action_predictability", "behavior_shift", "bimodality", "duplicate_transitions",
           "return_order_fit", "return_trend", "spearman", "state_coverage", "estimate_tier", "kind_of_data",
           "level_of_data", "recommend", "KINDS", "TIERS"]


def _reference_source(env_id: str | None, md: dict) -> str:
    from offrl.envs import D4RL_REFERENCE_RETURNS, env_family

    if "ref_min_score" in md and "ref_max_score" in md:
        return str(md.get("ref_source") or "the dataset's metadata (ref_min_score / ref_max_score)")
    if env_id and env_family(env_id) in D4RL_REFERENCE_RETURNS:
        return f"D4RL's published reference returns for {env_family(env_id)}"
    return f"offrl's measured reference returns for {env_id}"


def inspect_dataset(ds: Dataset, env_id: str | None = None, seed: int = 0) -> dict[str, Any]:
    """A JSON-serialisable report on ``ds``: sizes, returns, rewards, coverage, duplicates,
    the kind and level of the data, the tier and a recommendation."""
    from offrl.envs import check_env_id, normalized_score, reference_returns

    check_env_id(env_id, "env_id")
    md = dict(ds.metadata)
    env_id = env_id or md.get("env_id")
    lengths = ds.episode_lengths()
    returns = ds.episode_returns()
    refs = None
    scores = None
    if env_id or ("ref_min_score" in md and "ref_max_score" in md):
        refs = reference_returns(env_id or "", md)
        if refs is not None:
            scores = normalized_score(env_id or "", returns, md)
    references = None if refs is None else {"random": float(refs[0]), "expert": float(refs[1]),
                                            "source": _reference_source(env_id, md)}
    starts, ends = ds.episode_bounds()
    last = ends - 1
    coverage = action_coverage(ds)
    states = state_coverage(ds, seed=seed)
    autocorr = action_autocorrelation(ds)
    predictability = {**action_predictability(ds, seed=seed), **behavior_shift(ds, seed=seed)}
    trend = return_trend(returns)
    order_fit = return_order_fit(returns)
    modes = bimodality(scores if scores is not None else returns)
    kind = kind_of_data(predictability, trend, order_fit, modes, autocorr, coverage["mean_entropy"])
    level = level_of_data(scores, references, modes, order_fit)
    tier = estimate_tier(kind, level, int(len(starts)), md.get("tier"))
    tier.update(return_trend=None if not np.isfinite(trend) else trend, bimodality=modes, return_order_fit=order_fit)
    duplicates = duplicate_transitions(ds)
    rewards = ds.rewards.astype(np.float64)
    report: dict[str, Any] = {
        "source": ds.source,
        "env_id": env_id,
        "metadata": {k: md[k] for k in ("env_id", "tier", "generator", "seed", "policy_return", "minari_dataset_id",
                                        "algorithm_name", "next_observations") if k in md},
        "transitions": len(ds),
        "episodes": int(len(starts)),
        "obs_dim": ds.obs_dim,
        "action_dim": ds.action_dim,
        "infos": sorted(ds.infos),
        "episode_length": summary_stats(lengths),
        "returns": {**summary_stats(returns), "histogram": value_histogram(returns)},
        "reference_returns": references,
        "normalized_score": ({**summary_stats(scores), "histogram": value_histogram(scores)} if scores is not None else None),
        "rewards": {"mean": float(rewards.mean()), "std": float(rewards.std()), "min": float(rewards.min()),
                    "max": float(rewards.max()), "abs_max": float(np.abs(rewards).max())},
        "terminals": int(ds.terminals.sum()),
        "timeouts": int(ds.timeouts.sum()),
        "episodes_ending_in_terminal": int(ds.terminals[last].sum()),
        "episodes_ending_in_timeout": int(ds.timeouts[last].sum()),
        "action_coverage": coverage,
        "action_histogram": action_histogram(ds, env_id),
        "action_autocorrelation": None if not np.isfinite(autocorr) else autocorr,
        "action_predictability": {k: predictability[k] for k in ("r2", "trend", "within", "cross", "shift")},
        "state_coverage": states,
        "duplicates": duplicates,
        "tier": tier,
    }
    report["recommendation"] = recommend(tier, states, discrete=report["action_histogram"] is not None)
    report["warnings"] = _warnings(report)
    return json.loads(json.dumps(report, default=_json_default))


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(type(obj).__name__)


def _warnings(r: dict) -> list[str]:
    out = []
    if r["transitions"] < 10_000:
        out.append(f"only {r['transitions']} transitions: offline RL results on this little data vary a lot between seeds")
    if r["episodes"] < 10:
        out.append(f"only {r['episodes']} episodes: return statistics and the tier estimate are rough")
    if r["duplicates"]["fraction"] > 0.01:
        out.append(f"{r['duplicates']['count']} duplicate transitions ({100 * r['duplicates']['fraction']:.1f}%): the data may have been concatenated twice")
    if r.get("action_histogram") and r["action_histogram"]["unseen_actions"]:
        out.append(f"discrete actions {r['action_histogram']['unseen_actions']} never appear in the data: a Q-learner's max over them is "
                   "pure extrapolation; prefer discrete_cql, discrete_bcq or discrete_iql to dqn")
    if r["action_coverage"]["out_of_bounds"] and not r.get("action_histogram"):
        out.append(f"{r['action_coverage']['out_of_bounds']} actions lie outside the action bounds: clip them before training")
    if r["rewards"]["std"] == 0 and r["episodes_ending_in_terminal"] == 0:
        out.append("every reward is the same and no episode ends in a terminal: value-based methods cannot learn from it; use BC")
    if r["rewards"]["abs_max"] > 100:
        out.append(f"large rewards (|r| up to {r['rewards']['abs_max']:.3g}): consider reward scaling")
    if r["terminals"] == 0 and r["timeouts"] == 0:
        out.append("no terminals or timeouts: the whole dataset is one episode")
    tier = r["tier"]
    if tier.get("declared") and tier.get("agrees_with_metadata") is False:
        out.append(f"metadata says tier '{tier['declared']}' but the data look like {tier['kind']}"
                   + (f", tier '{tier['estimate']}'" if tier["estimate"] else ""))
    return out
