"""Offline -> online fine-tuning: which remedies help? (``offrl finetune``, issue: engine v2)

CQL pre-trained offline on a dataset, then continued online in its env with each remedy alone,
all together, and Cal-QL, seeds vmapped; prints and writes a markdown table and one figure::

    naive      CQL, constant alpha, online data only (mix 0)    the "handcuffs" baseline
    mix        + replay mixing (mix_ratio 0.5)
    decay      + alpha decay alpha_0 exp(-lambda t)
    all        mixing + decay
    cal_ql     Cal-QL pre-training and fine-tuning (mix 0.5, the paper's setting)

Columns: offline score (the pre-trained policy's last evaluation), online score (last online
evaluation), the unlearning dip (lowest return in the first 10% of online steps minus the offline
return), the cumulative regret (mean over online evaluations of 1 - score/100) and wall time.
The dip and the regret are computed per seed and given with a 95% bootstrap interval over seeds
(2000 resamples); a remedy "beats naive" on a measure only when its interval and naive's do not
overlap (a shallower dip, a lower regret).

    python benchmarks/o2o.py --dataset hopper-medium-20k-v0 --offline-steps 20000 --online-steps 20000 \\
        --seeds 3 --out benchmarks/results/o2o
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

VARIANTS = {
    "naive": ("cql", {"mix_ratio": 0.0}),
    "mix": ("cql", {"mix_ratio": 0.5}),
    "decay": ("cql", {"mix_ratio": 0.0, "alpha_decay": None}),
    "all": ("cql", {"mix_ratio": 0.5, "alpha_decay": None}),
    "cal_ql": ("cal_ql", {"mix_ratio": 0.5}),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="hopper-medium-20k-v0")
    p.add_argument("--offline-steps", type=int, default=20_000)
    p.add_argument("--online-steps", type=int, default=20_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--hidden", default="128,128", help="critic and actor widths (CQL's paper: 256,256,256)")
    p.add_argument("--n-actions", type=int, default=4, help="sampled actions per source in CQL's log-sum-exp (paper: 10)")
    p.add_argument("--cql-alpha", type=float, default=5.0)
    p.add_argument("--alpha-decay", type=float, default=None,
                   help="lambda of the decay (default: alpha falls to 1%% of alpha_0 by the end of the online phase)")
    p.add_argument("--eval-every", type=int, default=2000)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", default="benchmarks/results/o2o")
    return p.parse_args(argv)


def bootstrap_interval(values, num: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean over seeds."""
    import numpy as np

    x = np.asarray(values, float)
    if x.size == 0 or not np.isfinite(x).all():
        return float("nan"), float("nan")
    means = x[np.random.default_rng(seed).integers(0, x.size, (num, x.size))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main(argv=None) -> int:
    import math

    import offrl
    from offrl.finetuning import online_summary, per_seed_outcomes
    from offrl.plotting import plot_finetune

    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    decay = args.alpha_decay if args.alpha_decay is not None else math.log(100.0) / args.online_steps
    overrides = {"hidden_dims": args.hidden, "n_actions": str(args.n_actions), "cql_alpha": str(args.cql_alpha),
                 "bc_warmup_steps": str(min(5000, args.offline_steps // 4))}
    names = [v for v in args.variants.split(",") if v]
    offline_runs, timings, results = {}, {}, {}
    previous = json.loads((out / "results.json").read_text())["timings"] if (out / "results.json").exists() else {}
    for algo in sorted({VARIANTS[v][0] for v in names}):
        folder = out / f"offline-{algo}"
        t0 = time.perf_counter()
        if (folder / "checkpoints" / "latest.json").exists():
            timings[f"offline-{algo}"] = previous.get(f"offline-{algo}", float("nan"))
            offline_runs[algo] = folder
            continue
        offrl.train(algo, args.dataset, steps=args.offline_steps, seeds=args.seeds, eval_every=args.eval_every,
                    eval_episodes=args.eval_episodes, out=folder, config_overrides=overrides)
        timings[f"offline-{algo}"] = time.perf_counter() - t0
        offline_runs[algo] = folder
    runs = []
    for name in names:
        algo, options = VARIANTS[name]
        options = {k: (decay if v is None else v) for k, v in options.items()}
        folder = out / name
        t0 = time.perf_counter()
        reused = (folder / "summary.json").exists()
        if reused:  # a finished variant (rerun after an interruption): its table row, not a new run
            run = offrl.load_run(folder, with_agent=False)
        else:
            run = offrl.finetune(offline_runs[algo], steps=args.online_steps, out=folder, eval_every=args.eval_every,
                                 eval_episodes=args.eval_episodes, checkpoint_every=args.eval_every * 5,
                                 log_every=args.eval_every, **options)
        timings[name] = previous.get(name, time.perf_counter() - t0) if reused else time.perf_counter() - t0
        results[name] = online_summary(run.metrics, run.settings["offline_steps"])
        seeds_ = per_seed_outcomes(run.metrics, run.settings["offline_steps"])
        results[name]["per_seed"] = seeds_
        results[name]["dip_interval"] = bootstrap_interval(seeds_["dip"])
        results[name]["regret_interval"] = bootstrap_interval(seeds_["regret"])
        results[name]["options"] = options
        results[name]["wall_s"] = timings[name]
        runs.append(run)
        print(name, json.dumps(results[name]), flush=True)
    plot_finetune(runs, out, runs[0].settings["offline_steps"], labels=names)

    fmt = lambda v: "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.1f}"  # noqa: E731
    fmt2 = lambda v: "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3f}"  # noqa: E731
    lines = [f"# Offline -> online on {args.dataset}: {args.seeds} seeds, {args.offline_steps} offline updates, "
             f"{args.online_steps} online env steps (UTD 1), hidden {args.hidden}, n_actions {args.n_actions}, "
             f"cql_alpha {args.cql_alpha}, decay lambda {decay:.2e}", "",
             "| variant | options | offline score | online score | unlearning dip (return) [95% CI] | "
             "cumulative regret [95% CI] | wall time (s) |",
             "|---|---|---|---|---|---|---|"]
    ci = lambda iv, f: f"[{f(iv[0])}, {f(iv[1])}]"  # noqa: E731
    for name in names:
        r = results[name]
        lines.append(f"| {name} | {r['options']} | {fmt(r.get('offline_score'))} | {fmt(r.get('online_score'))} | "
                     f"{fmt(r.get('unlearning_dip'))} {ci(r['dip_interval'], fmt)} | {fmt2(r.get('cumulative_regret'))} "
                     f"{ci(r['regret_interval'], fmt2)} | {r['wall_s']:.0f} |")
    if "naive" in results:
        base = results["naive"]
        lines.append("")
        for name in names:
            if name == "naive":
                continue
            r = results[name]
            dip = r["dip_interval"][0] > base["dip_interval"][1]
            regret = r["regret_interval"][1] < base["regret_interval"][0]
            lines.append(f"- {name}: shallower dip than naive: {'yes' if dip else 'no (intervals overlap or deeper)'}; "
                         f"lower regret than naive: {'yes' if regret else 'no (intervals overlap or higher)'}")
    table = "\n".join(lines)
    print(table)
    (out / "results.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results, "timings": timings}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
