"""Training throughput of offrl vs d3rlpy, side by side in one process, on the same data.

Continuous algorithms: both libraries train on the same HalfCheetah-shaped random transitions
(obs 17, action 6), with the same network widths (256 x 256; BCQ's VAE 750 x 750), batch size 256
and 2 critics. Discrete algorithms (``dqn``, ``discrete_cql``, ``discrete_bc`` vs d3rlpy's
``DQN``, ``DiscreteCQL``, ``DiscreteBC``): both train on the bundled ``cartpole-medium-expert-v0``
(obs 4, 2 actions) with one 256 x 256 Q-network (or logit network), Huber TD loss and batch 256.
For every algorithm both sides are built and warmed up first (offrl: XLA compilation of the
scanned chunk plus one chunk; d3rlpy: a few updates), then timed in alternating rounds
(offrl chunk, d3rlpy block, offrl chunk, ...) so that load from other processes on a shared
machine hits both sides alike. Reported speeds are the median over rounds.

offrl's side is the engine's own training path (``offrl.engine.Trainer``: dataset on the device,
minibatches sampled inside jit, ``lax.scan`` over a chunk of updates). d3rlpy's side is the body
of its ``fit`` loop (``dataset.sample_transition_batch`` then ``algo.update``) with its logging
left out, on CPU with its default torch thread count.

Beside wall-clock updates/s it reports updates per CPU-second of this process (``time.process_time``
over all its threads, d3rlpy at its fastest thread setting): the work one update costs, which
load from other processes on a shared machine barely changes.

It also prints offrl's achieved FLOP/s as a fraction of this machine's measured float32 matmul
peak (FLOPs of one update counted by XLA's cost analysis) and the peak resident memory of a
subprocess that trains on 1M transitions, against ``2 x dataset bytes + 1.5 GB``.

Run (d3rlpy lives in its own virtualenv, see benchmarks/README.md)::

    $D3RLPY_ENV/bin/python benchmarks/throughput.py
    $D3RLPY_ENV/bin/python benchmarks/throughput.py --algos iql,cql --quick
    $D3RLPY_ENV/bin/python benchmarks/throughput.py --algos dqn,discrete_cql,discrete_bc --memory-transitions 0
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

OBS_DIM, ACTION_DIM, BATCH_SIZE = 17, 6, 256
CONTINUOUS_ALGOS = ("bc", "td3_bc", "iql", "cql", "awac", "bcq", "rebrac", "crr", "bear", "plas")
DISCRETE_ALGOS = ("dqn", "discrete_cql", "discrete_bc")
ALL_ALGOS = CONTINUOUS_ALGOS + DISCRETE_ALGOS
DISCRETE_DATASET = "cartpole-medium-expert-v0"

#: offrl overrides that make each algorithm match the d3rlpy configuration below
#: (256 x 256 networks everywhere, batch 256, 2 critics; BC trained by MSE on both sides).
OFFRL_OVERRIDES = {
    "bc": {"loss": "mse", "hidden_dims": (256, 256), "batch_size": BATCH_SIZE},
    "td3_bc": {"hidden_dims": (256, 256), "num_qs": 2, "batch_size": BATCH_SIZE},
    "iql": {"hidden_dims": (256, 256), "num_qs": 2, "batch_size": BATCH_SIZE},
    "cql": {"hidden_dims": (256, 256), "num_qs": 2, "batch_size": BATCH_SIZE, "n_actions": 10, "bc_warmup_steps": 0},
    "awac": {"actor_hidden_dims": (256, 256), "hidden_dims": (256, 256), "num_qs": 2,
             "batch_size": BATCH_SIZE, "actor_weight_decay": 0.0},
    "bcq": {"hidden_dims": (256, 256), "vae_hidden_dims": (750, 750),
            "num_qs": 2, "batch_size": BATCH_SIZE, "num_samples": 10},
    # the issue-23 algorithms; BEAR and PLAS past their warm-up (the full update on both sides)
    "rebrac": {"hidden_dims": (256, 256), "critic_layer_norm": True, "num_qs": 2, "batch_size": BATCH_SIZE},
    "crr": {"hidden_dims": (256, 256), "num_qs": 1, "batch_size": BATCH_SIZE, "num_action_samples": 4,
            "target_update_interval": 100},
    "bear": {"hidden_dims": (256, 256), "vae_hidden_dims": (750, 750), "num_qs": 2, "batch_size": BATCH_SIZE,
             "num_target_samples": 10, "num_mmd_samples": 4, "warmup_steps": 0},
    "plas": {"hidden_dims": (256, 256), "vae_hidden_dims": (750, 750), "num_qs": 2, "batch_size": BATCH_SIZE,
             "warmup_steps": 0},
    # discrete: one 256 x 256 Q-network (or logit network), Huber TD loss, batch 256, no double-Q
    "dqn": {"hidden_dims": (256, 256), "batch_size": BATCH_SIZE},
    "discrete_cql": {"hidden_dims": (256, 256), "batch_size": BATCH_SIZE, "cql_alpha": 1.0},
    "discrete_bc": {"hidden_dims": (256, 256), "batch_size": BATCH_SIZE},
}


def d3rlpy_config(name: str):
    """The d3rlpy 2.x config equivalent to ``OFFRL_OVERRIDES[name]``."""
    import d3rlpy

    mlp = d3rlpy.models.VectorEncoderFactory(hidden_units=[256, 256])
    common = {"batch_size": BATCH_SIZE}
    if name == "bc":
        return d3rlpy.algos.BCConfig(encoder_factory=mlp, policy_type="deterministic", **common)
    if name == "td3_bc":
        return d3rlpy.algos.TD3PlusBCConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp, n_critics=2,
                                            update_actor_interval=2, **common)
    if name == "iql":
        return d3rlpy.algos.IQLConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp,
                                      value_encoder_factory=mlp, n_critics=2, **common)
    if name == "cql":  # fixed penalty weight 5 (offrl's default is the non-Lagrangian CQL(H))
        return d3rlpy.algos.CQLConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp, n_critics=2,
                                      n_action_samples=10, alpha_learning_rate=0.0, conservative_weight=5.0, **common)
    if name == "awac":
        return d3rlpy.algos.AWACConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp, n_critics=2,
                                       n_action_samples=1, **common)
    if name == "bcq":
        vae = d3rlpy.models.VectorEncoderFactory(hidden_units=[750, 750])
        return d3rlpy.algos.BCQConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp,
                                      imitator_encoder_factory=vae, n_critics=2, n_action_samples=10, **common)
    if name == "rebrac":  # LayerNorm in the critic, as offrl's (and the paper's) critic
        critic = d3rlpy.models.VectorEncoderFactory(hidden_units=[256, 256], use_layer_norm=True)
        return d3rlpy.algos.ReBRACConfig(actor_encoder_factory=mlp, critic_encoder_factory=critic, n_critics=2,
                                         update_actor_interval=2, **common)
    if name == "crr":
        return d3rlpy.algos.CRRConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp, n_critics=1,
                                      n_action_samples=4, target_update_type="hard", target_update_interval=100,
                                      **common)
    if name == "bear":
        vae = d3rlpy.models.VectorEncoderFactory(hidden_units=[750, 750])
        return d3rlpy.algos.BEARConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp,
                                       imitator_encoder_factory=vae, n_critics=2, n_target_samples=10,
                                       n_mmd_action_samples=4, warmup_steps=0, **common)
    if name == "plas":
        vae = d3rlpy.models.VectorEncoderFactory(hidden_units=[750, 750])
        return d3rlpy.algos.PLASConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp,
                                       imitator_encoder_factory=vae, n_critics=2, warmup_steps=0, **common)
    # discrete (d3rlpy's DQN/DiscreteCQL: one Q-network, Huber loss, hard target copy every
    # target_update_interval steps; offrl: Polyak target every step, a few extra FLOPs per update)
    if name == "dqn":
        return d3rlpy.algos.DQNConfig(encoder_factory=mlp, n_critics=1, **common)
    if name == "discrete_cql":
        return d3rlpy.algos.DiscreteCQLConfig(encoder_factory=mlp, n_critics=1, alpha=1.0, **common)
    if name == "discrete_bc":  # d3rlpy's beta = 0.5 logit-norm penalty is a few FLOPs; left at its default
        return d3rlpy.algos.DiscreteBCConfig(encoder_factory=mlp, **common)
    raise ValueError(name)


# ---------------------------------------------------------------------- data
def make_data(num_transitions: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random HalfCheetah-shaped transitions: 1000-step episodes ending in timeouts."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((num_transitions, OBS_DIM), dtype=np.float32)
    next_obs = np.concatenate([obs[1:], rng.standard_normal((1, OBS_DIM), dtype=np.float32)])
    timeouts = np.zeros(num_transitions, bool)
    timeouts[999::1000] = True
    timeouts[-1] = True
    return {
        "observations": obs,
        "actions": rng.uniform(-1, 1, (num_transitions, ACTION_DIM)).astype(np.float32),
        "rewards": rng.standard_normal(num_transitions, dtype=np.float32),
        "next_observations": next_obs,
        "terminals": np.zeros(num_transitions, bool),
        "timeouts": timeouts,
    }


def load_discrete_data() -> dict[str, np.ndarray]:
    """The bundled ``cartpole-medium-expert-v0`` (obs 4, 2 discrete actions) as arrays."""
    from offrl.data import load

    ds = load(DISCRETE_DATASET)
    return {"observations": ds.observations, "actions": ds.actions, "rewards": ds.rewards,
            "terminals": ds.terminals, "timeouts": ds.timeouts, "next_observations": ds.next_observations,
            "metadata": dict(ds.metadata)}


# ---------------------------------------------------------------------- offrl side
class OffrlSide:
    """The engine's scanned chunk for one seed, on device-resident data."""

    def __init__(self, name: str, data: dict[str, np.ndarray], chunk: int):
        import jax

        from offrl import engine
        from offrl.algos import get_algorithm
        from offrl.algos.common import apply_overrides

        self.module = get_algorithm(name)
        self.config = apply_overrides(self.module.Config(), OFFRL_OVERRIDES[name])
        if getattr(self.config, "schedule_steps", 0) is None:
            self.config = apply_overrides(self.config, {"schedule_steps": 1_000_000})
        from offrl.data import Dataset

        dataset = Dataset.from_arrays(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                      data["timeouts"], next_observations=data["next_observations"],
                                      metadata=data.get("metadata"))
        self.data, info = engine.prepare_data(dataset, self.config, None, self.module)  # the training path
        self.agents, self.data_keys = engine.create_agents(self.module, self.config, info.obs_dim, info.action_dim, 0, 1)
        self.trainer = engine.Trainer(self.module, self.config.batch_size, 1)
        self.chunk = chunk
        self._jax = jax

    def warmup(self) -> float:
        """Compile the chunk and run it twice; returns the compile + first-chunk seconds."""
        t0 = time.perf_counter()
        self.run()
        first = time.perf_counter() - t0
        self.run()
        return first

    def run(self) -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        self.agents, metrics = self.trainer.run(self.agents, self.data_keys, self.data, self.chunk)
        self._jax.block_until_ready((self.agents, metrics))
        self.cpu_seconds = time.process_time() - c0
        return time.perf_counter() - t0

    def flops_per_update(self) -> float:
        """FLOPs of one ``update`` as counted by XLA's cost analysis of the compiled function."""
        jax = self._jax
        from offrl.algos.common import Batch

        agent = jax.tree_util.tree_map(lambda x: x[0], self.agents)
        batch = Batch.from_rows({k: v[:BATCH_SIZE] for k, v in self.data.items()})
        analysis = jax.jit(self.module.update).lower(agent, batch).compile().cost_analysis()
        if isinstance(analysis, (list, tuple)):
            analysis = analysis[0]
        return float(analysis.get("flops", float("nan")))


