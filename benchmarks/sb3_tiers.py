"""Tier datasets from Stable-Baselines3 SAC policies, in D4RL's HDF5 layout: data the doctor was not tuned on.

Trains SB3's SAC (its defaults, one PyTorch thread) on a MuJoCo env for ``--steps`` steps,
evaluating the stochastic policy every ``--snapshot-every`` steps and keeping each snapshot.
Then writes, into ``--out``:

* ``<family>-sb3-medium.hdf5``: the snapshot whose return is closest to one third of the way
  from the first evaluation to the best one, run stochastically for ``--size`` steps;
* ``<family>-sb3-medium-replay.hdf5``: SB3's replay buffer up to that snapshot's step;
* ``<family>-sb3-medium-expert.hdf5``: ``--size / 2`` steps of the medium snapshot followed by
  ``--size / 2`` of the best one.

Keys: ``observations, actions, rewards, terminals, timeouts, next_observations`` and
``metadata/{env_id, tier, algorithm, policy_returns}`` (no reference returns: the reader brings
its own). Run it with the Python of a virtualenv that has SB3 (see benchmarks/README.md)::

    $SB3_ENV/bin/python benchmarks/sb3_tiers.py --env Hopper-v5 --steps 40000 --out /work/data/sb3
    python -m offrl inspect /work/data/sb3/hopper-sb3-medium.hdf5 --env Hopper-v5
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def evaluate(model, env, episodes: int, seed: int) -> float:
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=False)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def rollout(model, env, size: int, seed: int) -> dict:
    """``size`` steps of the stochastic policy; the last, partial episode ends with a timeout."""
    rows = {k: [] for k in ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")}
    obs, _ = env.reset(seed=seed)
    episode = 0
    for t in range(size):
        action, _ = model.predict(obs, deterministic=False)
        nxt, reward, terminated, truncated, _ = env.step(action)
        last = t == size - 1
        for key, value in (("observations", obs), ("actions", action), ("rewards", reward), ("terminals", terminated),
                           ("timeouts", (truncated or last) and not terminated), ("next_observations", nxt)):
            rows[key].append(value)
        obs = nxt
        if terminated or truncated:
            episode += 1
            obs, _ = env.reset(seed=seed + episode)
    return {k: np.asarray(v) for k, v in rows.items()}


def replay_rows(buffer, stop: int) -> dict:
    """SB3's replay buffer (one env) up to row ``stop``; ``dones`` that are timeouts become ``timeouts``."""
    done = buffer.dones[:stop, 0].astype(bool)
    timeout = buffer.timeouts[:stop, 0].astype(bool) & done
    out = {"observations": buffer.observations[:stop, 0], "actions": buffer.actions[:stop, 0],
           "rewards": buffer.rewards[:stop, 0], "terminals": done & ~timeout, "timeouts": timeout,
           "next_observations": buffer.next_observations[:stop, 0]}
    if not (out["terminals"][-1] or out["timeouts"][-1]):
        out["timeouts"][-1] = True
    return out


def write(path: Path, arrays: dict, metadata: dict) -> None:
    import h5py

    tmp = path.with_name(path.stem + ".partial.hdf5")
    with h5py.File(tmp, "w") as f:
        for key, value in arrays.items():
            dtype = bool if key in ("terminals", "timeouts") else np.float32
            f.create_dataset(key, data=np.asarray(value).astype(dtype), compression="gzip")
        for key, value in metadata.items():
            f[f"metadata/{key}"] = value if isinstance(value, (int, float)) else str(value)
    tmp.rename(path)


def main() -> None:
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--steps", type=int, default=40_000)
    p.add_argument("--snapshot-every", type=int, default=5_000)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--size", type=int, default=50_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    family = args.env.split("-")[0].lower()
    env, eval_env = gym.make(args.env), gym.make(args.env)
    model = SAC("MlpPolicy", env, seed=args.seed, verbose=0, buffer_size=args.steps)
    snapshots = []

    class Snapshot(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % args.snapshot_every == 0:
                path = out / f"{family}-sb3-step{self.num_timesteps}.zip"
                self.model.save(path)
                ret = evaluate(self.model, eval_env, args.eval_episodes, seed=10_000 + self.num_timesteps)
                snapshots.append({"step": self.num_timesteps, "return": ret, "path": str(path)})
                print(f"step {self.num_timesteps}: stochastic return {ret:.1f}", flush=True)
            return True

    t0 = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=Snapshot())
    train_s = time.perf_counter() - t0
    first = evaluate(SAC("MlpPolicy", gym.make(args.env), seed=args.seed), eval_env, args.eval_episodes, seed=1)
    best = max(snapshots, key=lambda s: s["return"])
    target = first + (best["return"] - first) / 3
    medium = min((s for s in snapshots if s is not best), key=lambda s: abs(s["return"] - target))
    common = {"env_id": args.env, "algorithm": f"stable-baselines3 SAC (defaults), {args.steps} steps, seed {args.seed}",
              "snapshots": json.dumps([{k: s[k] for k in ("step", "return")} for s in snapshots])}
    medium_model, best_model = SAC.load(medium["path"]), SAC.load(best["path"])
    write(out / f"{family}-sb3-medium.hdf5", rollout(medium_model, gym.make(args.env), args.size, seed=args.seed + 1),
          {**common, "tier": "medium", "policy_returns": json.dumps([medium["return"]])})
    write(out / f"{family}-sb3-medium-replay.hdf5", replay_rows(model.replay_buffer, medium["step"]),
          {**common, "tier": "medium-replay", "policy_returns": json.dumps([s["return"] for s in snapshots if s["step"] <= medium["step"]])})
    half = args.size // 2
    parts = [rollout(medium_model, gym.make(args.env), half, seed=args.seed + 2),
             rollout(best_model, gym.make(args.env), args.size - half, seed=args.seed + 3)]
    write(out / f"{family}-sb3-medium-expert.hdf5", {k: np.concatenate([p_[k] for p_ in parts]) for k in parts[0]},
          {**common, "tier": "medium-expert", "policy_returns": json.dumps([medium["return"], best["return"]])})
    summary = {"env": args.env, "train_s": train_s, "total_s": time.perf_counter() - t0, "first_return": first,
               "snapshots": [{k: s[k] for k in ("step", "return")} for s in snapshots],
               "medium_step": medium["step"], "expert_step": best["step"]}
    (out / f"{family}-sb3-summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
