"""``offrl collect``: train SAC behaviour policies and build D4RL-style tiered datasets.

    offrl collect train-behavior --env Hopper-v5 --steps 300000 --out zoo/hopper
    offrl collect dataset --env Hopper-v5 --tier medium --size 200000 --zoo zoo/hopper --out hopper-medium.hdf5
    offrl collect pack --zoo zoo/hopper --out zoo/hopper-packed      # what the tiers need, compressed
    offrl collect oracle --env cube-single-v0 --dataset-type play --episodes 1000   # OGBench's layout
"""

from __future__ import annotations

import shlex
import sys


def register(subparsers) -> None:
    from offrl.collect.discrete import DQNBehaviorConfig
    from offrl.collect.train import TrainBehaviorConfig
    from offrl.config import add_flags
    from offrl.data.doctor.tier import TIERS

    parser = subparsers.add_parser(
        "collect", help="train SAC behaviour policies and collect D4RL-style datasets",
        description="Train SAC behaviour policies (train-behavior) and collect tiered datasets from them (dataset).")
    sub = parser.add_subparsers(dest="collect_command", metavar="SUBCOMMAND")

    train = sub.add_parser("train-behavior", help="train an online SAC learner, saving evaluated policy snapshots and the replay history")
    train.add_argument("--env", required=True, help="Gymnasium id, e.g. Pendulum-v1, Hopper-v5 (SAC) or CartPole-v1, Acrobot-v1 (Discrete actions: DQN)")
    train.add_argument("--out", required=True, help="zoo folder to write (snapshots/, replay.hdf5, zoo.json)")
    add_flags(train, TrainBehaviorConfig, prefix="cfg", labels={"SAC": TrainBehaviorConfig, "DQN": DQNBehaviorConfig})
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=run_train_behavior)

    data = sub.add_parser("dataset", help="collect one D4RL-style tier from a zoo and register it by name")
    data.add_argument("--env", required=True, help="the zoo's environment id, e.g. Hopper-v5")
    data.add_argument("--tier", required=True, choices=TIERS)
    data.add_argument("--size", type=int, default=100_000, help="transitions (medium-expert: half medium, half expert; medium-replay: at most this many)")
    data.add_argument("--zoo", required=True, help="zoo folder made by `offrl collect train-behavior`")
    data.add_argument("--out", default=None, help="HDF5 file to write (default: only register it in the cache)")
    data.add_argument("--name", default=None, help="dataset name, registered in the cache and stored as metadata/name (default: <env family>-<tier>-v0, or <family>-<tier>-local-v0 when a bundled dataset has that name)")
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--num-envs", type=int, default=8, help="environments run in lockstep during collection (default 8)")
    data.add_argument("--no-register", action="store_true", help="do not register the dataset in the cache")
    data.add_argument("--compress", action="store_true", help="gzip the arrays of the --out file (HDF5: shuffle + gzip filters; NPZ: zip deflate)")
    data.add_argument("--quiet", action="store_true", help="no progress bar")
    data.set_defaults(func=run_dataset)

    pack = sub.add_parser("pack", help="copy the part of a SAC zoo its tiers need (3 snapshots, the replay up to the medium one), compressed")
    pack.add_argument("--zoo", required=True, help="zoo folder made by `offrl collect train-behavior`")
    pack.add_argument("--out", required=True, help="new folder for the packed zoo (never overwritten); `offrl collect dataset --zoo OUT` builds the same tiers")
    pack.set_defaults(func=run_pack)

    from offrl.collect.ogbench import OracleConfig

    oracle = sub.add_parser("oracle", help="OGBench-style datasets from the scripted oracles of OGBench's cube, scene and puzzle envs (pip install 'offrl[ogbench]')")
    oracle.add_argument("--env", required=True, help="an OGBench manipulation env id: cube-single-v0, cube-double-v0, scene-v0, puzzle-3x3-v0, ...")
    add_flags(oracle, OracleConfig, prefix="cfg")
    oracle.add_argument("--out", default=None, help="the .npz to write in OGBench's layout, the -val.npz beside it (default: $OFFRL_HOME/datasets/<env>-<type>-v0.npz, so offrl.data.load finds its name)")
    oracle.add_argument("--overwrite", action="store_true", help="replace existing files")
    oracle.add_argument("--quiet", action="store_true", help="no progress bar")
    oracle.set_defaults(func=run_oracle)

    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def command_line() -> str:
    return "offrl " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv and sys.argv[0].endswith(("offrl", "__main__.py")) else " ".join(shlex.quote(a) for a in sys.argv)


