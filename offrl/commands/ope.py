"""``offrl ope`` and ``offrl select``: off-policy evaluation and policy choice from a dataset alone."""

from __future__ import annotations


from dataclasses import dataclass
from typing import ClassVar

from offrl.config import ANY_INT, POSITIVE_INT, param


@dataclass(frozen=True)
class Candidates:
    """Which data and policies, and where the results go.

    dataset: registry name or path of the logged dataset.
    seed: which trained seed of each run to evaluate.
    out: folder for ope.json, ope.csv and the plots (default: print only).
    overwrite: replace existing files in --out.
    check: also roll the policies out in their environment and score the estimators.
    env: Gymnasium id for --check (default: each policy's own).
    episodes: --check rollouts per policy.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    dataset: str
    seed: int = param(0, ANY_INT)
    out: str | None = None
    overwrite: bool = False
    check: bool = False
    env: str | None = None
    episodes: int = param(10, POSITIVE_INT)

    def __post_init__(self) -> None:
        from offrl.config import check_config

        check_config(self)


def _common(p) -> None:
    from offrl.config import add_flags
    from offrl.ope.behavior import BehaviorConfig
    from offrl.ope.config import OPEConfig

    add_flags(p, Candidates, prefix="cand")
    add_flags(p, OPEConfig, prefix="ope")
    add_flags(p, BehaviorConfig, prefix="bc", only=("steps",))


def register(subparsers) -> None:
    from offrl.ope.config import OPE_ESTIMATORS

    p = subparsers.add_parser("ope", help="estimate policies' values from a dataset (off-policy evaluation)",
                              description="Estimate each policy's value on the logged dataset with importance sampling, doubly robust, FQE and model-based (--estimators model) estimators, with confidence intervals and effective sample sizes.")
    p.add_argument("policies", nargs="*", help="run folders (`offrl train --out`; one candidate per kept checkpoint), RUN@STEP, or exported policies (`offrl export`)")
    p.add_argument("--estimators", default=None, help=f"comma list from {','.join(OPE_ESTIMATORS)} (default: all)")
    _common(p)
    p.set_defaults(func=run_ope)
    s = subparsers.add_parser("select", help="pick the best of several runs without the environment",
                              description="Rank candidates by an off-policy estimate and pick the best: every kept checkpoint of each run (RUN@STEP; `offrl train --keep-checkpoints`), or a run's latest, or exported policies.")
    s.add_argument("policies", nargs="*", help="candidate run folders (one candidate per kept checkpoint), RUN@STEP, or exported policies")
    s.add_argument("--by", default="fqe", choices=OPE_ESTIMATORS, help="estimator that ranks the candidates (default fqe)")
    _common(s)
    s.set_defaults(func=run_select)


# ---------------------------------------------------------------------- shared
def _config(args, estimators):
    """The OPE settings of the flags; every range is checked by the config (one line, exit 2)."""
    from offrl.config import from_args
    from offrl.ope.behavior import BehaviorConfig
    from offrl.ope.config import OPEConfig

    return from_args(OPEConfig, args, prefix="ope", estimators=estimators,
                     behavior_cloning=from_args(BehaviorConfig, args, prefix="bc"))


def _outputs(cand, names):
    from pathlib import Path

    from offrl.errors import ConfigError

    if not cand.out:
        return {}
    out = Path(cand.out)
    paths = {n: out / n for n in names}
    existing = [p for p in paths.values() if p.exists()]
    if existing and not cand.overwrite:
        raise ConfigError(f"{existing[0]} already exists; pass --overwrite or choose another --out.")
    return paths


def _evaluate(args, estimators, command):
    from offrl.data import load
    from offrl.errors import OffrlError
    from offrl.ope.evaluate import evaluate_policies
    from offrl.ope.policies import load_policies

    from offrl.config import from_args

    if not args.policies:
        raise OffrlError(f"`offrl {command}` got no candidate policies; pass one or more run folders or export folders.")
    config = _config(args, estimators)
    cand = from_args(Candidates, args, prefix="cand")
    files = ["ope.json", "ope.csv", "ope.png"] + (["check.png"] if cand.check else [])
    paths = _outputs(cand, files)
    policies = load_policies(args.policies, std=config.target_std, seed=cand.seed)
    dataset = load(cand.dataset)
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("off-policy evaluation") as status:
        report = evaluate_policies(policies, dataset, config, progress=lambda text: status.update(text))
    truth = None
    if cand.check:
        from offrl.ope.check import true_values

        with console.status(f"--check: rolling out {len(policies)} policies x {cand.episodes} episodes"):
            truth = true_values(policies, cand.env, cand.episodes, config.discount)
    return report, truth, paths, dataset


def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)   # files and pipes get whole rows


def _fmt(v, digits=2):
    import math

    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def _print_report(report, truth, dataset, title):
    from rich.table import Table

    from offrl.ope.evaluate import Q_ESTIMATORS

    console = _console()
    diverged = report.diverged()
    seeds = int((report.fqe or {}).get("seeds", 1))
    table = Table(title=title)
    for col in ("policy", "estimator", "estimate", f"{report.config['confidence']:.0%} CI", "ESS", "max w", "flags"):
        table.add_column(col, justify="left" if col in ("policy", "estimator", "flags") else "right")
    if truth:
        table.add_column("true value", justify="right")
    for name in report.policies:
        for i, (est_name, r) in enumerate(report.results[name].items()):
            flags = []
            if r.estimated_behavior:
                flags.append("est. behaviour")
            if r.clipped:
                flags.append(f"clip {r.clip:g}")
            if r.num_episodes and r.ess == r.ess and r.ess < max(10.0, 0.01 * r.num_episodes):
                flags.append("ESS low")
            if est_name in Q_ESTIMATORS and name in diverged:
                flags.append(f"FQE diverged @{diverged[name]['step']}")
            if est_name in Q_ESTIMATORS and seeds > 1:
                flags.append(f"{seeds} FQE seeds")
            row = [name if i == 0 else "", est_name, _fmt(r.estimate), f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]",
                   _fmt(r.ess, 1), _fmt(r.max_weight_share, 3), ", ".join(flags)]
            if truth:
                row.append(_fmt(truth[name]["value"]) if i == 0 else "")
            table.add_row(*row)
    console.print(table)
    notes = ["ESS = effective number of episodes behind the weights; max w = the largest weight's share; "
             "ESS low = the importance weights rest on very few episodes (distrust IS-type estimates)."]
    notes += [f"{dataset.num_episodes} episodes, {len(dataset)} transitions; discount {report.config['discount']:g}; "
             f"{report.config['ci']} intervals."]
    if report.estimated_behavior:
        notes.append("The dataset has no logged action_log_probs: the behaviour policy was ESTIMATED by behaviour cloning, "
                     "so the importance-weighted estimates are approximate.")
    if report.fqe:
        f = report.fqe
        if f["converged"]:
            state = "flat" + (" (the diverged candidates left out)" if diverged else "")
        elif diverged and len(diverged) == len(report.policies):
            state = "diverged for every candidate"
        else:
            state = "NOT flat (it reached --fqe-steps; raise it or distrust fqe/dr/wdr)"
        notes.append(f"FQE: {state} after {f['final_step']} steps, {f['total_seconds']:.0f} s.")
        low, high = f["value_bounds"]
        rule = f["divergence_rule"]
        for name, d in diverged.items():
            why = (f"a seed's start-state estimate stayed outside the data's value range [{low:.4g}, {high:.4g}], by more "
                   f"than {rule['margin']:g} of its width, for a whole --fqe-window" if d["reason"] == "estimate"
                   else f"a seed's loss grew past {rule['loss_growth']:g}x its lowest earlier --fqe-window")
            notes.append(f"FQE diverged for {name} at step {d['step']} ({why}); its critics are frozen at step {d['frozen_at']} "
                         f"(estimate {d['estimate']:.4g}), so its fqe/dr/wdr rows are not to be used and select skips it.")
        rest = [n for n in f.get("outside_value_bounds", []) if n not in diverged]
        if rest:
            notes.append("FQE's estimate for " + ", ".join(rest) + " lies outside the range any policy's value can take on "
                         "this data, so its fqe/dr/wdr rows are not to be used.")
        if seeds > 1:
            notes.append(f"fqe/dr/wdr: the mean over {seeds} FQE seeds; each interval adds the seeds' Student-t half-width "
                         f"to the {report.config['ci']} interval over episodes in quadrature.")
    targets = sorted(set(report.target.values()))
    notes.append("Target policies: " + "; ".join(targets) + ".")
    for note in notes:
        console.print(note, soft_wrap=True)


def _print_check(report, truth):
    from rich.table import Table

    from offrl.ope.metrics import estimator_metrics

    true = [truth[p]["value"] for p in report.policies]
    table = Table(title=f"--check: estimators vs rolled-out discounted returns ({next(iter(truth.values()))['episodes']} episodes per policy)")
    for col in ("estimator", "abs error", "rel error", "Spearman", "regret@1"):
        table.add_column(col, justify="left" if col == "estimator" else "right")
    rows = {}
    for name in next(iter(report.results.values())):
        m = estimator_metrics(report.estimates(name), true)
        rows[name] = m
        table.add_row(name, _fmt(m["abs_error"]), _fmt(m["rel_error"], 3), _fmt(m["spearman"], 2), _fmt(m["regret@1"]))
    _console().print(table)
    return rows


def _write(report, truth, paths, extra=None):
    import csv
    import json

    from offrl.ope.plots import plot_check, plot_estimates

    if not paths:
        return
    paths["ope.json"].parent.mkdir(parents=True, exist_ok=True)
    payload = {**report.to_dict(), "truth": truth, **(extra or {})}
    paths["ope.json"].write_text(json.dumps(payload, indent=2, default=str))
    rows = report.table()
    with open(paths["ope.csv"], "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) + (["true_value"] if truth else []))
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, **({"true_value": truth[row["policy"]]["value"]} if truth else {})})
    plot_estimates(report, paths["ope.png"], truth)
    if truth and "check.png" in paths:
        plot_check(report, truth, paths["check.png"])
    for path in paths.values():
        print(path)


# ---------------------------------------------------------------------- commands
def run_ope(args) -> int:
    from offrl.ope.evaluate import parse_estimators

    report, truth, paths, dataset = _evaluate(args, parse_estimators(args.estimators), "ope")
    _print_report(report, truth, dataset, f"off-policy estimates on {args.cand__dataset}")
    metrics = _print_check(report, truth) if truth else None
    _write(report, truth, paths, {"check_metrics": metrics} if metrics else None)
    return 0


def run_select(args) -> int:
    from offrl.ope.select import choose, near_tie, selection_regret

    report, truth, paths, dataset = _evaluate(args, (args.by,), "select")
    _print_report(report, truth, dataset, f"candidates ranked by {args.by} on {args.cand__dataset}")
    from offrl.ope.select import excluded_message

    console = _console()
    left_out = excluded_message(report, args.by)
    if left_out:
        console.print(left_out, soft_wrap=True)
    choice = choose(report, args.by)
    r = report.results[choice][args.by]
    console.print(f"[bold]selected:[/bold] {choice} ({args.by} = {r.estimate:.2f}, CI [{r.ci_low:.2f}, {r.ci_high:.2f}])", soft_wrap=True)
    extra = {"selected": choice, "by": args.by, "excluded": left_out}
    tie = near_tie(report, args.by)
    if tie:
        console.print(tie, soft_wrap=True)
    extra["near_tie"] = tie
    if truth:
        regrets = selection_regret(report, args.by, truth)
        for rule, row in regrets.items():
            console.print(f"{rule}: {row['choice']} (true value {row['true_value']:.2f}, regret {row['regret']:.2f})", soft_wrap=True)
        extra["selection_regret"] = regrets
    _write(report, truth, paths, extra)
    return 0
