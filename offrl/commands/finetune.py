"""``offrl finetune RUN``: continue an offline run online (offline -> online fine-tuning)."""

from __future__ import annotations

#: the RunSettings fields that are flags of ``offrl finetune`` (its steps and intervals are FinetuneConfig's).
FINETUNE_SETTINGS = ("env", "out", "resume", "progress")


def register(subparsers) -> None:
    from offrl.config import add_flags
    from offrl.finetuning import FinetuneConfig
    from offrl.settings import RunSettings

    p = subparsers.add_parser("finetune", help="continue an offline run with environment interaction (offline -> online)",
                              description="Fine-tune an offline CQL, Cal-QL, IQL, AWAC or TD3+BC run online. Writes a new run folder "
                                          "(default RUN-finetune) with the return curve across the boundary, the unlearning dip and the regret.")
    p.add_argument("run", help="run folder written by `offrl train`")
    add_flags(p, FinetuneConfig, prefix="cfg")
    add_flags(p, RunSettings, prefix="run", only=FINETUNE_SETTINGS, shown={"out": "RUN-finetune"})
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    from rich.console import Console
    from rich.table import Table

    from offrl.config import from_args
    from offrl.finetuning import FinetuneConfig, finetune, online_summary
    from offrl.settings import RunSettings

    config = from_args(FinetuneConfig, args, prefix="cfg")
    settings = from_args(RunSettings, args, prefix="run")
    result = finetune(args.run, config=config, env=settings.env, out=settings.out, resume=settings.resume,
                      progress=settings.progress)
    summary = online_summary(result.metrics, result.settings["offline_steps"])
    table = Table(title=f"{result.algo}: offline -> online ({result.path})")
    for title in ("offline return", "online return", "unlearning dip", "cumulative regret", "online env steps"):
        table.add_column(title, justify="right")
    fmt = lambda v: "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.2f}"  # noqa: E731
    table.add_row(fmt(summary.get("offline_return")), f"{fmt(summary.get('online_return'))} ± {fmt(summary.get('online_return_std'))}",
                  fmt(summary.get("unlearning_dip")), fmt(summary.get("cumulative_regret")), str(summary.get("online_steps", 0)))
    Console().print(table)
    return 0