def behavior_config(cls, args):
    """``cls`` built from the flags given (unset: ``cls``'s own defaults); a flag of the other
    learner only is refused in one line."""
    import dataclasses

    from offrl.collect.discrete import DQNBehaviorConfig
    from offrl.collect.train import TrainBehaviorConfig
    from offrl.config import flag_of, flag_values
    from offrl.errors import ConfigError

    given = {k: v for k, v in vars(args).items() if k.startswith("cfg__")}
    names = {f.name for f in dataclasses.fields(cls)}
    for key in given:
        if key[len("cfg__"):] not in names:
            other = "continuous (SAC)" if cls.__name__.startswith("DQN") else "discrete (DQN)"
            flag = next(flag_of(f) for c in (TrainBehaviorConfig, DQNBehaviorConfig) for f in dataclasses.fields(c)
                        if f.name == key[len("cfg__"):])
            raise ConfigError(f"{flag} applies to {other} action spaces only; drop it for --env {args.env}.")
    return cls(**flag_values(cls, args, prefix="cfg"))


def run_train_behavior(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from offrl.collect.train import TrainBehaviorConfig, train_behavior
    from offrl.collect.train import write_references
    from offrl.envs import check_env_id

    check_env_id(args.env)
    if _is_discrete(args.env):
        return _train_discrete_behavior(args)
    config = behavior_config(TrainBehaviorConfig, args)
    index = train_behavior(args.env, args.out, config, command=command_line(), progress=not args.quiet)
    refs = write_references(args.out)
    table = Table(title=f"SAC on {args.env}: snapshots in {args.out}")
    for col in ("step", "return (stochastic)", "return (deterministic)"):
        table.add_column(col, justify="right")
    for s in index["snapshots"]:
        table.add_row(str(s["step"]), f"{s['return_mean']:.1f} ± {s['return_std']:.1f}", f"{s['deterministic_return_mean']:.1f}")
    console = Console()
    console.print(table)
    console.print(f"env-steps/s (training, excluding evaluation): {index['env_steps_per_s']:.1f}; "
                  f"references: random {refs['random']:.1f}, expert {refs['expert']:.1f}")
    return 0


def run_dataset(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from offrl.collect.tiers import build_tier_dataset, dataset_name, free_dataset_name, save_tier_dataset
    from offrl.envs import check_env_id

    check_env_id(args.env)
    name = args.name or free_dataset_name(dataset_name(args.env, args.tier))
    ds = build_tier_dataset(args.zoo, args.tier, size=args.size, seed=args.seed, env_id=args.env, num_envs=args.num_envs,
                            command=command_line(), progress=not args.quiet, name=name)
    where = save_tier_dataset(ds, out=args.out, name=None if args.no_register else name, compress=args.compress)
    meta = ds.metadata
    table = Table(title=f"{meta['name']} ({args.tier})")
    table.add_column("fact")
    table.add_column("value", justify="right")
    for k, v in [("transitions", len(ds)), ("episodes", ds.num_episodes),
                 ("terminals", int(ds.terminals.sum())), ("timeouts", int(ds.timeouts.sum())),
                 ("episode return (complete episodes)", f"{meta['dataset_return_mean']:.1f}" if meta.get("dataset_return_mean") is not None else "-"),
                 ("behaviour policy return", f"{meta['policy_return']:.1f}"),
                 ("ref min / max", f"{meta['ref_min_score']:.1f} / {meta['ref_max_score']:.1f}")] + [(k, str(v)) for k, v in where.items()]:
        table.add_row(k, str(v))
    Console().print(table)
    return 0


def run_pack(args) -> int:
    from offrl.collect.pack import pack_zoo, summary

    index = pack_zoo(args.zoo, args.out)
    print(summary(index, args.out))
    return 0


def run_oracle(args) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from offrl.collect.ogbench import OracleConfig, check_oracle_env, collect_oracle, dataset_file_name
    from offrl.config import from_args
    from offrl.data.ogbench import save_ogbench, split_name
    from offrl.data.registry import cache_dir
    from offrl.envs import register_optional_envs

    check_oracle_env(args.env)
    register_optional_envs(args.env)
    config = from_args(OracleConfig, args)
    name = dataset_file_name(args.env, config.dataset_type)
    out = Path(args.out).expanduser() if args.out else cache_dir() / f"{name}.npz"
    if out.suffix.lower() != ".npz":
        from offrl.errors import ConfigError

        raise ConfigError(f"--out {args.out}: OGBench's layout is an .npz file; pass a path ending in .npz.")
    val_out = out.with_name(out.stem + "-val.npz")
    for path in (out, val_out) if config.val_episodes else (out,):
        if path.exists() and not args.overwrite:
            from offrl.errors import ConfigError

            raise ConfigError(f"{path} already exists; pass --overwrite or another --out.")
    train, val, facts = collect_oracle(args.env, config, progress=not args.quiet)
    written = [save_ogbench(train, out, overwrite=args.overwrite)]
    if val is not None:
        written.append(save_ogbench(val, val_out, overwrite=args.overwrite))
    head, version = out.stem.rsplit("-", 1) if split_name(out.stem) else (None, None)
    if head is None:
        task_load = f"offrl.data.ogbench.load_ogbench({str(out)!r}, task=1, env_id={args.env!r})"
    else:
        alias = f"{head}-singletask-task1-{version}"
        task_load = f"offrl.data.load({str(out.parent / alias) + '.npz' if args.out else alias!r})"
    table = Table(title=f"{name}: OGBench {config.dataset_type} data from the oracles of {args.env}")
    table.add_column("fact")
    table.add_column("value", justify="right")
    steps = len(train["terminals"])
    for k, v in [("episodes (train / val)", f"{config.episodes} / {config.val_episodes}"),
                 ("rows (env steps, train)", steps), ("transitions (train)", steps - config.episodes),
                 ("oracle tasks completed", facts["tasks_completed"]), ("collection rounds", facts["attempts"])] + \
            [("file", str(p)) for p in written] + \
            [("load with", f"offrl.data.load({str(out) if args.out else name!r})"), ("task 1's rewards", task_load)]:
        table.add_row(k, str(v))
    Console().print(table)
    return 0


def _is_discrete(env_id: str) -> bool:
    from offrl.envs import make_env

    env = make_env(env_id)
    try:
        return hasattr(env.action_space, "n")
    finally:
        env.close()


def _train_discrete_behavior(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from offrl.collect.discrete import DQNBehaviorConfig, train_dqn_behavior
    from offrl.collect.train import write_references

    config = behavior_config(DQNBehaviorConfig, args)
    index = train_dqn_behavior(args.env, args.out, config, command=command_line(), progress=not args.quiet)
    refs = write_references(args.out)
    table = Table(title=f"DQN on {args.env}: snapshots in {args.out}")
    for col in ("step", f"return (epsilon {config.epsilon})", "return (greedy)"):
        table.add_column(col, justify="right")
    for s in index["snapshots"]:
        table.add_row(str(s["step"]), f"{s['return_mean']:.1f} ± {s['return_std']:.1f}", f"{s['deterministic_return_mean']:.1f}")
    console = Console()
    console.print(table)
    console.print(f"env-steps/s (training, excluding evaluation): {index['env_steps_per_s']:.1f}; "
                  f"references: random {refs['random']:.1f}, expert {refs['expert']:.1f}")
    return 0
