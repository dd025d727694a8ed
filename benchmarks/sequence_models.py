"""Sequence models beside BC and IQL on one bundled dataset: final return and wall time.

Each algorithm trains one seed for ``--steps`` updates on the dataset, then its policy plays
``--episodes`` evaluation episodes (DT conditioned on the run's default target, the dataset's
best episode return; TT and Diffuser planning at every step). Sizes are the small CPU
configurations below, not the papers' (those need a GPU). Wall time covers compilation,
training and the final evaluation.

Run::

    python benchmarks/sequence_models.py --dataset pendulum-medium-v0 --steps 2000 \
        --out benchmarks/results/sequence-models-pendulum.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

SMALL = {
    "bc": {},
    "iql": {},
    "dt": {"embed_dim": "64", "num_layers": "2", "learning_rate": "1e-3", "warmup_steps": "200", "context_length": "10"},
    "tt": {"num_bins": "50", "embed_dim": "64", "num_layers": "2", "beam_width": "8", "horizon": "3",
           "sequence_length": "4"},
    "diffuser": {"horizon": "8", "unet_dims": "32,64", "diffusion_steps": "10", "num_samples": "4", "learning_rate": "1e-3"},
}


def main(argv=None) -> int:
    import offrl

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="pendulum-medium-v0")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--algos", default="bc,iql,dt,tt,diffuser")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    for algo in args.algos.split(","):
        t0 = time.perf_counter()
        run = offrl.train(algo, args.dataset, steps=args.steps, seeds=1, eval_every=args.steps,
                          eval_episodes=args.episodes, log_every=min(1000, args.steps), progress=False,
                          config_overrides=SMALL[algo])
        wall = time.perf_counter() - t0
        last = run.evaluations()[-1]
        rows.append({"algo": algo, "steps": args.steps, "return": last["eval/return"],
                     "return_std": last["eval/return_std"], "normalized_score": last["eval/normalized_score"],
                     "wall_s": wall, "overrides": SMALL[algo]})
        print(f"{algo:9s} return {last['eval/return']:8.1f} ± {last['eval/return_std']:6.1f}  wall {wall:6.1f} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"dataset": args.dataset, "episodes": args.episodes, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