def matmul_peak_flops(size: int, repeats: int = 5) -> float:
    """Best float32 FLOP/s of a jitted ``size x size`` matmul on this machine."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (size, size), jnp.float32)
    matmul = jax.jit(lambda x, y: x @ y)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best


# ---------------------------------------------------------------------- d3rlpy side
class D3rlpySide:
    """d3rlpy's ``fit`` loop body: ``sample_transition_batch`` + ``update``, no logging."""

    def __init__(self, name: str, data: dict[str, np.ndarray], steps: int):
        import d3rlpy

        discrete = name in DISCRETE_ALGOS
        self.dataset = d3rlpy.dataset.MDPDataset(
            data["observations"], data["actions"].reshape(len(data["actions"]), -1), data["rewards"],
            data["terminals"].astype(np.float32), data["timeouts"].astype(np.float32),
            action_space=d3rlpy.ActionSpace.DISCRETE if discrete else d3rlpy.ActionSpace.CONTINUOUS)
        self.algo = d3rlpy_config(name).create(device="cpu:0")
        self.algo.build_with_dataset(self.dataset)
        self.steps = steps

    def warmup(self) -> float:
        t0 = time.perf_counter()
        for _ in range(5):
            self.algo.update(self.dataset.sample_transition_batch(BATCH_SIZE))
        return time.perf_counter() - t0

    def run(self) -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(self.steps):
            self.algo.update(self.dataset.sample_transition_batch(BATCH_SIZE))
        self.cpu_seconds = time.process_time() - c0
        return time.perf_counter() - t0


