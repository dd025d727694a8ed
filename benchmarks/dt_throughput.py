"""Decision Transformer training throughput: offrl vs d3rlpy 2.8.1, side by side in one process.

Same synthetic HalfCheetah-shaped data (obs 17, action 6, episodes of 1000 steps), the same
model sizes as the paper's MuJoCo defaults (context 20, 3 layers, 1 head, 128-wide embeddings,
dropout 0.1) and batch 64. Differences that remain: d3rlpy embeds observations with a
one-hidden-layer ReLU encoder (``VectorEncoderFactory([128])``) where offrl uses one linear
layer; d3rlpy's update includes its own warm-up schedule. offrl's side is the engine's scanned
chunk (segments sampled on the device); d3rlpy's is its ``fit`` loop body
(``sample_trajectory_batch`` + ``update``), on CPU with ``--torch-threads`` threads (default:
torch's own choice; on a loaded machine one thread can be several times faster). Rounds
alternate (offrl chunk, d3rlpy block, ...) so machine load hits both; medians are reported,
with the load average before and after.

Run (d3rlpy lives in its own virtualenv, see benchmarks/README.md)::

    $D3RLPY_ENV/bin/python benchmarks/dt_throughput.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

OBS_DIM, ACTION_DIM, BATCH, CONTEXT, EPISODE = 17, 6, 64, 20, 1000


def synthetic(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n + 1, OBS_DIM)).astype(np.float32)
    timeouts = np.zeros(n, bool)
    timeouts[EPISODE - 1::EPISODE] = True
    return {"observations": obs[:-1], "next_observations": obs[1:],
            "actions": rng.uniform(-1, 1, (n, ACTION_DIM)).astype(np.float32),
            "rewards": rng.standard_normal(n).astype(np.float32), "terminals": np.zeros(n, bool), "timeouts": timeouts}


class OffrlSide:
    def __init__(self, data: dict, chunk: int):
        import jax

        from offrl import engine
        from offrl.algos import dt
        from offrl.algos.common import apply_overrides
        from offrl.data import Dataset

        self.config = apply_overrides(dt.Config(), {"batch_size": BATCH, "context_length": CONTEXT})
        ds = Dataset.from_arrays(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                 data["timeouts"], next_observations=data["next_observations"])
        self.data, _ = engine.prepare_data(ds, self.config, None, dt)
        self.agents, self.keys = engine.create_agents(dt, self.config, OBS_DIM, ACTION_DIM, 0, 1)
        self.trainer, self.chunk, self.jax = engine.Trainer(dt, BATCH, 1), chunk, jax

    def run(self) -> float:
        t0 = time.perf_counter()
        self.agents, metrics = self.trainer.run(self.agents, self.keys, self.data, self.chunk)
        self.jax.block_until_ready((self.agents, metrics))
        return time.perf_counter() - t0


class D3rlpySide:
    def __init__(self, data: dict, steps: int):
        import d3rlpy

        self.dataset = d3rlpy.dataset.MDPDataset(
            data["observations"], data["actions"], data["rewards"], data["terminals"].astype(np.float32),
            data["timeouts"].astype(np.float32), action_space=d3rlpy.ActionSpace.CONTINUOUS)
        config = d3rlpy.algos.DecisionTransformerConfig(
            batch_size=BATCH, context_size=CONTEXT, num_heads=1, num_layers=3, max_timestep=1000,
            encoder_factory=d3rlpy.models.VectorEncoderFactory(hidden_units=[128]))
        self.algo = config.create(device="cpu:0")
        self.algo.build_with_dataset(self.dataset)
        self.steps = steps

    def run(self) -> float:
        t0 = time.perf_counter()
        for _ in range(self.steps):
            self.algo.update(self.dataset.sample_trajectory_batch(BATCH, CONTEXT))
        return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transitions", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--chunk", type=int, default=200, help="offrl updates per timed chunk")
    p.add_argument("--d3rlpy-steps", type=int, default=50, help="d3rlpy updates per timed block")
    p.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads for d3rlpy (default: torch's)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import os

    load_before = os.getloadavg()
    if args.torch_threads:
        try:
            import torch

            torch.set_num_threads(args.torch_threads)
        except ImportError:
            pass
    data = synthetic(args.transitions)
    offrl = OffrlSide(data, args.chunk)
    t0 = time.perf_counter()
    offrl.run()
    compile_s = time.perf_counter() - t0
    try:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            d3 = D3rlpySide(data, args.d3rlpy_steps)
            d3.run()
    except ImportError:
        d3 = None
        print("d3rlpy is not installed in this interpreter: offrl side only (see benchmarks/README.md).")
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours.append(args.chunk / offrl.run())
        if d3 is not None:
            theirs.append(args.d3rlpy_steps / d3.run())
    row = {"algo": "dt", "offrl_updates_per_s": statistics.median(ours), "offrl_compile_plus_first_chunk_s": compile_s,
           "d3rlpy_updates_per_s": statistics.median(theirs) if theirs else None,
           "batch": BATCH, "context": CONTEXT, "rounds": args.rounds, "transitions": args.transitions,
           "torch_threads": args.torch_threads, "load_average_before": list(load_before),
           "load_average_after": list(os.getloadavg())}
    row["ratio"] = row["offrl_updates_per_s"] / row["d3rlpy_updates_per_s"] if theirs else None
    print(f"DT updates/s  offrl {row['offrl_updates_per_s']:.1f}  d3rlpy "
          f"{row['d3rlpy_updates_per_s'] or float('nan'):.1f}  ratio {row['ratio'] or float('nan'):.2f}x  "
          f"(offrl compile + first chunk {compile_s:.1f} s; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
