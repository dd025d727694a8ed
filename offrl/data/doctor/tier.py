"""The dataset doctor's decision rule: what *kind* of data, how *good*, which tier, what to train.

Two questions, answered from different evidence:

**Kind** (scale-free; needs no reference returns). Signals from
:mod:`offrl.data.doctor.stats`:

* ``predictability``: held-out k-NN ``R^2`` of actions from observations;
* ``behaviour shift``: that ``R^2`` within each half of the file minus across its halves;
* ``consistency trend``: Spearman's correlation of per-episode ``R^2`` with file position;
* ``return trend``: Spearman's correlation of episode return with file position;
* ``return shape along the file``: variance of the return ranks explained by a line
  (``linear``) and by one step (``step``), and the step's permutation p-value (``step_p``);
* ``return modes``: Otsu split and Ashman's ``D`` of the returns;
* ``action autocorrelation`` (lag 1) and the flatness of the action histograms.

Spearman's correlation over ``E`` episodes has a standard deviation of about ``1 / sqrt(E - 1)``
without any trend (0.16 at 40 episodes), hence the margins of the thresholds. The rule, in order:

1. when the returns rise along the file (return trend ``>= 0.4``): **learning history** if
   they rise gradually (``linear >= 0.85 step``), else **mixture of policies** (blocks:
   datasets written one after another); a change of consistency along the file supports either.
   Blocks also count when the trend is weaker but one step explains the returns far better than
   chance (``step >= 0.1`` and ``step_p <= 0.005``, i.e. no random order of the episodes fits a
   step as well): a medium block of many short episodes followed by a few long expert ones, some
   of which fall early (Hopper, Walker2d), gives a Spearman trend of only about 0.3. Blocks in a
   file whose actions are unpredictable as a whole (``R^2 < 0.15``) but grow more consistent
   along it (consistency trend ``>= 0.5``) are a **learning history** that leaves its random
   exploration in a jump (a learner that stalls after it, or a short history; mixtures of
   trained policies are predictable, far above the threshold);
2. otherwise, **learning history** when the behaviour grows more consistent along the file
   (consistency trend ``>= 0.5``: a learner's entropy falls, even where its returns do not
   show it yet) and **mixture of policies** when it grows less consistent (``<= -0.5``); two
   return modes add support;
3. **mixture of policies** when the file's two halves predict each other's actions worse than
   their own (behaviour shift ``>= 0.05``, above the sampling noise of one policy's exchangeable
   halves): two policies written one after another whose returns are alike, which no return
   signal can see (a Walker2d expert that scores like the medium when run stochastically);
4. **random actions** when the actions are unpredictable from the states (``R^2 < 0.15``);
5. **one policy** otherwise. Two return modes alone do not make a mixture: one policy whose
   return depends on the start state (Pendulum) has them too, so they count against one
   policy (lowering the confidence) without changing the kind; a shuffled mixture of two
   policies is reported as one policy with that caveat.

Confidence counts the signals that support the kind (each listed in ``evidence``):
``high`` needs two or more, no signal pointing to another kind, at least 20 episodes, and a
metadata tier (if any) of the same kind; each failed condition lowers it one step
(``high -> medium -> low``). One signal alone never gives ``high``.

**Level** (needs reference returns; the references and their source are reported):
per-episode ``s = 100 (R - R_random) / (R_expert - R_random)`` (D4RL, Fu et al. 2020);
the median, and for a mixture each mode's mean.

**Tier** (D4RL's names) from both: random actions -> *random*; learning history ->
*medium-replay*; mixture -> *medium-expert* (the better mode, or the better of the two blocks of
the file either side of its best step, ``>= 75``; or the level unknown),
else *medium-replay*; one policy -> *expert* (median ``>= 85``), *random* (``< 15``: a poor
policy such as a randomly initialised actor), else *medium*, and unknown without references.
The metadata's tier is reported beside it.

**Recommendation** (the dataset-quality table) cites both: random actions -> CQL; one policy
near expert -> BC (TD3+BC when the scores spread widely); one weaker policy, a mixture or a
learning history -> IQL. For ``Discrete`` actions the same rule names the discrete family:
discrete_cql, discrete_bc (discrete_bcq, the discrete algorithm that keeps Q-learning on the
data's actions, where TD3+BC would be) and discrete_iql.
"""

