"""A 12-configuration x 3-seed IQL grid as ONE vmapped program, against its members alone.

The grid is the issue's: ``expectile in {0.6, 0.7, 0.8, 0.9}`` x ``awr_inverse_temperature in
{1, 3, 10}``, 3 seeds each: 36 members. On HalfCheetah-shaped random transitions (obs 17,
action 6) it prints

1. steady-state time per update of the 36-member program (offrl.sweeps.program's member agents,
   the engine's Trainer: members in a ``lax.map`` on CPU, its default; ``--vmap`` also times the
   vmapped program) against the SUM of the 36 members' single-seed times per update (each
   configuration's single-seed program timed; the 3 seeds of a configuration cost the same;
   ``--single-configs K`` times K of the 12 configurations, which differ only in values, and
   scales by 12 / K). Rounds alternate (program chunk, then each configuration's chunk) so other
   people's load hits both sides alike; medians over rounds. Target: ratio <= 1.1.
2. wall time of ``python -m offrl sweep`` (the whole grid, one process) against ``python -m
   offrl train`` run once per member, one process after another (``--processes K`` runs K of
   the 36 and scales the sum by 36 / K, printed as an extrapolation).

Timings on a shared machine move with other people's load; the script prints the load average.

Run::

    python benchmarks/sweep.py                       # 256x256 nets, batch 256 (the issue's setting)
    python benchmarks/sweep.py --quick --processes 3 # 64x64 nets, batch 64, 3 of 36 processes timed
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's offrl, also in the subprocesses (cwd=ROOT)

GRID = {"expectile": [0.6, 0.7, 0.8, 0.9], "awr_inverse_temperature": [1.0, 3.0, 10.0]}
SEEDS = 3


def synthetic_dataset(n: int):
    from offrl.data import Dataset

    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n, 17)).astype(np.float32)
    actions = np.tanh(rng.standard_normal((n, 6))).astype(np.float32)
    terminals = np.zeros(n, bool)
    terminals[999::1000] = True
    return Dataset.from_arrays(obs, actions, rng.standard_normal(n).astype(np.float32), terminals,
                               next_observations=np.roll(obs, -1, axis=0), metadata={}, source="synthetic-halfcheetah-shaped")


def time_per_update(args, overrides) -> dict:
    import dataclasses

    import jax

    from offrl.algos import iql
    from offrl.algos.common import apply_overrides
    from offrl.engine import Trainer, create_agents, prepare_data
    from offrl.sweeps.grid import configurations
    from offrl.sweeps.program import member_agents

    dataset = synthetic_dataset(args.transitions)
    config = dataclasses.replace(apply_overrides(iql.Config(), overrides), schedule_steps=1_000_000)
    data, info = prepare_data(dataset, config, None, iql)
    points = configurations(GRID)
    traced = {k: [p[k] for p in points] for k in GRID}
    agents, keys = member_agents(iql, config, info, traced, 0, SEEDS)
    programs = {"program": [Trainer(iql, config.batch_size, len(points) * SEEDS), agents]}
    if args.vmap:
        programs["vmap"] = [Trainer(iql, config.batch_size, len(points) * SEEDS, members="vmap"), agents]
    timed = points[::max(1, len(points) // args.single_configs)][:args.single_configs]
    singles = []
    for p in timed:
        cfg = dataclasses.replace(config, **p)
        a, k = create_agents(iql, cfg, info.obs_dim, info.action_dim, 0, 1)
        singles.append([Trainer(iql, cfg.batch_size, 1), a, k])

    def run(trainer, a, k):
        t0 = time.perf_counter()
        a, m = trainer.run(a, k, data, args.chunk)
        jax.block_until_ready((a, m))
        return a, time.perf_counter() - t0

    out = {}
    for name, prog in programs.items():
        t0 = time.perf_counter()
        prog[1], _ = run(prog[0], prog[1], keys)
        out[f"compile_{name}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in singles:
        s[1], _ = run(*s)
    out["compile_singles"] = time.perf_counter() - t0
    per_update = {name: [] for name in programs}
    single_sums = []
    for _ in range(args.rounds):
        for name, prog in programs.items():
            prog[1], dt = run(prog[0], prog[1], keys)
            per_update[name].append(dt / args.chunk)
        total = 0.0
        for s in singles:
            s[1], dt = run(*s)
            total += SEEDS * dt / args.chunk
        single_sums.append(total * len(points) / len(timed))
    out.update({name: statistics.median(v) for name, v in per_update.items()})
    out.update(singles_sum=statistics.median(single_sums), single_configs=len(timed),
               rounds_program=per_update["program"], rounds_singles=single_sums)
    return out


def time_processes(args, overrides) -> dict:
    from offrl.data import save

    folder = Path(tempfile.mkdtemp(prefix="offrl-sweep-bench-"))
    data_path = save(synthetic_dataset(args.transitions), folder / "data.npz")
    sets = [x for k, v in overrides.items() for x in ("--set", f"{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}")]
    common = ["--dataset", str(data_path), "--steps", str(args.steps), "--eval-episodes", "0",
              "--log-every", str(min(args.steps, 1000)), "--eval-every", str(args.steps), "--no-progress", *sets]
    grid = [x for k, v in GRID.items() for x in ("--grid", f"{k}={','.join(map(str, v))}")]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "offrl", "sweep", "--algo", "iql", *grid, "--seeds", str(SEEDS),
                    "--out", str(folder / "sweep"), *common], check=True, capture_output=True, cwd=ROOT)
    sweep_s = time.perf_counter() - t0
    from offrl.sweeps.grid import configurations

    members = [(p, s) for p in configurations(GRID) for s in range(SEEDS)]
    step = max(1, len(members) // args.processes)
    chosen = members[::step][:args.processes]
    t0 = time.perf_counter()
    for i, (p, s) in enumerate(chosen):
        subprocess.run([sys.executable, "-m", "offrl", "train", "--algo", "iql", "--seed", "0", "--seeds", "1",
                        *[x for k, v in p.items() for x in ("--set", f"{k}={v}")], "--out", str(folder / f"run{i}"), *common],
                       check=True, capture_output=True, cwd=ROOT)
    each = (time.perf_counter() - t0) / len(chosen)
    return {"sweep_s": sweep_s, "process_s": each, "processes_timed": len(chosen), "processes_total_s": each * len(members)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64x64 networks, batch 64, 2,000 process steps")
    parser.add_argument("--transitions", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=200, help="updates per timed chunk")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="updates per member in part 2 (default 10000; quick 2000)")
    parser.add_argument("--processes", type=int, default=36, help="how many of the 36 single-member processes to time")
    parser.add_argument("--skip-processes", action="store_true")
    parser.add_argument("--single-configs", type=int, default=12, help="configurations whose single-seed program is timed (default all 12)")
    parser.add_argument("--vmap", action="store_true", help="also time the 36 members vmapped (the accelerator layout) on this CPU")
    args = parser.parse_args()
    width, batch = (64, 64) if args.quick else (256, 256)
    args.steps = args.steps or (2000 if args.quick else 10_000)
    overrides = {"hidden_dims": (width, width), "batch_size": batch}
    import jax

    print(f"offrl sweep benchmark: IQL {len(GRID['expectile'])}x{len(GRID['awr_inverse_temperature'])} grid x {SEEDS} seeds = 36 members; "
          f"nets {width}x{width}, batch {batch}, {args.transitions} transitions; jax {jax.__version__} on {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (a shared machine: timings move with others' load)")
    t = time_per_update(args, overrides)
    print(f"1. time per update (median of {args.rounds} rounds of {args.chunk} updates):")
    print(f"   36-member program (lax.map) {1e3 * t['program']:9.3f} ms  (compile {t['compile_program']:.1f} s)")
    if "vmap" in t:
        print(f"   36-member program (vmap)    {1e3 * t['vmap']:9.3f} ms  (compile {t['compile_vmap']:.1f} s)")
    scaled = "" if t["single_configs"] == 12 else f", {t['single_configs']} of 12 timed and scaled by {12 / t['single_configs']:.0f}"
    print(f"   sum of 36 single members    {1e3 * t['singles_sum']:9.3f} ms  ({t['single_configs']} programs, compile "
          f"{t['compile_singles']:.1f} s in all{scaled})")
    print(f"   ratio program / sum         {t['program'] / t['singles_sum']:9.3f}   (target <= 1.1)")
    if "vmap" in t:
        print(f"   ratio vmap program / sum    {t['vmap'] / t['singles_sum']:9.3f}")
    print(f"   ratio program / ONE member  {t['program'] / (t['singles_sum'] / 36):9.3f}   (GPU target <= 4)")
    print("   per round (ms): program " + ", ".join(f"{1e3 * x:.1f}" for x in t["rounds_program"])
          + "; singles sum " + ", ".join(f"{1e3 * x:.1f}" for x in t["rounds_singles"]))
    if not args.skip_processes:
        p = time_processes(args, overrides)
        print(f"2. wall time, {args.steps} updates per member, no evaluation:")
        print(f"   offrl sweep (1 process)               {p['sweep_s']:8.1f} s")
        print(f"   offrl train, one process per member   {p['process_s']:8.1f} s each x 36 = {p['processes_total_s']:.1f} s"
              + (f" (extrapolated from {p['processes_timed']} processes)" if p["processes_timed"] < 36 else ""))
        print(f"   ratio sweep / processes               {p['sweep_s'] / p['processes_total_s']:8.3f}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
