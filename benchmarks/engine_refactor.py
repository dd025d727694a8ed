"""Offline training throughput of two checkouts of offrl, side by side (before/after an engine change).

Runs ``offrl.engine.measure_throughput`` from each checkout in its own subprocess, alternating
rounds, on the same HalfCheetah-shaped random data (obs 17, actions 6, 100k rows), and prints
updates/s (wall clock) and process CPU seconds per 1000 updates for each, and their ratio.
On a shared machine the CPU seconds are the steadier number.

    python benchmarks/engine_refactor.py --before /tmp/old-main --after . --algos bc,td3_bc,iql,awac,cql
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, {path!r})
from offrl.engine import measure_throughput
rng = np.random.default_rng(0)
n = 100_000
obs = rng.standard_normal((n, 17)).astype(np.float32)
act = np.tanh(rng.standard_normal((n, 6))).astype(np.float32)
rew = rng.standard_normal(n).astype(np.float32)
out = measure_throughput({algo!r}, obs, act, rew, np.roll(obs, -1, 0), num_updates={updates}, repeats=3, details=True)
print(json.dumps(out))
"""


def measure(path: str, algo: str, updates: int) -> dict:
    code = CHILD.format(path=path, algo=algo, updates=updates)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=path)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True)
    p.add_argument("--after", default=".")
    p.add_argument("--algos", default="bc,td3_bc,iql,awac,cql")
    p.add_argument("--updates", type=int, default=500)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    print(f"{'algo':8s} {'before upd/s':>12s} {'after upd/s':>12s} {'ratio':>6s} {'before cpu-s/1k':>16s} {'after cpu-s/1k':>15s} {'ratio':>6s}")
    for algo in args.algos.split(","):
        updates = max(50, args.updates // 5) if algo in ("cql", "cal_ql", "bcq") else args.updates
        before, after = [], []
        for _ in range(args.rounds):
            before.append(measure(args.before, algo, updates))
            after.append(measure(args.after, algo, updates))
        b_rate, a_rate = max(r["steps_per_s"] for r in before), max(r["steps_per_s"] for r in after)
        b_cpu, a_cpu = min(r["cpu_s_per_1000_steps"] for r in before), min(r["cpu_s_per_1000_steps"] for r in after)
        print(f"{algo:8s} {b_rate:12.1f} {a_rate:12.1f} {a_rate / b_rate:6.2f} {b_cpu:16.2f} {a_cpu:15.2f} {b_cpu / a_cpu:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
