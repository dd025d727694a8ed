"""``offrl finetune RUN``: continue an offline run online (offline -> online fine-tuning)."""

from __future__ import annotations

import dataclasses

HELP = {
    "mix_ratio": "share of offline rows in each minibatch, in [0, 1] (default 0.5; 0 = online data only, the naive continuation)",
    "utd": "gradient updates per environment step (default 1)",
    "update_every": "env steps between jitted update calls (default 50)",
    "start_steps": "online env steps before the first update (default 1000)",
    "alpha_decay": "CQL/Cal-QL: lambda of alpha_0 * exp(-lambda t) over online steps (default 0: constant)",
    "bc_anneal_steps": "TD3+BC: the BC weight falls linearly to 0 over these online steps (default 0: kept)",
    "eval_every": "env steps between evaluations (default 5000)",
    "eval_episodes": "evaluation episodes per seed (default 5; 0 = none)",
    "checkpoint_every": "env steps between checkpoints, where all envs restart (default 10000)",
    "log_every": "env steps between metrics rows (default 1000)",
    "lr_warmup_steps": "env steps of the online learning-rate warm-up from where an offline schedule stopped (default 5000; 0: none)",
}


def register(subparsers) -> None:
    from offrl.finetuning import FinetuneConfig

    p = subparsers.add_parser("finetune", help="continue an offline run with environment interaction (offline -> online)",
                              description="Fine-tune an offline CQL, Cal-QL, IQL, AWAC or TD3+BC run online. Writes a new run folder "
                                          "(default RUN-finetune) with the return curve across the boundary, the unlearning dip and the regret.")
    p.add_argument("run", help="run folder written by `offrl train`")
    p.add_argument("--steps", type=int, default=FinetuneConfig.steps, help=f"online env steps per seed (default {FinetuneConfig.steps})")
    p.add_argument("--env", default=None, help="Gymnasium id (default: the run's dataset env)")
    p.add_argument("--out", default=None, help="fine-tuning run folder (default RUN-finetune)")
    p.add_argument("--resume", action="store_true", help="continue the fine-tuning run in --out from its latest checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    for f in dataclasses.fields(FinetuneConfig):
        if f.name == "steps":
            continue
        flag = "--bc-anneal" if f.name == "bc_anneal_steps" else "--" + f.name.replace("_", "-")
        p.add_argument(flag, dest=f.name, type=type(f.default), default=f.default, help=HELP[f.name])
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    from rich.console import Console
    from rich.table import Table

    from offrl.finetuning import FinetuneConfig, finetune, online_summary

    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(FinetuneConfig) if f.name != "steps"}
    result = finetune(args.run, steps=args.steps, env=args.env, out=args.out, resume=args.resume,
                      progress=not args.no_progress, **options)
    summary = online_summary(result.metrics, result.settings["offline_steps"])
    table = Table(title=f"{result.algo}: offline -> online ({result.path})")
    for title in ("offline return", "online return", "unlearning dip", "cumulative regret", "online env steps"):
        table.add_column(title, justify="right")
    fmt = lambda v: "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.2f}"  # noqa: E731
    table.add_row(fmt(summary.get("offline_return")), f"{fmt(summary.get('online_return'))} ± {fmt(summary.get('online_return_std'))}",
                  fmt(summary.get("unlearning_dip")), fmt(summary.get("cumulative_regret")), str(summary.get("online_steps", 0)))
    Console().print(table)
    return 0
