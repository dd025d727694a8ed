"""``offrl train``: train an offline RL algorithm on a dataset (see offrl.engine.train)."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ALGORITHM_CHOICES = ("bc", "td3", "td3_bc", "iql", "cql", "cal_ql", "awac", "bcq", "dt", "tt", "diffuser",
                     "discrete_bc", "dqn", "double_dqn", "discrete_cql", "discrete_bcq", "discrete_iql")


def config_field_names() -> list[str]:
    """Config fields of every algorithm file, read with ``ast`` so ``--help`` stays JAX-free."""
    names: list[str] = []
    folder = Path(__file__).resolve().parent.parent / "algos"
    for path in sorted(folder.glob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "Config":
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id not in names:
                        names.append(item.target.id)
    return names


def unknown_config_flag_message(algo: str, flag: str) -> str:
    """One sentence for a ``--config.FIELD`` that no algorithm has (argparse alone would only say
    "unrecognized arguments"): the flag, then the config layer's own unknown-field message."""
    from offrl.algos import get_algorithm
    from offrl.algos.common import apply_overrides
    from offrl.errors import ConfigError

    flag = flag.split("=", 1)[0]
    try:
        apply_overrides(get_algorithm(algo).Config(), {flag[len("--config."):]: ""})
    except ConfigError as exc:
        return f"{flag}: {exc}"
    return f"{flag} is not a config field of --algo {algo}."


def parse_set(values: list[str] | None) -> dict[str, str]:
    from offrl.errors import ConfigError

    out = {}
    for item in values or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} is not of the form FIELD=VALUE; e.g. --set expectile=0.8.")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train an offline RL algorithm on a dataset",
                              description="Train an offline RL algorithm; writes config.json, metrics.jsonl/csv, checkpoints/ and plots/ to --out.")
    p.add_argument("--algo", default="iql", help=f"algorithm: {', '.join(ALGORITHM_CHOICES)} (default iql)")
    p.add_argument("--dataset", help="registry name or path of the dataset (.hdf5/.npz/minari folder)")
    p.add_argument("--env", default=None, help="Gymnasium id for evaluation (default: the dataset's env_id)")
    p.add_argument("--steps", type=int, default=100_000, help="gradient steps (default 100000)")
    p.add_argument("--seeds", type=int, default=1, help="independent seeds trained together with vmap (default 1)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--eval-every", type=int, default=10_000, help="steps between evaluations (default 10000)")
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation and seed (default 10; 0 = none)")
    p.add_argument("--log-every", type=int, default=1000, help="steps per scanned chunk / metrics row (default 1000)")
    p.add_argument("--out", default=None, help="run folder (default runs/<algo>-<dataset>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a config field (repeatable), e.g. --set expectile=0.8; --config.expectile 0.8 works too")
    p.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard (needs tensorboardX)")
    p.add_argument("--wandb", action="store_true", help="also log to Weights & Biases (needs wandb)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep the checkpoint of every evaluation step (default: the latest only); `offrl select RUN` then ranks them all")
    p.add_argument("--select-by", default=None, metavar="ESTIMATOR", help="after training, pick the checkpoint with the best off-policy estimate (fqe, dr, wis, ...) on the run's dataset and write RUN/selected.json; implies --keep-checkpoints")
    p.add_argument("--devices", default=None, metavar="N|auto", help="shard the seeds (one seed: the batch axis) over N devices, data replicated; auto: as many as divide it (default: one device)")
    for name in config_field_names():  # --config.FIELD VALUE, hidden from --help (same as --set)
        p.add_argument(f"--config.{name}", dest=f"config__{name}", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args) -> int:
    from offrl.engine import train
    from offrl.errors import ConfigError

    from offrl.envs import check_env_id

    if not args.dataset and not args.resume:
        raise ConfigError("offrl train needs --dataset NAME|PATH (or --resume with --out).")
    check_env_id(args.env)
    select_by = getattr(args, "select_by", None)
    if select_by is not None:
        from offrl.ope.evaluate import OPE_ESTIMATORS

        if select_by not in OPE_ESTIMATORS:
            raise ConfigError(f"--select-by {select_by!r} is not an estimator; choose one of {', '.join(OPE_ESTIMATORS)} (e.g. fqe).")
    overrides = parse_set(args.set)
    overrides.update({k[len("config__"):]: v for k, v in vars(args).items() if k.startswith("config__")})
    dataset = args.dataset
    out = args.out or f"runs/{args.algo}-{Path(str(dataset)).stem if dataset else 'run'}"
    if args.resume and not dataset:
        import json

        record = json.loads((Path(out) / "config.json").read_text()) if (Path(out) / "config.json").exists() else {}
        dataset = record.get("settings", {}).get("dataset")
        if not dataset:
            raise ConfigError(f"--resume: cannot find the dataset of {out}; pass --dataset.")
    run_ = train(algo=args.algo, dataset=dataset, steps=args.steps, seeds=args.seeds, seed=args.seed,
                 eval_every=args.eval_every, eval_episodes=args.eval_episodes, out=out, config_overrides=overrides,
                 env=args.env, resume=args.resume, log_every=args.log_every, tensorboard=args.tensorboard,
                 wandb=args.wandb, progress=not args.no_progress, devices=args.devices,
                 keep_checkpoints=args.keep_checkpoints or select_by is not None)
    print_run_table(run_)
    if select_by is not None:
        print_selection(run_, select_by)
    return 0


