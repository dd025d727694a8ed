"""``offrl export RUN --format numpy``: the policy as plain arrays for deployment without JAX."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a trained policy (NumPy arrays + JSON)",
                              description="Write the run's deterministic policy as policy.npz + policy.json; load it with offrl.policy.load_numpy_policy (NumPy only).")
    p.add_argument("run", help="run folder written by `offrl train`")
    p.add_argument("--format", default="numpy", choices=["numpy"], help="export format (default numpy)")
    p.add_argument("--seed", type=int, default=0, help="which seed's policy (default 0)")
    p.add_argument("--out", default=None, help="output folder (default RUN/export)")
    p.add_argument("--step", type=int, default=None, help="export this kept checkpoint step (default: the latest)")
    p.add_argument("--selected", action="store_true", help="export the checkpoint chosen by `offrl train --select-by` (RUN/selected.json)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from offrl.checkpoint import export_numpy_policy
    from offrl.engine import load_run

    run_ = load_run(args.run, step=chosen_step(args))
    out = Path(args.out) if args.out else Path(args.run) / "export"
    folder = export_numpy_policy(run_, out, seed=args.seed)
    print(f"wrote {folder / 'policy.npz'} and {folder / 'policy.json'} (step {run_.step}, seed {args.seed}); "
          f"load with offrl.policy.load_numpy_policy('{folder}')")
    return 0


def chosen_step(args) -> int | None:
    """``--step N``, or ``--selected``'s step from RUN/selected.json, or None (the latest)."""
    from offrl.errors import ConfigError

    if args.selected and args.step is not None:
        raise ConfigError("pass either --step or --selected, not both.")
    if args.selected:
        from offrl.ope.select import selected_step

        return selected_step(args.run)
    return args.step
