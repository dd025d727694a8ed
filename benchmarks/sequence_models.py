"""Sequence models beside BC, IQL and d3rlpy's Decision Transformer: normalized score and wall time at equal updates.

For every dataset (a registered name or a file path) each algorithm trains ``--seeds`` seeds for
``--steps`` updates (offrl vmaps the seeds in one run), then every seed's policy plays
``--episodes`` evaluation episodes (env reset seeds 10000, 10001, ...); the score is the D4RL
normalized score from the references in the dataset's metadata, mean and standard deviation
over seeds. DT is conditioned on one target return (default: the dataset's best episode
return) on both sides; TT and Diffuser plan at every step. Sizes are the small CPU
configurations in ``SMALL``, not the papers' (those need a GPU). Wall time covers compilation,
training of all seeds and the final evaluation.

The ``d3rlpy_dt`` column is d3rlpy 2.8.1's ``DecisionTransformer`` run in its own virtualenv
(``--d3rlpy-python``) with the same sizes, batch, updates, learning rate, warm-up, weight decay,
gradient clip, dropout, context length, return scale and target as offrl's DT: a linear state
embedding (``VectorEncoderFactory([embed_dim], exclude_last_activation=True)``), a learned
timestep embedding (``PositionEncodingType.SIMPLE``), GELU blocks, observations standardised
with dataset statistics and rewards multiplied by ``1 / return_scale``. Its seeds train one
after another; each is evaluated through ``as_stateful_wrapper`` on the same env reset seeds.
torch runs with one thread (``--d3rlpy-threads``): on the shared 2-core machine, at load ~11,
its default two threads ran DT at 0.6-0.9 updates/s and 3-5 actions/s, one thread at 8-17
updates/s and ~550 actions/s.

``--merge A.json,B.json --out OUT`` joins result files of separate runs (e.g. one per dataset,
run side by side) into one table.

Run::

    python benchmarks/sequence_models.py --datasets hopper-medium-20k-v0 --steps 2000 --seeds 2 \\
        --out benchmarks/results/sequence-models-hopper-2026-12-01
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DT_SIZES = {"embed_dim": 64, "num_layers": 2, "num_heads": 1, "context_length": 10, "batch_size": 64,
            "learning_rate": 1e-3, "warmup_steps": 200, "weight_decay": 1e-4, "max_grad_norm": 0.25,
            "dropout": 0.1, "return_scale": 1000.0, "max_timestep": 1000}
SMALL = {
    "bc": {},
    "iql": {},
    "dt": {k: str(v) for k, v in DT_SIZES.items()},
    "tt": {"num_bins": "50", "embed_dim": "64", "num_layers": "2", "beam_width": "8", "horizon": "3",
           "sequence_length": "4"},
    "diffuser": {},  # its defaults are the small-data configuration
}
EVAL_SEED = 10_000


def dataset_facts(name: str) -> dict:
    from offrl import data

    ds = data.load(name)
    returns = np.asarray(ds.episode_returns(), float)
    return {"dataset": name, "env_id": ds.metadata.get("env_id"), "transitions": len(ds), "episodes": len(returns),
            "best_episode_return": float(returns.max()), "mean_episode_return": float(returns.mean()),
            "ref_min_score": ds.metadata.get("ref_min_score"), "ref_max_score": ds.metadata.get("ref_max_score")}


def offrl_row(algo: str, dataset: str, steps: int, seeds: int, episodes: int, target: float) -> dict:
    import offrl

    overrides = dict(SMALL[algo])
    if algo == "dt":
        overrides["target_return"] = str(target)
    t0 = time.perf_counter()
    run = offrl.train(algo, dataset, steps=steps, seeds=seeds, eval_every=steps, eval_episodes=episodes,
                      log_every=min(1000, steps), progress=False, config_overrides=overrides)
    wall = time.perf_counter() - t0
    return {"algo": algo, "library": "offrl", "scores": [float(s) for s in run.final_scores],
            "returns": [float(r) for r in run.final_returns], "wall_s": wall, "overrides": overrides}


def d3rlpy_row(python: str, dataset: str, steps: int, seeds: int, episodes: int, target: float, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "d3rlpy.json"
        cmd = [python, __file__, "--d3rlpy-worker", "--datasets", dataset, "--steps", str(steps), "--seeds", str(seeds),
               "--episodes", str(episodes), "--target-return", str(target), "--worker-out", str(out),
               "--d3rlpy-threads", str(threads)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            print("d3rlpy worker failed:\n  " + "\n  ".join(tail), file=sys.stderr)
            return {"algo": "d3rlpy_dt", "library": "d3rlpy 2.8.1", "error": tail[-1] if tail else "failed", "wall_s": wall}
        row = json.loads(out.read_text())
    row["wall_s"] = wall
    return row


def d3rlpy_worker(dataset: str, steps: int, seeds: int, episodes: int, target: float, threads: int) -> dict:
    """Train and evaluate d3rlpy's DT (runs inside the d3rlpy virtualenv)."""
    import contextlib
    import io

    import d3rlpy
    import gymnasium as gym
    import torch

    torch.set_num_threads(threads)

    from offrl import data
    from offrl.envs import normalized_score

    ds = data.load(dataset)
    dataset_ = d3rlpy.dataset.MDPDataset(
        np.asarray(ds.observations, np.float32), np.asarray(ds.actions, np.float32), np.asarray(ds.rewards, np.float32),
        np.asarray(ds.terminals, np.float32), np.asarray(ds.timeouts, np.float32),
        action_space=d3rlpy.ActionSpace.CONTINUOUS)
    env_id = ds.metadata["env_id"]
    S = DT_SIZES
    scores, returns = [], []
    for seed in range(seeds):
        d3rlpy.seed(seed)
        config = d3rlpy.algos.DecisionTransformerConfig(
            batch_size=S["batch_size"], learning_rate=S["learning_rate"], context_size=S["context_length"],
            num_heads=S["num_heads"], num_layers=S["num_layers"], max_timestep=S["max_timestep"],
            attn_dropout=S["dropout"], resid_dropout=S["dropout"], embed_dropout=S["dropout"], activation_type="gelu",
            encoder_factory=d3rlpy.models.VectorEncoderFactory([S["embed_dim"]], exclude_last_activation=True),
            optim_factory=d3rlpy.optimizers.AdamWFactory(
                weight_decay=S["weight_decay"], clip_grad_norm=S["max_grad_norm"],
                lr_scheduler_factory=d3rlpy.optimizers.WarmupSchedulerFactory(warmup_steps=S["warmup_steps"])),
            observation_scaler=d3rlpy.preprocessing.StandardObservationScaler(),
            reward_scaler=d3rlpy.preprocessing.MultiplyRewardScaler(1.0 / S["return_scale"]),
            position_encoding_type=d3rlpy.PositionEncodingType.SIMPLE)
        algo = config.create(device="cpu:0")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            algo.fit(dataset_, n_steps=steps, n_steps_per_epoch=steps, show_progress=False, save_interval=10**9,
                     experiment_name=f"seqbench_{seed}", with_timestamp=False, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
        env = gym.make(env_id)
        wrapper = algo.as_stateful_wrapper(target_return=target)
        seed_returns = []
        for k in range(episodes):
            wrapper.reset()
            obs, _ = env.reset(seed=EVAL_SEED + k)
            total, reward, done = 0.0, 0.0, False
            while not done:
                action = wrapper.predict(np.asarray(obs, np.float32), reward)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done = total + float(reward), terminated or truncated
            seed_returns.append(total)
        env.close()
        returns.append(float(np.mean(seed_returns)))
        scores.append(float(np.mean(normalized_score(env_id, np.asarray(seed_returns), dict(ds.metadata)))))
        print(f"d3rlpy DT seed {seed}: return {returns[-1]:.1f} score {scores[-1]:.1f}", flush=True)
    return {"algo": "d3rlpy_dt", "library": f"d3rlpy {d3rlpy.__version__}", "scores": scores, "returns": returns,
            "overrides": {**{k: str(v) for k, v in S.items()}, "target_return": str(target)}, "torch_threads": threads}


def summarise(row: dict) -> dict:
    if "scores" in row:
        row["score_mean"], row["score_std"] = float(np.mean(row["scores"])), float(np.std(row["scores"]))
        row["return_mean"], row["return_std"] = float(np.mean(row["returns"])), float(np.std(row["returns"]))
    return row


def markdown(result: dict) -> str:
    a = result["settings"]
    lines = [f"# Sequence models vs BC, IQL and d3rlpy's DT: {a['steps']} updates, {a['seeds']} seeds, "
             f"{a['episodes']} evaluation episodes per seed", "",
             f"Command: `{result['command']}`", "",
             f"Machine: {result['machine']}", ""]
    for block in result["datasets"]:
        f = block["facts"]
        lines += [f"## {f['dataset']} ({f['env_id']}, {f['transitions']} transitions, {f['episodes']} episodes, "
                  f"best episode return {f['best_episode_return']:.0f} = DT target)", "",
                  "| algorithm | library | normalized score (mean ± std over seeds) | per-seed scores | return | wall time (s) |",
                  "|---|---|---|---|---|---|"]
        for r in block["rows"]:
            if "scores" not in r:
                lines.append(f"| {r['algo']} | {r['library']} | failed: {r.get('error')} | | | {r['wall_s']:.0f} |")
                continue
            per_seed = ", ".join(f"{s:.1f}" for s in r["scores"])
            lines.append(f"| {r['algo']} | {r['library']} | {r['score_mean']:.1f} ± {r['score_std']:.1f} | {per_seed} | "
                         f"{r['return_mean']:.0f} ± {r['return_std']:.0f} | {r['wall_s']:.0f} |")
        lines.append("")
    lines += ["Sizes: " + ", ".join(f"{k} {json.dumps(v)}" for k, v in SMALL.items() if v), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="hopper-medium-20k-v0", help="comma-separated registered names or file paths")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--algos", default="dt,d3rlpy_dt,bc,iql,tt,diffuser")
    p.add_argument("--target-return", type=float, default=None, help="DT target in env units (default: best episode return)")
    p.add_argument("--d3rlpy-python", default=os.path.expandvars("$D3RLPY_ENV/bin/python"))
    p.add_argument("--d3rlpy-threads", type=int, default=1, help="torch threads for d3rlpy (default 1)")
    p.add_argument("--merge", default=None, help="comma-separated result JSONs to join into --out")
    p.add_argument("--out", default=None, help="write OUT.json and OUT.md")
    p.add_argument("--d3rlpy-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.d3rlpy_worker:
        row = d3rlpy_worker(args.datasets, args.steps, args.seeds, args.episodes, args.target_return, args.d3rlpy_threads)
        Path(args.worker_out).write_text(json.dumps(row))
        return 0
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge.split(",")]
        result = {**parts[0], "command": " ; ".join(r["command"] for r in parts),
                  "machine": " | ".join(r["machine"] for r in parts), "datasets": [d for r in parts for d in r["datasets"]]}
        Path(args.out + ".json").write_text(json.dumps(result, indent=2))
        Path(args.out + ".md").write_text(markdown(result))
        print(markdown(result))
        return 0
    load = os.getloadavg()
    result = {"command": "python benchmarks/sequence_models.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "settings": {"steps": args.steps, "seeds": args.seeds, "episodes": args.episodes},
              "machine": f"{os.cpu_count()} CPU cores, shared; load average at start {load[0]:.1f}", "datasets": []}
    t_all = time.perf_counter()
    for dataset in args.datasets.split(","):
        facts = dataset_facts(dataset)
        target = facts["best_episode_return"] if args.target_return is None else args.target_return
        rows = []
        for algo in args.algos.split(","):
            if algo == "d3rlpy_dt":
                row = d3rlpy_row(args.d3rlpy_python, dataset, args.steps, args.seeds, args.episodes, target,
                                 args.d3rlpy_threads)
            else:
                row = offrl_row(algo, dataset, args.steps, args.seeds, args.episodes, target)
            rows.append(summarise(row))
            if "scores" in row:
                print(f"{dataset}  {algo:9s} score {row['score_mean']:6.1f} ± {row['score_std']:5.1f}  "
                      f"return {row['return_mean']:7.1f}  wall {row['wall_s']:6.1f} s", flush=True)
            if args.out:          # partial results survive an interrupted run
                Path(args.out + ".partial.json").write_text(json.dumps({**result, "datasets": result["datasets"] + [
                    {"facts": facts, "target_return": target, "rows": rows}]}, indent=2))
        result["datasets"].append({"facts": facts, "target_return": target, "rows": rows})
    load = os.getloadavg()
    result["machine"] += f", at end {load[0]:.1f}; total wall {time.perf_counter() - t_all:.0f} s"
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(result, indent=2))
        Path(args.out + ".md").write_text(markdown(result))
        Path(args.out + ".partial.json").unlink(missing_ok=True)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