def print_selection(run_, by: str) -> None:
    """Rank the run's kept checkpoints by ``by`` on its own dataset; write and report selected.json."""
    from offrl.ope.evaluate import OPEConfig
    from offrl.ope.select import SELECTED, select_checkpoint

    record = select_checkpoint(run_.path, by, config=OPEConfig(discount=getattr(run_.config, "discount", 0.99)))
    print(f"selected: step {record['step']} of {len(record['candidates'])} checkpoints by {by} = {record['estimate']:.2f} "
          f"(CI [{record['ci_low']:.2f}, {record['ci_high']:.2f}]{', estimated behaviour' if record['estimated_behavior'] else ''})"
          f" -> {run_.path / SELECTED}")


def print_run_table(run_) -> None:
    """The last evaluation per seed and mean ± std, as a rich table."""
    import math

    import numpy as np
    from rich.console import Console
    from rich.table import Table

    console = Console()
    evals = {}
    for row in run_.evaluations():
        evals[row["seed"]] = row
    table = Table(title=f"{run_.algo} on {run_.settings.get('dataset')}: step {run_.step} -> {run_.path}")
    columns = [("seed", None), ("return", "eval/return"), ("normalized score", "eval/normalized_score"),
               ("Q(s0, pi(s0))", "eval/q_estimate"), ("realised disc. return", "eval/discounted_return"),
               ("Q / return", "eval/q_ratio")]
    for title, _ in columns:
        table.add_column(title, justify="right")
    fmt = lambda v: "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.2f}"  # noqa: E731
    for seed in sorted(evals):
        table.add_row(str(seed), *(fmt(evals[seed].get(key)) for _, key in columns[1:]))
    if len(evals) > 1:
        cells = []
        for _, key in columns[1:]:
            values = np.array([evals[s].get(key, float("nan")) for s in evals], dtype=float)
            cells.append("-" if not np.isfinite(values).all() else f"{values.mean():.2f} ± {values.std():.2f}")
        table.add_row("mean ± std", *cells, style="bold")
    if not evals:
        last = [r for r in run_.metrics if r["step"] == run_.step]
        console.print(f"[bold]{run_.algo}[/]: trained to step {run_.step} (no evaluation env); run folder {run_.path}")
        if last:
            console.print({k: round(v, 4) for k, v in last[0].items() if isinstance(v, float)})
        return
    console.print(table)
