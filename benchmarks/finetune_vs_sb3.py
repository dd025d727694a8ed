"""Fine-tuning speed: ``offrl finetune`` env-steps/s at UTD 1 vs Stable-Baselines3 SAC, same env.

offrl side: a short offline run of each algorithm on ``--dataset`` (its cost is not counted),
then ``offrl.finetune`` for ``--steps`` env steps (UTD 1, updates in jitted chunks of
``--update-every`` steps, no evaluation), one seed. Two rates: all-in (the whole ``finetune`` call:
loading, the device buffer, compilation) and steady (between the first and last metrics rows).
SB3 side: ``SAC("MlpPolicy")`` 256x256, ``train_freq=1, gradient_steps=1``, the same number of
warm-up steps, timed over ``learn``. Runs are sequential; on a shared CPU read the ratio.

    python benchmarks/finetune_vs_sb3.py --env Hopper-v5 --dataset hopper-medium-20k-v0 --steps 5000 \\
        --algos iql,td3_bc,cql --sb3-python $SB3_ENV/bin/python
"""

from __future__ import annotations

import os
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIDDEN = {"iql": {"hidden_dims": "256,256"}, "td3_bc": {"hidden_dims": "256,256"}, "awac": {"hidden_dims": "256,256"},
          "cql": {"hidden_dims": "256,256", "bc_warmup_steps": "100"}, "cal_ql": {"hidden_dims": "256,256", "bc_warmup_steps": "100"}}


def run_offrl(algo: str, dataset: str, steps: int, start_steps: int, update_every: int) -> dict:
    import offrl

    with tempfile.TemporaryDirectory() as tmp:
        offrl.train(algo, dataset, steps=500, eval_every=500, eval_episodes=0, log_every=500, out=Path(tmp) / "off",
                    config_overrides=HIDDEN.get(algo), progress=False)
        t0 = time.perf_counter()
        run = offrl.finetune(Path(tmp) / "off", steps=steps, out=Path(tmp) / "ft", eval_episodes=0,
                             update_every=update_every, start_steps=start_steps, log_every=update_every * 20,
                             checkpoint_every=steps, progress=False)
        wall = time.perf_counter() - t0
    rows = [r for r in run.metrics if r.get("phase") == "online" and r["seed"] == 0]
    steady = (rows[-1]["env_step"] - rows[0]["env_step"]) / (rows[-1]["time"] - rows[0]["time"])
    return {"library": f"offrl finetune {algo}", "steps": steps, "seconds": wall, "env_steps_per_s": steps / wall,
            "steady_env_steps_per_s": steady}


def run_sb3(env_id: str, steps: int, start_steps: int) -> dict:
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", env_id, learning_rate=3e-4, buffer_size=steps, learning_starts=start_steps, batch_size=256,
                tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto",
                policy_kwargs={"net_arch": [256, 256]}, seed=0, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    seconds = time.perf_counter() - t0
    return {"library": "stable-baselines3 SAC", "steps": steps, "seconds": seconds, "env_steps_per_s": steps / seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--dataset", default="hopper-medium-20k-v0")
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--start-steps", type=int, default=1000)
    p.add_argument("--update-every", type=int, default=50)
    p.add_argument("--algos", default="iql,td3_bc,cql")
    p.add_argument("--sb3-python", default=os.path.expandvars("$SB3_ENV/bin/python"))
    p.add_argument("--only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.only == "sb3":
        print(json.dumps(run_sb3(args.env, args.steps, args.start_steps)))
        return
    if args.only:
        print(json.dumps(run_offrl(args.only, args.dataset, args.steps, args.start_steps, args.update_every)))
        return
    results = []
    for who in ["sb3", *args.algos.split(",")]:
        python = args.sb3_python if who == "sb3" else sys.executable
        cmd = [python, __file__, "--only", who, "--env", args.env, "--dataset", args.dataset, "--steps", str(args.steps),
               "--start-steps", str(args.start_steps), "--update-every", str(args.update_every)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        results.append(json.loads(out))
        print(json.dumps(results[-1]), flush=True)
    sb3 = results[0]["env_steps_per_s"]
    print(f"\n{args.env}, {args.steps} env steps, UTD 1, {args.start_steps} warm-up steps (shared CPU: timings are noisy)")
    print(f"{'library':28s} {'all-in steps/s':>15s} {'ratio':>6s} {'steady steps/s':>15s} {'ratio':>6s}")
    for r in results:
        steady = r.get("steady_env_steps_per_s", r["env_steps_per_s"])
        print(f"{r['library']:28s} {r['env_steps_per_s']:15.1f} {r['env_steps_per_s'] / sb3:6.2f} {steady:15.1f} {steady / sb3:6.2f}")


if __name__ == "__main__":
    main()
