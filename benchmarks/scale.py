"""A 10M-transition dataset end to end: generate, save, load, inspect and train, against 100k.

D4RL's largest files hold about 2M transitions. This script writes a continuous-action dataset
of ``--rows`` transitions (default 10,000,000) and one of 100,000 in the same layout, and for
each measures, every step in its own process (so each peak RSS is that step's own):

* ``load``: ``offrl.data.load`` wall time and peak RSS, against the arrays' size in memory;
* ``inspect``: ``offrl inspect FILE`` (the dataset doctor) wall time and peak RSS;
* ``train``: ``offrl train FILE --algo td3_bc`` updates/s after compilation (the median of the
  metrics rows' ``steps_per_s`` past the first chunk) and the process's peak RSS.

The data are Gymnasium's Pendulum-v1 (the same equations, stepped for many episodes at once in
NumPy, checked against ``gymnasium.make("Pendulum-v1")`` step by step before anything is
written) under an energy-pumping swing-up controller with Gaussian action noise, so the file is
a real Pendulum dataset that ``offrl evaluate`` can deploy against the real env::

    PYTHONPATH=$PWD python benchmarks/scale.py --rows 10000000 --steps 20000 \
        --report benchmarks/results/scale-$(date +%F).md

Files go to ``--work`` (default a temporary folder; about 0.5 GB per 10M rows in HDF5).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

G, M, L, DT, MAX_SPEED, MAX_TORQUE, HORIZON = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0, 200


def _angle(th):
    return ((th + np.pi) % (2 * np.pi)) - np.pi


def pendulum_step(th, thdot, u):
    """Pendulum-v1's step (gymnasium/envs/classic_control/pendulum.py), for arrays of states."""
    u = np.clip(u, -MAX_TORQUE, MAX_TORQUE)
    cost = _angle(th) ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
    newthdot = np.clip(thdot + (3 * G / (2 * L) * np.sin(th) + 3.0 / (M * L ** 2) * u) * DT, -MAX_SPEED, MAX_SPEED)
    return th + newthdot * DT, newthdot, -cost


def controller(th, thdot, rng, noise):
    """Energy pumping far from upright, PD control near it, plus Gaussian noise (clipped to the box)."""
    a = _angle(th)
    energy = 0.5 * thdot ** 2 + 1.5 * G * (np.cos(th) - 1.0)          # 0 when upright and at rest
    pump = np.clip(-1.0 * energy * np.sign(thdot + 1e-6), -MAX_TORQUE, MAX_TORQUE)
    pd = -(8.0 * a + 1.5 * thdot)
    u = np.where(np.cos(th) > 0.85, pd, pump)
    return np.clip(u + noise * rng.standard_normal(u.shape), -MAX_TORQUE, MAX_TORQUE).astype(np.float32)


def check_against_gymnasium(steps: int = 200) -> None:
    """Each step of :func:`pendulum_step` from the env's exact state equals gymnasium's step (the
    state is re-synchronised every step: float32 actions make long open-loop runs drift apart)."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        th, thdot = (np.array([x]) for x in env.unwrapped.state)
        u = controller(th, thdot, rng, 0.5)
        obs, reward, *_ = env.step(u)
        th, thdot, r = pendulum_step(th, thdot, u.astype(np.float64))
        ours = np.array([np.cos(th[0]), np.sin(th[0]), thdot[0]])
        if not (np.allclose(ours, obs, atol=1e-5) and abs(r[0] - reward) < 1e-5):
            sys.exit(f"the NumPy Pendulum disagrees with gymnasium's: {ours} vs {obs}, {r[0]} vs {reward}")


def generate(rows: int, seed: int = 0, noise: float = 0.5):
    """``rows`` transitions (a whole number of 200-step episodes), as an ``offrl.data.Dataset``."""
    from offrl.data import Dataset

    episodes = max(1, rows // HORIZON)
    rng = np.random.default_rng(seed)
    th = rng.uniform(-np.pi, np.pi, episodes)
    thdot = rng.uniform(-1.0, 1.0, episodes)
    obs = np.empty((HORIZON + 1, episodes, 3), np.float32)
    act = np.empty((HORIZON, episodes, 1), np.float32)
    rew = np.empty((HORIZON, episodes), np.float32)
    for t in range(HORIZON):
        obs[t] = np.stack([np.cos(th), np.sin(th), thdot], -1)
        u = controller(th, thdot, rng, noise)
        act[t, :, 0] = u
        th, thdot, rew[t] = pendulum_step(th, thdot, u.astype(np.float64))
    obs[HORIZON] = np.stack([np.cos(th), np.sin(th), thdot], -1)
    # episode-major rows
    observations = obs[:-1].transpose(1, 0, 2).reshape(-1, 3)
    next_observations = obs[1:].transpose(1, 0, 2).reshape(-1, 3)
    del obs
    timeouts = np.zeros((episodes, HORIZON), bool)
    timeouts[:, -1] = True
    return Dataset.from_arrays(
        observations=observations, actions=act.transpose(1, 0, 2).reshape(-1, 1),
        rewards=rew.T.reshape(-1), terminals=np.zeros(episodes * HORIZON, bool), timeouts=timeouts.reshape(-1),
        next_observations=next_observations,
        metadata={"env_id": "Pendulum-v1", "generator": "benchmarks/scale.py (energy-pumping controller, noise std 0.5)",
                  "action_low": [-2.0], "action_high": [2.0]})


def measured(cmd: list[str], env=None) -> tuple[float, float, str]:
    """``(wall seconds, peak RSS in GB, stdout)`` of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    return wall, usage.ru_maxrss / 1e6, out  # ru_maxrss is in kB on Linux


