"""``offrl sweep``: a hyperparameter grid x seeds, traced fields in one vmapped program (see offrl.sweeps)."""

from __future__ import annotations

from offrl.commands.train import ALGORITHM_CHOICES, parse_set


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="train a hyperparameter grid x seeds as vmapped compiled programs",
        description="Train every configuration of the --grid with --seeds seeds. Fields an algorithm can trace "
                    "(e.g. IQL's expectile, awr_inverse_temperature, discount, tau) train together in ONE vmapped program; "
                    "shape-changing fields (hidden_dims, batch_size) and optimiser settings split into separate programs. "
                    "Writes one run folder per configuration (usable by offrl evaluate/plot/export), sweep.json, sweep.csv "
                    "and, for a 2-D grid, heatmap.png to --out.")
    p.add_argument("--algo", default="iql", help=f"algorithm: {', '.join(ALGORITHM_CHOICES)} (default iql)")
    p.add_argument("--dataset", required=True, help="registry name or path of the dataset")
    p.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                   help="a config field and its values (repeatable); values of tuple fields are separated by ';' (hidden_dims=64,64;256,256)")
    p.add_argument("--traced", default=None, metavar="FIELD,...",
                   help="grid fields to trace in one program (default: every traceable grid field); a field the algorithm cannot trace is an error")
    p.add_argument("--seeds", type=int, default=3, help="seeds per configuration (default 3)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--steps", type=int, default=100_000, help="gradient steps (default 100000)")
    p.add_argument("--eval-every", type=int, default=10_000, help="steps between evaluations (default 10000)")
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation and member (default 10; 0 = none)")
    p.add_argument("--log-every", type=int, default=1000, help="steps per scanned chunk / metrics row (default 1000)")
    p.add_argument("--env", default=None, help="Gymnasium id for evaluation (default: the dataset's env_id)")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="fixed config override for every configuration (repeatable)")
    p.add_argument("--devices", type=int, default=None, help="shard the members over this many devices (default: one)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local: programs one after another here (default); ray: one Ray Tune trial per configuration (needs offrl[sweep])")
    p.add_argument("--address", default=None, help="Ray cluster to join (HOST:PORT or auto; default: start Ray on this machine)")
    p.add_argument("--search", choices=("grid", "random", "optuna"), default="grid",
                   help="Ray search: every grid point, or --num-samples draws (random/optuna; FIELD=LOW:HIGH[:log] ranges allowed)")
    p.add_argument("--scheduler", choices=("fifo", "asha"), default=None, help="Ray scheduler; asha stops poor trials early on the evaluation score")
    p.add_argument("--num-samples", type=int, default=10, help="trials drawn by --search random/optuna (default 10)")
    p.add_argument("--out", default=None, help="sweep folder (default sweeps/<algo>-<dataset>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from offrl.envs import check_env_id
    from offrl.sweeps import sweep

    check_env_id(args.env)
    out = args.out or f"sweeps/{args.algo}-{Path(str(args.dataset)).stem}"
    traced = None if args.traced is None else [f for f in args.traced.split(",") if f.strip()]
    result = sweep(algo=args.algo, dataset=args.dataset, grid=args.grid, seeds=args.seeds, steps=args.steps, seed=args.seed,
                   eval_every=args.eval_every, eval_episodes=args.eval_episodes, out=out,
                   config_overrides=parse_set(args.set), env=args.env, traced=traced, log_every=args.log_every,
                   devices=args.devices, progress=not args.no_progress, backend=args.backend, address=args.address,
                   search=args.search, scheduler=args.scheduler, num_samples=args.num_samples)
    result.print_table()
    return 0
