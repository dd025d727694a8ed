"""``offrl benchmark``: train and evaluate every (env, tier, algorithm) cell; a resumable table."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "benchmark", help="train every (env, tier, algorithm) cell and write a table of normalized scores",
        description="Train each algorithm on each env's tier datasets (seeds vmapped), evaluate, and write results.md, "
                    "results.csv and learning-curve / Q-vs-return grids to --out. Finished cells are kept: rerun the same "
                    "command to resume after an interruption.")
    p.add_argument("--envs", required=True, help="comma-separated: hopper, halfcheetah, walker2d, pendulum or Gymnasium ids")
    p.add_argument("--tiers", default="medium,medium-replay,medium-expert", help="comma-separated tiers (default medium,medium-replay,medium-expert)")
    p.add_argument("--algos", default="bc,td3_bc,iql,cql", help="comma-separated algorithms (default bc,td3_bc,iql,cql)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per cell, trained together with vmap (default 3)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--budget", default="cpu", help="cpu (30k updates, eval every 5k) or full (1M, the papers'; for a GPU)")
    p.add_argument("--steps", type=int, default=None, help="updates per cell (default: the budget's)")
    p.add_argument("--eval-every", type=int, default=None, help="updates between evaluations (default: the budget's)")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per evaluation and seed (default: the budget's, 10)")
    p.add_argument("--dataset-pattern", default="{env}-{tier}-v0", help="registered dataset name of a cell (default {env}-{tier}-v0)")
    p.add_argument("--set", action="append", metavar="ALGO.FIELD=VALUE", help="config override for one algorithm (repeatable), e.g. --set iql.expectile=0.8")
    p.add_argument("--peer", default=None, choices=None, metavar="d3rlpy",
                   help="also train every cell with this library (same data, updates, seeds, evaluation) and tabulate both")
    p.add_argument("--peer-python", default=None, metavar="PATH",
                   help="the Python of a virtualenv with the peer installed (default: $OFFRL_PEER_PYTHON)")
    p.add_argument("--out", default="bench", help="benchmark folder (default ./bench)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from offrl.benchmark import run_benchmark
    from offrl.commands.train import parse_set

    cells = run_benchmark(args.envs, args.tiers, args.algos, seeds=args.seeds, steps=args.steps, eval_every=args.eval_every,
                          eval_episodes=args.eval_episodes, budget=args.budget, out=args.out, seed=args.seed,
                          dataset_pattern=args.dataset_pattern, overrides=parse_set(args.set), progress=not args.quiet,
                          peer=args.peer, peer_python=args.peer_python)
    print((Path(args.out) / "results.md").read_text())
    print(f"{len(cells)} cells; table in {args.out}/results.md and results.csv")
    return 0
