"""FLOPs of one training update per algorithm and setting, counted by XLA, and the projected wall
time of an ``offrl benchmark --budget cpu`` cell (3 seeds) from them. Nothing is timed.

Every count is XLA's cost analysis of a compiled function (``jax.jit(f).lower(...).compile()
.cost_analysis()["flops"]``) on HalfCheetah-shaped data (obs 17, action 6, 100,000 random
transitions in 1000-step episodes: ``benchmarks/throughput.py``'s ``make_data``, the size of the
benchmark's tier files), through the engine's own data preparation, agent creation and sampler.

XLA counts a ``lax.cond`` as its most expensive branch and a loop body once, so counting the
compiled ``update`` as it is would charge TD3's actor step on every update and one of FQL's ten
Euler steps. Here each update is traced at a given step ``s`` (:func:`update_flops`):
``agent.step`` is a constant ``s``, a ``lax.cond`` whose predicate is then known runs only its
branch, and every ``lax.scan`` is unrolled, so the count is what update ``s`` executes. A run of
``N`` updates costs the average over its phases (:func:`phase_steps`): the ``warmup_steps``
updates (SPOT's and PLAS's VAE-only phase) and the rest, each averaged over one period of
``policy_delay``.

The model-based algorithms (MOPO, MOBILE, COMBO) do three kinds of work, counted apart:

* the learner's update on a mixed batch: ``update`` at a step that neither fits nor rolls out;
* one refill of the model buffer (:func:`offrl.algos.model_based.refill`: ``rollout_starts``
  states, ``rollout_length`` steps of the policy and all ensemble members, the scan unrolled),
  run at steps 0, R, 2R, ... (``R = rollout_every``), so ``ceil(N / R)`` times per run;
* the dynamics fit at step 0, one epoch = ``n_train // model_batch_size`` minibatch steps (the
  gradient of :func:`offrl.dynamics.model_loss` over all members and Adam) plus the held-out
  score. The number of epochs is set by early stopping on the data (``model_patience``), which
  a count cannot know: the projection uses ``model_max_epochs`` (the cap a budget sets).

Evaluation: ``act`` on one observation (a scan unrolled: IDQL's 64 x 5 denoiser passes) times
``steps / eval_every`` evaluations x 10 episodes x 1000 steps x 3 seeds.

The projection divides by an effective rate of 3 vmapped seeds, derived from the six algorithms
of the running cpu table: their 3-seed update rates on HalfCheetah-shaped data (2026-12-02,
other jobs paused; ``offrl/benchmark.py``'s comment above ``BUDGETS``) times 3 x their counted
FLOPs per update. It adds 10 s per evaluation for the env steps (1 minute for a 30,000-update cell) and half a
minute per cell for compiling and loading.

Run from the repository root (compiles about 150 programs, no training; ``PYTHONPATH=.`` so that
this checkout's ``offrl`` is counted, not an installed one)::

    PYTHONPATH=. python benchmarks/update_flops.py --json benchmarks/results/new-algos-budget-2026-12-03.json
    PYTHONPATH=. python benchmarks/update_flops.py --algos edac,sac_n --table budget --rate 151
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # throughput.make_data

ENV_ID = "HalfCheetah-v5"
ROWS = 100_000
SEEDS, EVAL_EPISODES, EPISODE_STEPS = 3, 10, 1000
EVAL_SECONDS, COMPILE_MINUTES = 10.0, 0.5  # per evaluation (env steps: 1 min per 30k-update cell); per cell

#: the cpu table's algorithms: (budget settings, 3-seed updates/s measured idle on 2026-12-02)
REFERENCES = {
    "bc": ({}, 432.0),
    "td3_bc": ({}, 122.0),
    "iql": ({}, 120.0),
    "awac": ({"actor_hidden_dims": "256,256"}, 31.0),
    "cql": ({"hidden_dims": "128,128", "bc_warmup_steps": "0"}, 26.0),
    "bcq": ({"hidden_dims": "128,128", "vae_hidden_dims": "256,256"}, 99.0),
}

#: candidate settings per algorithm: label -> overrides ("default" is the algorithm's own config)
W128 = {"hidden_dims": "128,128"}
CANDIDATES = {
    "rebrac": {"default": {}, "2x256 b256": {"hidden_dims": "256,256", "batch_size": "256"},
               "2x256 b512": {"hidden_dims": "256,256", "batch_size": "512"},
               "2x128 b1024": {"hidden_dims": "128,128"}, "2x128 b512": {**W128, "batch_size": "512"}},
    "sac_n": {"default": {}, "2x256 N10": {"hidden_dims": "256,256"}, "2x128 N10": W128,
              "2x128 N5": {**W128, "num_qs": "5"}},
    "edac": {"default": {}, "2x256 N10": {"hidden_dims": "256,256"}, "2x128 N10": W128,
             "2x128 N5": {**W128, "num_qs": "5"}},
    "lb_sac": {"default": {}, "2x128 b2048": {**W128, "batch_size": "2048"},
               "2x128 b1024": {**W128, "batch_size": "1024"}, "2x128 N5 b1024": {**W128, "batch_size": "1024", "num_qs": "5"},
               "2x128 N5 b512": {**W128, "batch_size": "512", "num_qs": "5"}},
    "spot": {"default": {"warmup_steps": "10000"}, "2x256 vae256": {"vae_hidden_dims": "256,256", "warmup_steps": "10000"},
             "2x128 vae256": {**W128, "vae_hidden_dims": "256,256", "warmup_steps": "10000"}},
    "xql": {"default": {}, "2x128": W128},
    "crr": {"default": {}, "2x128": W128},
    "bear": {"default": {}, "2x256 vae256": {"vae_hidden_dims": "256,256"},
             "2x128 vae256": {**W128, "vae_hidden_dims": "256,256"}},
    "plas": {"default": {"warmup_steps": "10000"}, "2x256 vae256": {"hidden_dims": "256,256", "vae_hidden_dims": "256,256", "warmup_steps": "10000"},
             "2x128 vae256": {**W128, "vae_hidden_dims": "256,256", "warmup_steps": "10000"}},
    "td3_awr": {"default": {}, "2x256 b256": {"hidden_dims": "256,256", "batch_size": "256"},
                "2x256 b512": {"hidden_dims": "256,256", "batch_size": "512"},
                "2x128 b1024": {**W128, "batch_size": "1024"}, "2x128 b512": {**W128, "batch_size": "512"}},
    "brac": {"default": {}, "2x128": W128},
    "idql": {"default": {}, "3x128 N32": {"actor_hidden_dims": "128,128,128", "num_samples": "32"},
             "2x128 3x128": {**W128, "actor_hidden_dims": "128,128,128"}},
    "fql": {"default": {}, "2x256": {"hidden_dims": "256,256"}, "2x256 K5": {"hidden_dims": "256,256", "flow_steps": "5"},
            "2x128": W128, "3x128": {"hidden_dims": "128,128,128"}},
    "mopo": {"default": {}, "starts10k ep20": {"rollout_starts": "10000", "model_max_epochs": "20"}},
    "mobile": {"default": {}, "starts10k ep20": {"rollout_starts": "10000", "model_max_epochs": "20"},
               "starts10k ep20 S5": {"rollout_starts": "10000", "model_max_epochs": "20", "successor_samples": "5"},
               "2x128 starts10k S5": {**W128, "rollout_starts": "10000", "model_max_epochs": "10", "successor_samples": "5"},
               "2x128 starts10k S3": {**W128, "rollout_starts": "10000", "model_max_epochs": "10", "successor_samples": "3"}},
    "combo": {"default": {}, "2x256 starts10k ep20": {"hidden_dims": "256,256", "rollout_starts": "10000", "model_max_epochs": "20"},
              "2x128 starts10k": {**W128, "rollout_starts": "10000", "model_max_epochs": "10"},
              "2x128 starts10k n5": {**W128, "rollout_starts": "10000", "model_max_epochs": "10", "n_actions": "5"}},
}


# ---------------------------------------------------------------------- counting
@contextlib.contextmanager
def static_control_flow():
    """While tracing: a ``jax.lax.cond`` with a known predicate runs its branch only, and
    ``jax.lax.scan`` is unrolled, so that XLA's count is what one execution does."""
    import jax
    from jax.core import Tracer

    cond, scan = jax.lax.cond, jax.lax.scan

    def known_cond(pred, true_fun, false_fun, *operands, **kwargs):
        if isinstance(pred, Tracer):
            return cond(pred, true_fun, false_fun, *operands, **kwargs)
        return (true_fun if bool(pred) else false_fun)(*operands)

    def unrolled_scan(f, init, xs=None, length=None, **kwargs):
        return scan(f, init, xs, length, **{**kwargs, "unroll": True})

    jax.lax.cond, jax.lax.scan = known_cond, unrolled_scan
    try:
        yield
    finally:
        jax.lax.cond, jax.lax.scan = cond, scan


