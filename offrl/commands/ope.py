"""``offrl ope`` and ``offrl select``: off-policy evaluation and policy choice from a dataset alone."""

from __future__ import annotations


def _common(p) -> None:
    p.add_argument("--dataset", required=True, help="registry name or path of the logged dataset")
    p.add_argument("--discount", type=float, default=0.99, help="discount of the estimated value (default 0.99; 1 = undiscounted return over the data's episodes)")
    p.add_argument("--behavior", default="auto", choices=["auto", "logged", "estimated"],
                   help="behaviour log-probs: the dataset's infos/action_log_probs (logged), behaviour cloning (estimated), or logged when present (auto)")
    p.add_argument("--target-std", type=float, default=0.1, help="Gaussian std around deterministic policies' actions for importance weights, in [-1, 1] action units (default 0.1)")
    p.add_argument("--clip", type=float, default=2.0, help="per-step ratio clip of clipped_is (default 2)")
    p.add_argument("--ci", default="bootstrap", choices=["bootstrap", "t", "hoeffding"], help="interval method (default bootstrap percentile)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--fqe-steps", type=int, default=20_000, help="FQE gradient steps (default 20000)")
    p.add_argument("--bc-steps", type=int, default=5000, help="behaviour-cloning steps when the behaviour policy is estimated (default 5000)")
    p.add_argument("--fqe-seeds", type=int, default=1, help="FQE seeds averaged per policy (default 1)")
    p.add_argument("--seed", type=int, default=0, help="which trained seed of each run to evaluate (default 0)")
    p.add_argument("--out", default=None, help="folder for ope.json, ope.csv and the plots (default: print only)")
    p.add_argument("--overwrite", action="store_true", help="replace existing files in --out")
    p.add_argument("--check", action="store_true", help="also roll the policies out in their environment and score the estimators")
    p.add_argument("--env", default=None, help="Gymnasium id for --check (default: each policy's own)")
    p.add_argument("--episodes", type=int, default=10, help="--check rollouts per policy (default 10)")


def register(subparsers) -> None:
    p = subparsers.add_parser("ope", help="estimate policies' values from a dataset (off-policy evaluation)",
                              description="Estimate each policy's value on the logged dataset with importance sampling, doubly robust and FQE estimators, with confidence intervals and effective sample sizes.")
    p.add_argument("policies", nargs="*", help="run folders (`offrl train --out`) or exported policies (`offrl export`)")
    p.add_argument("--estimators", default=None, help="comma list from fqe,dr,wdr,is,pdis,wis,wpdis,clipped_is (default: all)")
    _common(p)
    p.set_defaults(func=run_ope)
    s = subparsers.add_parser("select", help="pick the best of several runs without the environment",
                              description="Rank candidate runs (each run's latest checkpoint) or exported policies by an off-policy estimate and pick the best.")
    s.add_argument("policies", nargs="*", help="candidate run folders or exported policies")
    s.add_argument("--by", default="fqe", choices=["fqe", "dr", "wdr", "wis", "wpdis", "pdis", "is", "clipped_is"], help="estimator that ranks the candidates (default fqe)")
    _common(s)
    s.set_defaults(func=run_select)


# ---------------------------------------------------------------------- shared
def _config(args, estimators):
    from offrl.errors import ConfigError
    from offrl.ope.behavior import BehaviorConfig
    from offrl.ope.evaluate import OPEConfig

    for flag, value, ok, fix in (("--discount", args.discount, 0 < args.discount <= 1, "a value in (0, 1]"),
                                 ("--confidence", args.confidence, 0 < args.confidence < 1, "a value in (0, 1), e.g. 0.95"),
                                 ("--target-std", args.target_std, args.target_std > 0, "a positive std, e.g. 0.1"),
                                 ("--clip", args.clip, args.clip > 0, "a positive ratio bound, e.g. 2"),
                                 ("--bootstrap", args.bootstrap, args.bootstrap >= 10, "at least 10 resamples"),
                                 ("--fqe-steps", args.fqe_steps, args.fqe_steps >= 1, "a positive number of steps"),
                                 ("--fqe-seeds", args.fqe_seeds, args.fqe_seeds >= 1, "at least 1"),
                                 ("--bc-steps", args.bc_steps, args.bc_steps >= 1, "a positive number of steps"),
                                 ("--episodes", args.episodes, args.episodes >= 1, "at least 1")):
        if not ok:
            raise ConfigError(f"{flag} {value} is out of range; use {fix}.")
    return OPEConfig(estimators=estimators, discount=args.discount, behavior=args.behavior, target_std=args.target_std,
                     clip=args.clip, ci=args.ci, confidence=args.confidence, num_bootstrap=args.bootstrap,
                     fqe_steps=args.fqe_steps, fqe_seeds=args.fqe_seeds, behavior_cloning=BehaviorConfig(steps=args.bc_steps))


def _outputs(args, names):
    from pathlib import Path

    from offrl.errors import ConfigError

    if not args.out:
        return {}
    out = Path(args.out)
    paths = {n: out / n for n in names}
    existing = [p for p in paths.values() if p.exists()]
    if existing and not args.overwrite:
        raise ConfigError(f"{existing[0]} already exists; pass --overwrite or choose another --out.")
    return paths


def _evaluate(args, estimators, command):
    from offrl.data import load
    from offrl.errors import OffrlError
    from offrl.ope.evaluate import evaluate_policies
    from offrl.ope.policies import load_policy

    if not args.policies:
        raise OffrlError(f"`offrl {command}` got no candidate policies; pass one or more run folders or export folders.")
    config = _config(args, estimators)
    files = ["ope.json", "ope.csv", "ope.png"] + (["check.png"] if args.check else [])
    paths = _outputs(args, files)
    policies = [load_policy(path, std=args.target_std, seed=args.seed) for path in args.policies]
    dataset = load(args.dataset)
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("off-policy evaluation") as status:
        report = evaluate_policies(policies, dataset, config, progress=lambda text: status.update(text))
    truth = None
    if args.check:
        from offrl.ope.check import true_values

        with console.status(f"--check: rolling out {len(policies)} policies x {args.episodes} episodes"):
            truth = true_values(policies, args.env, args.episodes, args.discount)
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

    console = _console()
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
    _print_report(report, truth, dataset, f"off-policy estimates on {args.dataset}")
    metrics = _print_check(report, truth) if truth else None
    _write(report, truth, paths, {"check_metrics": metrics} if metrics else None)
    return 0


def run_select(args) -> int:
    from offrl.ope.select import choose, selection_regret

    report, truth, paths, dataset = _evaluate(args, (args.by,), "select")
    _print_report(report, truth, dataset, f"candidates ranked by {args.by} on {args.dataset}")
    choice = choose(report, args.by)
    r = report.results[choice][args.by]
    console = _console()
    console.print(f"[bold]selected:[/bold] {choice} ({args.by} = {r.estimate:.2f}, CI [{r.ci_low:.2f}, {r.ci_high:.2f}])", soft_wrap=True)
    extra = {"selected": choice, "by": args.by}
    if truth:
        regrets = selection_regret(report, args.by, truth)
        for rule, row in regrets.items():
            console.print(f"{rule}: {row['choice']} (true value {row['true_value']:.2f}, regret {row['regret']:.2f})", soft_wrap=True)
        extra["selection_regret"] = regrets
    _write(report, truth, paths, extra)
    return 0
