"""offrl's JAX SAC vs Stable-Baselines3's PyTorch SAC: env-steps/s and final return, same env and steps.

Both use the paper's settings: 256x256 networks, Adam 3e-4, batch 256, gamma 0.99, tau 0.005,
automatic entropy tuning with target -dim(A), one gradient update per env step, the same
number of warm-up steps before learning. offrl runs its updates in jitted ``lax.scan`` chunks
of ``--update-every`` steps (SB3: ``train_freq=1, gradient_steps=1``, one eager update per step).
The two runs are sequential, never concurrent. Timings exclude evaluation; on a shared CPU
they are noisy, so run both on the same quiet machine and read the ratio.

    python benchmarks/sac_vs_sb3.py --env Pendulum-v1 --steps 5000 --sb3-python $SB3_ENV/bin/python

SB3 lives in its own venv (``python -m venv --system-site-packages /work/venv-sb3``;
``/work/venv-sb3/bin/pip install stable-baselines3``) so it cannot change the system torch.
"""

from __future__ import annotations

import os
import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np


def evaluate(act, env_id: str, episodes: int, seed: int = 10_000) -> float:
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total = False, 0.0
        while not done:
            obs, r, term, trunc, _ = env.step(act(obs))
            total += float(r)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


def run_sb3(env_id: str, steps: int, start_steps: int, seed: int, episodes: int) -> dict:
    import torch
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", env_id, learning_rate=3e-4, buffer_size=max(steps, 1), learning_starts=start_steps,
                batch_size=256, tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto",
                policy_kwargs={"net_arch": [256, 256]}, seed=seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    seconds = time.perf_counter() - t0
    ret = evaluate(lambda o: model.predict(o, deterministic=True)[0], env_id, episodes)
    return {"library": "stable-baselines3", "steps": steps, "seconds": seconds, "env_steps_per_s": steps / seconds,
            "final_return": ret, "torch_threads": torch.get_num_threads()}


def run_offrl(env_id: str, steps: int, start_steps: int, seed: int, episodes: int, update_every: int) -> dict:
    from offrl.collect.train import TrainBehaviorConfig, train_behavior
    from offrl.collect.zoo import load_policy

    with tempfile.TemporaryDirectory() as tmp:
        config = TrainBehaviorConfig(steps=steps, start_steps=start_steps, update_every=update_every,
                                     snapshot_every=steps, eval_episodes=1, seed=seed)
        t0 = time.perf_counter()
        index = train_behavior(env_id, tmp, config, progress=False)
        wall = time.perf_counter() - t0
        policy = load_policy(tmp, steps)
        ret = evaluate(lambda o: policy.deterministic(np.asarray(o, np.float32)[None])[0], env_id, episodes)
    seconds = wall - index["eval_time_s"]
    return {"library": f"offrl (update_every={update_every})", "steps": steps, "seconds": seconds,
            "env_steps_per_s": steps / seconds, "final_return": ret}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--start-steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--update-every", type=int, default=50)
    parser.add_argument("--sb3-python", default=os.path.expandvars("$SB3_ENV/bin/python"), help="interpreter with stable-baselines3")
    parser.add_argument("--only", choices=("offrl", "sb3"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    common = (args.env, args.steps, args.start_steps, args.seed, args.eval_episodes)
    if args.only == "sb3":
        print(json.dumps(run_sb3(*common)))
        return
    if args.only == "offrl":
        print(json.dumps(run_offrl(*common, args.update_every)))
        return
    results = []
    for who, python in (("offrl", sys.executable), ("sb3", args.sb3_python)):
        cmd = [python, __file__, "--only", who, "--env", args.env, "--steps", str(args.steps), "--start-steps",
               str(args.start_steps), "--seed", str(args.seed), "--eval-episodes", str(args.eval_episodes),
               "--update-every", str(args.update_every)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        results.append(json.loads(out))
        print(json.dumps(results[-1]), flush=True)
    ours, sb3 = results
    print(f"\n{args.env}, {args.steps} env steps, 1 update/step, seed {args.seed} (shared CPU: timings are noisy)")
    print(f"{'library':32s} {'env-steps/s':>12s} {'seconds':>9s} {'final return':>13s}")
    for r in results:
        print(f"{r['library']:32s} {r['env_steps_per_s']:12.1f} {r['seconds']:9.1f} {r['final_return']:13.1f}")
    print(f"speed ratio offrl / SB3: {ours['env_steps_per_s'] / sb3['env_steps_per_s']:.2f}x")


if __name__ == "__main__":
    main()