from __future__ import annotations

import numpy as np

RANDOM_BELOW = 15.0
EXPERT_FROM = 85.0
MIXTURE_HIGH_FROM = 75.0
WIDE_SPREAD = 30.0
RETURN_TREND_FROM = 0.4
CONSISTENCY_TREND_FROM = 0.5
PREDICTABLE_BELOW = 0.15
GRADUAL_RATIO = 0.85
IID_AUTOCORR_BELOW = 0.2
FLAT_ACTIONS_FROM = 0.9
MIN_EPISODES_FOR_HIGH = 20
#: Below this many episodes no tier is estimated ("too small to judge"): a Spearman correlation
#: over ``E`` episodes spreads by about ``1 / sqrt(E - 1)`` without any trend (0.58 at 4), and two
#: return modes or an order fit cannot be told from noise, so any kind would be a guess.
MIN_EPISODES_TO_JUDGE = 5
TOO_SMALL = "too small to judge"
STEP_FROM = 0.1
STEP_P_BELOW = 0.005
SHIFT_FROM = 0.05

KINDS = ("random actions", "one policy", "mixture of policies", "learning history")
#: the D4RL-style dataset tiers (Fu et al. 2020), the one list offrl uses (collection, benchmark, doctor).
TIERS = ("random", "medium", "medium-replay", "medium-expert", "expert")
#: the kinds of data each declared tier can be (D4RL's random tier is a randomly initialised policy).
KINDS_OF_TIER = {"random": ("random actions", "one policy"), "medium": ("one policy",), "expert": ("one policy",),
                 "medium-replay": ("learning history", "mixture of policies"), "full-replay": ("learning history",),
                 "medium-expert": ("mixture of policies",)}
CONFIDENCE = ("low", "medium", "high")


def _finite(x) -> bool:
    return x is not None and bool(np.isfinite(x))


