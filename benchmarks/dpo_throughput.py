"""DPO training throughput: offrl vs TRL's DPOTrainer, side by side, same everything.

Same tiny Llama (built from a LlamaConfig, identical initial weights from one folder), same
character tokenizer, same preference pairs (digits task, oracle pairs), batch size, max length,
beta, learning rate, fp32, no gradient checkpointing, same torch thread count. Runs alternate
(offrl, TRL, offrl, TRL, ...) so that CPU contention hits both alike; the best steady-state run
of each is compared. Steady state = steps after ``--warmup`` (the first steps include
allocator warm-up). offrl's one-off reference log-prob pass is timed separately and also
reported amortised over the measured steps.

It also checks that both compute the same DPO loss on the same batch for a policy that differs
from the reference (offrl's trained policy vs the initial weights): |difference| must be < 1e-5.

TRL must be importable (it lives in its own venv, with system site-packages):

    python -m venv --system-site-packages $TRL_ENV && $TRL_ENV/bin/pip install trl
    $TRL_ENV/bin/python benchmarks/dpo_throughput.py            # defaults below
    $TRL_ENV/bin/python benchmarks/dpo_throughput.py --steps 60 --repeats 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32, help="preference pairs per step")
    p.add_argument("--pairs", type=int, default=2048)
    p.add_argument("--min-digits", type=int, default=4)
    p.add_argument("--max-digits", type=int, default=24, help="digit-string length range: sets sequence lengths")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--steps", type=int, default=40, help="measured steps per run")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both")
    p.add_argument("--trl-precompute", action="store_true",
                   help="also time TRL with precompute_ref_log_probs=True (its own reference caching)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--lora", default=None, metavar="R,ALPHA,DROPOUT[,TARGETS]",
                   help="train a LoRA adapter on both sides (offrl --lora; TRL with the same peft LoraConfig), the "
                        "reference being the base with the adapter disabled on both")
    return p.parse_args()


def build(args, workdir: str) -> tuple[str, str]:
    from offrl.prefs.data import write_jsonl
    from offrl.prefs.task import TaskConfig, make_oracle_pairs, make_prompts, build_model, build_tokenizer
    import random

    cfg = TaskConfig(min_digits=args.min_digits, max_digits=args.max_digits, hidden_size=args.hidden,
                     layers=args.layers, heads=4, intermediate_size=4 * args.hidden, tasks=("sort", "reverse"))
    tokenizer = build_tokenizer()
    model = build_model(cfg, tokenizer)
    model.config.max_position_embeddings = max(64, args.max_length)
    model_dir = os.path.join(workdir, "model")
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    prompts = make_prompts(args.pairs, cfg, random.Random(0))
    pairs = os.path.join(workdir, "pairs.jsonl")
    write_jsonl(pairs, make_oracle_pairs(prompts, seed=0))
    return model_dir, pairs


def peft_config(text: str):
    """TRL's side of ``--lora``: the peft LoraConfig that offrl builds from the same text."""
    import peft

    from offrl.prefs.config import parse_lora

    spec = parse_lora(text)
    return peft.LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, task_type="CAUSAL_LM",
                           target_modules=list(spec.targets) if spec.targets else "all-linear")


def run_offrl(args, model_dir: str, pairs: str, out: str) -> dict:
    from offrl.prefs.config import PreferenceConfig
    from offrl.prefs.preference import train_preferences

    total = args.warmup + args.steps
    cfg = PreferenceConfig(loss="dpo", beta=args.beta, steps=total, batch_size=args.batch_size, lr=args.lr,
                           warmup_steps=0, log_every=args.warmup, max_length=args.max_length, eval_fraction=0.0,
                           kl_prompts=0, mixed_precision="no", lora=args.lora)
    # log_every = warmup: rows after the first cover exactly the measured steps (warmup must divide steps)
    t0 = time.perf_counter()
    result = train_preferences(model_dir, pairs, out, cfg, progress=False)
    wall = time.perf_counter() - t0
    rows = result.metrics[1:]
    seconds = sum(args.warmup * args.batch_size / r["examples_per_s"] for r in rows)
    pairs_per_s = len(rows) * args.warmup * args.batch_size / seconds
    return {"pairs_per_s": pairs_per_s, "train_seconds": seconds, "wall_seconds": wall, "model": result.model_path}


