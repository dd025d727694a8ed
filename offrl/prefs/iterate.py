"""Iterative (online) DPO: the language-model form of offline -> online RL.

    pi_0 = the start (SFT) model
    round r:  K samples per fresh prompt from pi_{r-1}  ->  a judge labels pairs
              ->  DPO / IPO / KTO on those pairs with reference pi_{r-1} (or pi_0: keep_reference)
              ->  pi_r; true reward and KL(pi_r || pi_0) on held-out prompts

With ``compare_offline`` the same label budget is spent once, on samples of pi_0, and one
offline run of ``rounds * steps`` steps is trained from them: the offline baseline.

Example::

    from offrl.prefs.iterate import run_iterate
    result = run_iterate("runs/sft/model", "runs/task/prompts_train.jsonl", "runs/iter",
                         IterateConfig(rounds=3), eval_prompts="runs/task/prompts_eval.jsonl")
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any, Callable

from offrl.prefs.adapters import check_lora_targets
from offrl.prefs.config import IterateConfig, PreferenceConfig, parse_lora
from offrl.prefs.data import write_jsonl
from offrl.prefs.evaluation import evaluate_policy
from offrl.prefs.judges import ProgrammaticJudge, label_with_judge, make_judge
from offrl.prefs.labelling import label_pairs
from offrl.prefs.loop import write_json
from offrl.prefs.modeling import load_causal_lm, load_tokenizer, sample_completions
from offrl.prefs.preference import train_preferences
from offrl.prefs.rollout import check_prompt_lengths, context_size
from offrl.prefs.task import read_prompts


def _label(judge, prompts, groups, seed):
    if isinstance(judge, ProgrammaticJudge):  # scores exist: best vs worst of the K samples
        return label_pairs(prompts, groups, judge.score, seed=seed)
    return label_with_judge(prompts, groups, judge, seed=seed)


def _round_prompts(prompts: list, n: int, r: int) -> list:
    start = (r * n) % len(prompts)
    return (prompts[start:] + prompts[:start])[:n]


def run_iterate(model: str, prompts, out: str, config: IterateConfig = IterateConfig(), eval_prompts=None,
                progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume: finished rounds are reused) iterative preference optimisation; writes
    ``rounds.json`` and one folder per round under ``out``."""
    prompts = read_prompts(prompts) if isinstance(prompts, str) else list(prompts)
    held_out = (read_prompts(eval_prompts) if isinstance(eval_prompts, str) else list(eval_prompts or []))
    judge = make_judge(config.judge)
    tokenizer = load_tokenizer(model)
    start_model = load_causal_lm(model).eval()
    for source, batch in (("--prompts", prompts), ("--eval-prompts", held_out)):
        check_prompt_lengths(tokenizer, batch, config.max_new_tokens, context_size(start_model), source)
    check_lora_targets(start_model, parse_lora(config.lora))  # before the work folder is written
    pref = PreferenceConfig(loss=config.loss, beta=config.beta, steps=config.steps, lr=config.lr,
                            batch_size=config.batch_size, max_length=config.max_length, warmup_steps=min(10, config.steps // 5),
                            log_every=max(1, config.steps // 2), kl_prompts=0, eval_fraction=0.05, seed=config.seed,
                            lora=config.lora)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), {"trainer": "iterate", "model": model, **config.to_json()})

    def evaluate(path: str) -> dict[str, float]:
        if not held_out or not config.eval_samples:
            return {}
        policy = load_causal_lm(path).eval()
        return evaluate_policy(policy, start_model, tokenizer, held_out, config.eval_samples, config.max_new_tokens)

    rows: list[dict[str, Any]] = [{"round": 0, "method": "start", "pairs": 0, **evaluate(model)}]
    current, labels = model, 0
    for r in range(1, config.rounds + 1):
        folder = os.path.join(out, f"round_{r}")
        done = os.path.join(folder, "round.json")
        if os.path.exists(done):
            row = json.load(open(done))
        else:
            policy = load_causal_lm(current).eval()
            batch = _round_prompts(prompts, config.prompts_per_round, r - 1)
            drawn = sample_completions(policy, tokenizer, batch, config.samples, config.max_new_tokens, 1.0,
                                       seed=config.seed * 1000 + r)
            pairs, stats = _label(judge, batch, drawn.grouped(), config.seed + r)
            os.makedirs(folder, exist_ok=True)
            write_jsonl(os.path.join(folder, "pairs.jsonl"), pairs)
            reference = model if config.keep_reference else current
            result = train_preferences(current, os.path.join(folder, "pairs.jsonl"), os.path.join(folder, "run"),
                                       replace(pref, reference=reference, seed=config.seed + r), progress=progress)
            row = {"round": r, "method": "iterative", "pairs": stats["pairs"], "reference": reference,
                   "eval_accuracy": result.summary.get("eval/accuracy"), **evaluate(result.model_path)}
            write_json(done, row)
        rows.append(row)
        labels += row["pairs"]
        current = os.path.join(folder, "run", "model")
        log(f"round {r}: {row['pairs']} pairs, reward {row.get('reward', float('nan')):.3f}, "
            f"KL to start {row.get('kl', float('nan')):.2f}")
    if config.compare_offline:
        rows.append(_offline_baseline(model, prompts, out, config, pref, judge, tokenizer, start_model, labels,
                                      evaluate, progress))
    result = {"rows": rows, "final_model": current}
    write_json(os.path.join(out, "rounds.json"), result)
    return result


def _offline_baseline(model, prompts, out, config, pref, judge, tokenizer, start_model, budget, evaluate, progress):
    folder = os.path.join(out, "offline")
    done = os.path.join(folder, "round.json")
    if os.path.exists(done):
        return json.load(open(done))
    batch = _round_prompts(prompts, config.prompts_per_round * config.rounds, 0)
    drawn = sample_completions(start_model, tokenizer, batch, config.samples, config.max_new_tokens, 1.0,
                               seed=config.seed * 1000)
    pairs, _ = _label(judge, batch, drawn.grouped(), config.seed)
    pairs = pairs[:budget]
    os.makedirs(folder, exist_ok=True)
    write_jsonl(os.path.join(folder, "pairs.jsonl"), pairs)
    result = train_preferences(model, os.path.join(folder, "pairs.jsonl"), os.path.join(folder, "run"),
                               replace(pref, steps=config.steps * config.rounds, reference=model), progress=progress)
    row = {"round": config.rounds, "method": "offline", "pairs": len(pairs), "reference": model,
           "eval_accuracy": result.summary.get("eval/accuracy"), **evaluate(result.model_path)}
    write_json(done, row)
    return row
