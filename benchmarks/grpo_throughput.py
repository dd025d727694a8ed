"""GRPO training throughput: offrl vs TRL's GRPOTrainer, side by side, same everything.

Same tiny Llama (built from a LlamaConfig, identical initial weights from one folder), same
character tokenizer, same prompts (digits task, all of one length so that no prompt is padded),
same programmatic reward, group size, prompts per step, generation length (sampling at
temperature 1, no top-k / top-p), learning rate, KL coefficient (k3 estimator in the loss, as
GRPO's paper and TRL do), token-level loss normalisation (TRL ``loss_type="bnpo"``), fp32, no
gradient checkpointing, same torch thread count. TRL 1.16 multiplies the KL term by the
importance ratio by default (``use_bias_correction_kl``); it is turned off here so that both
optimise the GRPO paper's loss. Runs alternate (offrl, TRL, offrl, TRL, ...)
so that CPU contention hits both alike; per side, the median completions/s over the steps after
``--warmup`` of its best run is reported, and the ratio.

It also checks that both compute the same GRPO loss on the same batch: a rollout of offrl's
trained policy with Gaussian noise (std ``--perturb``) added to its weights, scored by the judge,
with the initial weights as both the "old" policy (so the ratios differ from 1 and clipping is
exercised) and the KL reference; |difference| must be < 1e-5.

TRL must be importable (it lives in its own venv, with system site-packages):

    python -m venv --system-site-packages $TRL_ENV && $TRL_ENV/bin/pip install trl
    $TRL_ENV/bin/python benchmarks/grpo_throughput.py            # defaults below
    $TRL_ENV/bin/python benchmarks/grpo_throughput.py --steps 20 --repeats 2 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's offrl


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--prompts-per-step", type=int, default=16)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--digits", type=int, default=6, help="digits per prompt (all prompts have one length)")
    p.add_argument("--steps", type=int, default=20, help="steps per run")
    p.add_argument("--warmup", type=int, default=3, help="first steps of each run left out of the median")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--beta", type=float, default=0.04, help="KL coefficient (k3, in the loss)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both")
    p.add_argument("--perturb", type=float, default=0.05, help="weight noise of the same-loss check's policy")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--lora", default=None, metavar="R,ALPHA,DROPOUT[,TARGETS]",
                   help="train a LoRA adapter on both sides (offrl --lora; TRL with the same peft LoraConfig), the "
                        "reference being the base with the adapter disabled on both")
    p.add_argument("--profile", default=None, metavar="PATH",
                   help="instead of the comparison: cProfile --steps steps of each side (after one warm-up run) and "
                        "write the top of both profiles (cumulative time) to PATH")
    return p.parse_args()


def build(args, workdir: str) -> tuple[str, list[str]]:
    import random

    from offrl.prefs.task import TaskConfig, build_model, build_tokenizer

    cfg = TaskConfig(hidden_size=args.hidden, layers=args.layers, heads=4, intermediate_size=4 * args.hidden)
    tokenizer = build_tokenizer()
    model = build_model(cfg, tokenizer)
    path = os.path.join(workdir, "model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    rng = random.Random(0)
    prompts = sorted({"sort:" + "".join(rng.choice("0123456789") for _ in range(args.digits)) + "=" for _ in range(4000)})
    rng.shuffle(prompts)
    return path, prompts


def peft_config(text: str):
    """TRL's side of ``--lora``: the peft LoraConfig that offrl builds from the same text."""
    import peft

    from offrl.prefs.config import parse_lora

    spec = parse_lora(text)
    return peft.LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, task_type="CAUSAL_LM",
                           target_modules=list(spec.targets) if spec.targets else "all-linear")


def run_offrl(args, model_path: str, prompts: list[str], out: str) -> dict:
    from offrl.prefs.config import GRPOConfig
    from offrl.prefs.grpo import train_grpo

    cfg = GRPOConfig(steps=args.steps, batch_size=args.prompts_per_step, group_size=args.group_size,
                     max_new_tokens=args.max_new_tokens, lr=args.lr, kl_coef=args.beta, kl_estimator="k3",
                     epochs=1, minibatches=1, log_every=1, warmup_steps=0, grad_clip=1.0, lora=args.lora)
    result = train_grpo(model_path, prompts, out, cfg, progress=False)
    rates = [m["samples_per_s"] for m in result.metrics[args.warmup:]]
    return {"completions_per_s": statistics.median(rates), "per_step": [m["samples_per_s"] for m in result.metrics],
            "final_true_reward": result.metrics[-1]["objective/true_reward"]}