def reference_pass_seconds(args, model_dir: str, pairs: str) -> float:
    """offrl's one-off cost: reference log-probs for the whole dataset (what TRL redoes each step)."""
    import torch

    from offrl.prefs.data import load_preferences, tokenize_preferences
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer, reference_logps

    tok = load_tokenizer(model_dir)
    data = tokenize_preferences(load_preferences(pairs), tok, max_length=args.max_length)
    model = load_causal_lm(model_dir)
    t0 = time.perf_counter()
    reference_logps(model, data, tok.pad_token_id, batch_size=args.batch_size)
    return time.perf_counter() - t0


class _StepTimer:
    """Times TRL steps end-to-end: the interval between consecutive ``on_step_end`` calls, so data
    loading, collation and logging count as they do in offrl's numbers."""

    def __init__(self, warmup: int):
        self.warmup, self.times, self._t = warmup, [], None

    def callback(self):
        from transformers import TrainerCallback

        timer = self

        class CB(TrainerCallback):
            def on_step_end(self, a, state, control, **kw):
                now = time.perf_counter()
                if state.global_step > timer.warmup and timer._t is not None:
                    timer.times.append(now - timer._t)
                timer._t = now

        return CB()


def trl_trainer(args, model_dir: str, pairs: str, out: str, precompute: bool, policy_dir: str | None = None,
                max_steps: int | None = None):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = [json.loads(line) for line in open(pairs)]
    ds = datasets.Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])
    policy = AutoModelForCausalLM.from_pretrained(policy_dir or model_dir, dtype="float32")
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32") if policy_dir else None
    cfg = DPOConfig(output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=max_steps or
                    (args.warmup + args.steps), learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
                    beta=args.beta, bf16=False, fp16=False, gradient_checkpointing=False, use_cpu=True,
                    max_length=args.max_length, logging_steps=10_000, save_strategy="no", report_to=[],
                    precompute_ref_log_probs=precompute, dataloader_num_workers=0, disable_tqdm=True, seed=0)
    return DPOTrainer(model=policy, ref_model=ref, args=cfg, train_dataset=ds, processing_class=tok,
                      peft_config=peft_config(args.lora) if args.lora and policy_dir is None else None)


def run_trl(args, model_dir: str, pairs: str, out: str, precompute: bool = False) -> dict:
    t0 = time.perf_counter()
    trainer = trl_trainer(args, model_dir, pairs, out, precompute)
    timer = _StepTimer(args.warmup)
    trainer.add_callback(timer.callback())
    trainer.train()
    wall = time.perf_counter() - t0
    seconds = sum(timer.times)
    return {"pairs_per_s": len(timer.times) * args.batch_size / seconds, "train_seconds": seconds,
            "wall_seconds": wall}


def loss_agreement(args, model_dir: str, pairs: str, policy_dir: str, workdir: str) -> dict:
    """DPO loss of the same 32 pairs under offrl and TRL, policy != reference."""
    import torch

    from offrl.prefs.data import load_preferences, tokenize_preferences
    from offrl.prefs.losses import dpo_loss
    from offrl.prefs.modeling import collate_pairs, load_causal_lm, load_tokenizer, sequence_logps

    n = args.batch_size
    trainer = trl_trainer(args, model_dir, pairs, os.path.join(workdir, "trl_loss"), False, policy_dir=policy_dir,
                          max_steps=1)
    trainer.model.eval()
    examples = [trainer.train_dataset[i] for i in range(n)]
    batch = trainer.data_collator(examples)
    with torch.no_grad():
        trl_loss = float(trainer.compute_loss(trainer.model, batch))

    tok = load_tokenizer(model_dir)
    data = tokenize_preferences(load_preferences(pairs), tok, max_length=args.max_length)
    same_tokens = all(
        data.prompt_ids[i] + data.completions[0][i] == e["prompt_ids"] + e["chosen_ids"]
        and data.prompt_ids[i] + data.completions[1][i] == e["prompt_ids"] + e["rejected_ids"]
        for i, e in enumerate(examples)
    )
    policy, reference = load_causal_lm(policy_dir), load_causal_lm(model_dir)
    b = collate_pairs(data, list(range(n)), tok.pad_token_id)
    with torch.no_grad():
        pi_c, pi_r = sequence_logps(policy, b).chunk(2)
        ref_c, ref_r = sequence_logps(reference, b).chunk(2)
        losses, _, _ = dpo_loss(pi_c, pi_r, ref_c, ref_r, args.beta)
    ours = float(losses.mean())
    return {"offrl_loss": ours, "trl_loss": trl_loss, "abs_diff": abs(ours - trl_loss), "same_tokens": same_tokens}