def compiled_flops(fn, *args) -> float:
    """XLA's FLOP count of ``jax.jit(fn)(*args)``."""
    import jax

    with static_control_flow():
        analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return float(analysis.get("flops", float("nan")))


class Setup:
    """One algorithm and setting on the synthetic data, built as ``offrl.engine.train`` builds a run."""

    def __init__(self, algo: str, overrides: dict, steps: int, arrays: dict):
        import jax

        from offrl import engine
        from offrl.algos import get_algorithm
        from offrl.data import Dataset
        from offrl.engine.chunks import unstack
        from offrl.engine.data import sampler
        from offrl.engine.training import dataset_config, run_config

        self.module = get_algorithm(algo)
        dataset = Dataset.from_arrays(arrays["observations"], arrays["actions"], arrays["rewards"], arrays["terminals"],
                                      arrays["timeouts"], next_observations=arrays["next_observations"])
        config = dataset_config(self.module, run_config(self.module, overrides, steps), dataset, ENV_ID)
        self.config, self.steps = config, steps
        self.data, info = engine.prepare_data(dataset, config, ENV_ID, self.module)
        agents, _ = engine.create_agents(self.module, config, info.obs_dim, info.action_dim, 0, 1)
        self.agent = unstack(agents)
        self.batch = sampler(self.module)(self.data, jax.random.PRNGKey(1), config.batch_size)

    def update_flops(self, step: int) -> float:
        """FLOPs of ``update`` at agent step ``step`` (module docstring)."""
        import jax
        import jax.numpy as jnp

        update = self.module.update

        def at_step(agent, batch):
            with jax.ensure_compile_time_eval():
                return update(agent.replace(step=jnp.asarray(step, jnp.int32)), batch)

        return compiled_flops(at_step, self.agent, self.batch)

    def act_flops(self) -> float:
        """FLOPs of ``act`` on one observation."""
        return compiled_flops(self.module.act, self.agent, self.data["observations"][:1])

    def phase_steps(self) -> list[tuple[float, int]]:
        """``[(weight, step)]`` whose weighted FLOPs are the mean over the run's ``steps`` updates:
        a period of ``policy_delay`` in the warm-up and one after it, away from the refill steps."""
        cfg, n = self.config, self.steps
        period = int(getattr(cfg, "policy_delay", 1))
        warmup = min(int(getattr(cfg, "warmup_steps", 0)), n)
        phases = [(warmup, 1)] if warmup > 1 else []
        phases.append((n - warmup, max(warmup, 1) + 1))
        return [(length / n / period, start + j) for length, start in phases if length > 0 for j in range(period)]

    def mean_update_flops(self) -> float:
        return sum(w * self.update_flops(s) for w, s in self.phase_steps())

    # model-based
    def refill_flops(self) -> float:
        from offrl.algos import model_based

        return compiled_flops(model_based.refill, self.agent, self.data)

    def fit_epoch_flops(self) -> tuple[float, int]:
        """``(FLOPs of one epoch of the dynamics fit, minibatch steps per epoch)``."""
        import jax
        import optax

        from offrl import dynamics as dyn

        model = self.agent.dynamics
        s = model.settings
        inputs, targets, terminals = dyn.model_arrays(self.data)
        n_train = inputs.shape[0] - dyn.holdout_size(s, inputs.shape[0])
        batch = min(s.model_batch_size, n_train)
        rows = jax.numpy.arange(s.ensemble_size * batch).reshape(s.ensemble_size, batch)
        tx = optax.adam(s.model_lr)

        def minibatch(params, opt_state, x, y, t):
            grads, _ = jax.grad(dyn.model_loss, has_aux=True)(params, model.net, x, y, t, s.model_weight_decay)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        held = dyn.holdout_size(s, inputs.shape[0])
        step = compiled_flops(minibatch, model.params, model.opt_state, inputs[rows], targets[rows], terminals[rows])
        hold = compiled_flops(lambda p, x, y: dyn.holdout_mse(p, model.net, x, y), model.params, inputs[:held], targets[:held])
        return (n_train // batch) * step + hold, n_train // batch


def count(algo: str, label: str, overrides: dict, steps: int, eval_every: int, arrays: dict) -> dict:
    """Every count of one algorithm and setting for a run of ``steps`` updates."""
    setup = Setup(algo, overrides, steps, arrays)
    row = {"algo": algo, "setting": label, "overrides": overrides, "steps": steps,
           "update_gflop": setup.mean_update_flops() / 1e9,
           "update_gflop_by_step": {s: setup.update_flops(s) / 1e9 for _, s in setup.phase_steps()},
           "act_mflop": setup.act_flops() / 1e6}
    evaluations = steps // eval_every
    row["eval_tflop_per_cell"] = row["act_mflop"] * 1e6 * evaluations * EVAL_EPISODES * EPISODE_STEPS * SEEDS / 1e12
    if hasattr(setup.config, "rollout_every"):
        cfg = setup.config
        refills = math.ceil(steps / cfg.rollout_every)
        epoch, minibatches = setup.fit_epoch_flops()
        row.update(refill_gflop=setup.refill_flops() / 1e9, refills=refills,
                   fit_epoch_gflop=epoch / 1e9, fit_minibatches_per_epoch=minibatches,
                   model_max_epochs=cfg.model_max_epochs)
        row["rollout_gflop_per_update"] = row["refill_gflop"] * refills / steps
    return row


# ---------------------------------------------------------------------- projection
def cell_tflop(row: dict, epochs: int | None = None) -> float:
    """FLOPs of one 3-seed cell (updates, rollouts, fit at ``epochs`` or the row's cap, evaluation), in TFLOP."""
    per_seed = row["steps"] * (row["update_gflop"] + row.get("rollout_gflop_per_update", 0.0)) / 1e3
    if "fit_epoch_gflop" in row:
        per_seed += (epochs or row["model_max_epochs"] or 0) * row["fit_epoch_gflop"] / 1e3
    return SEEDS * per_seed + row["eval_tflop_per_cell"]


def project_minutes(row: dict, rate_gflops: float, eval_every: int) -> float:
    """Minutes of one 3-seed cell: its FLOPs at ``rate_gflops``, the evaluations' env steps, compiling."""
    return cell_tflop(row) * 1e3 / rate_gflops / 60 + (row["steps"] // eval_every) * EVAL_SECONDS / 60 + COMPILE_MINUTES


def calibrate(arrays: dict, log=print) -> list[dict]:
    """The effective 3-seed GFLOP/s of each reference algorithm at its cpu-table setting."""
    from offrl.benchmark import BUDGETS

    rows = []
    for algo, (overrides, rate) in REFERENCES.items():
        steps = BUDGETS["cpu"]["algos"].get(algo, {}).get("steps", BUDGETS["cpu"]["steps"])
        setup = Setup(algo, overrides, steps, arrays)
        flops = setup.mean_update_flops()
        rows.append({"algo": algo, "overrides": overrides, "update_gflop": flops / 1e9, "updates_per_s": rate,
                     "effective_gflops": SEEDS * flops * rate / 1e9})
        log(f"  {algo:8s} {flops / 1e9:7.3f} GFLOP/update x 3 seeds x {rate:5.0f}/s = {rows[-1]['effective_gflops']:6.0f} GFLOP/s")
    return rows


def budget_rows(algos) -> list[tuple[str, str, dict, int]]:
    """``(algo, "budget", set, steps)`` of the cpu budget's entry for each algorithm."""
    from offrl.benchmark import BUDGETS

    profile = BUDGETS["cpu"]
    return [(a, "budget", dict(profile["algos"].get(a, {}).get("set", {})),
             int(profile["algos"].get(a, {}).get("steps", profile["steps"]))) for a in algos]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algos", default=",".join(CANDIDATES), help="comma-separated subset of " + ",".join(CANDIDATES))
    p.add_argument("--table", default="candidates,budget", help="candidates (every setting above, at 30,000 "
                   "updates), budget (the cpu budget's entries) or both")
    p.add_argument("--settings", default=None, help="comma-separated candidate labels to count (default: all)")
    p.add_argument("--steps", type=int, default=30_000, help="updates per cell for the candidates")
    p.add_argument("--rate", type=float, default=None, help="effective 3-seed GFLOP/s (default: the calibration's median; given, the calibration is skipped)")
    p.add_argument("--json", default=None, help="also write every count to this JSON file")
    args = p.parse_args(argv)

    import statistics

    from offrl.benchmark import BUDGETS
    from throughput import make_data

    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = sorted(set(algos) - set(CANDIDATES))
    if unknown:
        p.error(f"--algos: unknown {', '.join(unknown)}; choose from {', '.join(CANDIDATES)}")
    tables = {t.strip() for t in args.table.split(",")}
    arrays = make_data(ROWS)
    eval_every = BUDGETS["cpu"]["eval_every"]
    reference = []
    if args.rate is None:
        print("calibration: the cpu table's algorithms, 3-seed rates of 2026-12-02 (idle):")
        reference = calibrate(arrays)
    rate = args.rate or statistics.median(r["effective_gflops"] for r in reference)
    print(f"effective rate used: {rate:.0f} GFLOP/s for 3 seeds; + {EVAL_SECONDS:.0f} s per evaluation "
          f"+ {COMPILE_MINUTES:.1f} min compile per cell")
    todo = []
    if "candidates" in tables:
        wanted = None if args.settings is None else {x.strip() for x in args.settings.split(",")}
        todo += [(a, label, ov, args.steps) for a in algos for label, ov in CANDIDATES[a].items()
                 if wanted is None or label in wanted]
    if "budget" in tables:
        todo += budget_rows(algos)
    results = []
    header = (f"{'algo':8s} {'setting':22s} {'GFLOP/upd':>9s} {'steps':>6s} {'rollout':>8s} {'fit/ep':>7s} "
              f"{'eval TF':>7s} {'TFLOP/cell':>10s} {'min/cell':>8s}")
    print(header)
    for algo, label, overrides, steps in todo:
        row = count(algo, label, overrides, steps, eval_every, arrays)
        row["cell_tflop"] = cell_tflop(row)
        row["minutes_per_cell"] = project_minutes(row, rate, eval_every)
        results.append(row)
        rollout = f"{row['rollout_gflop_per_update']:.3f}" if "rollout_gflop_per_update" in row else "-"
        fit = f"{row['fit_epoch_gflop']:.0f}" if "fit_epoch_gflop" in row else "-"
        print(f"{algo:8s} {label:22s} {row['update_gflop']:9.3f} {steps:6d} {rollout:>8s} {fit:>7s} "
              f"{row['eval_tflop_per_cell']:7.2f} {row['cell_tflop']:10.1f} {row['minutes_per_cell']:8.1f}", flush=True)
    budget = [r for r in results if r["setting"] == "budget"]
    if budget:
        cells = 6  # 3 envs x (medium, medium-replay)
        rates = sorted({rate, *(r["effective_gflops"] for r in reference)})
        totals = {f"{r:.0f}": sum(cells * project_minutes(row, r, eval_every) for row in budget) for r in rates}
        print(f"budget: {len(budget)} algorithms x {cells} cells = {len(budget) * cells} cells, projected "
              + ", ".join(f"{m / 60:.1f} h at {r} GFLOP/s" for r, m in totals.items()))
        results.append({"algo": "total", "setting": "budget", "cells": len(budget) * cells,
                        "projected_minutes_by_rate": totals})
    if args.json:
        import jax

        record = {"command": "python benchmarks/update_flops.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "jax": jax.__version__, "cpus": os.cpu_count(), "rows": ROWS, "env_shape": ENV_ID,
                  "calibration": reference, "rate_gflops": rate, "eval_seconds_per_evaluation": EVAL_SECONDS,
                  "compile_minutes": COMPILE_MINUTES, "results": results}
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
