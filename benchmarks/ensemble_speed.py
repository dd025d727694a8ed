"""offrl's SAC-N and EDAC against a PyTorch reference of the same algorithms, side by side in one run.

The peer is ``benchmarks/peers/sac_n_torch.py`` (a single-file SAC-N/EDAC following CORL's
``algorithms/offline/edac.py``; no package ships one). Both sides train on the same transitions
(the bundled ``hopper-medium-20k-v0`` by default, actions rescaled into [-1, 1]) with the same
sizes: ``N`` critics (default 10), 3 x 256 MLPs, batch 256, EDAC's ``eta`` 1. offrl's rate is its
own training path (a scanned chunk of updates, :func:`offrl.engine.measure_throughput`, best of
``--repeats`` chunks after a compile); the peer's is ``--updates`` eager updates timed after
``--warmup`` untimed ones, best of ``--repeats``. Both report wall-clock updates/s and this
process's CPU seconds per 1,000 updates (a second number that a shared machine's load moves less).

Run (on an idle machine: other processes' load changes both sides)::

    python benchmarks/ensemble_speed.py                          # sac_n and edac, N = 10
    python benchmarks/ensemble_speed.py --algos edac --num-critics 10 --updates 200
    python benchmarks/ensemble_speed.py --out benchmarks/results/ensemble-speed.json
    python benchmarks/ensemble_speed.py --smoke                  # a few updates of each: the script runs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))


def load_transitions(name: str):
    """The dataset's transitions with actions rescaled into [-1, 1] (the agent's units)."""
    from offrl import data as offrl_data
    from offrl.engine.data import data_info

    ds = offrl_data.load(name)
    info = data_info(ds, None)
    n = len(ds)
    return (ds.observations.reshape(n, -1).astype(np.float32), info.to_agent_action(ds.actions.reshape(n, -1)),
            ds.rewards.astype(np.float32), ds.next_observations.reshape(n, -1).astype(np.float32),
            ds.terminals.astype(np.float32))


def time_peer(arrays, obs_dim: int, action_dim: int, hidden: int, layers: int, num_critics: int, eta: float,
              batch_size: int, updates: int, warmup: int, repeats: int) -> dict:
    import torch
    from sac_n_torch import SACN, as_tensors

    tensors = as_tensors(*arrays)
    agent = SACN(obs_dim, action_dim, hidden=hidden, layers=layers, num_critics=num_critics, eta=eta)
    for _ in range(warmup):
        agent.update(*agent.sample(tensors, batch_size))
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(updates):
            agent.update(*agent.sample(tensors, batch_size))
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    return {"steps_per_s": updates / best, "cpu_s_per_1000_steps": 1000.0 * best_cpu / updates,
            "torch_threads": torch.get_num_threads()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default="sac_n,edac", help="sac_n and/or edac (default both)")
    parser.add_argument("--dataset", default="hopper-medium-20k-v0")
    parser.add_argument("--num-critics", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--eta", type=float, default=1.0, help="EDAC's diversity weight (default 1, the paper's)")
    parser.add_argument("--updates", type=int, default=200, help="updates per timed chunk, both sides (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed peer updates first (default 20)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="5 updates, 1 repeat, 1 x 32 networks, N = 2: only checks the script runs")
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.updates, args.warmup, args.repeats, args.hidden, args.layers, args.num_critics = 5, 1, 1, 32, 1, 2

    from offrl.engine import measure_throughput

    arrays = load_transitions(args.dataset)
    obs_dim, action_dim = arrays[0].shape[1], arrays[1].shape[1]
    hidden_dims = ",".join([str(args.hidden)] * args.layers)
    load_before = os.getloadavg()
    rows = []
    for algo in args.algos.split(","):
        eta = args.eta if algo == "edac" else 0.0
        overrides = {"num_qs": str(args.num_critics), "batch_size": str(args.batch_size), "hidden_dims": hidden_dims}
        if algo == "edac":
            overrides["diversity_weight"] = str(eta)
        ours = measure_throughput(algo, *arrays, num_updates=args.updates, repeats=args.repeats,
                                  config_overrides=overrides, details=True)
        peer = time_peer(arrays, obs_dim, action_dim, args.hidden, args.layers, args.num_critics, eta,
                         args.batch_size, args.updates, args.warmup, args.repeats)
        rows.append({"algo": algo, "eta": eta, "offrl_steps_per_s": ours["steps_per_s"],
                     "offrl_cpu_s_per_1000": ours["cpu_s_per_1000_steps"], "offrl_compile_s": ours["compile_s"],
                     "peer_steps_per_s": peer["steps_per_s"], "peer_cpu_s_per_1000": peer["cpu_s_per_1000_steps"],
                     "torch_threads": peer["torch_threads"], "ratio": ours["steps_per_s"] / peer["steps_per_s"],
                     "cpu_ratio": peer["cpu_s_per_1000_steps"] / ours["cpu_s_per_1000_steps"]})
    load_after = os.getloadavg()

    print(f"{args.dataset}: obs {obs_dim}, action {action_dim}, N = {args.num_critics}, hidden {hidden_dims}, "
          f"batch {args.batch_size}, {args.updates} updates x {args.repeats} chunks per side")
    print(f"load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}; {os.cpu_count()} CPUs")
    print(f"{'algo':>6} {'offrl upd/s':>12} {'peer upd/s':>11} {'ratio':>6} {'offrl cpu s/1k':>15} {'peer cpu s/1k':>14} {'cpu ratio':>10}")
    for r in rows:
        print(f"{r['algo']:>6} {r['offrl_steps_per_s']:>12.1f} {r['peer_steps_per_s']:>11.1f} {r['ratio']:>5.2f}x "
              f"{r['offrl_cpu_s_per_1000']:>15.2f} {r['peer_cpu_s_per_1000']:>14.2f} {r['cpu_ratio']:>9.2f}x")
    if args.out:
        record = {"command": "python benchmarks/ensemble_speed.py " + " ".join(sys.argv[1:] if argv is None else argv),
                  "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_before": load_before,
                  "load_after": load_after, "cpus": os.cpu_count(), **{k: v for k, v in vars(args).items() if k != "out"},
                  "rows": rows}
        Path(args.out).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
