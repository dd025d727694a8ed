"""Reward hacking on purpose: PPO against a length-biased reward model, without and with the
counter-measures, each run read by the guardrails report (``offrl prefs guard``).

The reward model is trained on digits-task pairs whose chosen side is the right answer followed
by 1-4 junk digits and whose rejected side is the right answer alone: it learns "longer is
better". PPO then runs from the SFT policy under three settings:

    plain        kl_coef 0.01
    penalised    kl_coef 0.3 and the ensemble uncertainty penalty (mean - 2 std over 3 heads)
    adaptive     the adaptive KL controller with a target of 1 nat per sequence

and the guardrails report of every run is written next to it. Prints one table; writes
``<out>/results.json``. About 1-2 minutes on 2 shared CPU cores.

    python benchmarks/guard_length_bias.py --out runs/guard-length-bias
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/guard-length-bias")
    parser.add_argument("--iterations", type=int, default=24)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    from offrl.prefs.config import PPOConfig, RewardModelConfig, SFTConfig
    from offrl.prefs.data import write_jsonl
    from offrl.prefs.guard import guard_report
    from offrl.prefs.ppo import train_ppo
    from offrl.prefs.reward_model import train_reward_model
    from offrl.prefs.sft import train_sft
    from offrl.prefs.task import TaskConfig, make_task, read_prompts, target

    t0 = time.perf_counter()
    out = args.out
    paths = make_task(os.path.join(out, "task"), TaskConfig(train_prompts=2000, eval_prompts=100, hidden_size=32,
                                                            intermediate_size=64, layers=2, heads=2, seed=args.seed))
    sft = train_sft(paths["model"], paths["demos"], os.path.join(out, "sft"),
                    SFTConfig(steps=300, batch_size=64, lr=5e-3, warmup_steps=20, log_every=100, max_length=24,
                              eval_fraction=0.05, seed=args.seed), progress=False).model_path
    rng = random.Random(args.seed)
    rows = [{"prompt": p, "chosen": target(p) + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 4))),
             "rejected": target(p)} for p in read_prompts(paths["prompts_train"])[:1500]]
    write_jsonl(os.path.join(out, "length_pairs.jsonl"), rows)
    rm = train_reward_model(sft, os.path.join(out, "length_pairs.jsonl"), os.path.join(out, "rm"),
                            RewardModelConfig(heads=3, steps=100, batch_size=32, lr=2e-3, log_every=50, max_length=24,
                                              eval_fraction=0.1, seed=args.seed), progress=False)
    common = dict(steps=args.iterations, batch_size=32, lr=1e-3, max_new_tokens=8, log_every=3,
                  reward_model=rm.model_path, kl_budget=3.0, seed=args.seed)
    settings = {
        "plain": PPOConfig(kl_coef=0.01, **common),
        "penalised": PPOConfig(kl_coef=0.3, uncertainty_penalty=2.0, **common),
        "adaptive": PPOConfig(kl_coef=0.1, kl_target=1.0, kl_horizon=2000.0, **common),
    }
    results = {"reward_model": {k: rm.summary.get(f"eval/{k}") for k in ("accuracy", "uncertainty", "length_correlation")}}
    print(f"length-biased reward model: held-out accuracy {results['reward_model']['accuracy']:.3f}, "
          f"reward-length correlation {results['reward_model']['length_correlation']:.3f}")
    print(f"{'setting':<10} {'true first':>10} {'true last':>10} {'proxy first':>11} {'proxy last':>10} "
          f"{'KL last':>8} {'length':>7}  warnings")
    for name, cfg in settings.items():
        run = os.path.join(out, name)
        result = train_ppo(sft, paths["prompts_train"], run, cfg, progress=False, callbacks=())
        report = guard_report(run)
        first, last = result.metrics[0], result.metrics[-1]
        kinds = sorted({w["kind"] for w in report["warnings"]})
        results[name] = {"true_first": first["objective/true_reward"], "true_last": last["objective/true_reward"],
                         "proxy_first": first["objective/rm_mean"], "proxy_last": last["objective/rm_mean"],
                         "kl_last": last["objective/kl"], "length_last": last["response/length"],
                         "warnings": report["warnings"]}
        print(f"{name:<10} {first['objective/true_reward']:>10.3f} {last['objective/true_reward']:>10.3f} "
              f"{first['objective/rm_mean']:>11.3f} {last['objective/rm_mean']:>10.3f} {last['objective/kl']:>8.2f} "
              f"{last['response/length']:>7.2f}  {', '.join(kinds) or '-'}")
    results["seconds"] = time.perf_counter() - t0
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"total {results['seconds']:.0f} s on {args.threads} torch thread(s); reports: {out}/<setting>/guard/report.md")


if __name__ == "__main__":
    main()
