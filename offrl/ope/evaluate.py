"""Off-policy evaluation of several policies on one dataset: the API behind ``offrl ope``.

``evaluate_policies(policies, dataset, OPEConfig(...))`` returns an :class:`OPEReport` with
one :class:`offrl.ope.estimators.OPEResult` per (policy, estimator). The behaviour policy's
log-probabilities are the logged ones or a behaviour-cloning estimate
(:mod:`offrl.ope.behavior`); FQE (:mod:`offrl.ope.fqe`) trains once for all policies and its
Q serves the direct method (reported as ``fqe``) and DR / WDR. The ``model`` estimator rolls each
policy out in one dynamics ensemble fitted on the data (:mod:`offrl.ope.model_based`).

Every estimator estimates the same target policy ``pi``: for a continuous policy the
Gaussian ``N(mu(s), sigma^2)`` truncated to the action box (``sigma = target_std`` in ``[-1, 1]``
action units for a deterministic policy; :mod:`offrl.ope.policies`), whose density forms the
importance weights, whose samples form FQE's backups, and whose expectation
``V(s) = E_{a~pi(.|s)} Q(s, a)`` is the direct method's value and DR's control variate. So
DR is unbiased for ``J(pi)`` whatever the fitted ``Q``, and every row of a report answers the
same question. ``--check`` rolls out the same ``pi``.

FQE fits ``fqe_seeds`` independently initialised critics per policy (one vmapped run). The
``fqe``, ``dr`` and ``wdr`` rows are the mean over seeds, and their intervals add the seeds'
Student-t half-width to the interval over episodes in quadrature
(:func:`offrl.ope.estimators.combined_interval`; one seed: the interval over episodes alone).
The mean rather than the median: these estimators are linear in ``Q``, so the mean of the seeds'
estimates is the estimate with their mean ``Q`` and the three rows rest on one ``Q``; a seed that
runs away is not left to a robust statistic but caught by the divergence rule
(:func:`offrl.ope.fqe.diverged`). A policy whose FQE diverged keeps its rows, computed with the
critics frozen at the last chunk that passed, and ``report.diverged()`` names it (with the step);
:mod:`offrl.ope.select` never chooses it by a Q-based estimator.

Example::

    policies = [load_policy("runs/iql"), load_policy("runs/td3_bc")]
    report = evaluate_policies(policies, load_dataset("pendulum-medium-v0"), OPEConfig(discount=0.99))
    report.table()      # rows of dicts: policy, estimator, estimate, ci_low, ci_high, ess, ...
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from offrl.errors import OffrlError
from offrl.ope import estimators as est
from offrl.ope.behavior import behavior_log_probs
from offrl.ope.config import DEFAULT_ESTIMATORS, OPE_ESTIMATORS, OPEConfig
from offrl.ope.policies import check_policy_matches

#: the estimators that use FQE's Q (the direct method ``fqe``, DR, WDR).
Q_ESTIMATORS = ("fqe", "dr", "wdr")

@dataclass
class OPEReport:
    policies: list[str]
    results: dict[str, dict[str, est.OPEResult]]          # policy -> estimator -> result
    estimated_behavior: bool
    target: dict[str, str]                                # policy -> how its density was formed
    meta: dict[str, dict]
    config: dict
    fqe: dict | None = None                               # FQE's training curve (FQECurve.to_dict), when it ran
    model: dict | None = None                             # the model estimator's ensemble fit and rollout times, when it ran

    def table(self) -> list[dict]:
        rows = []
        for name in self.policies:
            for result in self.results[name].values():
                rows.append({"policy": name, **result.to_dict(), "target": self.target[name]})
        return rows

    def estimates(self, estimator: str) -> np.ndarray:
        return np.array([self.results[p][estimator].estimate for p in self.policies])

    def diverged(self) -> dict[str, dict]:
        """``{policy: {"step", "frozen_at", "reason", "estimate"}}`` for the policies whose FQE diverged."""
        return dict((self.fqe or {}).get("diverged", {}))

    def to_dict(self) -> dict:
        return {"policies": self.policies, "estimated_behavior": self.estimated_behavior, "rows": self.table(),
                "meta": self.meta, "config": self.config, "fqe": self.fqe, "model": self.model}


def parse_estimators(text: str | None) -> tuple[str, ...]:
    if not text:
        return DEFAULT_ESTIMATORS
    names = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in OPE_ESTIMATORS]
    if bad or not names:
        raise OffrlError(f"--estimators has unknown name {bad[0] if bad else text!r}; choose from {', '.join(OPE_ESTIMATORS)}.")
    return names


def evaluate_policies(policies, dataset, config: OPEConfig = OPEConfig(), progress=None) -> OPEReport:
    """Every estimator in ``config.estimators`` for every policy (see the module docstring)."""
    if not policies:
        raise OffrlError("no candidate policies were given; pass at least one run or export folder.")
    if len(dataset) == 0:
        raise OffrlError(f"dataset {dataset.source} has no transitions to evaluate on.")
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise OffrlError(f"two candidates share the name {next(n for n in names if names.count(n) > 1)!r}; pass distinct folders.")
    for policy in policies:
        check_policy_matches(policy, dataset)
    discrete = all(getattr(p, "discrete", False) for p in policies)
    say = progress or (lambda text: None)
    say("behaviour log-probabilities")
    logp_b, estimated = behavior_log_probs(dataset, config.behavior, discrete=discrete, config=config.behavior_cloning)
    starts, ends = dataset.episode_bounds()
    q_needed = any(e in Q_ESTIMATORS for e in config.estimators)
    q_seeds = v_seeds = curve = None
    if q_needed:
        say(f"FQE: up to {config.fqe_steps} steps x {len(policies)} policies x {config.fqe_seeds} seeds")
        q_seeds, v_seeds, curve = fit_q(policies, dataset, config, discrete,
                                        progress=lambda step: say(f"FQE: {step} of at most {config.fqe_steps} steps"))
        say(f"FQE: {'flat' if curve.converged else 'NOT flat (cap reached)'} after {int(curve.steps[-1])} steps, "
            f"{curve.seconds[-1]:.0f} s")
        from offrl.ope.fqe import value_bounds

        low, high = value_bounds(dataset.rewards, config.discount, int(np.max(dataset.episode_lengths())))
        final = v_seeds[:, :, starts].mean(-1).mean(-1)
        outside = [n for n, e in zip(names, final) if not low <= e <= high]
        diverged = {names[p]: {"step": int(curve.diverged_at[p]), "frozen_at": int(curve.frozen_at[p]), "reason": curve.reasons[p],
                               "estimate": float(final[p])} for p in curve.diverged()}
    model = model_record = None
    if "model" in config.estimators:
        if discrete:
            raise OffrlError("the model estimator needs continuous actions; drop 'model' from --estimators for this dataset.")
        from offrl.ope import model_based

        say("dynamics ensemble for the model estimator")
        t0 = time.perf_counter()
        model = model_based.fitted_model(dataset, config.dynamics, config.seed)
        model_record = model_based.fit_record(model)                 # reading the fit waits for it
        model_record["fit_seconds"] = time.perf_counter() - t0
        say(f"dynamics ensemble: {model_record['epochs']} epochs, {model_record['fit_seconds']:.0f} s, held-out MSE of the "
            f"elites {model_record['holdout_mse']:.3f} (standardised targets)")
    results: dict[str, dict[str, est.OPEResult]] = {}
    ensemble: dict[str, dict] = {}
    for p, policy in enumerate(policies):
        say(f"estimators for {policy.name}")
        logp_e = policy.log_prob(dataset.observations, dataset.actions)
        episodes = est.make_episodes(dataset.rewards, logp_e, logp_b, starts, ends, config.discount,
                                     None if q_seeds is None else q_seeds[p].mean(0), None if v_seeds is None else v_seeds[p].mean(0),
                                     estimated)
        results[policy.name] = {}
        for name in config.estimators:
            if name == "model":
                settings = model_based.ModelOPESettings(config.model_horizon, config.model_samples, config.dynamics)
                t0 = time.perf_counter()
                results[policy.name][name] = model_based.model_estimate(
                    dataset, policy, settings, config.discount, config.confidence, config.num_bootstrap, config.seed, model)
                model_record["rollout_seconds"][policy.name] = time.perf_counter() - t0
                continue
            result = est.estimate(episodes, "dm" if name == "fqe" else name, ci=config.ci, confidence=config.confidence,
                                  num_bootstrap=config.num_bootstrap, seed=config.seed, clip=config.clip)
            if name in Q_ESTIMATORS and config.fqe_seeds > 1:
                result, record = seed_ensemble(result, episodes, q_seeds[p], v_seeds[p], starts, ends, config)
                ensemble.setdefault(policy.name, {})[name] = record
            if name == "fqe":
                result = est.OPEResult(**{**result.to_dict(), "estimator": "fqe"})
            results[policy.name][name] = result
    cfg = asdict(config)
    return OPEReport(names, results, estimated, {p.name: p.describe() for p in policies},
                     {p.name: dict(p.meta) for p in policies}, cfg,
                     None if curve is None else {"policies": names, **curve.to_dict(), "value_bounds": [low, high],
                                                 "outside_value_bounds": outside, "diverged": diverged,
                                                 "divergence_rule": {"margin": config.fqe_divergence_margin,
                                                                     "loss_growth": config.fqe_loss_growth},
                                                 "seeds": config.fqe_seeds, "ensemble": ensemble},
                     model_record)


def seed_ensemble(result: est.OPEResult, episodes: est.Episodes, q_seeds, v_seeds, starts, ends, config: OPEConfig):
    """``result`` (computed with the seeds' mean ``Q``) with its interval widened by the seeds'
    half-width (:func:`offrl.ope.estimators.combined_interval`), and the record of it: every seed's
    estimate, the half-width, the interval over episodes alone."""
    from dataclasses import replace

    name = "dm" if result.estimator in ("fqe", "dm") else result.estimator
    pad = lambda x: est.pad_episodes(starts, ends, np.asarray(x, np.float64))  # noqa: E731
    per_seed = [est.point_estimate(replace(episodes, q_taken=pad(q), v=pad(v)), name, config.clip) for q, v in zip(q_seeds, v_seeds)]
    half = est.seed_half_width(per_seed, config.confidence)
    low, high = est.combined_interval(result.estimate, result.ci_low, result.ci_high, half)
    record = {"per_seed": per_seed, "seed_half_width": half, "data_ci": [result.ci_low, result.ci_high]}
    return est.OPEResult(**{**result.to_dict(), "ci_low": low, "ci_high": high}), record


def fit_q(policies, dataset, config: OPEConfig, discrete: bool, progress=None):
    """FQE for all policies at once; returns ``Q(s_i, a_i)`` and ``V(s_i) = E_{a~pi(.|s_i)} Q(s_i, a)``,
    each ``(P, S, N)`` for ``S = fqe_seeds`` critics per policy, for the same target policy ``pi``
    whose density the importance weights use (the truncated Gaussian of :mod:`offrl.ope.policies`),
    and the :class:`offrl.ope.fqe.FQECurve` of each seed's direct estimate ``mean_k V(s_{k,0})`` over
    the episode starts while FQE trained until it flattened (``fqe_window``, ``fqe_tolerance``,
    ``fqe_loss_tolerance``) or reached ``fqe_steps``, with divergence judged against the data's
    value bounds (``fqe_divergence_margin``, ``fqe_loss_growth``; :func:`offrl.ope.fqe.diverged`)."""
    from dataclasses import replace

    import jax

    from offrl.ope import fqe

    if discrete:
        next_policy = np.stack([p.probabilities(dataset.next_observations) for p in policies])
        now_policy = np.stack([p.probabilities(dataset.observations) for p in policies])
        fqe_config = replace(config.fqe, discount=config.discount, num_actions=int(next_policy.shape[-1]))
        low = high = None
    else:
        def target(observations):
            mean, std = zip(*(p.distribution(observations) for p in policies))
            return fqe.GaussianTarget(np.stack(mean), np.stack(std))

        next_policy, now_policy = target(dataset.next_observations), target(dataset.observations)
        low, high = policies[0].action_low, policies[0].action_high
        for p in policies[1:]:
            if not (np.array_equal(p.action_low, low) and np.array_equal(p.action_high, high)):
                raise OffrlError(f"policies '{policies[0].name}' and '{p.name}' have different action bounds; "
                                 "evaluate policies of one environment together.")
        fqe_config = replace(config.fqe, discount=config.discount, num_actions=None)
    horizon = int(np.max(dataset.episode_lengths()))
    scale = 1.0
    if fqe_config.normalize_returns:
        scale = fqe.return_scale(dataset.rewards, config.discount, horizon)
    data = fqe.fqe_data(dataset, next_policy, low, high, value_scale=scale)
    agents = fqe.create(fqe_config, data, seeds=config.fqe_seeds)
    starts = dataset.episode_bounds()[0]
    start_obs = dataset.observations[starts]
    start_policy = jax.tree_util.tree_map(lambda x: np.asarray(x)[:, starts], now_policy)
    probe = lambda agents: fqe.state_values(agents, data, start_obs, start_policy).mean(-1)  # noqa: E731
    chunk = 1000
    agents, _, curve = fqe.train_until_flat(agents, data, probe, config.fqe_steps, max(1, config.fqe_window // chunk),
                                            config.fqe_tolerance, config.fqe_loss_tolerance, chunk, progress,
                                            bounds=fqe.value_bounds(dataset.rewards, config.discount, horizon),
                                            margin=config.fqe_divergence_margin, loss_growth=config.fqe_loss_growth)
    q_taken = fqe.q_values(agents, data, dataset.observations, dataset.actions)
    v = fqe.state_values(agents, data, dataset.observations, now_policy)
    return q_taken, v, curve