def kind_of_data(predictability: dict, return_trend: float, order_fit: dict, modes: dict,
                 action_autocorr: float = float("nan"), action_entropy: float = float("nan")) -> dict:
    """The kind of data and the signals for and against it (see the module rule).

    Returns ``{"estimate", "support", "against", "evidence": [{"signal", "value", "points_to", "reason"}]}``.
    """
    r2, consistency = predictability.get("r2"), predictability.get("trend")
    shift = predictability.get("shift")
    shifted = _finite(shift) and shift >= SHIFT_FROM
    linear, step = order_fit.get("linear"), order_fit.get("step")
    rising = _finite(return_trend) and return_trend >= RETURN_TREND_FROM
    gradual = rising and _finite(linear) and _finite(step) and linear >= GRADUAL_RATIO * step
    step_p = order_fit.get("step_p")
    clear_step = _finite(step) and _finite(step_p) and step >= STEP_FROM and step_p <= STEP_P_BELOW
    blocks = (rising or clear_step) and not gradual
    more_consistent = _finite(consistency) and consistency >= CONSISTENCY_TREND_FROM
    less_consistent = _finite(consistency) and consistency <= -CONSISTENCY_TREND_FROM
    unpredictable = _finite(r2) and r2 < PREDICTABLE_BELOW
    evidence = []

    def note(signal, value, points_to, reason):
        evidence.append({"signal": signal, "value": value, "points_to": points_to, "reason": reason})

    # a learner leaves its early (near-)random exploration: the file as a whole is hard to predict,
    # yet its actions grow more consistent along it; a sharp early rise then forms blocks
    exploring = blocks and more_consistent and unpredictable
    if more_consistent or less_consistent:
        direction = "more" if more_consistent else "less"
        grows = f"actions grow {direction} predictable from the states along the file (Spearman {consistency:.2f}"
        if exploring:
            points_to, why = "learning history", (f" of per-episode R^2 with position) although the file as a whole is hard to predict "
                                                  f"(R^2 {r2:.2f}): a learner leaving its early random exploration")
        elif blocks:
            points_to, why = "mixture of policies", " of per-episode R^2 with position): the behaviour policy changes"
        elif more_consistent:
            points_to, why = "learning history", " of per-episode R^2 with position), as a learner's do"
        else:
            points_to, why = "mixture of policies", "): the behaviour policy changes"
        note("consistency trend", consistency, points_to, grows + why)
    if gradual:
        note("return trend", return_trend, "learning history",
             f"returns rise gradually along the file (Spearman {return_trend:.2f}; a line explains {100 * linear:.0f}% of the rank variance, one step {100 * step:.0f}%)")
    if blocks:
        direction = "rise" if order_fit.get("step_rises", True) else "fall"
        chance = f", p = {step_p:.3f} against random orders" if _finite(step_p) else ""
        where = f"one step at episode {order_fit.get('step_at')} explains {100 * step:.0f}% of the rank variance{chance}, a line {100 * linear:.0f}%"
        note("return blocks", step, "learning history" if exploring else "mixture of policies",
             f"returns {direction} along the file in a step ({where}) as the actions leave their random phase: exploration, then a policy"
             if exploring else f"returns {direction} along the file in blocks ({where}): datasets written one after another")
    if modes.get("bimodal"):
        note("return modes", modes.get("ashman_d"), "mixture of policies",
             f"returns have two modes ({100 * (1 - modes['low_fraction']):.0f}% of episodes in the upper one, Ashman's D {modes['ashman_d']:.1f})")
    if _finite(r2):
        if unpredictable:
            note("predictability", r2, "random actions",
                 f"actions are not predictable from the states (held-out k-NN R^2 {r2:.2f} < {PREDICTABLE_BELOW})")
        else:
            note("predictability", r2, "one policy",
                 f"actions depend on the states (held-out k-NN R^2 {r2:.2f})")
    if shifted:
        note("behaviour shift", shift, "mixture of policies",
             f"the file's halves predict each other's actions worse than their own (held-out k-NN R^2 {predictability['cross']:.2f} "
             f"across the halves, {predictability['within']:.2f} within them): the behaviour policy changes along the file")
    if _finite(action_autocorr):
        if action_autocorr < IID_AUTOCORR_BELOW:
            note("action autocorrelation", action_autocorr, "random actions",
                 f"consecutive actions are nearly uncorrelated (lag-1 autocorrelation {action_autocorr:.2f}); stochastic policies can be too")
        else:
            note("action autocorrelation", action_autocorr, "one policy",
                 f"consecutive actions are correlated (lag-1 autocorrelation {action_autocorr:.2f})")
    if _finite(action_entropy) and action_entropy >= FLAT_ACTIONS_FROM and unpredictable:
        note("action histogram", action_entropy, "random actions",
             f"every action dimension's histogram is nearly flat (entropy {action_entropy:.2f} of the maximum)")
    if _finite(return_trend) and abs(return_trend) < RETURN_TREND_FROM and not (more_consistent or less_consistent or blocks or shifted):
        note("no trend", return_trend, "one policy",
             f"neither the returns (Spearman {return_trend:.2f}) nor the behaviour change along the file")

    if gradual or exploring:
        kind = "learning history"
    elif blocks:
        kind = "mixture of policies"
    elif more_consistent:
        kind = "learning history"
    elif less_consistent or shifted:
        kind = "mixture of policies"
    elif unpredictable:
        kind = "random actions"
    else:
        kind = "one policy"
    support = [e for e in evidence if e["points_to"] == kind]
    against = [e for e in evidence if e["points_to"] != kind and not _compatible(e, kind)]
    if kind == "one policy" and modes.get("bimodal"):
        for e in evidence:
            if e["signal"] == "return modes":
                e["reason"] += ("; with nothing changing along the file this reads as one policy whose return depends on the"
                                " start state (a shuffled mixture of two policies would look the same)")
                break
    return {"estimate": kind, "support": support, "against": against, "evidence": evidence}


