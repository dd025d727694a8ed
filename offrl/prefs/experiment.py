"""The end-to-end preference experiment on the digits task, and the reward-vs-KL frontier.

    SFT on noisy demonstrations (BC) -> sample k responses per prompt from the SFT policy
    -> label pairs with the programmatic judge (best vs worst) -> DPO / IPO / KTO and the
    reference-free SimPO / ORPO from those pairs, a sweep over beta; online, from the same SFT
    policy: PPO, GRPO and DAPO-loss GRPO on the program's reward with a sweep over the KL
    coefficient, iterative DPO and online DPO with a sweep over beta
    -> on held-out prompts: true reward of samples from pi and KL(pi || pi_sft) estimated from
    the same samples.

The frontier is the small-scale analogue of the IMDb figure of Rafailov et al. (2023, fig. 2):
each method traces reward against KL as beta varies; smaller beta buys reward with drift.

Example::

    from offrl.prefs.experiment import FrontierConfig, run_frontier
    result = run_frontier("runs/frontier", FrontierConfig())
    result["rows"]   # one dict per (method, beta) with reward, kl, ...
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from offrl.prefs.config import GRPOConfig, IterateConfig, OnlineDPOConfig, PPOConfig, PreferenceConfig, SFTConfig
from offrl.prefs.data import write_jsonl
from offrl.prefs.evaluation import evaluate_policy
from offrl.prefs.labelling import label_pairs
from offrl.prefs.loop import write_json
from offrl.prefs.modeling import load_causal_lm, load_tokenizer, sample_completions
from offrl.prefs.preference import train_preferences
from offrl.prefs.sft import train_sft
from offrl.prefs.task import TaskConfig, judge, make_task, read_prompts

DEFAULT_BETAS = {
    "dpo": (0.03, 0.1, 0.3, 1.0, 3.0),
    "ipo": (0.1, 0.3, 1.0, 3.0, 10.0),
    "kto": (0.03, 0.1, 0.3, 1.0, 3.0),
    "cdpo": (0.02, 0.05, 0.1, 0.3, 1.0),
    "rdpo": (0.02, 0.05, 0.1, 0.3, 1.0),
    "ppo": (0.01, 0.05, 0.2),       # the KL coefficient
    "grpo": (0.01, 0.05, 0.2),      # the KL coefficient
    "iterate": (0.1, 0.3, 1.0),     # DPO's beta in every round
    "simpo": (1.0, 2.0, 5.0),       # SimPO's reward scale (no reference: not a KL price)
    "orpo": (0.1, 0.3, 1.0),        # ORPO's odds-ratio weight lambda
    "dapo": (0.0, 0.01, 0.05),      # the KL coefficient of GRPO with the DAPO loss (DAPO itself drops the KL: 0)
    "online-dpo": (0.1, 0.3, 1.0),  # DPO's beta
}
ONLINE_METHODS = ("ppo", "grpo", "dapo", "iterate", "online-dpo")


@dataclass(frozen=True)
class FrontierConfig:
    """The experiment's knobs (defaults sized for a few CPU cores: 2-layer models, hundreds of steps).

    methods / betas: the sweep (``betas`` maps method -> values; missing methods use DEFAULT_BETAS).
    sft: SFT options. preference: options shared by every DPO/IPO/KTO run (loss and beta are set
    per run). ppo / grpo / dapo / iterate / online_dpo: options of the online runs (kl_coef, or the DPO
    beta of iterate and online DPO, set per run); dapo is GRPO with DAPO's loss (token-sum loss,
    clip-higher 0.28, dynamic sampling). label_prompts: training prompts sampled for pairs; samples_per_prompt: k.
    eval_samples: samples per held-out prompt for reward and KL. max_new_tokens: sample length.
    """

    task: TaskConfig = TaskConfig()
    methods: tuple[str, ...] = ("dpo", "ipo", "kto", "simpo", "orpo", "ppo", "grpo", "dapo", "iterate", "online-dpo")
    betas: dict[str, tuple[float, ...]] = field(default_factory=dict)
    sft: SFTConfig = SFTConfig(steps=600, batch_size=64, lr=3e-3, warmup_steps=30, log_every=100, max_length=32)
    preference: PreferenceConfig = PreferenceConfig(steps=150, batch_size=32, lr=5e-4, warmup_steps=10, log_every=50,
                                                    max_length=32, kl_prompts=0, eval_fraction=0.05)
    ppo: PPOConfig = PPOConfig(steps=100, batch_size=32, lr=3e-4, max_new_tokens=10, log_every=10)
    grpo: GRPOConfig = GRPOConfig(steps=100, batch_size=16, group_size=4, lr=5e-4, max_new_tokens=10, log_every=10)
    dapo: GRPOConfig = GRPOConfig(steps=100, batch_size=16, group_size=4, lr=5e-4, max_new_tokens=10, log_every=10,
                                  loss_type="dapo", clip_range_high=0.28, dynamic_sampling=True)
    iterate: IterateConfig = IterateConfig(rounds=3, prompts_per_round=500, steps=50, lr=5e-4, max_length=32,
                                           max_new_tokens=10, eval_samples=0)
    online_dpo: OnlineDPOConfig = OnlineDPOConfig(steps=100, batch_size=32, lr=1e-3, max_new_tokens=10, log_every=10)
    label_prompts: int = 2000
    samples_per_prompt: int = 4
    eval_samples: int = 4
    max_new_tokens: int = 10
    seed: int = 0

    def betas_for(self, method: str) -> tuple[float, ...]:
        return tuple(self.betas.get(method, DEFAULT_BETAS[method]))


# --------------------------------------------------------------------------- the experiment


def run_frontier(workdir: str, config: FrontierConfig = FrontierConfig(), progress: bool = True,
                 log: Callable[[str], None] = print, sft_model: str | None = None, pairs: str | None = None,
                 eval_prompts_path: str | None = None) -> dict[str, Any]:
    """Run (or resume: finished stages are reused) the whole experiment under ``workdir``.

    ``sft_model`` / ``pairs`` / ``eval_prompts_path`` start from an existing SFT model, pair file
    or held-out prompt file instead of building them. Writes ``results.json``, ``frontier.png``
    and one run folder per (method, beta).
    """
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    os.makedirs(workdir, exist_ok=True)
    task_dir = os.path.join(workdir, "task")
    if not os.path.exists(os.path.join(task_dir, "task.json")):
        make_task(task_dir, config.task)
    paths = json.load(open(os.path.join(task_dir, "task.json")))["paths"]
    if eval_prompts_path:
        paths["prompts_eval"] = eval_prompts_path
    timings["task"] = time.perf_counter() - t_start

    t = time.perf_counter()
    sft_dir = os.path.join(workdir, "sft")
    if sft_model is None and not os.path.exists(os.path.join(sft_dir, "summary.json")):
        log("stage 1/4: SFT (behaviour cloning) on noisy demonstrations")
        train_sft(paths["model"], paths["demos"], sft_dir, config.sft, progress=progress)
    sft_model_path = sft_model or os.path.join(sft_dir, "model")
    timings["sft"] = time.perf_counter() - t

    tokenizer = load_tokenizer(sft_model_path)
    reference = load_causal_lm(sft_model_path)
    eval_prompts = read_prompts(paths["prompts_eval"])

    t = time.perf_counter()
    pairs_path = pairs or os.path.join(workdir, "pairs.jsonl")
    label_stats_path = os.path.join(workdir, "label_stats.json")
    if pairs is not None:
        n = sum(1 for line in open(pairs) if line.strip())
        write_json(label_stats_path, {"pairs": n, "source": pairs})
    elif not os.path.exists(label_stats_path):
        log("stage 2/4: sampling from the SFT policy and labelling pairs with the judge")
        prompts = read_prompts(paths["prompts_train"])[: config.label_prompts]
        samples = sample_completions(reference, tokenizer, prompts, config.samples_per_prompt,
                                     config.max_new_tokens, 1.0, seed=config.seed)
        rows, stats = label_pairs(prompts, samples.grouped(), judge, seed=config.seed)
        write_jsonl(pairs_path, rows)
        write_json(label_stats_path, stats)
    label_stats = json.load(open(label_stats_path))
    timings["label"] = time.perf_counter() - t

    t = time.perf_counter()
    sft_eval = evaluate_policy(reference, reference, tokenizer, eval_prompts, config.eval_samples,
                               config.max_new_tokens)
    rows: list[dict[str, Any]] = [{"method": "sft", "beta": None, **sft_eval, "eval_accuracy": None, "seconds": 0.0}]
    timings["eval_sft"] = time.perf_counter() - t

    log(f"stage 3/4: {len(config.methods)} methods x betas from {label_stats['pairs']} pairs")
    cache_dir = os.path.join(workdir, "reference_cache")
    for method in config.methods:
        for beta in config.betas_for(method):
            run_dir = os.path.join(workdir, "runs", f"{method}_beta{beta:g}")
            done_file = os.path.join(run_dir, "frontier_eval.json")
            if os.path.exists(done_file):
                rows.append(json.load(open(done_file)))
                continue
            t = time.perf_counter()
            if method in ONLINE_METHODS:
                model_path, accuracy = _online_run(method, beta, sft_model_path, paths["prompts_train"], run_dir,
                                                   config, progress), None
            else:
                cfg = PreferenceConfig(**{**asdict(config.preference), "loss": method, "beta": beta,
                                          "seed": config.seed})
                avg = cfg.length_normalize if cfg.length_normalize is not None else method in ("ipo", "simpo", "orpo")
                cache = os.path.join(cache_dir, f"{'unpaired' if method == 'kto' else 'paired'}_avg{int(avg)}.safetensors")
                result = train_preferences(sft_model_path, pairs_path, run_dir, cfg, progress=progress,
                                           reference_cache=cache)
                model_path, accuracy = result.model_path, result.summary.get("eval/accuracy")
            policy = load_causal_lm(model_path)
            ev = evaluate_policy(policy, reference, tokenizer, eval_prompts, config.eval_samples, config.max_new_tokens)
            row = {"method": method, "beta": beta, **ev, "eval_accuracy": accuracy, "seconds": time.perf_counter() - t}
            write_json(done_file, row)
            rows.append(row)
            log(f"  {method} beta={beta:g}: reward {ev['reward']:.3f}  KL {ev['kl']:.2f}  ({row['seconds']:.0f} s)")
    timings["preference_runs"] = sum(r["seconds"] for r in rows)
    log("stage 4/4: frontier plot")
    png = os.path.join(workdir, "frontier.png")
    plot_frontier(rows, png)
    timings["total"] = time.perf_counter() - t_start
    result = {"rows": rows, "label_stats": label_stats, "timings": timings, "plot": png,
              "threads": torch.get_num_threads(), "config": _jsonable(config)}
    write_json(os.path.join(workdir, "results.json"), result)
    return result


def _online_run(method: str, coef: float, sft_model: str, prompts: str, run_dir: str, config: FrontierConfig,
                progress: bool) -> str:
    """Train one online run from the SFT model; returns the final model folder."""
    from dataclasses import replace

    if method == "ppo":
        from offrl.prefs.ppo import train_ppo

        return train_ppo(sft_model, prompts, run_dir, replace(config.ppo, kl_coef=coef, seed=config.seed),
                         progress=progress).model_path
    if method in ("grpo", "dapo"):
        from offrl.prefs.grpo import train_grpo

        base = config.grpo if method == "grpo" else config.dapo
        return train_grpo(sft_model, prompts, run_dir, replace(base, kl_coef=coef, seed=config.seed),
                          progress=progress).model_path
    if method == "online-dpo":
        from offrl.prefs.online_dpo import train_online_dpo

        return train_online_dpo(sft_model, prompts, run_dir, replace(config.online_dpo, beta=coef, seed=config.seed),
                                progress=progress).model_path
    from offrl.prefs.iterate import run_iterate

    return run_iterate(sft_model, prompts, run_dir, replace(config.iterate, beta=coef, seed=config.seed),
                       progress=progress, log=lambda s: None)["final_model"]


def _jsonable(obj):
    try:
        return json.loads(json.dumps(asdict(obj), default=str))
    except TypeError:
        return str(obj)


def plot_frontier(rows: list[dict[str, Any]], path: str) -> None:
    """Reward vs KL(pi || pi_sft), one line per method ordered by beta, SFT as a star."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    markers = {"dpo": "o", "ipo": "s", "kto": "^", "cdpo": "D", "rdpo": "v", "ppo": "P", "grpo": "X", "iterate": "*",
               "simpo": "<", "orpo": ">", "dapo": "h", "online-dpo": "p"}
    for method in dict.fromkeys(r["method"] for r in rows if r["method"] != "sft"):
        pts = sorted((r for r in rows if r["method"] == method), key=lambda r: r["kl"])
        ax.errorbar([r["kl"] for r in pts], [r["reward"] for r in pts], xerr=[r["kl_se"] for r in pts],
                    marker=markers.get(method, "o"), label=method.upper(), capsize=2, linewidth=1.2)
        for r in pts:
            ax.annotate(f"{r['beta']:g}", (r["kl"], r["reward"]), textcoords="offset points", xytext=(4, 3), fontsize=7)
    for r in rows:
        if r["method"] == "sft":
            ax.scatter([r["kl"]], [r["reward"]], marker="*", s=160, color="black", zorder=5, label="SFT (reference)")
    ax.set_xlabel("KL(pi || pi_SFT)  [nats per sequence, sampled]")
    ax.set_ylabel("true reward (judge score of samples)")
    ax.set_title("Reward vs KL frontier on the digits task (labels: beta / KL coef.)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def frontier_table(result: dict[str, Any]):
    """A rich table of the frontier rows."""
    from rich.table import Table

    table = Table(title="reward vs KL on held-out prompts (samples at temperature 1)")
    for col in ("method", "beta", "reward", "exact", "greedy", "KL(pi||sft)", "held-out pair acc", "seconds"):
        table.add_column(col, justify="right")
    for r in result["rows"]:
        acc = r.get("eval_accuracy")
        table.add_row(r["method"], "-" if r["beta"] is None else f"{r['beta']:g}", f"{r['reward']:.3f}",
                      f"{r['exact']:.3f}", f"{r['greedy_reward']:.3f}", f"{r['kl']:.2f} ± {r['kl_se']:.2f}",
                      "-" if acc is None else f"{acc:.3f}", f"{r['seconds']:.0f}")
    return table
