"""``offrl prefs``: preference learning for language models (PyTorch side).

    offrl prefs make-task --out runs/task                      tiny model + tokenizer + data
    offrl prefs sft   --model runs/task/model --data runs/task/demos.jsonl --out runs/sft
    offrl prefs label --model runs/sft/model --data runs/task/prompts_train.jsonl --out pairs.jsonl
    offrl prefs rm    --model runs/sft/model --data pairs.jsonl --out runs/rm --heads 4
    offrl prefs dpo | ipo | kto | simpo | cpo | orpo --model runs/sft/model --data pairs.jsonl --out runs/dpo --beta 0.1
    offrl prefs ppo | grpo | online-dpo --model runs/sft/model --prompts runs/task/prompts_train.jsonl --out runs/ppo
    offrl prefs iterate --model runs/sft/model --prompts runs/task/prompts_train.jsonl --out runs/iter
    offrl prefs guard runs/ppo                                 guardrails report of an online run
    offrl prefs eval  --model runs/dpo/model --reference runs/sft/model --data runs/task/prompts_eval.jsonl
    offrl prefs frontier --out runs/frontier                   the whole experiment + plot

Training flags are generated from the config dataclasses of ``offrl.prefs.config``; torch and
transformers are imported inside the command functions only.
"""

from __future__ import annotations