def _compatible(e: dict, kind: str) -> bool:
    """Signals that point elsewhere but do not contradict ``kind``."""
    if kind == "random actions" and e["signal"] == "no trend":
        return True   # uniform actions do not change along the file either
    if kind != "random actions" and e["signal"] in ("action autocorrelation", "action histogram"):
        return True   # a stochastic policy's consecutive actions can be uncorrelated
    if kind in ("learning history", "mixture of policies") and e["points_to"] == "one policy" and e["signal"] != "no trend":
        return True   # each policy in the file is predictable
    if kind == "learning history" and e["signal"] in ("return modes", "behaviour shift"):
        return True   # early and late returns can form two modes
    if kind == "learning history" and e["signal"] == "predictability":
        return True   # early random exploration makes the whole file hard to predict
    return False


def level_of_data(scores, references: dict | None, modes: dict | None = None, order_fit: dict | None = None) -> dict | None:
    """How good: the median normalized score (and each mode's mean, and the median of each
    block of the file either side of the best step), naming the references."""
    if scores is None or references is None:
        return None
    s = np.asarray(scores, dtype=np.float64)
    out = {"median_score": float(np.median(s)), "score_spread": float(np.percentile(s, 90) - np.percentile(s, 10)),
           "references": references}
    if modes and modes.get("bimodal"):
        out["low_mode_score"], out["high_mode_score"] = modes["low_mean"], modes["high_mean"]
    at = (order_fit or {}).get("step_at")
    if at and 0 < at < len(s):
        out["block_scores"] = [float(np.median(s[:at])), float(np.median(s[at:]))]
    return out


def tier_name(kind: str, level: dict | None) -> str | None:
    """D4RL's tier name for a kind and a level (``None`` when the level is needed and unknown)."""
    if kind == "random actions":
        return "random"
    if kind == "learning history":
        return "medium-replay"
    if kind == "mixture of policies":
        if level is None:
            return "medium-expert"
        high = max([level.get("high_mode_score", level["median_score"])] + list(level.get("block_scores", [])))
        return "medium-expert" if high >= MIXTURE_HIGH_FROM else "medium-replay"
    if level is None:
        return None
    med = level["median_score"]
    return "expert" if med >= EXPERT_FROM else ("random" if med < RANDOM_BELOW else "medium")