def trl_trainer(args, model_path: str, prompts: list[str], out: str, steps: int):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from offrl.prefs.modeling import load_causal_lm, load_tokenizer
    from offrl.prefs.task import judge

    def reward(prompts, completions, **kwargs):
        return [judge(p, c) for p, c in zip(prompts, completions)]

    class Clock(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter())

        def on_train_begin(self, *a, **k):
            self.times.append(time.perf_counter())

    cfg = TRLConfig(output_dir=out, per_device_train_batch_size=args.prompts_per_step * args.group_size,
                    num_generations=args.group_size, max_completion_length=args.max_new_tokens,
                    learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, beta=args.beta,
                    loss_type="bnpo", scale_rewards="group", epsilon=0.2, use_bias_correction_kl=False, num_iterations=1, max_steps=steps,
                    temperature=1.0, top_k=0, top_p=1.0, logging_steps=10_000, report_to="none", use_cpu=True,
                    bf16=False, fp16=False, gradient_checkpointing=False, save_strategy="no", seed=0,
                    max_grad_norm=1.0, dataloader_num_workers=0, disable_tqdm=True)
    clock = Clock()
    trainer = GRPOTrainer(model=load_causal_lm(model_path), reward_funcs=reward, args=cfg,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                          processing_class=load_tokenizer(model_path), callbacks=[clock],
                          peft_config=peft_config(args.lora) if args.lora else None)
    return trainer, clock


def run_trl(args, model_path: str, prompts: list[str], out: str) -> dict:
    trainer, clock = trl_trainer(args, model_path, prompts, out, args.steps)
    trainer.train()
    durations = [b - a for a, b in zip(clock.times, clock.times[1:])]
    n = args.prompts_per_step * args.group_size
    rates = [n / d for d in durations]
    return {"completions_per_s": statistics.median(rates[args.warmup:]), "per_step": rates}


def same_loss(args, model_path: str, trained_path: str, prompts: list[str], workdir: str) -> dict:
    import torch

    from offrl.prefs import rl_losses as R
    from offrl.prefs.grpo import group_policy_gradient_loss
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer
    from offrl.prefs.rollout import generate_rollout, response_logps
    from offrl.prefs.task import judge

    tokenizer = load_tokenizer(model_path)
    policy, initial = load_causal_lm(trained_path).eval(), load_causal_lm(model_path).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(args.perturb * torch.randn_like(p))
    perturbed = os.path.join(workdir, "perturbed")
    policy.save_pretrained(perturbed)
    tokenizer.save_pretrained(perturbed)
    rollout = generate_rollout(policy, tokenizer, prompts[: args.prompts_per_step], args.group_size,
                               args.max_new_tokens, seed=123)
    with torch.no_grad():
        old, _, _ = response_logps(initial, rollout)
    scores = torch.tensor([judge(p, c) for p, c in zip(rollout.prompts, rollout.texts)])
    advantages = R.group_advantages(scores, args.group_size, "grpo")
    mask = rollout.response_mask
    with torch.no_grad():
        logps, _, _ = response_logps(policy, rollout)
        ours, _ = group_policy_gradient_loss(logps, old, old, advantages, mask, 0.2, args.beta, "k3")
        trainer, _ = trl_trainer(args, perturbed, prompts, os.path.join(workdir, "trl_loss"), 1)
        trainer.model.eval()
        P = rollout.prompt_width
        inputs = {"prompt_ids": rollout.input_ids[:, :P], "prompt_mask": rollout.attention_mask[:, :P],
                  "completion_ids": rollout.responses, "completion_mask": mask, "advantages": advantages,
                  "old_per_token_logps": old, "ref_per_token_logps": old, "num_items_in_batch": mask.sum()}
        theirs = trainer._compute_loss(trainer.model, inputs)
    ratio = torch.exp(logps - old)
    clipped = float(((ratio - 1).abs() > 0.2).float().mul(mask).sum() / mask.sum())
    return {"offrl": float(ours), "trl": float(theirs), "abs_diff": abs(float(ours) - float(theirs)),
            "share_of_tokens_outside_clip": clipped, "padded_prompts": int((rollout.attention_mask[:, :P] == 0).sum())}


