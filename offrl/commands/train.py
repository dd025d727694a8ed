"""``offrl train``: train an offline RL algorithm on a dataset (see offrl.engine.train).

The run flags are generated from :class:`offrl.settings.RunSettings`; the algorithm's own
fields are set with ``--set FIELD=VALUE`` (or ``--config.FIELD VALUE``) and listed, with
defaults and valid values, by ``offrl train --algo NAME --list-fields``.
"""

from __future__ import annotations

from pathlib import Path

#: the RunSettings fields that are flags of ``offrl train`` (all of them).
TRAIN_SETTINGS = ("steps", "seeds", "seed", "eval_every", "eval_episodes", "log_every", "env", "out", "resume",
                  "progress", "devices", "tensorboard", "wandb", "keep_checkpoints")


def algo_help(default: str) -> str:
    """``--algo``'s help: the registry's names (no algorithm module is imported)."""
    from offrl.algos import ALGORITHM_NAMES

    return f"algorithm: {', '.join(ALGORITHM_NAMES)} (default {default}; offrl train --algo NAME --list-fields shows its config)"


def known_fields(config_cls) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(config_cls)} | set(getattr(config_cls, "RENAMED", {}))


def config_overrides(algo: str, set_items: list[str] | None, config_flags) -> dict[str, str]:
    """``{field: text}`` of ``--set`` and ``--config.FIELD VALUE``; an unknown ``--config`` field or a
    missing value is one sentence naming the flag (the algorithm is imported here)."""
    from offrl.algos import get_algorithm
    from offrl.algos.common import apply_overrides
    from offrl.errors import ConfigError

    overrides = parse_set(set_items)
    config_cls = get_algorithm(algo).Config
    for flag, value in config_flags or ():
        name = flag[len("--config."):]
        if name.replace("-", "_") not in known_fields(config_cls):
            try:
                apply_overrides(config_cls(), {name: ""})
            except ConfigError as exc:
                raise ConfigError(f"{flag}: {exc}") from None
        if value is None:
            raise ConfigError(f"{flag} needs a value, e.g. {flag} {_example_value(config_cls, name)}.")
        overrides[name] = value
    return overrides


def _example_value(config_cls, name: str) -> str:
    import dataclasses

    default = next((f.default for f in dataclasses.fields(config_cls) if f.name == name.replace("-", "_")), None)
    return ",".join(map(str, default)) if isinstance(default, tuple) else str(default)


def parse_set(values: list[str] | None) -> dict[str, str]:
    from offrl.errors import ConfigError

    out = {}
    for item in values or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} is not of the form FIELD=VALUE; e.g. --set expectile=0.8.")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def config_table(algo: str) -> list[tuple[str, str, str]]:
    """``(field, default, valid values)`` for every config field of ``algo``."""
    import dataclasses

    from offrl.algos import get_algorithm
    from offrl.config import VALID

    rows = []
    for f in dataclasses.fields(get_algorithm(algo).Config):
        default = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else str(f.default)
        rows.append((f.name, default, str(f.metadata.get(VALID, "any value"))))
    return rows


def print_config_table(algo: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"config fields of --algo {algo} (set with --set FIELD=VALUE)")
    for title in ("field", "default", "valid values"):
        table.add_column(title)
    for row in config_table(algo):
        table.add_row(*row)
    Console().print(table)


def register(subparsers) -> None:
    from offrl.config import add_flags
    from offrl.settings import RunSettings

    p = subparsers.add_parser("train", help="train an offline RL algorithm on a dataset",
                              description="Train an offline RL algorithm; writes config.json, metrics.jsonl/csv, checkpoints/ and plots/ to --out.")
    p.add_argument("--algo", default="iql", help=algo_help("iql"))
    p.add_argument("--dataset", help="registry name or path of the dataset (.hdf5/.npz/minari folder)")
    add_flags(p, RunSettings, prefix="run", only=TRAIN_SETTINGS, shown={"out": "runs/<algo>-<dataset>"})
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a config field (repeatable), e.g. --set expectile=0.8; --config.expectile 0.8 works too")
    p.add_argument("--select-by", default=None, metavar="ESTIMATOR", help="after training, pick the checkpoint with the best off-policy estimate (fqe, dr, wis, ...) on the run's dataset and write RUN/selected.json; implies --keep-checkpoints")
    p.add_argument("--list-fields", action="store_true", help="print the config fields of --algo with their defaults and valid values, and exit")
    p.set_defaults(func=run, accepts_config_flags=True)


def run(args) -> int:
    import dataclasses

    from offrl.config import from_args
    from offrl.engine import train
    from offrl.envs import check_env_id
    from offrl.errors import ConfigError
    from offrl.settings import RunSettings

    if args.list_fields:
        print_config_table(args.algo)
        return 0
    settings = from_args(RunSettings, args, prefix="run")
    overrides = config_overrides(args.algo, args.set, getattr(args, "config_flags", ()))
    if not args.dataset and not settings.resume:
        raise ConfigError("offrl train needs --dataset NAME|PATH (or --resume with --out).")
    check_env_id(settings.env)
    select_by = args.select_by
    if select_by is not None:
        from offrl.ope.config import OPE_ESTIMATORS

        if select_by not in OPE_ESTIMATORS:
            raise ConfigError(f"--select-by {select_by!r} is not an estimator; choose one of {', '.join(OPE_ESTIMATORS)} (e.g. fqe).")
    dataset = args.dataset
    out = settings.out or f"runs/{args.algo}-{Path(str(dataset)).stem if dataset else 'run'}"
    if settings.resume and not dataset:
        import json

        record = json.loads((Path(out) / "config.json").read_text()) if (Path(out) / "config.json").exists() else {}
        dataset = record.get("settings", {}).get("dataset")
        if not dataset:
            raise ConfigError(f"--resume: cannot find the dataset of {out}; pass --dataset.")
    settings = dataclasses.replace(settings, out=out, keep_checkpoints=settings.keep_checkpoints or select_by is not None)
    run_ = train(algo=args.algo, dataset=dataset, config_overrides=overrides, **settings.train_kwargs())
    print_run_table(run_)
    if select_by is not None:
        print_selection(run_, select_by)
    return 0


def print_selection(run_, by: str) -> None:
    """Rank the run's kept checkpoints by ``by`` on its own dataset; write and report selected.json."""
    from offrl.ope.config import OPEConfig
    from offrl.ope.select import SELECTED, select_checkpoint

    record = select_checkpoint(run_.path, by, config=OPEConfig(discount=getattr(run_.config, "discount", 0.99)))
    print(f"selected: step {record['step']} of {len(record['candidates'])} checkpoints by {by} = {record['estimate']:.2f} "
          f"(CI [{record['ci_low']:.2f}, {record['ci_high']:.2f}]{', estimated behaviour' if record['estimated_behavior'] else ''})"
          f" -> {run_.path / SELECTED}")
    if record.get("excluded"):
        print(record["excluded"])
    if record.get("near_tie"):
        print(record["near_tie"])


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