def main() -> None:
    args = parse_args()
    if args.steps % args.warmup:
        raise SystemExit("--steps must be a multiple of --warmup")
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    import datasets
    import trl

    datasets.disable_progress_bars()

    workdir = args.workdir or tempfile.mkdtemp(prefix="dpo_bench_")
    model_dir, pairs = build(args, workdir)
    from offrl.prefs.modeling import count_parameters, load_causal_lm

    n_params = count_parameters(load_causal_lm(model_dir))
    print(f"model: Llama {args.layers} layers, hidden {args.hidden}, {n_params / 1e6:.2f}M params; batch "
          f"{args.batch_size} pairs; digits {args.min_digits}-{args.max_digits}; fp32; {args.threads} thread(s); "
          f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")
    results = {"offrl": [], "trl": [], "trl_precompute": []}
    for r in range(args.repeats):
        results["offrl"].append(run_offrl(args, model_dir, pairs, os.path.join(workdir, f"offrl_{r}")))
        print(f"  run {r}: offrl {results['offrl'][-1]['pairs_per_s']:.1f} pairs/s", flush=True)
        results["trl"].append(run_trl(args, model_dir, pairs, os.path.join(workdir, f"trl_{r}")))
        print(f"  run {r}: TRL   {results['trl'][-1]['pairs_per_s']:.1f} pairs/s", flush=True)
        if args.trl_precompute:
            results["trl_precompute"].append(run_trl(args, model_dir, pairs, os.path.join(workdir, f"trlp_{r}"), True))
            print(f"  run {r}: TRL (precompute_ref_log_probs) {results['trl_precompute'][-1]['pairs_per_s']:.1f} pairs/s",
                  flush=True)
    ref_seconds = reference_pass_seconds(args, model_dir, pairs)
    agreement = None if args.lora else loss_agreement(args, model_dir, pairs, results["offrl"][0]["model"], workdir)

    best = {k: max(v, key=lambda x: x["pairs_per_s"]) for k, v in results.items() if v}
    measured_pairs = args.steps * args.batch_size
    amortised = measured_pairs / (best["offrl"]["train_seconds"] + ref_seconds * measured_pairs / args.pairs)
    from rich.console import Console
    from rich.table import Table

    adapter = f", both with peft LoRA {args.lora}" if args.lora else ""
    table = Table(title=f"DPO training throughput (steady state, best of repeats{adapter})")
    for col in ("trainer", "pairs/s", "all runs", "vs TRL"):
        table.add_column(col, justify="right")
    trl_best = best["trl"]["pairs_per_s"]
    for name, label in (("offrl", "offrl"), ("trl", "TRL DPOTrainer"), ("trl_precompute", "TRL + precompute_ref_log_probs")):
        if name in best:
            table.add_row(label, f"{best[name]['pairs_per_s']:.1f}",
                          ", ".join(f"{x['pairs_per_s']:.0f}" for x in results[name]),
                          f"{best[name]['pairs_per_s'] / trl_best:.2f}x")
    table.add_row("offrl incl. reference pass", f"{amortised:.1f}", f"ref pass {ref_seconds:.1f} s / {args.pairs} pairs",
                  f"{amortised / trl_best:.2f}x")
    console = Console()
    console.print(table)
    ratio = best["offrl"]["pairs_per_s"] / trl_best
    same = ("loss check: run without --lora (it compares full-weight policies)" if agreement is None else
            f"loss on the same batch: offrl {agreement['offrl_loss']:.8f}, TRL {agreement['trl_loss']:.8f}, "
            f"|diff| {agreement['abs_diff']:.2e} (target < 1e-5), identical tokens: {agreement['same_tokens']}")
    console.print(f"ratio offrl / TRL = {ratio:.2f}x{adapter}; {same}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "results": results, "ratio": ratio, "reference_pass_seconds": ref_seconds,
                       "amortised_pairs_per_s": amortised, "loss_agreement": agreement}, fh, indent=1)


if __name__ == "__main__":
    main()
