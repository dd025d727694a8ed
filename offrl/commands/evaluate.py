"""``offrl evaluate RUN``: roll a trained run's deterministic policy in its environment."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="evaluate a trained run in its environment",
                              description="Roll each seed's deterministic policy for --episodes episodes and report returns, normalized scores and the critic's Q at the start states.")
    p.add_argument("run", help="run folder written by `offrl train`")
    p.add_argument("--episodes", type=int, default=10, help="episodes per seed (default 10)")
    p.add_argument("--env", default=None, help="Gymnasium id (default: the run's)")
    p.add_argument("--eval-seed", type=int, default=20_000, help="seed of the first episode's reset (default 20000)")
    p.add_argument("--step", type=int, default=None, help="evaluate this kept checkpoint step (default: the latest)")
    p.add_argument("--selected", action="store_true", help="evaluate the checkpoint chosen by `offrl train --select-by` (RUN/selected.json)")
    p.add_argument("--target-return", default=None,
                   help="return-conditioned runs (e.g. dt): the target return in env units (default: the run's config)")
    p.add_argument("--target-returns", default=None,
                   help="return-conditioned runs (e.g. dt): comma-separated targets, e.g. --target-returns=-900,-300 (use = when the first is negative); plots achieved vs target into RUN/plots/")
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    from rich.console import Console
    from rich.table import Table

    from offrl.commands.export import chosen_step
    from offrl.engine import evaluate, load_run
    from offrl.envs import check_env_id

    check_env_id(args.env)
    if getattr(args, "target_returns", None) is not None:
        return _sweep(args)
    options = None
    if getattr(args, "target_return", None) is not None:
        from offrl.target_returns import check_return_conditioned, parse_target_returns

        options = {"target_return": parse_target_returns(args.target_return, "--target-return")[0]}
        check_return_conditioned(load_run(args.run, with_agent=False).algo)
    step = chosen_step(args)
    run_ = load_run(args.run, step=step) if step is not None else args.run
    result = evaluate(run_, episodes=args.episodes, env=args.env, eval_seed=args.eval_seed, policy_options=options)
    where = args.run if step is None else f"{args.run} at step {step}"
    table = Table(title=f"{where}: {result['episodes']} episodes per seed in {result['env']}")
    for title in ("seed", "return", "normalized score", "Q(s0, pi(s0))", "realised disc. return"):
        table.add_column(title, justify="right")
    fmt = lambda v: "-" if not math.isfinite(v) else f"{v:.2f}"  # noqa: E731
    for seed, row in enumerate(result["per_seed"]):
        table.add_row(str(seed), f"{row['eval/return']:.2f} ± {row['eval/return_std']:.2f}", fmt(row["eval/normalized_score"]),
                      fmt(row["eval/q_estimate"]), fmt(row["eval/discounted_return"]))
    mean, std = result["normalized_score"]
    rmean, rstd = result["return"]
    table.add_row("mean ± std", f"{rmean:.2f} ± {rstd:.2f}", "-" if not math.isfinite(mean) else f"{mean:.2f} ± {std:.2f}", "", "", style="bold")
    Console().print(table)
    first = result["per_seed"][0]
    if "eval/planning_ms_per_step" in first:     # planners: TT, Diffuser, IDQL
        envs = len(result["per_seed"]) * result["episodes"]
        Console().print(f"planning: {first['eval/planning_ms_per_step']:.1f} ms per env step for {envs} envs planned together "
                        f"({first['eval/planning_ms_per_action']:.2f} ms per action)")
    return 0


def _sweep(args) -> int:
    import json
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from offrl.target_returns import parse_target_returns, plot_target_returns, target_return_sweep

    targets = parse_target_returns(args.target_returns)
    rows = target_return_sweep(args.run, targets, episodes=args.episodes, env=args.env, eval_seed=args.eval_seed)
    plots = Path(args.run) / "plots"
    figure = plot_target_returns(rows, plots / "target_returns.png")
    (plots / "target_returns.json").write_text(json.dumps(rows, indent=2))
    table = Table(title=f"{args.run}: achieved vs target return, {args.episodes} episodes per seed in {rows[0]['env']}")
    for title in ("target", "achieved return", "normalized score"):
        table.add_column(title, justify="right")
    for row in rows:
        (r, rs), (sc, ss) = row["return"], row["normalized_score"]
        table.add_row(f"{row['target']:.1f}", f"{r:.2f} ± {rs:.2f}", "-" if sc != sc else f"{sc:.2f} ± {ss:.2f}")
    Console().print(table)
    Console().print(f"plot: {figure}")
    return 0
