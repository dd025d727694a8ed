"""``offrl benchmark``: train and evaluate every (env, tier, algorithm) cell; a resumable table.

The run flags come from :class:`offrl.settings.RunSettings` with the defaults of
:func:`offrl.benchmark.run_benchmark` (unset steps and intervals: the ``--budget``'s).
"""

from __future__ import annotations

from pathlib import Path

#: the RunSettings fields that are flags of ``offrl benchmark``.
BENCHMARK_SETTINGS = ("seeds", "seed", "steps", "eval_every", "eval_episodes", "out", "progress")


def benchmark_defaults() -> dict:
    """The defaults of :func:`offrl.benchmark.run_benchmark` for the shared run flags."""
    import inspect

    from offrl.benchmark import run_benchmark

    parameters = inspect.signature(run_benchmark).parameters
    return {name: parameters[name].default for name in BENCHMARK_SETTINGS if name in parameters}


def _budget_help(name: str, budget: dict) -> str:
    """One budget for --help: its updates, each algorithm's own updates and settings, the evaluation interval."""
    parts = [f"{name}: {budget['steps']} updates"]
    for algo, entry in budget.get("algos", {}).items():
        settings = ", ".join(f"{k}={x}" for k, x in entry.get("set", {}).items())
        parts.append(f"{algo} {entry['steps']}" + (f" with {settings}" if settings else ""))
    return ", ".join(parts + [f"eval every {budget['eval_every']}"])


def register(subparsers) -> None:
    import argparse

    from offrl.benchmark import BUDGETS
    from offrl.config import add_flags
    from offrl.data.doctor.tier import TIERS
    from offrl.settings import RunSettings

    p = subparsers.add_parser(
        "benchmark", help="train every (env, tier, algorithm) cell and write a table of normalized scores",
        description="Train each algorithm on each env's tier datasets (seeds vmapped), evaluate, and write results.md, "
                    "results.csv and learning-curve / Q-vs-return grids to --out. Finished cells are kept: rerun the same "
                    "command to resume after an interruption.")
    p.add_argument("--envs", required=True, help="comma-separated: hopper, halfcheetah, walker2d, pendulum or Gymnasium ids")
    p.add_argument("--tiers", default="medium,medium-replay,medium-expert",
                   help=f"comma-separated tiers of {', '.join(TIERS)} (default medium,medium-replay,medium-expert)")
    p.add_argument("--algos", default="bc,td3_bc,iql,cql", help="comma-separated algorithms (default bc,td3_bc,iql,cql)")
    p.add_argument("--budget", default="cpu", help="; ".join(_budget_help(name, b) for name, b in BUDGETS.items())
                   + " (default cpu, sized for about 6 hours of a 2-core CPU for the 54-cell MuJoCo table; "
                     "full is the papers', for a GPU)")
    add_flags(p, RunSettings, prefix="run", only=BENCHMARK_SETTINGS, defaults=benchmark_defaults(),
              shown={"steps": "the budget's", "eval_every": "the budget's", "eval_episodes": "the budget's"})
    p.add_argument("--quiet", dest="run__progress", action="store_false", help=argparse.SUPPRESS)  # old name of --no-progress
    p.add_argument("--dataset-pattern", default="{env}-{tier}-v0", help="registered dataset name of a cell (default {env}-{tier}-v0)")
    p.add_argument("--set", action="append", metavar="ALGO.FIELD=VALUE", help="config override for one algorithm (repeatable), e.g. --set iql.expectile=0.8")
    p.add_argument("--peer", default=None, metavar="d3rlpy",
                   help="also train every cell with this library (same data, updates, seeds, evaluation) and tabulate both")
    p.add_argument("--peer-python", default=None, metavar="PATH",
                   help="the Python of a virtualenv with the peer installed (default: $OFFRL_PEER_PYTHON)")
    p.set_defaults(func=run)


def run(args) -> int:
    from offrl.benchmark import run_benchmark
    from offrl.commands.train import parse_set
    from offrl.config import flag_values

    from offrl.settings import RunSettings

    run = flag_values(RunSettings, args, prefix="run")   # unset steps / intervals: the budget's (checked in make_spec)
    cells = run_benchmark(args.envs, args.tiers, args.algos, budget=args.budget, dataset_pattern=args.dataset_pattern,
                          overrides=parse_set(args.set), peer=args.peer, peer_python=args.peer_python, **run)
    print((Path(run["out"]) / "results.md").read_text())
    print(f"{len(cells)} cells; table in {run['out']}/results.md and results.csv")
    return 0
