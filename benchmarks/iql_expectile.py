"""IQL's expectile sweep: does ``V_tau`` approach the best in-support value as ``tau -> 1``?

IQL fits ``V(s)`` as the ``tau``-expectile of ``Q(s, a)`` over the dataset's actions: ``tau = 0.5``
is their mean (SARSA, the behaviour policy's value), ``tau -> 1`` their maximum, without ever
querying an action the data did not take. Reads one finished ``offrl benchmark`` IQL cell per
``tau`` (run with ``--set iql.expectile=TAU``), reloads each seed's critics, and measures on the
cell's own dataset:

* ``V(s0)`` at the episodes' first states, in raw (unscaled) reward units, beside the dataset's
  discounted returns from those states: their mean (what the behaviour policies obtained) and
  their maximum (the best trajectory in the data);
* the share of the dataset's ``(s, a)`` whose ``min_k Q_k(s, a)`` exceeds ``V(s)``. With one logged
  action per state it need not fall as ``tau`` grows: Q's targets bootstrap from ``V``, so the two
  rise together (on hopper-medium-replay it stayed between 0.37 and 0.55);
* the last evaluation's normalized score.

    python benchmarks/iql_expectile.py RESULTS/tau-*/cells/hopper-medium-replay-iql \\
        --out benchmarks/results/iql-expectile-hopper-2026-12-01
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def measure(cell: Path) -> dict:
    import jax
    import jax.numpy as jnp

    from offrl import data
    from offrl.engine.run import load_run

    run = load_run(cell)
    cfg = run.config
    record = json.loads((cell / "cell.json").read_text())
    ds = data.load(record["dataset"])
    gamma = float(cfg.discount)
    starts, _ = ds.episode_bounds()
    rtg = ds.returns_to_go(gamma)
    obs = jnp.asarray(run.info.normalize(ds.observations))
    actions = jnp.asarray(run.info.to_agent_action(ds.actions))
    scale, bias = run.info.reward_scale, run.info.reward_bias
    to_raw = lambda v: (np.asarray(v) - bias / (1.0 - gamma)) / scale  # noqa: E731

    seeds = []
    for seed in range(int(run.settings["seeds"])):
        agent = jax.tree_util.tree_map(lambda x: x[seed], run.agent)
        v = np.asarray(agent.value.apply_fn(agent.value.params, obs)).reshape(-1)
        q = np.asarray(agent.critic.apply_fn(agent.critic.params, obs, actions).min(0)).reshape(-1)
        seeds.append({"v_start": float(to_raw(v[starts]).mean()), "q_above_v": float(np.mean(q > v)),
                      "v_minus_rtg": float(np.mean(to_raw(v) - rtg))})
    scores = run.final_scores
    out = {"cell": str(cell), "tau": float(cfg.expectile), "step": run.step, "seeds": len(seeds),
           "score_mean": float(np.mean(scores)), "score_std": float(np.std(scores)),
           "data_start_return_mean": float(rtg[starts].mean()), "data_start_return_max": float(rtg[starts].max()),
           "data_start_return_p90": float(np.percentile(rtg[starts], 90))}
    for key in seeds[0]:
        values = [s[key] for s in seeds]
        out[f"{key}_mean"], out[f"{key}_std"] = float(np.mean(values)), float(np.std(values))
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    taus = [r["tau"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    ax = axes[0]
    ax.errorbar(taus, [r["v_start_mean"] for r in rows], [r["v_start_std"] for r in rows], marker="o", label="IQL V(s0)")
    ax.axhline(rows[0]["data_start_return_mean"], ls="--", c="gray", label="data: mean return from s0")
    ax.axhline(rows[0]["data_start_return_max"], ls=":", c="k", label="data: best return from s0")
    ax.set(xlabel="expectile tau", ylabel="discounted return (raw)", title="V at the episodes' first states")
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.errorbar(taus, [r["q_above_v_mean"] for r in rows], [r["q_above_v_std"] for r in rows], marker="o")
    ax.set(xlabel="expectile tau", ylabel="share of dataset (s, a)", title="Q(s, a) > V(s)", ylim=(0, 1))
    ax = axes[2]
    ax.errorbar(taus, [r["score_mean"] for r in rows], [r["score_std"] for r in rows], marker="o")
    ax.set(xlabel="expectile tau", ylabel="normalized score", title="policy (last evaluation)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="+", help="finished IQL cell folders, one per tau")
    parser.add_argument("--out", default="iql-expectile", help="writes OUT.json, OUT.md and OUT.png")
    args = parser.parse_args(argv)
    rows = sorted((measure(Path(c)) for c in args.cells), key=lambda r: r["tau"])
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    lines = ["| tau | V(s0) raw | data mean / p90 / best return from s0 | share Q(s,a) > V(s) | mean V(s) - return-to-go | normalized score |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tau']} | {r['v_start_mean']:.1f} ± {r['v_start_std']:.1f} | {r['data_start_return_mean']:.1f} / "
                     f"{r['data_start_return_p90']:.1f} / {r['data_start_return_max']:.1f} | {r['q_above_v_mean']:.3f} ± "
                     f"{r['q_above_v_std']:.3f} | {r['v_minus_rtg_mean']:.1f} ± {r['v_minus_rtg_std']:.1f} | "
                     f"{r['score_mean']:.1f} ± {r['score_std']:.1f} |")
    table = "\n".join(lines)
    out.with_suffix(".md").write_text(table + "\n")
    plot(rows, out.with_suffix(".png"))
    print(table)


if __name__ == "__main__":
    main()