def estimate_tier(kind: dict, level: dict | None, episodes: int, declared: str | None = None) -> dict:
    """Combine kind and level into the tier estimate, its confidence and its reasons; below
    :data:`MIN_EPISODES_TO_JUDGE` episodes, no estimate (kind "too small to judge")."""
    if episodes < MIN_EPISODES_TO_JUDGE:
        reason = (f"{TOO_SMALL}: {episodes} episode(s), fewer than the {MIN_EPISODES_TO_JUDGE} the doctor needs before "
                  "estimating a tier; collect more episodes")
        if level is not None:
            reason += f" (the median normalized score of these episodes is {level['median_score']:.1f})"
        return {"estimate": None, "kind": TOO_SMALL, "confidence": "low", "reasons": [reason], "declared": declared,
                "agrees_with_metadata": None, "evidence": kind["evidence"], "level": level, "too_small": True,
                "normalized": level is not None, "median_score": level["median_score"] if level else None,
                "score_spread": level["score_spread"] if level else None}
    tier = tier_name(kind["estimate"], level)
    support, against = kind["support"], kind["against"]
    reasons = [f"kind: {kind['estimate']}"] + [f"  {e['reason']}" for e in support]
    reasons += [f"  against: {e['reason']}" for e in against]
    if level is None:
        reasons.append("level: unknown (no reference returns; pass --env or add ref_min_score/ref_max_score to the metadata)")
        if kind["estimate"] == "one policy":
            reasons.append("  whether one policy is a random, medium or expert tier depends on its level, which is unknown")
    else:
        refs = level["references"]
        text = (f"level: median normalized score {level['median_score']:.1f} against R_random {refs['random']:.4g} and "
                f"R_expert {refs['expert']:.4g} ({refs['source']})")
        if "high_mode_score" in level:
            text += f"; the two modes score about {level['low_mode_score']:.0f} and {level['high_mode_score']:.0f}"
        if kind["estimate"] == "mixture of policies" and "block_scores" in level:
            text += "; the file's blocks either side of its best step score about {:.0f} and {:.0f} (medians)".format(*level["block_scores"])
        reasons.append(text)

    start = min(len(support), 2)
    why = ["two or more signals support the kind" if start == 2 else
           ("only one signal supports the kind" if start == 1 else "no signal supports the kind directly")]
    lowered = []
    if against:
        lowered.append(f"{len(against)} signal(s) point to another kind")
    if episodes < MIN_EPISODES_FOR_HIGH:
        lowered.append(f"only {episodes} episodes")
    declared_kinds = KINDS_OF_TIER.get(str(declared)) if declared else None
    agrees = None
    if declared:
        kind_ok = declared_kinds is None or kind["estimate"] in declared_kinds
        agrees = kind_ok and (tier is None or declared == tier)
        if not kind_ok:
            lowered.append(f"the metadata says tier '{declared}', which is {' or '.join(declared_kinds)} data, not {kind['estimate']}")
        elif not agrees:
            lowered.append(f"the metadata says tier '{declared}', not '{tier}'")
    confidence = CONFIDENCE[max(0, start - len(lowered))]
    reasons.append(f"confidence {confidence}: " + "; ".join(why + lowered))
    return {"estimate": tier, "kind": kind["estimate"], "confidence": confidence, "reasons": reasons,
            "declared": declared, "agrees_with_metadata": agrees, "evidence": kind["evidence"], "level": level,
            "normalized": level is not None,
            "median_score": level["median_score"] if level else None,
            "score_spread": level["score_spread"] if level else None}


#: The algorithm names the recommendation uses, per action family: continuous names are the
#: table's, discrete ones are ``offrl train`` names of the discrete family.
NAMES = {
    False: {"cql": "CQL", "iql": "IQL", "constrained": "TD3+BC", "bc": "BC",
            "constrained_how": "TD3+BC's value term lets it prefer the better episodes while its BC term keeps it close to the data",
            "constrained_safer": "TD3+BC adds a value term on top of the BC term"},
    True: {"cql": "discrete_cql", "iql": "discrete_iql", "constrained": "discrete_bcq", "bc": "discrete_bc",
           "constrained_how": "discrete_bcq's Q-learning lets it prefer the better episodes while its behaviour-model threshold keeps the max on the data's actions",
           "constrained_safer": "discrete_bcq learns values but keeps its greedy choice among actions the data shows"},
}


#: the PCA-grid occupancy (:func:`offrl.data.doctor.stats.state_coverage`) from which ensemble
#: pessimism (EDAC, SAC-N) is suggested beside the tier's choice.
WIDE_COVERAGE = 0.3


def _newer_alternatives(kind: str, tier: str, coverage: dict | None, alts: list, reasons: list) -> None:
    """ReBRAC for suboptimal locomotion-style data and EDAC / SAC-N where states are covered
    widely, each with the published evidence and its cost (continuous actions only)."""
    if kind in ("one policy", "mixture of policies", "learning history") and not (kind == "one policy" and tier == "expert"):
        alts.append("ReBRAC")
        reasons.append("ReBRAC (TD3+BC plus a critic BC penalty, LayerNorm and a large batch) leads IQL in CORL's "
                       "Gym-MuJoCo table at 1M updates (89.7 vs 81.6 averaged over the 9 locomotion tasks); it needs "
                       "that budget, so at a few thousand updates the choice above is the safer one")
    occupied = (coverage or {}).get("occupied_fraction")
    if kind in ("random actions", "learning history") and occupied is not None and occupied >= WIDE_COVERAGE:
        alts.append("EDAC")
        reasons.append(f"the states are widely covered ({100 * occupied:.0f}% of the PCA grid): ensemble pessimism "
                       "(EDAC, SAC-N) needs that coverage — EDAC tops CORL's Gym-MuJoCo table (92.9) but scores 0 on "
                       "AntMaze's narrow data — and costs N critics per update (N = 10 by default)")


