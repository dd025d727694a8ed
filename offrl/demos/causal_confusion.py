"""Causal confusion in imitation learning (de Haan, Jayaraman & Levine 2019, "Causal Confusion in
Imitation Learning").

The expert drives MountainCar-v0 by pushing along the velocity, ``a = 2 if v >= 0 else 0``; the
imitator sees the position and a noisy velocity ``v + N(0, noise^2)`` and, in one variant, also a
nuisance caused by the expert itself: its *previous* action (the "brake light"). The expert's
actions persist for long stretches, so the nuisance predicts the next action better than the
noisy cause does and BC with it scores better on held-out expert data. Deployed, the nuisance
is the clone's own previous action: it copies itself, holds the initial "no push" and the car
never climbs. BC without the nuisance must use the velocity and drives like the expert.
"""

from __future__ import annotations

import numpy as np

from offrl.demos.common import fit_bc, write_outputs

ENV = "MountainCar-v0"
NO_PUSH = 1


def mountain_car_expert(obs: np.ndarray) -> np.ndarray:
    """Push in the direction of the velocity: ``(B, 2)`` -> ``(B,)`` actions in {0, 2}."""
    return np.where(np.asarray(obs).reshape(-1, 2)[:, 1] >= 0, 2, 0)


def play(act, episodes: int, seed: int, noise: float, nuisance: bool) -> dict:
    """Episodes where ``act(seen) -> (B,)`` picks the actions (``act=None``: the expert). ``seen``
    is ``[position, velocity + noise, previous action (nuisance) or 0]``. Returns the seen
    observations of alive steps with the expert's labels, and the episode returns."""
    import jax

    from offrl.rollout import VectorEnv, run_episodes

    rng = np.random.default_rng(seed)
    seen_steps, labels = [], []

    def policy(params, prev, obs, key):
        seen = np.stack([obs[:, 0], obs[:, 1] + rng.normal(0.0, noise, len(obs)),
                         prev if nuisance else np.zeros(len(obs))], axis=1).astype(np.float32)
        expert = mountain_car_expert(obs)
        actions = expert if act is None else np.asarray(act(seen))
        seen_steps.append(seen)
        labels.append(expert)
        return actions[:, None], actions.astype(np.float32)

    env = VectorEnv(ENV, episodes)
    try:
        out = run_episodes(env, policy, None, [seed + k for k in range(episodes)], jax.random.PRNGKey(seed),
                           carry=np.full(episodes, NO_PUSH, np.float32))
    finally:
        env.close()
    alive = np.arange(len(seen_steps))[None, :] < np.asarray(out["length"])[:, None]
    return {"observations": np.stack(seen_steps, 1)[alive], "labels": np.stack(labels, 1)[alive],
            "returns": np.asarray(out["return"])}


def run(out="offrl-demo/causal-confusion", seed: int = 0, noise: float = 0.003, expert_episodes: int = 10,
        eval_episodes: int = 10, bc_steps: int = 2000, bc_seeds: int = 3) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {}
    for nuisance in (False, True):
        name = "with nuisance" if nuisance else "without nuisance"
        train_data = play(None, expert_episodes, seed, noise, nuisance)
        held_out = play(None, 5, seed + 100, noise, nuisance)
        accuracy, deployed = [], []
        for s in range(bc_seeds):
            act = fit_bc(train_data["observations"], train_data["labels"], bc_steps, seed=seed + s, num_actions=3)
            accuracy.append(float(np.mean(act(held_out["observations"]) == held_out["labels"])))
            deployed.append(float(play(act, eval_episodes, seed + 200 + 50 * s, noise, nuisance)["returns"].mean()))
        rows[name] = {"held_out_accuracy": accuracy, "deployed_return": deployed,
                      "expert_return": float(train_data["returns"].mean()), "transitions": int(len(train_data["labels"]))}

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    names = list(rows)
    for ax, key, title in ((axes[0], "held_out_accuracy", "held-out expert data: accuracy"),
                           (axes[1], "deployed_return", "deployed: episode return")):
        means = [np.mean(rows[n][key]) for n in names]
        ax.bar(names, means, yerr=[np.std(rows[n][key]) for n in names], color=["tab:blue", "tab:red"])
        ax.set_title(title)
    axes[1].axhline(rows[names[0]]["expert_return"], ls="--", color="k", label="expert")
    axes[1].axhline(-200, ls=":", color="grey", label="never reaches the goal")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"Causal confusion ({ENV}: the previous action as a nuisance, velocity noise {noise})")

    w, wo = rows["with nuisance"], rows["without nuisance"]
    verdict = (f"BC with the nuisance scored {100 * np.mean(w['held_out_accuracy']):.1f}% on held-out expert data "
               f"(without: {100 * np.mean(wo['held_out_accuracy']):.1f}%) but returned {np.mean(w['deployed_return']):.0f} "
               f"when deployed, against {np.mean(wo['deployed_return']):.0f} without it (expert {wo['expert_return']:.0f}).")
    result = {"env": ENV, "rows": rows, "verdict": verdict,
              "settings": {"seed": seed, "noise": noise, "expert_episodes": expert_episodes, "eval_episodes": eval_episodes,
                           "bc_steps": bc_steps, "bc_seeds": bc_seeds}}
    result["files"] = write_outputs(out, "causal_confusion", result, fig)
    return result