def import_d3rlpy_quietly():
    """Import d3rlpy (and the legacy gym it pulls in) without its banners and info logs."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        import d3rlpy  # noqa: F401
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    return sys.modules["d3rlpy"]


# ---------------------------------------------------------------------- memory (subprocess)
def memory_child(algo: str, num_transitions: int, steps: int) -> None:
    """Build a Dataset of ``num_transitions`` rows, train ``steps`` updates, print peak RSS as JSON."""
    from offrl import engine
    from offrl.data import Dataset

    arrays = make_data(num_transitions)
    dataset = Dataset.from_arrays(**arrays)
    del arrays
    dataset_bytes = sum(getattr(dataset, k).nbytes for k in ("observations", "actions", "rewards", "terminals",
                                                             "timeouts", "next_observations"))
    engine.train(algo, dataset, steps=steps, eval_every=steps, eval_episodes=0, log_every=steps, progress=False,
                 config_overrides=OFFRL_OVERRIDES[algo])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    print(json.dumps({"peak_rss": peak, "dataset_bytes": dataset_bytes}))


def measure_memory(algo: str, num_transitions: int, steps: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", algo, str(num_transitions), str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", default=",".join(ALL_ALGOS), help=f"comma-separated subset of {','.join(ALL_ALGOS)}")
    p.add_argument("--steps", type=int, default=None, help="offrl updates per timed round, one scanned chunk (default 1000; --quick 200)")
    p.add_argument("--d3rlpy-steps", type=int, default=None, help="d3rlpy updates per timed round (default: steps / 10)")
    p.add_argument("--rounds", type=int, default=None, help="alternating timed rounds per algorithm (default 3; --quick 2)")
    p.add_argument("--transitions", type=int, default=100_000, help="size of the synthetic training set")
    p.add_argument("--memory-transitions", type=int, default=None, help="dataset size of the memory check, 0 skips it (default 1M; --quick 100k)")
    p.add_argument("--memory-algo", default="iql", help="algorithm trained in the memory check")
    p.add_argument("--peak-size", type=int, default=None, help="matrix size of the matmul peak measurement (default 2048; --quick 1024)")
    p.add_argument("--torch-threads", default="default,1",
                   help="comma-separated torch thread counts to time d3rlpy with, 'default' = torch's own choice "
                        "(default: 'default,1'; the ratio is taken against the fastest)")
    p.add_argument("--no-d3rlpy", action="store_true", help="time offrl only")
    p.add_argument("--quick", action="store_true", help="smoke run: 200-step chunks, 2 rounds, 100k-row memory check")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument("--memory-child", nargs=3, metavar=("ALGO", "N", "STEPS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    defaults = {"steps": (1000, 200), "rounds": (3, 2), "memory_transitions": (1_000_000, 100_000), "peak_size": (2048, 1024)}
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.d3rlpy_steps is None:
        args.d3rlpy_steps = max(5, args.steps // 10)
    args.algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = sorted(set(args.algos) - set(ALL_ALGOS))
    if unknown:
        p.error(f"--algos: unknown {', '.join(unknown)}; choose from {', '.join(ALL_ALGOS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.memory_child:
        algo, n, steps = args.memory_child
        memory_child(algo, int(n), int(steps))
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    d3rlpy = None if args.no_d3rlpy else import_d3rlpy_quietly()
    import jax
    import torch

    default_threads = torch.get_num_threads()
    thread_settings = [default_threads if t.strip() == "default" else int(t) for t in args.torch_threads.split(",")]
    thread_settings = list(dict.fromkeys(thread_settings)) if d3rlpy else []

    console.print(f"jax {jax.__version__} ({jax.default_backend()}), "
                  + (f"d3rlpy {d3rlpy.__version__} / torch {torch.__version__} (default {default_threads} threads), "
                     if d3rlpy else "") + f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    continuous_data = make_data(args.transitions) if set(args.algos) & set(CONTINUOUS_ALGOS) else None
    discrete_data = load_discrete_data() if set(args.algos) & set(DISCRETE_ALGOS) else None
    peak = matmul_peak_flops(args.peak_size)
    console.print(f"float32 matmul peak ({args.peak_size}x{args.peak_size}, jitted): {peak / 1e9:.1f} GFLOP/s")

    results = []
    for name in args.algos:
        console.print(f"[bold]{name}[/]: building and warming up both sides ...")
        data = discrete_data if name in DISCRETE_ALGOS else continuous_data
        ours = OffrlSide(name, data, args.steps)
        compile_s = ours.warmup()
        theirs = D3rlpySide(name, data, args.d3rlpy_steps) if d3rlpy else None
        if theirs:
            theirs.warmup()
        flops = ours.flops_per_update()
        ours_rates, fractions, ours_cpu = [], [], []
        theirs_rates: dict[int, list[float]] = {t: [] for t in thread_settings}
        theirs_cpu: dict[int, list[float]] = {t: [] for t in thread_settings}
        for _ in range(args.rounds):
            round_peak = matmul_peak_flops(args.peak_size, repeats=2)  # the peak under this round's load
            ours_rates.append(args.steps / ours.run())
            ours_cpu.append(args.steps / ours.cpu_seconds)
            fractions.append(flops * ours_rates[-1] / round_peak)
            peak = max(peak, round_peak)
            for threads in thread_settings:
                torch.set_num_threads(threads)
                theirs_rates[threads].append(args.d3rlpy_steps / theirs.run())
                theirs_cpu[threads].append(args.d3rlpy_steps / theirs.cpu_seconds)
        torch.set_num_threads(default_threads)
        d3rlpy_medians = {t: statistics.median(r) for t, r in theirs_rates.items()}
        best_threads = max(d3rlpy_medians, key=d3rlpy_medians.get) if d3rlpy_medians else None
        row = {"algo": name, "data": DISCRETE_DATASET if name in DISCRETE_ALGOS else "synthetic HalfCheetah-shaped",
               "offrl_steps_per_s": statistics.median(ours_rates),
               "offrl_rounds": ours_rates, "offrl_first_chunk_s": compile_s,
               "d3rlpy_steps_per_s_by_threads": d3rlpy_medians, "d3rlpy_rounds_by_threads": theirs_rates,
               "d3rlpy_steps_per_s": d3rlpy_medians.get(best_threads), "d3rlpy_best_threads": best_threads,
               "gflop_per_update": flops / 1e9, "peak_fraction_rounds": fractions}
        row["ratio"] = row["offrl_steps_per_s"] / row["d3rlpy_steps_per_s"] if theirs else None
        # updates per CPU-second (all threads of this process): the work per update, robust to load
        row["offrl_steps_per_cpu_s"] = statistics.median(ours_cpu)
        row["d3rlpy_steps_per_cpu_s"] = statistics.median(theirs_cpu[best_threads]) if theirs else None
        row["cpu_ratio"] = row["offrl_steps_per_cpu_s"] / row["d3rlpy_steps_per_cpu_s"] if theirs else None
        row["peak_fraction"] = statistics.median(fractions)
        console.print(f"  offrl {row['offrl_steps_per_s']:.1f} steps/s"
                      + "".join(f", d3rlpy ({t} thr) {v:.1f} steps/s" for t, v in d3rlpy_medians.items())
                      + (f", ratio {row['ratio']:.2f}x" if theirs else "") + f", {row['peak_fraction']:.0%} of peak"
                      + (f"; per CPU-second offrl {row['offrl_steps_per_cpu_s']:.0f}, d3rlpy ({best_threads} thr) "
                         f"{row['d3rlpy_steps_per_cpu_s']:.0f}: {row['cpu_ratio']:.2f}x" if theirs else ""))
        results.append(row)
        del ours, theirs

    memory = None
    if args.memory_transitions:
        console.print(f"memory: training {args.memory_algo} on {args.memory_transitions:,} transitions in a subprocess ...")
        memory = measure_memory(args.memory_algo, args.memory_transitions, 200)
        memory["budget"] = 2 * memory["dataset_bytes"] + 1.5e9

    what = []
    if continuous_data is not None:
        what.append(f"continuous: HalfCheetah-shaped data (obs {OBS_DIM}, act {ACTION_DIM}), 2 critics, "
                    f"{args.transitions:,} transitions")
    if discrete_data is not None:
        what.append(f"discrete: {DISCRETE_DATASET} (obs 4, 2 actions, {len(discrete_data['rewards']):,} transitions), 1 Q-network")
    table = Table(title=f"Training throughput, 256x256 MLPs, batch {BATCH_SIZE}; " + "; ".join(what))
    table.add_column("algorithm")
    table.add_column("offrl steps/s", justify="right")
    for t in thread_settings:
        table.add_column(f"d3rlpy steps/s ({t} thr)", justify="right")
    for col in ("ratio (vs best d3rlpy)", "ratio per CPU-s", "GFLOP/update", "offrl GFLOP/s", "of peak", "compile+1st chunk s"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(r["algo"], f"{r['offrl_steps_per_s']:.1f}",
                      *(f"{r['d3rlpy_steps_per_s_by_threads'][t]:.1f}" for t in thread_settings),
                      "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                      "-" if r["cpu_ratio"] is None else f"{r['cpu_ratio']:.2f}x", f"{r['gflop_per_update']:.3f}",
                      f"{r['gflop_per_update'] * r['offrl_steps_per_s']:.1f}", f"{r['peak_fraction']:.0%}",
                      f"{r['offrl_first_chunk_s']:.1f}")
    console.print(table)
    console.print(f"best matmul peak seen {peak / 1e9:.1f} GFLOP/s ('of peak' divides by the peak measured just before "
                  f"each offrl round, median over rounds); medians of {args.rounds} alternating rounds of "
                  f"{args.steps} offrl / {args.d3rlpy_steps} d3rlpy updates after warm-up; "
                  f"load average now {os.getloadavg()[0]:.1f} (shared machine: numbers are noisy).")
    if memory:
        console.print(f"peak RSS training {args.memory_algo} on {args.memory_transitions:,} transitions: "
                      f"{memory['peak_rss'] / 1e9:.2f} GB (dataset {memory['dataset_bytes'] / 1e9:.3f} GB; "
                      f"budget 2 x dataset + 1.5 GB = {memory['budget'] / 1e9:.2f} GB: "
                      f"{'within' if memory['peak_rss'] <= memory['budget'] else 'OVER'})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"peak_flops": peak, "results": results, "memory": memory, "args": vars(args)}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