LOAD = ("import time, offrl.data as d; t = time.perf_counter(); ds = d.load({path!r}); "
        "n = sum(getattr(ds, k).nbytes for k in ('observations', 'actions', 'rewards', 'terminals', 'timeouts', "
        "'next_observations')); print('LOAD', time.perf_counter() - t, len(ds), n)")


def measure_file(path: Path, steps: int, work: Path, hidden: str) -> dict:
    py = sys.executable
    wall, rss, out = measured([py, "-c", LOAD.format(path=str(path))])
    _, load_s, rows, nbytes = next(line for line in out.splitlines() if line.startswith("LOAD")).split()
    row = {"file": path.name, "rows": int(rows), "file_gb": path.stat().st_size / 1e9, "arrays_gb": int(nbytes) / 1e9,
           "load_s": float(load_s), "load_rss_gb": rss}
    row["inspect_s"], row["inspect_rss_gb"], _ = measured([py, "-m", "offrl", "inspect", str(path)])
    out_dir = work / f"run-{path.stem}"
    row["train_wall_s"], row["train_rss_gb"], _ = measured(
        [py, "-m", "offrl", "train", "--dataset", str(path), "--algo", "td3_bc", "--steps", str(steps),
         "--eval-episodes", "0", "--log-every", "1000", "--no-progress", "--out", str(out_dir),
         "--set", f"hidden_dims={hidden}"])
    rates = [json.loads(line)["steps_per_s"] for line in (out_dir / "metrics.jsonl").read_text().splitlines()
             if line.strip() and "steps_per_s" in line]
    row["updates_per_s"] = statistics.median(rates[1:] or rates)
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--small-rows", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=20_000, help="td3_bc updates per file")
    parser.add_argument("--hidden", default="256,256")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--report", type=Path, default=None)
    args = parser.parse_args(argv)
    check_against_gymnasium()
    work = args.work or Path(tempfile.mkdtemp(prefix="offrl-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    import offrl.data as data

    rows = []
    for n in (args.small_rows, args.rows):
        path = work / f"pendulum-scale-{n}.hdf5"
        if not path.exists():
            t = time.perf_counter()
            ds = generate(n)
            gen_s = time.perf_counter() - t
            t = time.perf_counter()
            data.save(ds, path)
            save_s = time.perf_counter() - t
            del ds
        else:
            gen_s = save_s = float("nan")
        row = measure_file(path, args.steps, work, args.hidden)
        row.update(generate_s=gen_s, save_s=save_s)
        rows.append(row)
        print(json.dumps(row), flush=True)
    load_avg = os.getloadavg()
    small, big = rows
    lines = [f"# {big['rows']:,} transitions vs {small['rows']:,}: load, inspect, train",
             "",
             f"`PYTHONPATH=$PWD python benchmarks/scale.py --rows {args.rows} --steps {args.steps} --hidden {args.hidden}`; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPU cores; "
             f"load average at the end {load_avg[0]:.2f} / {load_avg[1]:.2f} / {load_avg[2]:.2f} (1 / 5 / 15 min). "
             "Each step ran in its own process; peak RSS is that process's `ru_maxrss`. td3_bc, batch 256, "
             f"hidden {args.hidden}, {args.steps:,} updates, no evaluation; updates/s is the median over the "
             "metrics rows after the first (compiling) chunk.",
             "",
             "| rows | file GB | arrays GB | generate s | save s | load s | load peak RSS GB | inspect s | inspect peak RSS GB | train updates/s | train peak RSS GB |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['rows']:,} | {r['file_gb']:.3f} | {r['arrays_gb']:.3f} | {r['generate_s']:.1f} | {r['save_s']:.1f} | "
                     f"{r['load_s']:.1f} | {r['load_rss_gb']:.2f} | {r['inspect_s']:.1f} | {r['inspect_rss_gb']:.2f} | "
                     f"{r['updates_per_s']:,.0f} | {r['train_rss_gb']:.2f} |")
    lines += ["", f"Updates/s at {big['rows']:,} rows / at {small['rows']:,}: "
                  f"**{big['updates_per_s'] / small['updates_per_s']:.2f}**. "
                  f"Load peak RSS / arrays: {big['load_rss_gb'] / big['arrays_gb']:.2f}; "
                  f"train peak RSS / arrays: {big['train_rss_gb'] / big['arrays_gb']:.2f}.", ""]
    text = "\n".join(lines)
    print(text)
    if args.report:
        args.report.write_text(text)


if __name__ == "__main__":
    main()
