"""The unlearning dip of fine-tuning an IQL run: optimiser moments and learning rate across the switch.

IQL decays its actor's learning rate with a cosine schedule that reaches 0 at the end of the
offline phase. Before the fix, ``offrl finetune`` turned the schedule off (the actor's rate
jumped from ~0 to 3e-4 at the first online update) and, because the optimiser's tree changed,
started the actor's Adam moments from zero. Now the moments are carried over and the rate
follows ``FinetuneConfig.lr_warmup_steps`` from where the schedule stopped. This script trains
one IQL run offline (``--seeds`` vmapped seeds) and fine-tunes the same run with

    warmup     the stated rule (moments kept, rate warmed up over ``lr_warmup_steps``, default 5000)
    jump       moments kept, no warm-up (``lr_warmup_steps 0``): the rate jumps at once
    before     the code before the fix (``--before CHECKOUT``, an older offrl checkout), if given

and prints, per variant, the offline return, the dip (the lowest evaluation return in the first
10% of online steps minus the offline return, per seed), the final online return and the
cumulative regret, with 95% t-intervals over seeds::

    python benchmarks/iql_finetune_dip.py --dataset pendulum-medium-replay-v0 --seeds 5 \\
        --offline-steps 20000 --online-steps 10000 --before OLD_CHECKOUT --out benchmarks/results/iql-dip
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BEFORE_CHILD = r"""
import json, sys
sys.path.insert(0, {before!r})
from offrl.finetuning import finetune
finetune({run!r}, out={out!r}, progress=False, **{options!r})
print(json.dumps("ok"))
"""


def per_seed(rows: list[dict], offline_step: int) -> dict[str, np.ndarray]:
    """Per-seed offline return, dip, final online return and regret (as ``online_summary``)."""
    evals = [r for r in rows if "eval/return" in r]
    offline = [r for r in evals if r.get("phase") == "offline" or r["step"] <= offline_step]
    online = [r for r in evals if r.get("phase") == "online" and r["step"] > offline_step]
    seeds = sorted({r["seed"] for r in online})
    span = max(r["step"] for r in online) - offline_step
    out = {"offline": [], "dip": [], "online": [], "regret": []}
    for s in seeds:
        last_off = [r for r in offline if r["seed"] == s][-1]["eval/return"]
        mine = [r for r in online if r["seed"] == s]
        early = [r["eval/return"] for r in mine if r["step"] - offline_step <= max(0.1 * span, 1)] or [mine[-1]["eval/return"]]
        out["offline"].append(last_off)
        out["dip"].append(min(early) - last_off)
        out["online"].append(mine[-1]["eval/return"])
        out["regret"].append(float(np.mean([1 - r.get("eval/normalized_score", np.nan) / 100 for r in mine])))
    return {k: np.asarray(v, float) for k, v in out.items()}


def interval(x: np.ndarray) -> str:
    from scipy import stats

    if len(x) < 2:
        return f"{x.mean():.1f}"
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return f"{x.mean():.1f} [{x.mean() - half:.1f}, {x.mean() + half:.1f}]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="pendulum-medium-replay-v0")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--offline-steps", type=int, default=20_000)
    p.add_argument("--online-steps", type=int, default=10_000)
    p.add_argument("--eval-every", type=int, default=500, help="online env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--hidden", default="64,64")
    p.add_argument("--before", default=None, help="an offrl checkout from before the fix, run as the 'before' variant")
    p.add_argument("--out", default="benchmarks/results/iql-dip")
    args = p.parse_args(argv)

    import offrl
    from offrl.engine import load_run
    from offrl.finetuning import finetune

    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    overrides = {"hidden_dims": args.hidden}
    offline = root / "offline"
    t0 = time.perf_counter()
    if not (offline / "checkpoints" / "latest.json").exists():
        offrl.train("iql", args.dataset, steps=args.offline_steps, seeds=args.seeds, eval_every=args.offline_steps // 4,
                    eval_episodes=args.eval_episodes, out=offline, config_overrides=overrides, progress=False)
    print(f"offline: {time.perf_counter() - t0:.0f} s")
    common = dict(steps=args.online_steps, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
                  checkpoint_every=args.online_steps, log_every=args.eval_every, mix_ratio=0.5)
    variants = {"warmup": {}, "jump": {"lr_warmup_steps": 0}}
    results, timings = {}, {}
    for name, extra in variants.items():
        folder = root / f"ft-{name}"
        t0 = time.perf_counter()
        if not (folder / "summary.json").exists():
            finetune(offline, out=folder, progress=False, **common, **extra)
        timings[name] = time.perf_counter() - t0
        run = load_run(folder)
        results[name] = per_seed(run.metrics, int(run.settings["offline_steps"]))
    if args.before:
        folder = root / "ft-before"
        t0 = time.perf_counter()
        if not (folder / "summary.json").exists():
            code = BEFORE_CHILD.format(before=str(Path(args.before).resolve()), run=str(offline.resolve()),
                                       out=str(folder.resolve()), options=common)
            subprocess.run([sys.executable, "-c", code], check=True, cwd=args.before)
        timings["before"] = time.perf_counter() - t0
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
        config = json.loads((folder / "config.json").read_text())
        results["before"] = per_seed(rows, int(config["settings"]["offline_steps"]))
    lines = [f"# IQL fine-tuning across the switch: {args.dataset}, {args.seeds} seeds, {args.offline_steps} offline updates, "
             f"{args.online_steps} online env steps (mix 0.5), networks {args.hidden}; 95% t-intervals over seeds", "",
             "| variant | offline return | dip | final online return | cumulative regret | wall s |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {interval(r['offline'])} | {interval(r['dip'])} | {interval(r['online'])} | "
                     f"{r['regret'].mean():.3f} | {timings[name]:.0f} |")
    text = "\n".join(lines)
    print(text)
    (root / "summary.md").write_text(text + "\n")
    (root / "summary.json").write_text(json.dumps({k: {m: v.tolist() for m, v in r.items()} for k, r in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