def recommend(tier: dict, coverage: dict | None = None, discrete: bool = False) -> dict:
    """The algorithm the dataset-quality table suggests for this kind and level, with reasons citing
    both; ``discrete=True`` (a ``Discrete`` action space) names only discrete-action algorithms."""
    n = NAMES[bool(discrete)]
    kind, t = tier.get("kind"), tier["estimate"]
    level = tier.get("level")
    med = level["median_score"] if level else None
    level_text = f"median normalized score {med:.0f}" if med is not None else "level unknown"
    if kind is None:  # a hand-built tier dict: read the kind from the tier name
        kind = {"random": "random actions", "medium-replay": "learning history", "medium-expert": "mixture of policies"}.get(t, "one policy")
    if kind == TOO_SMALL:
        return {"algorithm": n["iql"], "alternatives": [],
                "reasons": [f"the file is {TOO_SMALL} (fewer than {MIN_EPISODES_TO_JUDGE} episodes), so no tier-based choice is made; "
                            f"{n['iql']} is the most robust default across tiers"]}
    if kind == "random actions":
        algo, alts = n["cql"], [n["iql"]]
        reasons = [f"random actions ({level_text}): cloning them reproduces random behaviour, and the values of actions the data rarely shows are easily over-estimated",
                   f"{n['cql']}'s conservative penalty pushes down Q-values of unseen actions, which matters most when coverage of good states is low"]
        if coverage is not None and coverage.get("occupied_fraction", 1.0) < 0.3:
            reasons.append(f"state coverage is low ({100 * coverage['occupied_fraction']:.0f}% of the PCA grid occupied)")
    elif kind == "one policy" and t == "expert":
        spread = tier.get("score_spread") or 0.0
        if spread > WIDE_SPREAD:
            algo, alts = n["constrained"], [n["bc"]]
            reasons = [f"one near-expert policy ({level_text}) with a wide spread of scores ({spread:.0f} points): {n['constrained_how']}",
                       "plain behaviour cloning also imitates the weaker episodes"]
        else:
            algo, alts = n["bc"], [n["constrained"]]
            reasons = [f"one near-expert policy ({level_text}), narrow data: behaviour cloning copies the good behaviour directly",
                       f"{n['constrained_safer']} and is the safer choice if some episodes are weaker"]
    else:
        algo = n["iql"]
        alts = [n["constrained"]] if kind in ("one policy", "mixture of policies") else [n["cql"], n["constrained"]]
        what = {"one policy": "one suboptimal policy" if med is not None else "one policy of unknown quality",
                "mixture of policies": "a mixture of policies", "learning history": "a learner's history of improving policies"}[kind]
        reasons = [f"{what} ({level_text}): {n['iql']} learns values in-sample with an expectile loss, so it improves on the behaviour without querying actions outside the data",
                   "its advantage-weighted policy extraction keeps the better actions and down-weights the worse episodes"]
    if not discrete:
        _newer_alternatives(kind, t, coverage, alts, reasons)
    if tier.get("confidence") == "low":
        reasons.append(f"the estimate is uncertain; {n['iql']} is the most robust default across tiers if in doubt")
    if discrete:
        reasons.append("the actions are discrete: only the discrete family (discrete_bc, dqn, double_dqn, discrete_cql, "
                       "discrete_bcq, discrete_iql) trains on them")
    return {"algorithm": algo, "alternatives": alts, "reasons": reasons}
