"""``offrl sweep``: a hyperparameter grid x seeds, traced fields in one vmapped program (see offrl.sweeps).

Run flags come from :class:`offrl.settings.RunSettings` (defaults: :func:`offrl.sweeps.sweep`'s),
the sweep's own from :class:`SweepOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from offrl.config import POSITIVE_INT, OneOf, OrNone, check_config, param

#: the RunSettings fields that are flags of ``offrl sweep``.
SWEEP_SETTINGS = ("steps", "seeds", "seed", "eval_every", "eval_episodes", "log_every", "env", "out", "devices", "progress")


@dataclass(frozen=True)
class SweepOptions:
    """How the grid is searched and where its programs run.

    traced: comma-separated grid fields to trace in one program (default: every traceable grid field); a field
      the algorithm cannot trace is an error.
    backend: local: programs one after another here; ray: one Ray Tune trial per configuration (needs offrl[sweep]).
    address: Ray cluster to join (HOST:PORT or auto; default: start Ray on this machine).
    search: Ray search: every grid point, or --num-samples draws (random/optuna; FIELD=LOW:HIGH[:log] ranges allowed).
    scheduler: Ray scheduler; asha stops poor trials early on the evaluation score.
    num_samples: trials drawn by --search random/optuna.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    traced: str | None = None
    backend: str = param("local", OneOf(("local", "ray")))
    address: str | None = None
    search: str = param("grid", OneOf(("grid", "random", "optuna")))
    scheduler: str | None = param(None, OrNone(OneOf(("fifo", "asha"))))
    num_samples: int = param(10, POSITIVE_INT)

    def __post_init__(self) -> None:
        check_config(self)


def sweep_defaults() -> dict:
    """The defaults of :func:`offrl.sweeps.sweep` for the shared run flags."""
    import inspect

    from offrl.sweeps.local import sweep

    parameters = inspect.signature(sweep).parameters
    return {name: parameters[name].default for name in SWEEP_SETTINGS if name in parameters}


def register(subparsers) -> None:
    from offrl.commands.train import algo_help
    from offrl.config import add_flags
    from offrl.settings import RunSettings

    p = subparsers.add_parser(
        "sweep", help="train a hyperparameter grid x seeds as vmapped compiled programs",
        description="Train every configuration of the --grid with --seeds seeds. Fields an algorithm can trace "
                    "(e.g. IQL's expectile, awr_inverse_temperature, discount, tau) train together in ONE vmapped program; "
                    "shape-changing fields (hidden_dims, batch_size) and optimiser settings split into separate programs. "
                    "Writes one run folder per configuration (usable by offrl evaluate/plot/export), sweep.json, sweep.csv "
                    "and, for a 2-D grid, heatmap.png to --out.")
    p.add_argument("--algo", default="iql", help=algo_help("iql"))
    p.add_argument("--dataset", required=True, help="registry name or path of the dataset")
    p.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                   help="a config field and its values (repeatable); values of tuple fields are separated by ';' (hidden_dims=64,64;256,256)")
    add_flags(p, RunSettings, prefix="run", only=SWEEP_SETTINGS, defaults=sweep_defaults(),
              shown={"out": "sweeps/<algo>-<dataset>", "devices": "one device"})
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="fixed config override for every configuration (repeatable)")
    add_flags(p, SweepOptions, prefix="sweep")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from offrl.commands.train import parse_set
    from offrl.config import from_args
    from offrl.envs import check_env_id
    from offrl.errors import ConfigError
    from offrl.settings import RunSettings
    from offrl.sweeps import sweep

    settings = from_args(RunSettings, args, prefix="run")
    options = from_args(SweepOptions, args, prefix="sweep")
    if settings.devices == "auto":
        raise ConfigError("--devices auto is not available for offrl sweep; pass a number of devices, e.g. --devices 2.")
    check_env_id(settings.env)
    out = settings.out or f"sweeps/{args.algo}-{Path(str(args.dataset)).stem}"
    traced = None if options.traced is None else [f for f in options.traced.split(",") if f.strip()]
    result = sweep(algo=args.algo, dataset=args.dataset, grid=args.grid, seeds=settings.seeds, steps=settings.steps,
                   seed=settings.seed, eval_every=settings.eval_every, eval_episodes=settings.eval_episodes, out=out,
                   config_overrides=parse_set(args.set), env=settings.env, traced=traced, log_every=settings.log_every,
                   devices=settings.devices, progress=settings.progress, backend=options.backend, address=options.address,
                   search=options.search, scheduler=options.scheduler, num_samples=options.num_samples)
    result.print_table()
    return 0
