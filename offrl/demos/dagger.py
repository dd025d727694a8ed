"""DAgger (Ross, Gordon & Bagnell 2011, "A Reduction of Imitation Learning and Structured
Prediction to No-Regret Online Learning") against behaviour cloning with the same number of
expert labels.

DAgger iterates: run the current policy ``pi_i`` (the expert at ``i = 1``, i.e. ``beta_1 = 1``,
``beta_i = 0`` after), ask the expert to label every state it visited, aggregate
``D <- D u {(s, pi*(s))}`` and refit ``pi_{i+1}`` by BC on ``D``. The labels come from the states
the learner itself reaches, so the mistakes that BC's expert-only data never shows get corrected.

The task is :mod:`offrl.demos.causal_confusion`'s: MountainCar-v0 with a noisy velocity and the
previous action as a nuisance. BC on expert episodes latches onto the nuisance however many labels
it gets; DAgger's labels on the learner's own states break the nuisance's correlation with the
expert's action. The expert is the scripted controller (queried, never trained here).
"""

from __future__ import annotations

import numpy as np

from offrl.demos.causal_confusion import ENV, play
from offrl.demos.common import fit_bc, write_outputs


def run(out="offrl-demo/dagger", seed: int = 0, iterations: int = 6, noise: float = 0.003, eval_episodes: int = 10,
        bc_steps: int = 2000) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def evaluate(act, i):
        return float(play(act, eval_episodes, seed + 10_000 + i, noise, nuisance=True)["returns"].mean())

    expert_pool = play(None, 30, seed + 500, noise, nuisance=True)
    observations, labels = np.zeros((0, 3), np.float32), np.zeros(0, np.int64)
    act = None  # iteration 1 runs the expert (beta_1 = 1)
    dagger, bc = [], []
    for i in range(iterations):
        visited = play(act, 1, seed + i, noise, nuisance=True)
        observations = np.concatenate([observations, visited["observations"]])
        labels = np.concatenate([labels, visited["labels"]])
        act = fit_bc(observations, labels, bc_steps, seed=seed, num_actions=3)
        dagger.append({"labels": int(len(labels)), "return": evaluate(act, i)})
        n = min(len(labels), len(expert_pool["labels"]))
        bc_act = fit_bc(expert_pool["observations"][:n], expert_pool["labels"][:n], bc_steps, seed=seed, num_actions=3)
        bc.append({"labels": int(n), "return": evaluate(bc_act, i)})

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot([r["labels"] for r in dagger], [r["return"] for r in dagger], "o-", label="DAgger")
    ax.plot([r["labels"] for r in bc], [r["return"] for r in bc], "s--", label="BC (expert episodes)")
    ax.axhline(float(expert_pool["returns"].mean()), ls=":", color="k", label="expert")
    ax.set_xlabel("expert labels")
    ax.set_ylabel("episode return")
    ax.legend(fontsize=8)
    ax.set_title(f"DAgger vs BC on {ENV} (noisy velocity + previous action)")
    later_dagger = float(np.mean([r["return"] for r in dagger[1:]]))
    later_bc = float(np.mean([r["return"] for r in bc[1:]]))
    verdict = (f"From {dagger[1]['labels']} to {dagger[-1]['labels']} expert labels DAgger returned {later_dagger:.0f} on average, "
               f"BC with as many labels from expert episodes {later_bc:.0f} (expert {float(expert_pool['returns'].mean()):.0f}; "
               f"at {dagger[-1]['labels']} labels: DAgger {dagger[-1]['return']:.0f}, BC {bc[-1]['return']:.0f}).")
    result = {"env": ENV, "dagger": dagger, "bc": bc, "mean_return_after_first": {"dagger": later_dagger, "bc": later_bc}, "expert_return": float(expert_pool["returns"].mean()),
              "verdict": verdict, "settings": {"seed": seed, "iterations": iterations, "noise": noise,
                                               "eval_episodes": eval_episodes, "bc_steps": bc_steps}}
    result["files"] = write_outputs(out, "dagger", result, fig)
    return result