PHASES = {  # offrl's parts of a step, by the (file, function) that runs them
    ("prefs/rollout.py", "generate_rollout"): "rollout (sampling)",
    ("generation/utils.py", "_sample"): "  of which HF generate's sampling loop",
    ("prefs/policy_gradient.py", "score_rollout"): "score: pi_old / reference passes, reward",
    ("prefs/grpo.py", "update"): "GRPO update (forward with grad, loss, backward, AdamW)",
    ("prefs/policy_gradient.py", "optimizer_step"): "  of which backward + AdamW",
    ("prefs/rollout.py", "response_logps"): "every log-prob forward pass (score + update)",
}


def profile_sides(args, model_path: str, prompts: list[str], workdir: str) -> str:
    """cProfile of ``--steps`` steps of offrl and of TRL (each after a warm-up run): a phase table of
    offrl's step and the top of both profiles by cumulative time."""
    import cProfile
    import io
    import pstats

    run_offrl(args, model_path, prompts, os.path.join(workdir, "warm_offrl"))
    run_trl(args, model_path, prompts, os.path.join(workdir, "warm_trl"))
    text = []
    for side, fn in (("offrl", run_offrl), ("TRL", run_trl)):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        fn(args, model_path, prompts, os.path.join(workdir, f"profile_{side}"))
        prof.disable()
        wall = time.perf_counter() - t0
        stats = pstats.Stats(prof)
        text.append(f"== {side}: {args.steps} steps in {wall:.2f} s under cProfile "
                    f"({wall / args.steps * 1000:.0f} ms/step, setup and saving included) ==")
        if side == "offrl":
            text.append(f"{'phase':58s} {'ms/step':>8s} {'calls/step':>10s}")
            for (file, _, name), (_, calls, _, cum, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][3]):
                label = next((v for (f, n), v in PHASES.items() if n == name and file.endswith(f)), None)
                if label:
                    text.append(f"{label:58s} {cum / args.steps * 1000:8.1f} {calls / args.steps:10.1f}")
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
        text.append("\n".join(line for line in buf.getvalue().splitlines() if line.strip()))
    return "\n".join(text)


def main() -> None:
    args = parse_args()
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    import trl

    workdir = args.workdir or tempfile.mkdtemp(prefix="grpo-bench-")
    model_path, prompts = build(args, workdir)
    if args.profile:
        report = profile_sides(args, model_path, prompts, workdir)
        with open(args.profile, "w") as fh:
            fh.write(report + "\n")
        print(report)
        return
    results = {"settings": vars(args), "trl_version": trl.__version__, "torch_version": torch.__version__,
               "offrl": [], "trl": []}
    for r in range(args.repeats):
        results["offrl"].append(run_offrl(args, model_path, prompts, os.path.join(workdir, f"offrl_{r}")))
        print(f"repeat {r}: offrl {results['offrl'][-1]['completions_per_s']:.1f} completions/s", flush=True)
        results["trl"].append(run_trl(args, model_path, prompts, os.path.join(workdir, f"trl_{r}")))
        pair = results["offrl"][-1]["completions_per_s"] / results["trl"][-1]["completions_per_s"]
        print(f"repeat {r}: TRL   {results['trl'][-1]['completions_per_s']:.1f} completions/s  (this pair: {pair:.2f}x)",
              flush=True)
    best_offrl = max(x["completions_per_s"] for x in results["offrl"])
    best_trl = max(x["completions_per_s"] for x in results["trl"])
    results["ratio"] = best_offrl / best_trl
    adapter = f" + peft LoRA {args.lora}" if args.lora else ""
    print(f"offrl GRPO{adapter} {best_offrl:.1f} vs TRL {trl.__version__} GRPOTrainer{adapter} {best_trl:.1f} completions/s "
          f"(median of steady-state steps, best of {args.repeats}): {results['ratio']:.2f}x")
    if args.lora:  # the same-loss check is about the loss, run without an adapter
        print("same-loss check: run without --lora (it compares full-weight policies)")
    else:
        results["same_loss"] = same_loss(args, model_path, os.path.join(workdir, "offrl_0", "model"), prompts, workdir)
        sl = results["same_loss"]
        print(f"same batch, same loss: offrl {sl['offrl']:.8f}  TRL {sl['trl']:.8f}  |diff| {sl['abs_diff']:.2e} "
          f"({100 * sl['share_of_tokens_outside_clip']:.0f}% of tokens outside the clip range; "
              f"{'PASS' if sl['abs_diff'] < 1e-5 else 'FAIL'} at 1e-5)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