def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "prefs",
        help="preference learning for language models (SFT, reward models, DPO/IPO/KTO, PPO/GRPO/RLOO, judges)",
        description="Preference learning for any local Hugging Face causal LM: SFT (= BC), Bradley-Terry reward "
        "models, DPO / IPO / KTO / conservative and robust DPO, online RLHF (PPO, GRPO, RLOO) with a KL penalty, "
        "iterative DPO with AI judges, the reward-hacking guardrails report, evaluation and the reward-vs-KL "
        "frontier on a tiny verifiable task.",
    )
    sub = parser.add_subparsers(dest="prefs_command", metavar="STEP")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    p = sub.add_parser("make-task", help="build the tiny digits task: model, char tokenizer, noisy demos, prompts")
    p.add_argument("--out", required=True, help="folder to write model/, demos.jsonl, prompts_*.jsonl into")
    p.add_argument("--tasks", default="sort,reverse", help="comma-separated subset of sort,reverse,sum (default sort,reverse)")
    from offrl.prefs.config import add_config_flags
    from offrl.prefs.task import TaskConfig

    add_config_flags(p, TaskConfig, skip=("tasks",))
    p.set_defaults(func=_make_task)

    for name, help_text in (
        ("sft", "supervised fine-tuning on demonstrations (behaviour cloning)"),
        ("rm", "Bradley-Terry reward model (optionally a K-head ensemble)"),
        ("dpo", "Direct Preference Optimization (--label-smoothing: conservative DPO, --robust: robust DPO)"),
        ("ipo", "Identity Preference Optimisation"),
        ("kto", "Kahneman-Tversky Optimisation (unpaired, or pairs split into good/bad)"),
        ("simpo", "SimPO: reference-free, length-normalised rewards with a target margin (--simpo-gamma)"),
        ("cpo", "Contrastive Preference Optimization: reference-free logistic loss + NLL on chosen (--cpo-alpha)"),
        ("orpo", "ORPO: SFT + odds-ratio penalty (--beta is lambda), one stage, no reference model"),
    ):
        p = sub.add_parser(name, help=help_text)
        _training_args(p, name)
        p.set_defaults(func=_train, trainer=name)

    for name, help_text in (
        ("ppo", "PPO-RLHF: KL-penalised reward (reward model or program), GAE, value head or separate value model"),
        ("grpo", "GRPO / RLOO (--estimator rloo): group-relative policy gradients, no value model"),
        ("online-dpo", "online DPO: two samples per prompt from the current policy, labelled by a judge, a reward "
                       "model or reward callables, one DPO / IPO / SimPO step on the pair"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--model", required=True, help="starting policy and KL reference: a local Hugging Face model folder")
        p.add_argument("--prompts", required=True, help='JSONL of {"prompt": ...} rows (e.g. make-task\'s prompts_train.jsonl)')
        _run_args(p)
        _config_flags(p, name)
        _reward_flag(p, name)
        p.set_defaults(func=_policy_gradient, trainer=name)

    p = sub.add_parser("label", help="sample completions and label pairs with a judge, a reward model or a constitution")
    _model_data_args(p)
    p.add_argument("--out", required=True, help="pairs JSONL to write")
    p.add_argument("--judge", default="digits",
                   help="digits (the program of make-task), rm:PATH (a reward model) or lm:PATH (a pairwise LM judge)")
    p.add_argument("--reward-model", help="score every sample with this reward model (or ensemble run folder); best vs worst")
    p.add_argument("--constitution", help="principles file (one per line): critique-and-revise pairs instead of a judge")
    p.add_argument("--critic", default="digits", help="with --constitution: digits (programmatic stand-in) or lm:PATH")
    p.add_argument("--samples", type=int, default=4, help="completions sampled per prompt")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-prompts", type=int, default=0, help="use only the first N prompts (0 = all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(func=_label)

    p = sub.add_parser("iterate", help="iterative (online) DPO: rounds of sample -> judge -> DPO -> evaluate")
    p.add_argument("--model", required=True, help="start (SFT) model folder")
    p.add_argument("--prompts", required=True, help='JSONL of {"prompt": ...} rows to sample from')
    p.add_argument("--eval-prompts", help="held-out prompts for the true reward and KL per round")
    p.add_argument("--out", required=True, help="work folder (finished rounds are reused on rerun)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--no-progress", action="store_true")
    from offrl.prefs.config import IterateConfig, add_config_flags

    add_config_flags(p, IterateConfig)
    p.set_defaults(func=_iterate)

    p = sub.add_parser("guard", help="guardrails report of a ppo/grpo run: reward hacking and KL-budget warnings, plots")
    p.add_argument("run", metavar="RUN", help="run folder of `offrl prefs ppo` or `offrl prefs grpo`")
    p.add_argument("--kl-budget", type=float, default=None, help="KL per sequence allowed (default: the run's --kl-budget)")
    p.add_argument("--out", help="report folder (default RUN/guard)")
    p.set_defaults(func=_guard)

    p = sub.add_parser("eval", help="true reward (judge) and sampled KL to a reference on prompts; pair accuracy on pairs")
    _model_data_args(p)
    p.add_argument("--reference", help="reference model folder for KL / implicit rewards")
    p.add_argument("--beta", type=float, default=0.1, help="beta for implicit rewards on pair data")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(func=_eval)

    p = sub.add_parser("frontier", help="the end-to-end experiment: SFT -> label -> offline and online methods over beta "
                                        "-> reward-vs-KL plot")
    p.add_argument("--out", required=True, help="work folder (finished stages are reused on rerun)")
    p.add_argument("--model", help="start from this SFT model instead of training one")
    p.add_argument("--data", help="start from this pairs JSONL instead of sampling and labelling")
    p.add_argument("--prompts", help="held-out prompts JSONL (default: the task's)")
    p.add_argument("--methods", default="dpo,ipo,kto,simpo,orpo,ppo,grpo,dapo,iterate,online-dpo",
                   help="comma-separated: dpo,ipo,kto,cdpo,rdpo,simpo,orpo (offline), ppo,grpo,dapo (GRPO with the "
                        "DAPO loss),iterate,online-dpo (online)")
    p.add_argument("--betas", action="append", default=[], metavar="METHOD=B1,B2",
                   help="betas for one method, e.g. --betas dpo=0.05,0.1 (repeatable)")
    p.add_argument("--sft-steps", type=int, help="SFT steps (default: FrontierConfig's, 600)")
    p.add_argument("--steps", type=int, help="optimizer steps per preference run (default: FrontierConfig's, 150)")
    p.add_argument("--rl-steps", type=int,
                   help="iterations per PPO / GRPO / DAPO / online-DPO run (default: FrontierConfig's, 100)")
    p.add_argument("--lr", type=float, help="learning rate of the preference runs (default: FrontierConfig's, 5e-4)")
    p.add_argument("--label-prompts", type=int, help="prompts sampled for pairs (default: FrontierConfig's, 2000)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_frontier)


def _model_data_args(p) -> None:
    p.add_argument("--model", required=True, help="local Hugging Face model folder (config.json + safetensors)")
    p.add_argument("--data", required=True, help="JSONL / JSON / Parquet file")


#: trainer command -> (config class name in offrl.prefs.config, fields that are not flags of that command)
TRAINERS = {
    "ppo": ("PPOConfig", ()),
    "grpo": ("GRPOConfig", ()),
    "online-dpo": ("OnlineDPOConfig", ("kl_coef", "kl_estimator", "kl_target", "kl_horizon", "epochs", "minibatches",
                                       "clip_range", "whiten_rewards")),
    "sft": ("SFTConfig", ()),
    "rm": ("RewardModelConfig", ()),
    "dpo": ("PreferenceConfig", ("loss", "desirable_weight", "undesirable_weight", "simpo_gamma", "cpo_alpha")),
    "ipo": ("PreferenceConfig", ("loss", "label_smoothing", "desirable_weight", "undesirable_weight", "simpo_gamma",
                                 "cpo_alpha")),
    "kto": ("PreferenceConfig", ("loss", "label_smoothing", "simpo_gamma", "cpo_alpha")),
    "simpo": ("SimPOConfig", ("loss", "desirable_weight", "undesirable_weight", "cpo_alpha")),
    "cpo": ("PreferenceConfig", ("loss", "desirable_weight", "undesirable_weight", "simpo_gamma")),
    "orpo": ("PreferenceConfig", ("loss", "label_smoothing", "desirable_weight", "undesirable_weight", "simpo_gamma",
                                  "cpo_alpha")),
}
#: the trainers of offrl.prefs.preference (the command name is the loss).
PREFERENCE_COMMANDS = ("dpo", "ipo", "kto", "simpo", "cpo", "orpo")


def _run_args(p, out_help: str = "run folder: config.json, metrics.jsonl, model/, checkpoints/") -> None:
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--no-progress", action="store_true")


def _config_flags(p, name: str) -> None:
    from offrl.prefs import config as C

    cls_name, skip = TRAINERS[name]
    C.add_config_flags(p, getattr(C, cls_name), skip=skip)


def _training_args(p, name: str) -> None:
    from offrl.prefs import config as C

    _model_data_args(p)
    _run_args(p)
    _config_flags(p, name)
    if name == "dpo":
        p.add_argument("--robust", action="store_true", help="with --label-smoothing: robust DPO (rDPO) instead of cDPO")


def _reward_flag(p, name: str) -> None:
    """``--reward MODULE:FUNCTION``, repeatable (the config field ``reward``, a tuple, has no generated flag)."""
    from offrl.config import field_docs
    from offrl.prefs import config as C

    help_text = field_docs(getattr(C, TRAINERS[name][0]))["reward"].rstrip(".")
    p.add_argument("--reward", action="append", default=[], metavar="MODULE:FUNCTION", help=help_text.replace("%", "%%"))


def _threads(n: int) -> None:
    if n and n > 0:
        import torch

        torch.set_num_threads(n)


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _make_task(args) -> int:
    from rich.console import Console

    from offrl.prefs.task import TaskConfig, make_task

    _quiet_transformers()
    from offrl.prefs.config import config_from_args

    cfg = config_from_args(TaskConfig, args, tasks=tuple(t.strip() for t in args.tasks.split(",") if t.strip()))
    paths = make_task(args.out, cfg)
    console = Console()
    for k, v in paths.items():
        console.print(f"{k:>14}: {v}")
    return 0


def _train(args) -> int:
    from offrl.errors import ConfigError
    from offrl.prefs import config as C

    cls_name, _ = TRAINERS[args.trainer]
    fixed = {}
    if args.trainer in PREFERENCE_COMMANDS:
        fixed["loss"] = args.trainer
        if args.trainer == "dpo" and args.cfg__label_smoothing > 0:
            fixed["loss"] = "rdpo" if args.robust else "cdpo"
        elif getattr(args, "robust", False):
            raise ConfigError("--robust needs --label-smoothing > 0 (the assumed label-flip rate, e.g. 0.1).")
    config = C.config_from_args(getattr(C, cls_name), args, **fixed)
    _threads(args.threads)
    _quiet_transformers()
    progress = not args.no_progress
    if args.trainer == "sft":
        from offrl.prefs.sft import train_sft

        result = train_sft(args.model, args.data, args.out, config, args.resume, progress)
    elif args.trainer == "rm":
        from offrl.prefs.reward_model import train_reward_model

        result = train_reward_model(args.model, args.data, args.out, config, args.resume, progress)
    else:
        from offrl.prefs.preference import train_preferences

        result = train_preferences(args.model, args.data, args.out, config, args.resume, progress)
    from offrl.prefs.loop import is_main_process

    if is_main_process():  # under `accelerate launch` every process returns here; one table
        _print_summary(f"offrl prefs {args.trainer}: {args.out}", result, config)
    return 0


def _policy_gradient(args) -> int:
    from offrl.prefs import config as C

    config = C.config_from_args(getattr(C, TRAINERS[args.trainer][0]), args, reward=tuple(args.reward))
    _threads(args.threads)
    _quiet_transformers()
    if args.trainer == "ppo":
        from offrl.prefs.ppo import train_ppo

        result = train_ppo(args.model, args.prompts, args.out, config, args.resume, not args.no_progress)
    elif args.trainer == "online-dpo":
        from offrl.prefs.online_dpo import train_online_dpo

        result = train_online_dpo(args.model, args.prompts, args.out, config, args.resume, not args.no_progress)
        _print_summary(f"offrl prefs online-dpo ({config.loss}): {args.out}", result, config)
        return 0
    else:
        from offrl.prefs.grpo import train_grpo

        result = train_grpo(args.model, args.prompts, args.out, config, args.resume, not args.no_progress)
    _print_summary(f"offrl prefs {args.trainer} ({getattr(config, 'estimator', 'ppo')}): {args.out}", result, config)
    return 0


def _print_summary(title: str, result, config=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    summary = result.summary
    if summary.get("bad_rows_dropped"):
        console.print(f"[yellow]{summary['bad_rows_dropped']} bad rows dropped[/]: " + "; ".join(summary["bad_rows"][:5]))
    if summary.get("truncated_completions"):
        console.print(f"[yellow]{summary['truncated_completions']} completions truncated at --max-length "
                      f"{getattr(config, 'max_length', '?')}[/]")
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        if isinstance(value, float):
            table.add_row(key, f"{value:.4g}")
        elif isinstance(value, int) and not isinstance(value, bool):
            table.add_row(key, str(value))
    console.print(table)
    launch = _launch_record(result.path)
    if launch:
        console.print(f"{launch['processes']} process(es) on {launch['device']}, precision {launch['mixed_precision']} "
                      f"({launch['mixed_precision_reason']}), {launch['examples_per_optimizer_step']} examples per optimizer "
                      f"step ({launch['gradient_accumulation_steps']} accumulation step(s))", soft_wrap=True)
    console.print(f"model: {result.model_path}")


def _launch_record(folder: str) -> dict:
    import json
    import os

    path = os.path.join(folder, "config.json")
    try:
        return json.load(open(path)).get("launch") or {}
    except (OSError, ValueError):
        return {}


def _label(args) -> int:
    from rich.console import Console

    from offrl.prefs.data import write_jsonl
    from offrl.prefs.labelling import sample_and_label
    from offrl.prefs.task import read_prompts

    _threads(args.threads)
    _quiet_transformers()
    prompts = read_prompts(args.data)
    if args.max_prompts:
        prompts = prompts[: args.max_prompts]
    if args.constitution:
        from offrl.prefs.labelling import critique_and_revise

        rows, stats = critique_and_revise(args.model, prompts, args.constitution, args.critic, args.max_new_tokens,
                                          args.temperature, args.seed)
        stats.setdefault("tied_prompts", stats.get("unrevised", 0))
    else:
        rows, stats = sample_and_label(args.model, prompts, judge=args.judge, reward_model=args.reward_model,
                                       samples=args.samples, max_new_tokens=args.max_new_tokens,
                                       temperature=args.temperature, seed=args.seed)
    write_jsonl(args.out, rows)
    score = f", mean sample score {stats['mean_sample_score']:.3f}" if "mean_sample_score" in stats else ""
    Console().print(f"{stats['pairs']} pairs from {stats['prompts']} prompts ({stats['tied_prompts']} prompts without "
                    f"a pair{score}) -> {args.out}")
    return 0


def _iterate(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from offrl.prefs.config import IterateConfig, config_from_args
    from offrl.prefs.iterate import run_iterate

    config = config_from_args(IterateConfig, args)
    _threads(args.threads)
    _quiet_transformers()
    console = Console()
    result = run_iterate(args.model, args.prompts, args.out, config, eval_prompts=args.eval_prompts,
                         progress=not args.no_progress, log=console.print)
    table = Table(title=f"offrl prefs iterate: {args.out}")
    for col in ("round", "method", "pairs", "reward", "exact", "KL(pi||start)", "held-out pair acc"):
        table.add_column(col, justify="right")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for r in result["rows"]:
        table.add_row(str(r["round"]), r["method"], str(r["pairs"]), fmt(r.get("reward")), fmt(r.get("exact")),
                      fmt(r.get("kl")), fmt(r.get("eval_accuracy")))
    console.print(table)
    console.print(f"final model: {result['final_model']}")
    return 0


def _guard(args) -> int:
    from rich.console import Console

    from offrl.errors import ConfigError
    from offrl.prefs.guard import GuardRules, guard_report

    if args.kl_budget is not None and args.kl_budget < 0:
        raise ConfigError(f"--kl-budget {args.kl_budget} is invalid: it must be >= 0 (0: no budget).")
    rules = GuardRules(kl_budget=args.kl_budget) if args.kl_budget is not None else None
    report = guard_report(args.run, rules, args.out)
    console = Console()
    for w in report["warnings"]:
        console.print(f"[yellow]iteration {w['step']}: {w['kind']}[/]: {w['message']}")
    if not report["warnings"]:
        console.print("no warnings")
    folder = args.out or f"{args.run}/guard"
    console.print(f"report: {folder}/report.md ({len(report['plots'])} plots, report.json)")
    return 0


def _eval(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from offrl.prefs.evaluation import evaluate_file

    _threads(args.threads)
    _quiet_transformers()
    metrics = evaluate_file(args.model, args.data, reference=args.reference, beta=args.beta, samples=args.samples,
                            max_new_tokens=args.max_new_tokens, max_length=args.max_length)
    table = Table(title=f"offrl prefs eval: {args.model} on {args.data}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in metrics.items():
        table.add_row(k, f"{v:.4f}")
    Console().print(table)
    return 0


def _frontier(args) -> int:
    from dataclasses import replace

    from rich.console import Console

    from offrl.errors import ConfigError
    from offrl.prefs.experiment import DEFAULT_BETAS, FrontierConfig, frontier_table, run_frontier

    _threads(args.threads)
    _quiet_transformers()
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    for m in methods:
        if m not in DEFAULT_BETAS:
            raise ConfigError(f"--methods {m} is unknown; use some of {','.join(DEFAULT_BETAS)}.")
    betas = {}
    for spec in args.betas:
        method, _, values = spec.partition("=")
        try:
            betas[method] = tuple(float(v) for v in values.split(","))
        except ValueError:
            raise ConfigError(f"--betas {spec} is not METHOD=B1,B2,...; e.g. --betas dpo=0.05,0.1") from None
    base = FrontierConfig()
    given = lambda value, default: default if value is None else value  # noqa: E731
    cfg = replace(base, methods=methods, betas=betas, seed=args.seed,
                  label_prompts=given(args.label_prompts, base.label_prompts),
                  sft=replace(base.sft, steps=given(args.sft_steps, base.sft.steps)),
                  preference=replace(base.preference, steps=given(args.steps, base.preference.steps),
                                     lr=given(args.lr, base.preference.lr)),
                  ppo=replace(base.ppo, steps=given(args.rl_steps, base.ppo.steps)),
                  grpo=replace(base.grpo, steps=given(args.rl_steps, base.grpo.steps)),
                  dapo=replace(base.dapo, steps=given(args.rl_steps, base.dapo.steps)),
                  online_dpo=replace(base.online_dpo, steps=given(args.rl_steps, base.online_dpo.steps)))
    console = Console()
    result = run_frontier(args.out, cfg, progress=not args.no_progress, log=console.print, sft_model=args.model,
                          pairs=args.data, eval_prompts_path=args.prompts)
    console.print(frontier_table(result))
    t = result["timings"]
    console.print(f"pairs: {result['label_stats'].get('pairs')}  |  time: total {t['total']:.0f} s (SFT {t['sft']:.0f} s, "
                  f"labelling {t['label']:.0f} s, preference runs {t['preference_runs']:.0f} s) on "
                  f"{result['threads']} torch thread(s)  |  plot: {result['plot']}")
    return 0
