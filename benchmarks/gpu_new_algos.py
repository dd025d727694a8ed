"""Issue 23's and 24's algorithms on one GPU: updates/s and the projected wall time of 1M updates.

Each algorithm trains at its defaults (the papers' D4RL locomotion sizes) on 1M random
HalfCheetah-shaped transitions (observations 17, actions 6) held on the device, through offrl's
own training path (:func:`offrl.engine.measure_throughput`: a scanned chunk of updates, compiled
once, then timed). The projection is ``1M / (best chunk's updates/s)``; it leaves out evaluation
and, for the model-based algorithms, the dynamics fit and the rollout refills that fall outside
the timed chunks (the first, untimed chunk fits the model; ``compile_s`` includes it). JAX-CORL's
published GTX 1080 Ti time is printed beside an algorithm where its README gives one.

    python benchmarks/gpu_new_algos.py                      # all 16, 5,000-update chunks
    python benchmarks/gpu_new_algos.py --algos rebrac,xql --updates 20000
    python benchmarks/gpu_new_algos.py --quick               # 3 algorithms, tiny: checks the script runs (CPU)

``benchmarks/gpu.sh`` runs it as its fourth section. On a CPU it runs too, slowly: the figures are
then a CPU's, and the script says which device it ran on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

NEW_ALGOS = ("rebrac", "sac_n", "edac", "lb_sac", "spot", "xql", "crr", "bear", "plas", "td3_awr", "brac",
             "mopo", "mobile", "combo", "idql", "fql")
# JAX-CORL README, 1M updates on a GTX 1080 Ti (halfcheetah-medium-expert), minutes
JAX_CORL_1080TI_MIN = {"xql": 12.0}


def random_transitions(n: int, obs_dim: int = 17, action_dim: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, obs_dim)).astype(np.float32)
    actions = np.tanh(rng.standard_normal((n, action_dim))).astype(np.float32)
    return obs, actions, rng.standard_normal(n).astype(np.float32), np.roll(obs, -1, 0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default=",".join(NEW_ALGOS), help="comma-separated (default: the 16 of issues 23 and 24)")
    p.add_argument("--updates", type=int, default=5000, help="updates per timed chunk (default 5,000)")
    p.add_argument("--repeats", type=int, default=2, help="timed chunks after the compiling one (default 2)")
    p.add_argument("--transitions", type=int, default=1_000_000, help="random transitions on the device (default 1M)")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--quick", action="store_true", help="rebrac, mopo, fql at tiny sizes, 3 updates: only checks the script runs")
    args = p.parse_args(argv)

    import jax

    from offrl.algos import ALGORITHMS
    from offrl.engine import measure_throughput

    names = [a.strip() for a in args.algos.split(",") if a.strip()]
    overrides: dict[str, dict] = {}
    if args.quick:
        names, args.updates, args.repeats, args.transitions = ["rebrac", "mopo", "fql"], 3, 1, 3000
        small = {"hidden_dims": "32,32", "batch_size": "16"}
        overrides = {"rebrac": small, "fql": small,
                     "mopo": {**small, "model_hidden_dims": "16,16", "model_max_epochs": "1", "rollout_starts": "64",
                              "rollout_every": "1000000"}}
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown:
        p.error(f"--algos: unknown {', '.join(unknown)}; choose from {', '.join(ALGORITHMS)}")
    device = jax.devices()[0]
    print(f"device: {device.platform} {device.device_kind}; {args.transitions:,} random transitions (obs 17, action 6); "
          f"{args.updates:,}-update chunks, best of {args.repeats}", flush=True)
    arrays = random_transitions(args.transitions)
    rows = []
    print(f"{'algo':8s} {'updates/s':>10s} {'1M updates':>11s} {'compile s':>10s}  JAX-CORL 1080 Ti", flush=True)
    for name in names:
        t0 = time.perf_counter()
        r = measure_throughput(name, *arrays, num_updates=args.updates, repeats=args.repeats, details=True,
                               config_overrides=overrides.get(name))
        minutes = 1e6 / r["steps_per_s"] / 60
        ref = JAX_CORL_1080TI_MIN.get(name)
        rows.append({"algo": name, "updates_per_s": r["steps_per_s"], "projected_1m_min": minutes,
                     "compile_s": r["compile_s"], "wall_s": time.perf_counter() - t0, "jax_corl_1080ti_min": ref})
        print(f"{name:8s} {r['steps_per_s']:10.0f} {minutes:9.1f} m {r['compile_s']:10.1f}  "
              f"{f'{ref:.0f} min' if ref else '-'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": f"{device.platform} {device.device_kind}", "updates": args.updates,
                       "transitions": args.transitions, "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
