"""Off-policy evaluation benchmarks: estimator speed, FQE vs d3rlpy, and estimators vs the truth.

``speed``: (a) every trajectory estimator (IS, PDIS, WIS, WPDIS, clipped IS, DR, WDR, DM, each
with a 1000-resample bootstrap interval) on 1M synthetic transitions (1000 episodes of 1000
steps), timed one by one; (b) FQE updates/s of ``offrl.ope.fqe`` against ``d3rlpy.ope.FQE`` on
the same 100k HalfCheetah-shaped transitions (obs 17, action 6) with the same settings:
256 x 256 critic, one critic, batch 256, Adam 1e-4, a hard target copy every 100 steps, the
target policy a 256 x 256 deterministic MLP with the deterministic backup ``Q(s', pi(s'))`` on
both sides (d3rlpy's rule; ``offrl ope`` itself backs up the Gaussian-smoothed policy with
``next_action_samples`` draws per row, see ``offrl/ope/fqe.py``). d3rlpy calls the policy on every minibatch's
next observations; offrl computes ``pi(s')`` once for the dataset (timed, and added to its
total), then runs jitted ``lax.scan`` chunks. Rounds alternate between the two sides so
background load hits both alike; medians are reported. offrl is also timed evaluating ten
policies at once (``vmap``), reported as policy-updates/s.

``tiers``: candidates are checkpoints of BC, TD3+BC, IQL and CQL trained on the bundled
``hopper-medium-20k-v0`` tier (made by ``offrl collect``; it logs the behaviour policy's
``action_log_probs``) at several step counts (each exported after training to that step,
then resumed). Every estimator evaluates every candidate on that dataset; each candidate is then
rolled out in Hopper-v5 for the true discounted return of the same target policy the
estimators estimate (the Gaussian of ``--target-std`` around its action, truncated to the
action box), and the table reports each estimator's
absolute and relative error, Spearman rank correlation and regret@1.

``curve``: FQE of the behaviour policy on its own data (the next logged action backed up), whose
value needs no environment: on episodes that end in a true terminal the discounted return-to-go
is an unbiased sample of ``Q^b(s, a)``, so ``mean Q / mean G`` (all rows, and the start states)
must reach 1. One curve per FQE setting (the old defaults and each candidate fix alone: target
rate, hard copies, return scaling, learning rate, width), every 1000 steps.

``dope``: the DOPE protocol (Fu et al. 2021). Base policies (one run per ``algo=steps``, trained on
the whole dataset: BC, TD3+BC, IQL at two budgets, CQL with 64 x 64 networks and no BC warm-up,
``--candidate-set``), each evaluated at several target stds (the same mean action with Gaussian
action noise of that size), checked pairwise distinct on dataset observations and rolled out in
the env first (true values, returns and normalized scores). Then every estimator of
``offrl.ope.evaluate_policies``, including ``model`` (the target policy rolled out in a dynamics
ensemble fitted on the data, as ``offrl ope --estimators model`` does; its size and epoch cap from
``--ensemble-size``, ``--num-elites``, ``--model-hidden-dims``, ``--model-max-epochs``), on the
whole dataset or ``--ope-episodes`` whole episodes of it, against the true values: mean absolute
error, Spearman and regret@1 (also as fractions of the set's value range) with 2.5-97.5% intervals
over random subsets of two thirds of the policies, and model - FQE on the same subsets. FQE trains
until flat (``--fqe-seeds`` critics per policy), its curve plotted; the ensemble's fit time, epochs
and held-out error are reported. A candidate whose FQE diverged (``offrl.ope.fqe.diverged``) keeps
its frozen estimate; the metrics are given over all candidates and over the others, and regret@1 is
that of ``offrl select``'s choice, which leaves diverged candidates out.

``dope-replay``: the divergence rule and the stopping rule of ``train_until_flat`` applied, chunk by
chunk, to the FQE curve recorded in a ``dope`` JSON (one seed): when each candidate would have been
frozen, when the others would have stopped, and the DOPE metrics of the estimates at that step.
This is what the guarded run would have produced: the candidates' critics are trained side by side
but independently (``vmap``), so freezing one leaves the others' curves unchanged.

Run::

    python benchmarks/ope.py curve --curve-steps 20000
    python benchmarks/ope.py dope --fqe-hidden 64,64
    python benchmarks/ope.py dope --dataset benchmarks/data/tiers/hopper-medium-v0.hdf5 --tag hopper-medium   # benchmarks/README.md
    python benchmarks/ope.py dope-replay --from benchmarks/results/ope-dope-hopper-medium-20k-2026-12-01.json
    python benchmarks/ope.py speed --no-d3rlpy
    $D3RLPY_ENV/bin/python benchmarks/ope.py speed          # with d3rlpy (see benchmarks/README.md)
    python benchmarks/ope.py tiers --steps 1000,4000,10000 --algo-steps "cql=1000,2500" --fqe-steps 10000
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

# One BLAS thread for NumPy (unless set): the target policies are NumPy MLPs called on a few rows per env or
# model step, where OpenBLAS's thread hand-off costs far more than the product on a busy 2-core machine
# (measured at load 7: 16 ms vs 0.12 ms of CPU for 10 rows of an 11-256-256-3 policy; 1.5 vs 0.23 s for
# 100 model-rollout steps from 20 starts). JAX and torch keep their own thread pools. Set before NumPy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OBS_DIM, ACTION_DIM, BATCH = 17, 6, 256
#: ``dope``'s default base policies (each at every ``--noise`` std) and their config overrides.
DOPE_CANDIDATES = "bc=500,5000;td3_bc=2000,10000;iql=2000,10000;cql=5000"
DOPE_CANDIDATE_SETTINGS = "cql.hidden_dims=64,64;cql.bc_warmup_steps=0"


# ---------------------------------------------------------------------- (a) trajectory estimators
def time_estimators(num_episodes: int = 1000, horizon: int = 1000, num_bootstrap: int = 1000) -> dict:
    from offrl.ope import estimators as est

    rng = np.random.default_rng(0)
    n = num_episodes * horizon
    rewards, q, v = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    logp_e, logp_b = rng.normal(scale=0.1, size=n), rng.normal(scale=0.1, size=n)
    starts = np.arange(num_episodes) * horizon
    t0 = time.perf_counter()
    episodes = est.make_episodes(rewards, logp_e, logp_b, starts, starts + horizon, 0.99, q, v)
    times = {"pad to (N, T)": time.perf_counter() - t0}
    for name in est.ESTIMATORS:
        t0 = time.perf_counter()
        est.estimate(episodes, name, num_bootstrap=num_bootstrap)
        times[name] = time.perf_counter() - t0
    return {"transitions": n, "episodes": num_episodes, "horizon": horizon, "bootstrap": num_bootstrap,
            "seconds": times, "total_s": sum(times.values())}


# ---------------------------------------------------------------------- (b) FQE vs d3rlpy
def make_data(num_transitions: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((num_transitions, OBS_DIM), dtype=np.float32)
    timeouts = np.zeros(num_transitions, bool)
    timeouts[999::1000] = True
    timeouts[-1] = True
    return {"observations": obs, "actions": rng.uniform(-1, 1, (num_transitions, ACTION_DIM)).astype(np.float32),
            "rewards": rng.standard_normal(num_transitions, dtype=np.float32),
            "next_observations": np.concatenate([obs[1:], rng.standard_normal((1, OBS_DIM), dtype=np.float32)]),
            "terminals": np.zeros(num_transitions, bool), "timeouts": timeouts}


def random_policy_layers(seed: int):
    rng = np.random.default_rng(seed)
    sizes = (OBS_DIM, 256, 256, ACTION_DIM)
    return [(rng.normal(size=(a, b)).astype(np.float32) / np.sqrt(a), np.zeros(b, np.float32)) for a, b in zip(sizes[:-1], sizes[1:])]


class OffrlFQE:
    def __init__(self, data: dict, steps: int, num_policies: int = 1):
        from offrl.data.dataset import Dataset
        from offrl.ope import fqe
        from offrl.policy import NumpyPolicy

        self.fqe, self.steps = fqe, steps
        ds = Dataset.from_arrays(**{k: data[k] for k in ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")})
        policies = [NumpyPolicy(random_policy_layers(k), np.zeros(OBS_DIM), np.ones(OBS_DIM), -np.ones(ACTION_DIM), np.ones(ACTION_DIM))
                    for k in range(num_policies)]
        t0 = time.perf_counter()
        next_actions = np.stack([p(ds.next_observations) for p in policies])
        self.precompute_s = time.perf_counter() - t0
        self.data = fqe.fqe_data(ds, next_actions)
        config = fqe.FQEConfig(hidden_dims=(256, 256), learning_rate=1e-4, batch_size=BATCH, target_update_period=100)
        self.agents = fqe.create(config, self.data, seeds=1)

    def warmup(self) -> float:
        t0 = time.perf_counter()
        self.agents, m = self.fqe.train_chunk(self.agents, self.data, self.steps)
        np.asarray(m["fqe/loss"])
        return time.perf_counter() - t0

    def run(self) -> float:
        t0 = time.perf_counter()
        self.agents, m = self.fqe.train_chunk(self.agents, self.data, self.steps)
        np.asarray(m["fqe/loss"])
        return time.perf_counter() - t0


class D3rlpyFQE:
    def __init__(self, data: dict, steps: int):
        import d3rlpy

        self.dataset = d3rlpy.dataset.MDPDataset(
            data["observations"], data["actions"], data["rewards"], data["terminals"].astype(np.float32),
            data["timeouts"].astype(np.float32), action_space=d3rlpy.ActionSpace.CONTINUOUS)
        mlp = d3rlpy.models.VectorEncoderFactory(hidden_units=[256, 256])
        policy = d3rlpy.algos.TD3PlusBCConfig(actor_encoder_factory=mlp, critic_encoder_factory=mlp).create(device="cpu:0")
        policy.build_with_dataset(self.dataset)
        config = d3rlpy.ope.FQEConfig(encoder_factory=mlp, learning_rate=1e-4, batch_size=BATCH, n_critics=1,
                                      target_update_interval=100)
        self.fqe = d3rlpy.ope.FQE(algo=policy, config=config, device="cpu:0")
        self.fqe.build_with_dataset(self.dataset)
        self.steps = steps

    def warmup(self) -> float:
        t0 = time.perf_counter()
        for _ in range(5):
            self.fqe.update(self.dataset.sample_transition_batch(BATCH))
        return time.perf_counter() - t0

    def run(self) -> float:
        t0 = time.perf_counter()
        for _ in range(self.steps):
            self.fqe.update(self.dataset.sample_transition_batch(BATCH))
        return time.perf_counter() - t0


def import_d3rlpy_quietly():
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        import d3rlpy  # noqa: F401
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    return sys.modules["d3rlpy"]


def run_speed(args) -> dict:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=110)
    console.print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    est = time_estimators(args.episodes, args.horizon, args.bootstrap)
    table = Table(title=f"trajectory estimators on {est['transitions']:,} transitions ({est['episodes']} x {est['horizon']}), "
                        f"{est['bootstrap']}-resample bootstrap each")
    table.add_column("step")
    table.add_column("seconds", justify="right")
    for k, v in est["seconds"].items():
        table.add_row(k, f"{v:.2f}")
    table.add_row("total", f"{est['total_s']:.2f}", style="bold")
    console.print(table)

    data = make_data(args.fqe_transitions)
    ours = OffrlFQE(data, args.fqe_steps)
    ours_many = OffrlFQE(data, args.fqe_steps, num_policies=10)
    compile_s = ours.warmup()
    ours_many.warmup()
    d3 = None if args.no_d3rlpy else import_d3rlpy_quietly()
    theirs = D3rlpyFQE(data, args.d3rlpy_steps) if d3 else None
    if theirs:
        theirs.warmup()
    threads = []
    if theirs:
        import torch

        default_threads = torch.get_num_threads()
        threads = list(dict.fromkeys(default_threads if t == "default" else int(t) for t in args.torch_threads.split(",")))
    rates = {"offrl": [], "offrl x10 policies": [], **{f"d3rlpy ({t} torch threads)": [] for t in threads}}
    for _ in range(args.rounds):
        rates["offrl"].append(args.fqe_steps / ours.run())
        rates["offrl x10 policies"].append(10 * args.fqe_steps / ours_many.run())
        for t in threads:
            torch.set_num_threads(t)
            rates[f"d3rlpy ({t} torch threads)"].append(args.d3rlpy_steps / theirs.run())
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    best = max((v for k, v in med.items() if k.startswith("d3rlpy")), default=None)
    table = Table(title=f"FQE updates/s, {args.fqe_transitions:,} transitions, 256x256, batch {BATCH}, median of {args.rounds} alternating rounds")
    for col in ("side", "updates/s", "ratio vs best d3rlpy"):
        table.add_column(col, justify="left" if col == "side" else "right")
    for k, v in med.items():
        table.add_row(k, f"{v:,.1f}", f"{v / best:.2f}x" if best else "-")
    console.print(table)
    console.print(f"offrl: pi(s') for the dataset computed once in {ours.precompute_s:.2f} s (1 policy) / "
                  f"{ours_many.precompute_s:.2f} s (10); first chunk incl. XLA compile {compile_s:.1f} s; "
                  f"load average {os.getloadavg()[0]:.1f} at end" + ("" if d3 else "; d3rlpy not timed (--no-d3rlpy)"))
    return {"estimators": est, "fqe_updates_per_s": med, "ratio_vs_best_d3rlpy": med["offrl"] / best if best else None, "fqe_rounds": rates, "precompute_s": ours.precompute_s,
            "precompute_10_s": ours_many.precompute_s, "compile_s": compile_s,
            "d3rlpy": getattr(d3, "__version__", None), "load_average_end": os.getloadavg()[0]}


# ---------------------------------------------------------------------- tiers experiment
def run_tiers(args) -> dict:
    from rich.console import Console
    from rich.table import Table

    from offrl.checkpoint import export_numpy_policy
    from offrl.data import load
    from offrl.engine import train
    from offrl.ope.check import true_values
    from offrl.ope.evaluate import OPEConfig, evaluate_policies
    from offrl.ope.fqe import FQEConfig
    from offrl.ope.metrics import estimator_metrics
    from offrl.ope.plots import plot_check
    from offrl.ope.policies import load_policy

    console = Console(width=110)
    work = Path(args.work)
    dataset = load(args.dataset)
    steps = {algo: [int(s) for s in args.steps.split(",")] for algo in args.algos.split(",")}
    for item in filter(None, args.algo_steps.split(";")):
        algo, values = item.split("=")
        steps[algo] = [int(s) for s in values.split(",")]
    candidates = []
    for algo in args.algos.split(","):
        for n in steps[algo]:
            folder = work / f"{algo}-{n}"
            if not (folder / "policy.json").exists():
                console.print(f"training {algo} to step {n}")
                # One run per algorithm, stopped at each step count: the learning-rate schedules span the
                # longest count, so a checkpoint at 1000 steps is the same as that run's step 1000.
                run = train(algo, dataset, steps=max(steps[algo]), stop_at=n, eval_every=10**9, eval_episodes=0,
                            out=work / f"run-{algo}", resume=(work / f"run-{algo}" / "checkpoints" / "latest.json").exists(),
                            progress=False)
                export_numpy_policy(run, folder)
            candidates.append(folder)
    policies = [load_policy(c, std=args.target_std) for c in candidates]
    for p in policies:
        p.meta["env_id"] = args.env
    config = OPEConfig(discount=args.discount, fqe_steps=args.fqe_steps, num_bootstrap=args.bootstrap,
                       fqe=FQEConfig(hidden_dims=(256, 256)))
    t0 = time.perf_counter()
    report = evaluate_policies(policies, dataset, config, progress=lambda text: console.print(f"  {text}"))
    ope_s = time.perf_counter() - t0
    console.print(f"rolling out {len(policies)} candidates x {args.episodes} episodes in {args.env}")
    truth = true_values(policies, args.env, args.episodes, args.discount)
    true = [truth[p]["value"] for p in report.policies]
    table = Table(title=f"{len(policies)} candidates on {args.dataset}: estimators vs the true discounted return "
                        f"(gamma {args.discount}, {args.episodes} rollouts each)")
    for col in ("estimator", "abs error", "rel error", "Spearman", "regret@1"):
        table.add_column(col, justify="left" if col == "estimator" else "right")
    scores = {}
    for name in config.estimators:
        m = estimator_metrics(report.estimates(name), true)
        scores[name] = m
        table.add_row(name, f"{m['abs_error']:.2f}", f"{m['rel_error']:.3f}", f"{m['spearman']:.2f}", f"{m['regret@1']:.2f}")
    console.print(table)
    values = Table(title="candidates: true value and a few estimates")
    for col in ("candidate", "true", "return", "fqe", "dr", "wis", "ESS"):
        values.add_column(col, justify="left" if col == "candidate" else "right")
    for p in report.policies:
        r = report.results[p]
        values.add_row(p, f"{truth[p]['value']:.1f}", f"{truth[p]['return']:.0f}", f"{r['fqe'].estimate:.1f}", f"{r['dr'].estimate:.1f}",
                       f"{r['wis'].estimate:.1f}", f"{r['wis'].ess:.1f}")
    console.print(values)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot = plot_check(report, truth, out / f"ope-tiers-{args.tag}.png")
    console.print(f"OPE of {len(policies)} candidates took {ope_s:.0f} s; figure {plot}")
    return {"dataset": args.dataset, "candidates": report.policies, "truth": truth, "metrics": scores,
            "rows": report.table(), "ope_seconds": ope_s}


# ---------------------------------------------------------------------- FQE convergence curves
CURVE_CONFIGS = {
    # name: (FQEConfig overrides, normalise rewards by the return scale)
    "old: 256x256 Adam 1e-4 Polyak 0.005": ({"hidden_dims": (256, 256), "learning_rate": 1e-4, "tau": 0.005}, False),
    "old + hard copy /100 (last benchmark)": ({"hidden_dims": (256, 256), "learning_rate": 1e-4, "target_update_period": 100}, False),
    "old + reward scaling": ({"hidden_dims": (256, 256), "learning_rate": 1e-4, "tau": 0.005}, True),
    "old + Polyak 0.05": ({"hidden_dims": (256, 256), "learning_rate": 1e-4, "tau": 0.05}, False),
    "scaling + Polyak 0.05": ({"hidden_dims": (256, 256), "learning_rate": 1e-4, "tau": 0.05}, True),
    "scaling + Polyak 0.05 + Adam 3e-4": ({"hidden_dims": (256, 256), "learning_rate": 3e-4, "tau": 0.05}, True),
    "64x64 scaling + Polyak 0.05 + Adam 3e-4": ({"hidden_dims": (64, 64), "learning_rate": 3e-4, "tau": 0.05}, True),
    "64x64 old": ({"hidden_dims": (64, 64), "learning_rate": 1e-4, "tau": 0.005}, False),
}


def behaviour_problem(dataset_path: str, discount: float):
    """FQE of the behaviour policy itself on its own data (the backup uses the next logged
    action, ``a'_i = a_{i+1}``), whose value is known without an environment: on an episode that
    ends in a true terminal, the discounted return-to-go ``G_i`` is an unbiased sample of
    ``Q^b(s_i, a_i)``, so ``mean_i Q(s_i, a_i)`` over those rows must equal ``mean_i G_i``."""
    from offrl.data import load

    ds = load(dataset_path)
    starts, ends = ds.episode_bounds()
    nxt = np.concatenate([ds.actions[1:], ds.actions[-1:]]).astype(np.float32)
    last = ends - 1
    nxt[last] = ds.actions[last]              # episode ends: masked (terminal) or gamma^1000-small (timeout)
    g = ds.returns_to_go(discount)
    terminated = np.zeros(len(ds), bool)
    for a, b in zip(starts, ends):
        terminated[a:b] = bool(ds.terminals[b - 1])
    done_starts = starts[ds.terminals[ends - 1].astype(bool)]
    return ds, nxt[None], terminated, float(g[terminated].mean()), len(starts), int(terminated.sum()), done_starts, float(g[done_starts].mean())


def plot_curves(result: dict, path: Path) -> Path | None:
    """FQE estimate / truth against steps, one line per configuration (all rows; starts dashed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, (name, c) in enumerate(result["curves"].items()):
        steps = [r["step"] for r in c["curve"]]
        line, = ax.plot(steps, [r["ratio"] for r in c["curve"]], label=name, lw=1.2)
        if "start_ratio" in c["curve"][0]:
            ax.plot(steps, [r["start_ratio"] for r in c["curve"]], color=line.get_color(), ls="--", lw=0.9)
    ax.axhline(1.0, color="k", lw=0.7)
    ax.set(xlabel="FQE step", ylabel="mean Q / mean discounted return-to-go", ylim=(0, 1.15),
           title=f"FQE of the behaviour policy on {Path(result['dataset']).name} (gamma {result['discount']}); dashed: start states")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def run_curve(args) -> dict:
    from dataclasses import replace

    from offrl.ope import fqe

    ds, next_actions, rows, truth, episodes, n_rows, start_rows, start_truth = behaviour_problem(args.dataset, args.discount)
    horizon = int(np.max(ds.episode_lengths()))
    scale = fqe.return_scale(ds.rewards, args.discount, horizon)
    out = {"dataset": args.dataset, "discount": args.discount, "truth_mean_G": truth, "episodes": episodes,
           "rows_compared": n_rows, "truth_mean_G0": start_truth, "starts_compared": len(start_rows), "return_scale": scale, "curves": {}}
    print(f"behaviour policy on {args.dataset}: mean G over {n_rows} rows of terminated episodes = {truth:.2f}; "
          f"return scale {scale:.1f}; load {os.getloadavg()[0]:.1f}", flush=True)
    names = [n for n in CURVE_CONFIGS if not args.configs or any(n.startswith(c) for c in args.configs.split("|"))]
    for name in names:
        overrides, normalise = CURVE_CONFIGS[name]
        if args.hidden:
            overrides = {**overrides, "hidden_dims": tuple(int(h) for h in args.hidden.split(","))}
        config = replace(fqe.FQEConfig(), discount=args.discount, **overrides)
        data = fqe.fqe_data(ds, next_actions, value_scale=scale if normalise else 1.0)
        agents = fqe.create(config, data)
        curve, t0 = [], time.perf_counter()
        for done in range(args.chunk, args.curve_steps + 1, args.chunk):
            agents, metrics = fqe.train_chunk(agents, data, args.chunk)
            q = fqe.q_values(agents, data, ds.observations[rows], ds.actions[rows])[0, 0]
            loss = float(np.asarray(metrics["fqe/loss"])[0, 0]) * float(data.value_scale) ** 2
            q0 = fqe.q_values(agents, data, ds.observations[start_rows], ds.actions[start_rows])[0, 0]
            curve.append({"step": done, "ratio": float(q.mean() / truth), "start_ratio": float(q0.mean() / start_truth), "loss": loss, "seconds": time.perf_counter() - t0})
        line = " ".join(f"{c['ratio']:.2f}/{c['start_ratio']:.2f}" for c in curve[args.print_every - 1::args.print_every])
        print(f"{name:45s} {curve[-1]['seconds']:6.0f} s  mean Q / mean G (all rows / starts) every {args.print_every * args.chunk} steps: {line}  "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
        label = name.replace("256x256", "x".join(args.hidden.split(","))) if args.hidden else name
        out["curves"][label] = {"config": {**overrides, "normalise_rewards": normalise}, "curve": curve}
    if args.out:
        plot_curves(out, Path(args.out) / f"ope-curve-{args.tag}.png")
    return out


# ---------------------------------------------------------------------- DOPE protocol
def parse_candidate_settings(text: str) -> dict[str, dict[str, str]]:
    """``"cql.hidden_dims=64,64;cql.bc_warmup_steps=0"`` -> ``{"cql": {"hidden_dims": "64,64", "bc_warmup_steps": "0"}}``
    (config fields of one algorithm, as ``offrl train --set`` takes them)."""
    out: dict[str, dict[str, str]] = {}
    for item in filter(None, (t.strip() for t in text.split(";"))):
        key, sep, value = item.partition("=")
        algo, dot, name = key.partition(".")
        if not sep or not dot or not algo or not name:
            raise SystemExit(f"--candidate-set entry {item!r} is not ALGO.FIELD=VALUE; write e.g. cql.hidden_dims=64,64.")
        out.setdefault(algo, {})[name] = value
    return out


def dope_candidates(work: Path, dataset, spec: str, noise: list[float], settings: dict, console) -> tuple[list, dict]:
    """Each ``algo=steps`` of ``spec`` trained on ``dataset`` as its own run (no resume: every
    checkpoint is its own schedule) with ``settings[algo]`` as config overrides, exported, then
    loaded once per target std in ``noise`` (the same mean action with Gaussian action noise of that
    size, in [-1, 1] units). An export in ``work`` made with other settings or on another dataset is trained again.
    Returns the policies and, per base policy, its algorithm, steps, overrides and training seconds."""
    import shutil
    from dataclasses import replace

    from offrl.checkpoint import export_numpy_policy
    from offrl.engine import train
    from offrl.ope.policies import load_policy

    policies, bases = [], {}
    source = str(Path(dataset.source).resolve()) if Path(dataset.source).exists() else dataset.source
    for item in filter(None, spec.split(";")):
        algo, values = item.split("=")
        for n in (int(v) for v in values.split(",")):
            folder, run_folder = work / f"{algo}-{n}", work / f"run-{algo}-{n}"
            wanted = {"algo": algo, "steps": n, "overrides": settings.get(algo, {}), "dataset": source}
            made = folder / "candidate.json"
            record = json.loads(made.read_text()) if made.exists() else {}
            if (folder / "policy.json").exists() and {k: record.get(k) for k in wanted} != wanted:
                console.print(f"  {folder} was trained on {record.get('dataset', '?')} with {record.get('overrides') or 'the defaults'}; "
                              "training it again")
                shutil.rmtree(folder)
            if not (folder / "policy.json").exists():
                shutil.rmtree(run_folder, ignore_errors=True)
                t0 = time.perf_counter()
                run = train(algo, dataset, steps=n, eval_every=10**9, eval_episodes=0, out=run_folder, progress=False,
                            config_overrides=wanted["overrides"] or None)
                export_numpy_policy(run, folder)
                record = {**wanted, "seconds": time.perf_counter() - t0}
                made.write_text(json.dumps(record))
                console.print(f"  trained {algo} for {n} steps in {record['seconds']:.0f} s"
                              + (f" ({wanted['overrides']})" if wanted["overrides"] else ""))
            bases[f"{algo}-{n}"] = record
            base = load_policy(folder)
            for sigma in noise:
                policies.append(replace(base, std=sigma, name=f"{algo}-{n}/std{sigma:g}", meta=dict(base.meta)))
    return policies, bases


def ope_subsample(dataset, episodes: int, seed: int):
    """``episodes`` whole episodes of ``dataset`` drawn without replacement (kept in their order), or
    the dataset itself when ``episodes`` is 0 or at least its number of episodes."""
    total = dataset.num_episodes
    if episodes <= 0 or episodes >= total:
        return dataset
    which = np.sort(np.random.default_rng(seed).choice(total, episodes, replace=False))
    return dataset.episodes(which)


def dynamics_settings(args):
    """The model estimator's ensemble (:class:`offrl.dynamics.DynamicsSettings`) from the flags named after its
    fields; termination stays ``auto`` (the env's registered function)."""
    from offrl.dynamics import DynamicsSettings

    return DynamicsSettings(ensemble_size=args.ensemble_size, num_elites=args.num_elites,
                            model_hidden_dims=tuple(int(h) for h in args.model_hidden_dims.split(",")),
                            model_patience=args.model_patience, model_max_epochs=args.model_max_epochs or None)


def run_dope(args) -> dict:
    from rich.console import Console
    from rich.table import Table

    from offrl.data import load
    from offrl.envs import normalized_score
    from offrl.ope.check import identical_pairs, true_values
    from offrl.ope.evaluate import OPEConfig, evaluate_policies, parse_estimators
    from offrl.ope.fqe import FQEConfig
    from offrl.ope.metrics import dope_metrics, paired_difference, subset_intervals
    from offrl.ope.select import choose

    console = Console(width=120)
    console.print(f"load average {os.getloadavg()[0]:.1f} at start")
    started = time.perf_counter()
    dataset = load(args.dataset)
    work = Path(args.work or f"/tmp/offrl-ope-dope/{Path(args.dataset).stem}")
    env = args.env or dataset.metadata.get("env_id")
    if not env:
        raise SystemExit(f"{args.dataset} records no env_id; pass --env (a Gymnasium id).")
    estimators = parse_estimators(args.estimators)
    t0 = time.perf_counter()
    policies, bases = dope_candidates(work, dataset, args.candidates, [float(s) for s in args.noise.split(",")],
                                      parse_candidate_settings(args.candidate_set), console)
    train_s = time.perf_counter() - t0
    for p in policies:
        p.meta["env_id"] = env
    probe = np.asarray(dataset.observations[:: max(1, len(dataset) // 512)][:512])
    same = identical_pairs(policies, probe)
    if same:
        raise SystemExit(f"candidates are not distinct: {same}")
    console.print(f"{len(policies)} candidates, pairwise distinct on {len(probe)} dataset observations")

    console.print(f"rolling out {len(policies)} candidates x {args.episodes} episodes in {env}")
    t1 = time.perf_counter()
    truth = true_values(policies, env, args.episodes, args.discount)
    rollout_s = time.perf_counter() - t1
    for p in policies:
        score = normalized_score(env, truth[p.name]["return"], dataset.metadata)
        truth[p.name]["normalized_score"] = None if score is None else float(score)
    values = np.array([truth[p.name]["value"] for p in policies])
    scores = [truth[p.name]["normalized_score"] for p in policies]
    spread = (f"; normalized scores {min(scores):.0f}..{max(scores):.0f} (the data's own return "
              f"{float(normalized_score(env, dataset.metadata['dataset_return_mean'], dataset.metadata)):.0f})"
              if None not in scores and "dataset_return_mean" in dataset.metadata else "")
    console.print(f"true discounted values {values.min():.1f}..{values.max():.1f}{spread} ({rollout_s:.0f} s)")

    data = ope_subsample(dataset, args.ope_episodes, args.seed)
    console.print(f"the estimators see {data.num_episodes} of {dataset.num_episodes} episodes ({len(data)} of {len(dataset)} rows)")
    fqe = FQEConfig(hidden_dims=tuple(int(h) for h in args.fqe_hidden.split(",")), layer_norm=args.fqe_layer_norm)
    config = OPEConfig(discount=args.discount, fqe_steps=args.fqe_steps, num_bootstrap=args.bootstrap, fqe=fqe,
                       estimators=estimators, fqe_seeds=args.fqe_seeds, dynamics=dynamics_settings(args),
                       model_horizon=args.model_horizon or None, model_samples=args.model_samples)
    t0 = time.perf_counter()
    report = evaluate_policies(policies, data, config, progress=lambda text: console.print(f"  {text}") if "of at most" not in text or text.split()[1].endswith("000") and int(text.split()[1]) % 5000 == 0 else None)
    ope_s = time.perf_counter() - t0
    true = np.array([truth[p]["value"] for p in report.policies])
    diverged = report.diverged()
    kept = np.array([p not in diverged for p in report.policies])
    for name, d in diverged.items():
        console.print(f"FQE diverged for {name} at step {d['step']} ({d['reason']}); frozen at step {d['frozen_at']}, "
                      f"estimate {d['estimate']:.1f} (true {truth[name]['value']:.1f})")
    size = max(3, int(round(args.subset_fraction * len(policies))))
    table = Table(title=f"{len(policies)} candidates on {args.dataset} (gamma {args.discount}, {args.episodes} rollouts each; value range "
                        f"{true.min():.1f}..{true.max():.1f}); intervals: 2.5-97.5% over {args.subsets} random subsets of {size}")
    for col in ("estimator", "MAE", "MAE / range", "Spearman", "regret@1", "regret@1 / range"):
        table.add_column(col, justify="left" if col == "estimator" else "right")
    metrics = {}
    for name in config.estimators:
        est = report.estimates(name)
        m, ci = dope_metrics(est, true), subset_intervals(est, true, size, args.subsets, seed=args.seed)
        chosen = report.policies.index(choose(report, name))
        m["select_regret@1"] = float(true.max() - true[chosen])
        metrics[name] = {"point": m, "interval": ci}
        cell = lambda k, d=2: f"{m[k]:.{d}f} [{ci[k][0]:.{d}f}, {ci[k][1]:.{d}f}]"  # noqa: E731
        table.add_row(name, cell("mae", 1), cell("mae/range"), cell("spearman"), cell("regret@1", 1), cell("regret@1/range"))
        if diverged and name in ("fqe", "dr", "wdr") and kept.sum() >= 3:
            k = dope_metrics(est[kept], true[kept])
            metrics[name]["without_diverged"] = k
            table.add_row(f"{name} (without the {len(diverged)} diverged)", f"{k['mae']:.1f}", f"{k['mae/range']:.2f}",
                          f"{k['spearman']:.2f}", f"{m['select_regret@1']:.1f} (select)", f"{m['select_regret@1'] / (true.max() - true.min()):.2f}")
    console.print(table)
    comparison = None
    if "model" in config.estimators and "fqe" in config.estimators:
        comparison = paired_difference(report.estimates("model"), report.estimates("fqe"), true, size, args.subsets, seed=args.seed)
        console.print("model - fqe on the same subsets (difference on all candidates [2.5-97.5%]; share of subsets where model is better): "
                      + "; ".join(f"{k} {v['difference']:+.2f} [{v['interval'][0]:+.2f}, {v['interval'][1]:+.2f}], {v['a_better']:.0%}"
                                  for k, v in comparison.items() if "/" not in k))
    values = Table(title="candidates: true discounted value (+- s.e.), return, normalized score and estimates")
    shown = [e for e in ("fqe", "dr", "wdr", "wpdis", "model") if e in config.estimators]
    for col in ("candidate", "true", "s.e.", "return", "score", *shown):
        values.add_column(col, justify="left" if col == "candidate" else "right")
    for p in report.policies:
        r, t = report.results[p], truth[p]
        values.add_row(p, f"{t['value']:.1f}", f"{t['value_se']:.1f}", f"{t['return']:.0f}",
                       "-" if t["normalized_score"] is None else f"{t['normalized_score']:.0f}", *(f"{r[e].estimate:.1f}" for e in shown))
    console.print(values)
    curve, model = report.fqe, report.model
    if curve is not None:
        console.print(f"FQE {'flattened' if curve['converged'] else 'did NOT flatten (cap)'} after {curve['final_step']} steps, "
                      f"{curve['total_seconds']:.0f} s ({len(policies)} policies vmapped, {fqe.hidden_dims})")
    if model is not None:
        console.print(f"model: {model['settings']['ensemble_size']} members ({model['settings']['num_elites']} elites, "
                      f"{model['settings']['model_hidden_dims']}), fit {model['epochs']} epochs "
                      f"({'the cap' if model['epochs'] == model['settings']['model_max_epochs'] else 'early stopping'}) "
                      f"in {model['fit_seconds']:.0f} s, held-out MSE "
                      f"of the elites {model['holdout_mse']:.4f} (standardised (s' - s, r); 1 = the mean); rollouts "
                      f"{sum(model['rollout_seconds'].values()):.0f} s for {len(policies)} candidates")
    total_s = time.perf_counter() - started
    console.print(f"candidates trained in {train_s:.0f} s; true values {rollout_s:.0f} s; whole OPE {ope_s:.0f} s; total {total_s:.0f} s; "
                  f"load average {os.getloadavg()[0]:.1f} at end")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        if curve is not None:
            est = np.asarray(curve["estimates"], dtype=float)            # a frozen candidate: None -> NaN
            for k, name in enumerate(report.policies):
                axes[0].plot(curve["steps"], est[:, k] / true[k], lw=0.8)
            axes[0].axhline(1.0, color="k", ls="--", lw=0.8)
        axes[0].set(xlabel="FQE step", ylabel="FQE estimate / true value", title="FQE while it trains (one line per candidate)")
        for name in shown:
            axes[1].scatter(true, report.estimates(name), s=14, label=name)
        lim = [min(true.min(), 0), true.max() * 1.1]
        axes[1].plot(lim, lim, "k--", lw=0.8)
        axes[1].set(xlabel="true discounted value", ylabel="estimate", title=args.dataset.split("/")[-1])
        axes[1].legend()
        fig.tight_layout()
        fig.savefig(out / f"ope-dope-{args.tag}.png", dpi=110)
    except ImportError:
        pass
    return {"dataset": args.dataset, "env": env, "candidates": report.policies, "bases": bases, "truth": truth, "metrics": metrics,
            "model_vs_fqe": comparison, "diverged": diverged, "subset_size": size, "subsets": args.subsets,
            "seed": args.seed, "ope_data": {"episodes": data.num_episodes, "rows": len(data), "of_episodes": dataset.num_episodes, "of_rows": len(dataset)},
            "fqe_curve": curve, "fqe_config": report.config["fqe"], "model": model, "rows": report.table(),
            "seconds": {"candidates": train_s, "true_values": rollout_s, "ope": ope_s, "total": total_s},
            "ope_seconds": ope_s, "rollout_seconds": rollout_s}


def run_replay(args) -> dict:
    """``dope-replay``: see the module docstring."""
    from offrl.data import load
    from offrl.ope.config import OPEConfig
    from offrl.ope.fqe import judge_chunk, return_scale, value_bounds
    from offrl.ope.metrics import dope_metrics

    record = json.loads(Path(args.source).read_text())
    curve = record["fqe_curve"]
    names, steps = curve["policies"], np.asarray(curve["steps"])
    estimates = np.asarray(curve["estimates"], np.float64)[..., None]          # (T, P, 1): the run had one seed
    losses = np.asarray(curve["losses"], np.float64)[..., None]
    true = np.array([record["truth"][n]["value"] for n in names])
    dataset = load(record["dataset"])
    if "ope_data" in record:                                   # the estimators' subsample of a --ope-episodes run
        dataset = ope_subsample(dataset, record["ope_data"]["episodes"], record["seed"])
    defaults = OPEConfig()
    horizon = int(np.max(dataset.episode_lengths()))
    bounds = value_bounds(dataset.rewards, args.discount, horizon)
    scale = return_scale(dataset.rewards, args.discount, horizon)
    window = defaults.fqe_window // 1000
    margin = defaults.fqe_divergence_margin if args.margin is None else args.margin
    growth = defaults.fqe_loss_growth if args.loss_growth is None else args.loss_growth
    active = np.ones(len(names), bool)
    last_inside = np.zeros(len(names), np.int64)
    diverged_at, frozen_at, reason = {}, {}, {}
    stop, flat = len(steps) - 1, False
    for t in range(len(steps)):
        rows_e = np.where(active[None, :, None], estimates[:t + 1], np.nan)
        rows_l = np.where(active[None, :, None], losses[:t + 1], np.nan)
        rows_e[-1], rows_l[-1] = np.where(active[:, None], estimates[t], np.nan), np.where(active[:, None], losses[t], np.nan)
        failed, by_estimate, inside, flat = judge_chunk(rows_e, rows_l, active, window, defaults.fqe_tolerance,
                                                        defaults.fqe_loss_tolerance, 1e-3 * scale, bounds, margin, growth, scale)
        for p in np.flatnonzero(failed):
            diverged_at[names[p]], reason[names[p]] = int(steps[t]), "estimate" if by_estimate[p] else "loss"
            frozen_at[names[p]] = last_inside[p]
        last_inside = np.where(active & ~failed & inside, int(steps[t]), last_inside)
        active &= ~failed
        if flat or not active.any():
            stop = t
            break
    index = {int(s): i for i, s in enumerate(steps)}
    final = np.array([estimates[index[frozen_at[n]], p, 0] if n in frozen_at and frozen_at[n] else
                      (np.nan if n in frozen_at else estimates[stop, p, 0]) for p, n in enumerate(names)])
    kept = np.array([n not in diverged_at for n in names])
    rows = {"at the stop, all": dope_metrics(final, true), "at the stop, without the diverged": dope_metrics(final[kept], true[kept])}
    capped = estimates[-1, :, 0]
    rows["unguarded, at the cap (as recorded)"] = dope_metrics(capped, true)
    chosen = int(np.argmax(np.where(kept, final, -np.inf)))
    select_regret = float(true.max() - true[chosen])
    print(f"replay of {args.source}: value bounds [{bounds[0]:.1f}, {bounds[1]:.1f}], margin {margin:g}, loss growth {growth:g}, "
          f"window {window} chunks")
    for n in diverged_at:
        frozen = estimates[index[frozen_at[n]], names.index(n), 0] if frozen_at[n] else float("nan")
        print(f"  {n}: diverged at step {diverged_at[n]} ({reason[n]}), frozen at step {frozen_at[n]} "
              f"(estimate {frozen:.1f}, true {true[names.index(n)]:.1f})")
    print(f"  the others {'flattened' if flat else 'did not flatten'}; FQE stops at step {int(steps[stop])} (recorded cap {int(steps[-1])})")
    print(f"  {'':38s} {'MAE':>7s} {'MAE/range':>9s} {'Spearman':>8s} {'regret@1':>8s}")
    for label, m in rows.items():
        print(f"  {label:38s} {m['mae']:7.1f} {m['mae/range']:9.2f} {m['spearman']:8.2f} {m['regret@1']:8.1f}")
    print(f"  select's choice (diverged left out): {names[chosen]}, regret {select_regret:.1f}")
    return {"source": args.source, "bounds": list(bounds), "margin": margin, "loss_growth": growth, "window_chunks": window,
            "diverged_at": diverged_at, "frozen_at": frozen_at, "reasons": reason, "flattened": bool(flat),
            "stop_step": int(steps[stop]), "metrics": rows, "select_choice": names[chosen], "select_regret": select_regret}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("speed")
    s.add_argument("--episodes", type=int, default=1000)
    s.add_argument("--horizon", type=int, default=1000)
    s.add_argument("--bootstrap", type=int, default=1000)
    s.add_argument("--fqe-transitions", type=int, default=100_000)
    s.add_argument("--fqe-steps", type=int, default=1000, help="offrl updates per timed round")
    s.add_argument("--d3rlpy-steps", type=int, default=200, help="d3rlpy updates per timed round")
    s.add_argument("--rounds", type=int, default=5)
    s.add_argument("--no-d3rlpy", action="store_true")
    s.add_argument("--torch-threads", default="default,1", help="torch thread counts to time d3rlpy with (best is compared)")
    t = sub.add_parser("tiers")
    t.add_argument("--dataset", default="offrl/datasets/hopper-medium-20k-v0.hdf5")
    t.add_argument("--env", default="Hopper-v5")
    t.add_argument("--algos", default="bc,td3_bc,iql,cql")
    t.add_argument("--steps", default="2000,5000,10000")
    t.add_argument("--algo-steps", default="", help="per-algorithm step lists, e.g. 'cql=500,1500;iql=1000'")
    t.add_argument("--work", default="/tmp/offrl-ope-bench")
    t.add_argument("--discount", type=float, default=0.99)
    t.add_argument("--target-std", type=float, default=0.1)
    t.add_argument("--fqe-steps", type=int, default=20_000)
    t.add_argument("--bootstrap", type=int, default=1000)
    t.add_argument("--episodes", type=int, default=10)
    c = sub.add_parser("curve")
    c.add_argument("--dataset", default="offrl/datasets/hopper-medium-20k-v0.hdf5")
    c.add_argument("--discount", type=float, default=0.99)
    c.add_argument("--curve-steps", type=int, default=20_000)
    c.add_argument("--chunk", type=int, default=1000)
    c.add_argument("--print-every", type=int, default=2)
    c.add_argument("--hidden", default="", help="override every configuration's critic widths, e.g. 64,64")
    c.add_argument("--configs", default="", help="'|'-separated prefixes of the configurations to run (default all)")
    d = sub.add_parser("dope")
    d.add_argument("--dataset", default="offrl/datasets/hopper-medium-20k-v0.hdf5")
    d.add_argument("--env", default=None, help="Gymnasium id of the true-value rollouts (default: the dataset's env_id)")
    d.add_argument("--candidates", default=DOPE_CANDIDATES,
                   help="';'-separated algo=steps,steps: one run per entry, each a base policy, trained on the whole dataset")
    d.add_argument("--candidate-set", default=DOPE_CANDIDATE_SETTINGS,
                   help="';'-separated ALGO.FIELD=VALUE config overrides of the candidates' runs (offrl train --set); "
                        "default: CQL with 64x64 networks and no BC warm-up (3 x 256 CQL costs ~13x more per update on 2 CPU cores)")
    d.add_argument("--noise", default="0.1,0.5", help="target stds ([-1, 1] units) applied to every base policy")
    d.add_argument("--estimators", default="fqe,dr,wdr,wis,wpdis,pdis,is,clipped_is,model")
    d.add_argument("--ope-episodes", type=int, default=0,
                   help="the estimators (FQE, the dynamics model, IS) see this many whole episodes drawn at random (0: all)")
    d.add_argument("--work", default=None, help="folder of the candidates' runs and exports (default /tmp/offrl-ope-dope/DATASET)")
    d.add_argument("--discount", type=float, default=0.99)
    d.add_argument("--fqe-steps", type=int, default=60_000, help="FQE's cap (it stops earlier once flat)")
    d.add_argument("--fqe-hidden", default="64,64", help="FQE critic widths (256,256 costs ~9x more per step for 14 policies)")
    d.add_argument("--fqe-layer-norm", action="store_true", help="LayerNorm in FQE's critic (FQEConfig.layer_norm)")
    d.add_argument("--fqe-seeds", type=int, default=1, help="FQE critics per candidate (offrl ope --fqe-seeds)")
    d.add_argument("--ensemble-size", type=int, default=7, help="members of the model estimator's dynamics ensemble (as offrl ope)")
    d.add_argument("--num-elites", type=int, default=5, help="elites the model rollouts use (as offrl ope)")
    d.add_argument("--model-hidden-dims", default="200,200,200,200", help="widths of each member (as offrl ope)")
    d.add_argument("--model-max-epochs", type=int, default=40,
                   help="cap on the model's epochs (0: early stopping alone, as offrl ope; 100k rows: ~17 s of CPU per epoch)")
    d.add_argument("--model-patience", type=int, default=5, help="epochs without a 1%% held-out improvement that end the fit")
    d.add_argument("--model-horizon", type=int, default=0, help="steps of each model rollout (0: the data's longest episode, as offrl ope)")
    d.add_argument("--model-samples", type=int, default=1, help="model rollouts per start state and elite")
    d.add_argument("--bootstrap", type=int, default=1000)
    d.add_argument("--episodes", type=int, default=20, help="rollouts per candidate for its true value")
    d.add_argument("--subsets", type=int, default=1000)
    d.add_argument("--subset-fraction", type=float, default=2 / 3)
    d.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("dope-replay")
    r.add_argument("--from", dest="source", default="benchmarks/results/ope-dope-hopper-medium-20k-2026-12-01.json")
    r.add_argument("--discount", type=float, default=0.99)
    r.add_argument("--margin", type=float, default=None, help="default: OPEConfig's fqe_divergence_margin")
    r.add_argument("--loss-growth", type=float, default=None, help="default: OPEConfig's fqe_loss_growth")
    for q in (s, t, c, d, r):
        q.add_argument("--out", default=None, help="folder for the JSON (and figure) of the results")
        q.add_argument("--tag", default=time.strftime("%Y-%m-%d"))
    args = p.parse_args(argv)
    if args.what in ("tiers", "curve", "dope") and args.out is None:
        args.out = "benchmarks/results"
    if args.what == "dope-replay" and args.out is None:
        args.out = ""
    result = {"speed": run_speed, "tiers": run_tiers, "curve": run_curve, "dope": run_dope, "dope-replay": run_replay}[args.what](args)
    if args.out:
        path = Path(args.out) / f"ope-{args.what}-{args.tag}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"command": " ".join(sys.argv), **result}, indent=2, default=str))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
