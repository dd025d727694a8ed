"""Cost of one SAC-N (or EDAC) update against the ensemble size N, on this machine.

The N critics are one vmapped network (:class:`offrl.nets.EnsembleCritic`), so an update's
critic matmuls are batched over N: issue 23 asks that the cost per update grow sub-linearly in
N for N <= 10. For each N this times the engine's own training path (a scanned chunk of
updates, :func:`offrl.engine.measure_throughput`) on HalfCheetah-shaped random transitions
(obs 17, action 6) with the paper's networks (3 x 256) and batch 256, and prints milliseconds
per update (wall, best of ``--repeats`` chunks) and CPU-milliseconds per update (this process,
all threads), each beside its ratio to the smallest N. Linear growth would make the ratio
``N / N_min``; the last column prints it. The load average is printed with the figures: on a
shared machine other processes' load inflates the wall time.

Run::

    python benchmarks/ensemble_scaling.py                      # sac_n at N = 2, 5, 10
    python benchmarks/ensemble_scaling.py --algo edac --sizes 2,5,10 --updates 50
    python benchmarks/ensemble_scaling.py --out benchmarks/results/ensemble-scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

OBS_DIM, ACTION_DIM, ROWS = 17, 6, 10_000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="sac_n", help="sac_n, edac or lb_sac (default sac_n)")
    parser.add_argument("--sizes", default="2,5,10", help="ensemble sizes N, comma-separated (default 2,5,10)")
    parser.add_argument("--updates", type=int, default=100, help="updates per timed chunk (default 100)")
    parser.add_argument("--repeats", type=int, default=3, help="timed chunks per N; the best is kept (default 3)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden-dims", default="256,256,256")
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)

    from offrl.engine import measure_throughput

    rng = np.random.default_rng(0)
    obs = rng.standard_normal((ROWS, OBS_DIM)).astype(np.float32)
    actions = rng.uniform(-1, 1, (ROWS, ACTION_DIM)).astype(np.float32)
    rewards = rng.standard_normal(ROWS).astype(np.float32)
    next_obs = rng.standard_normal((ROWS, OBS_DIM)).astype(np.float32)
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = os.getloadavg()
    rows = []
    for n in sizes:
        overrides = {"num_qs": str(n), "batch_size": str(args.batch_size), "hidden_dims": args.hidden_dims}
        out = measure_throughput(args.algo, obs, actions, rewards, next_obs, num_updates=args.updates,
                                 repeats=args.repeats, config_overrides=overrides, details=True)
        rows.append({"num_qs": n, "ms_per_update": 1000.0 / out["steps_per_s"],
                     "cpu_ms_per_update": out["cpu_s_per_1000_steps"], "compile_s": out["compile_s"]})
    load_after = os.getloadavg()

    base = rows[0]
    print(f"{args.algo}: obs {OBS_DIM}, action {ACTION_DIM}, hidden {args.hidden_dims}, batch {args.batch_size}, "
          f"{args.updates} updates x {args.repeats} chunks per N")
    print(f"load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}; {os.cpu_count()} CPUs")
    print(f"{'N':>4} {'ms/update':>10} {'x N_min':>8} {'cpu ms/update':>14} {'x N_min':>8} {'linear':>7}")
    for row in rows:
        print(f"{row['num_qs']:>4} {row['ms_per_update']:>10.2f} {row['ms_per_update'] / base['ms_per_update']:>8.2f} "
              f"{row['cpu_ms_per_update']:>14.2f} {row['cpu_ms_per_update'] / base['cpu_ms_per_update']:>8.2f} "
              f"{row['num_qs'] / base['num_qs']:>7.2f}")
    if args.out:
        record = {"command": "python benchmarks/ensemble_scaling.py " + " ".join(sys.argv[1:] if argv is None else argv), "algo": args.algo,
                  "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_before": load_before,
                  "load_after": load_after, "cpus": os.cpu_count(), "updates": args.updates, "repeats": args.repeats,
                  "batch_size": args.batch_size, "hidden_dims": args.hidden_dims, "rows": rows}
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
