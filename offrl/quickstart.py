"""The main job in one call: doctor -> BC / IQL / CQL -> evaluation -> a report folder.

On a suboptimal bundled dataset (default ``pendulum-medium-expert-v0``: half the episodes from
a "medium" SAC snapshot that rarely swings the pendulum up, half from the expert snapshot)
behaviour cloning copies the average logged behaviour, while value-based offline RL (IQL,
CQL) can prefer the better actions in each state. The quickstart measures whether it does, on
this machine, and says so.

``normalized = 100 * (R - R_random) / (R_expert - R_random)`` with the dataset's references.

Example::

    from offrl.quickstart import run_quickstart
    result = run_quickstart(out="offrl-quickstart")      # a few minutes on 2 CPU cores
    result["verdict"]
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from offrl.errors import ConfigError

DEFAULT_DATASET = "pendulum-medium-expert-v0"
#: updates per algorithm.
DEFAULT_STEPS = {"bc": 3_000, "iql": 6_000, "cql": 6_000,
                 "discrete_bc": 3_000, "discrete_iql": 6_000, "discrete_cql": 6_000, "dqn": 6_000,
                 "double_dqn": 6_000, "discrete_bcq": 6_000}
#: the discrete family's counterpart of each continuous algorithm (a Discrete dataset with the
#: default --algos bc,iql trains discrete_bc, discrete_iql).
DISCRETE_COUNTERPARTS = {"bc": "discrete_bc", "iql": "discrete_iql", "cql": "discrete_cql", "bcq": "discrete_bcq"}
#: Pendulum settings (the MuJoCo defaults assume 1000-step episodes with rewards of order 1):
#: smaller networks for 3-d observations and 1-d actions; rewards (about -16..0 per step)
#: scaled by 0.1 so that values stay of order 10 instead of hundreds, which the critics
#: fit within a few thousand updates; CQL's BC warm-up shortened from 40k to 2k updates.
#: The reward scale also sets CQL's effective conservatism (the penalty's gradient does not
#: scale with the rewards, the TD error's does), so scaling rewards by 0.1 strengthens CQL's
#: penalty relative to the TD error; the measured effect is in benchmarks/README.md.
PENDULUM_OVERRIDES = {
    "bc": {"hidden_dims": (128, 128)},
    "iql": {"hidden_dims": (128, 128), "reward_scaling": "0.1"},
    "cql": {"hidden_dims": (128, 128), "reward_scaling": "0.1", "bc_warmup_steps": 2000},
}


def summary_row(run) -> dict:
    """:meth:`Run.summary` (last evaluation, mean ± std over seeds) plus the critic's estimate
    ``Q(s0, pi(s0))`` and the realised discounted return at that evaluation."""
    last_step = max(r["step"] for r in run.evaluations())
    last = [r for r in run.evaluations() if r["step"] == last_step]
    q = np.array([r.get("eval/q_estimate", np.nan) for r in last], dtype=float)
    g = np.array([r.get("eval/discounted_return", np.nan) for r in last], dtype=float)
    return {"algo": run.algo, "steps": int(last_step), **run.summary(), "score_per_seed": run.final_scores,
            "q_estimate": float(np.nanmean(q)) if np.isfinite(q).any() else None,
            "discounted_return": float(np.nanmean(g)) if np.isfinite(g).any() else None,
            "run_folder": str(run.path) if run.path else None}


def verdict(rows: dict, behavior_score: float | None) -> str:
    bc_name = "bc" if "bc" in rows else "discrete_bc"
    if bc_name not in rows:
        return "BC was not run, so there is no comparison with behaviour cloning."
    bc = rows[bc_name]
    offline = {k: v for k, v in rows.items() if k != bc_name}
    if not offline:
        return "Only BC was run."
    best_name, best = max(offline.items(), key=lambda kv: kv[1]["score_mean"])
    gap = best["score_mean"] - bc["score_mean"]
    spread = max(best["score_std"], bc["score_std"])
    name = best_name.upper()
    if gap > spread and gap > 2.0:
        text = f"Offline RL beat BC: {name} scored {best['score_mean']:.1f} vs BC {bc['score_mean']:.1f} (+{gap:.1f} points, more than the seed spread of {spread:.1f})."
    elif gap > 0:
        text = f"Offline RL did NOT clearly beat BC here: {name} {best['score_mean']:.1f} vs BC {bc['score_mean']:.1f} (+{gap:.1f}, within the seed spread of {spread:.1f}); train longer (--steps) or with more seeds."
    else:
        text = f"Offline RL did NOT beat BC here: best offline RL ({name}) {best['score_mean']:.1f} vs BC {bc['score_mean']:.1f}."
    if behavior_score is not None:
        text += f" The data's own episodes average {behavior_score:.1f}."
    return text


def run_quickstart(dataset: str = DEFAULT_DATASET, out="offrl-quickstart", algos: Sequence[str] = ("bc", "iql"),
                   steps: dict | int | None = None, seeds: int = 2, eval_episodes: int = 10, evaluations: int = 5,
                   progress: bool = True, console=None) -> dict:
    """Doctor, train ``algos`` on ``dataset``, evaluate, and write ``out/`` (summary.md, plots, results.json)."""
    from rich.console import Console

    import offrl.data as data
    from offrl.data.doctor import inspect_dataset, render, write_report
    from offrl.engine import train
    from offrl.envs import normalized_score
    from offrl.plotting import plot_runs

    console = console or Console(quiet=not progress)
    started = time.perf_counter()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "results.json").exists():
        raise ConfigError(f"--out {out} exists and is not a quickstart report folder; choose another --out.")
    out.mkdir(parents=True, exist_ok=True)
    ds = data.load(dataset)
    from offrl.data.checks import num_discrete_actions

    if num_discrete_actions(ds):
        algos = tuple(DISCRETE_COUNTERPARTS.get(a, a) for a in algos)
    if isinstance(steps, int):
        steps = {a: steps for a in algos}
    steps = {**DEFAULT_STEPS, **(steps or {})}
    env_id = ds.metadata.get("env_id")
    if not env_id:
        raise ConfigError(f"dataset '{dataset}' has no metadata 'env_id', so its policies cannot be evaluated; pick a dataset made by `offrl collect`.")

    console.rule(f"[bold]1/3 dataset doctor: {dataset}")
    report = inspect_dataset(ds)
    render(report, console=console)
    doctor_files = write_report(report, out / "doctor")

    behavior_return = float(np.mean(ds.episode_returns()))
    complete_mean = ds.metadata.get("dataset_return_mean")
    if complete_mean is not None:
        behavior_return = float(complete_mean)
    behavior_score = normalized_score(env_id, behavior_return, ds.metadata)
    behavior_score = None if behavior_score is None else float(behavior_score)

    console.rule(f"[bold]2/3 training {', '.join(a.upper() for a in algos)} ({seeds} seeds each, vmapped)")
    runs, rows, timings = [], {}, {}
    is_pendulum = env_id.lower().startswith("pendulum")
    for algo in algos:
        n = int(steps[algo])
        overrides = dict(PENDULUM_OVERRIDES.get(algo, {"hidden_dims": (128, 128)})) if is_pendulum else {}
        if algo == "cql" and not is_pendulum:
            overrides["bc_warmup_steps"] = min(1000, n // 5)
        run_dir = out / "runs" / algo
        if run_dir.exists():
            import shutil

            shutil.rmtree(run_dir)
        t0 = time.perf_counter()
        run = train(algo, ds, steps=n, seeds=seeds, eval_every=max(1, n // evaluations), eval_episodes=eval_episodes,
                    out=run_dir, config_overrides=overrides, log_every=max(1, n // evaluations), progress=progress)
        timings[algo] = time.perf_counter() - t0
        runs.append(run)
        rows[algo] = {**summary_row(run), "seconds": timings[algo], "config_overrides": overrides}

    console.rule("[bold]3/3 results")
    plot_runs(runs, out, baselines={"behaviour (dataset mean)": behavior_score})
    text = verdict(rows, behavior_score)
    result = {"dataset": dataset, "env_id": env_id, "transitions": len(ds), "episodes": ds.num_episodes,
              "behavior": {"dataset_return_mean": behavior_return, "score": behavior_score,
                            "policy_return": ds.metadata.get("policy_return"),
                            "policy_score": _maybe_float(normalized_score(env_id, ds.metadata["policy_return"], ds.metadata)) if "policy_return" in ds.metadata else None},
                   "references": {"random": ds.metadata.get("ref_min_score"), "expert": ds.metadata.get("ref_max_score")},
                   "algorithms": rows, "verdict": text, "seconds": time.perf_counter() - started,
                   "doctor": {k: str(Path(v).relative_to(out)) for k, v in doctor_files.items()},
                   "tier_estimate": report.get("tier")}
    (out / "results.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "summary.md").write_text(summary_markdown(result))
    console.print(results_table(result))
    console.print(f"[bold]{text}")
    console.print(f"report: {out}/summary.md, learning_curves.png, q_vs_return.png, doctor/ ({result['seconds']:.0f} s in total)")
    return result


def _maybe_float(x):
    return None if x is None else float(x)


def results_table(result: dict):
    from rich.table import Table

    table = Table(title=f"offrl quickstart: {result['dataset']} ({result['env_id']}, {result['transitions']} transitions)")
    for col in ("policy", "updates", "seeds", "return", "normalized score", "vs behaviour", "time"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    b = result["behavior"]
    fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    table.add_row("behaviour (dataset episodes)", "-", "-", fmt(b["dataset_return_mean"]), fmt(b["score"]), "0.0", "-")
    for algo, r in result["algorithms"].items():
        diff = None if b["score"] is None else r["score_mean"] - b["score"]
        table.add_row(algo.upper(), str(r["steps"]), str(r["seeds"]), f"{r['return_mean']:.1f} ± {r['return_std']:.1f}",
                      f"{r['score_mean']:.1f} ± {r['score_std']:.1f}", "-" if diff is None else f"{diff:+.1f}",
                      f"{r['seconds']:.0f} s")
    return table


def summary_markdown(result: dict) -> str:
    b = result["behavior"]
    lines = [f"# offrl quickstart: {result['dataset']}", "",
             f"Environment `{result['env_id']}`, {result['transitions']} transitions in {result['episodes']} episodes.",
             f"Normalized score = 100 * (R - R_random) / (R_expert - R_random) with R_random = {result['references']['random']}, "
             f"R_expert = {result['references']['expert']}.", "",
             "| policy | updates | seeds | return | normalized score |", "|---|---|---|---|---|"]
    fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines.append(f"| behaviour (dataset episodes) | - | - | {fmt(b['dataset_return_mean'])} | {fmt(b['score'])} |")
    if b.get("policy_return") is not None:
        lines.append(f"| behaviour policy (snapshot return) | - | - | {fmt(b['policy_return'])} | {fmt(b['policy_score'])} |")
    for algo, r in result["algorithms"].items():
        lines.append(f"| {algo.upper()} | {r['steps']} | {r['seeds']} | {r['return_mean']:.1f} ± {r['return_std']:.1f} | "
                     f"{r['score_mean']:.1f} ± {r['score_std']:.1f} |")
    lines += ["", "Settings changed from each algorithm's paper defaults: " + "; ".join(
        f"{a.upper()} {r.get('config_overrides') or '{}'}" for a, r in result["algorithms"].items()) + ".",
              "", f"**{result['verdict']}**", "",
              "![learning curves](learning_curves.png)", "",
              "![critic estimate vs realised return](q_vs_return.png)", "",
              "The dataset doctor's report is in [doctor/summary.md](doctor/summary.md) "
              "(returns.png, actions.png, states.png).", "",
              f"Total time: {result['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"
