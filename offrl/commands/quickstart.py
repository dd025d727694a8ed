"""``offrl quickstart``: the main job on a bundled dataset (doctor -> BC / IQL / CQL -> evaluation -> report)."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "quickstart", help="run the main job on a bundled dataset: doctor, BC vs offline RL, evaluation, report",
        description="Inspect a bundled suboptimal dataset, train BC and IQL (optionally CQL) on it, evaluate them in the "
                    "environment and write a report folder (summary.md, learning curves, Q-vs-return, doctor plots). "
                    "A few minutes on a CPU.")
    parser.add_argument("--dataset", default=None, help="registered name or path (default: pendulum-medium-expert-v0, bundled)")
    parser.add_argument("--out", default="offrl-quickstart", help="report folder (default ./offrl-quickstart)")
    parser.add_argument("--algos", default="bc,iql", help="comma-separated algorithms (default bc,iql; add cql for CQL, several minutes more on 2 CPU cores)")
    parser.add_argument("--steps", type=int, default=None, help="updates per algorithm (default: bc 3000, iql 6000, cql 6000)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per algorithm, trained together with vmap (default 2)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="evaluation episodes per seed (default 10)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.set_defaults(func=run)


def run(args) -> int:
    from offrl.errors import ConfigError
    from offrl.quickstart import DEFAULT_DATASET, run_quickstart

    algos = tuple(a.strip().lower() for a in args.algos.split(",") if a.strip())
    if not algos:
        raise ConfigError("--algos is empty; pass e.g. --algos bc,iql,cql.")
    from offrl.algos import get_algorithm

    for algo in algos:
        get_algorithm(algo)
    if args.seeds < 1 or args.eval_episodes < 1 or (args.steps is not None and args.steps < 1):
        raise ConfigError("--seeds, --eval-episodes and --steps must be positive integers.")
    run_quickstart(dataset=args.dataset or DEFAULT_DATASET, out=args.out, algos=algos, steps=args.steps,
                   seeds=args.seeds, eval_episodes=args.eval_episodes, progress=not args.quiet)
    return 0
