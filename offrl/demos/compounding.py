"""Compounding error of behaviour cloning (Ross & Bagnell 2010, "Efficient Reductions for Imitation Learning").

A clone that disagrees with the expert on a fraction ``eps`` of the *expert's* states makes
``eps T`` mistakes in ``T`` steps only while it stays on the expert's state distribution. Each
mistake moves it towards states the expert never showed, where it errs more, so along its own
trajectory the mistakes compound; Ross & Bagnell bound the cost by ``eps T^2`` (1% error per step
over ``T = 100`` allows up to 100 mistakes, not 1).

The demo clones the CartPole expert (:func:`offrl.demos.common.cartpole_expert`) from increasing
numbers of its labels, measures ``eps`` on held-out expert states, and counts the clone's cost
along its own episodes: a mistake (an action the expert would not take in that state) costs 1,
and every step after the pole falls or the cart leaves the track costs 1. The cumulative cost
over horizons ``T`` is plotted beside ``eps T`` and ``eps T^2``.
"""

from __future__ import annotations

import numpy as np

from offrl.demos.common import cartpole_expert, fit_bc, rollout, write_outputs

HORIZONS = (25, 50, 100, 200, 300, 400, 500)


def cumulative_cost(mistakes: np.ndarray, lengths: np.ndarray, horizons=HORIZONS) -> list[float]:
    """Mean over episodes of ``sum_{t<T} c_t`` with ``c_t = mistakes[k, t]`` while alive and 1 after
    the episode ended; ``mistakes`` is ``(episodes, T_max)`` of 0/1."""
    t = np.arange(mistakes.shape[1])[None, :]
    cost = np.where(t < np.asarray(lengths)[:, None], mistakes, 1.0)
    if cost.shape[1] < max(horizons):
        cost = np.pad(cost, ((0, 0), (0, max(horizons) - cost.shape[1])), constant_values=1.0)
    running = np.cumsum(cost, axis=1)
    return [float(running[:, T - 1].mean()) for T in horizons]


def run(out="offrl-demo/compounding", sizes=(25, 50, 200), episodes: int = 10, bc_steps: int = 1500,
        seed: int = 0) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pool = rollout(cartpole_expert, episodes=8, seed=seed)["observations"]
    held_out = rollout(cartpole_expert, episodes=4, seed=seed + 1000)["observations"]
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        obs = pool[rng.choice(len(pool), size=min(n, len(pool)), replace=False)]
        act = fit_bc(obs, cartpole_expert(obs), bc_steps, seed=seed)
        eps = float(np.mean(act(held_out) != cartpole_expert(held_out)))
        own = rollout(act, episodes=episodes, seed=seed + 5000)
        steps = own["steps"]
        flat = steps.reshape(-1, steps.shape[-1])
        mistakes = (act(flat) != cartpole_expert(flat)).reshape(steps.shape[:2]).astype(np.float64)
        cost = cumulative_cost(mistakes, own["lengths"])
        rows.append({"expert_labels": int(n), "eps": eps, "mean_length": float(own["lengths"].mean()), "cost": cost,
                     "eps_T": [eps * T for T in HORIZONS], "eps_T2": [eps * T * T for T in HORIZONS]})

    fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.4))
    for ax, r in zip(np.atleast_1d(axes), rows):
        ax.plot(HORIZONS, r["cost"], "o-", label="BC: measured cost")
        ax.plot(HORIZONS, r["eps_T"], "--", label="eps T")
        ax.plot(HORIZONS, r["eps_T2"], ":", label="eps T^2")
        ax.set_ylim(0, max(HORIZONS))
        ax.set_title(f"{r['expert_labels']} labels, eps = {r['eps']:.3f}")
        ax.set_xlabel("horizon T")
    np.atleast_1d(axes)[0].set_ylabel("cumulative cost")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.suptitle("Behaviour cloning's mistakes compound along its own trajectories (CartPole-v1)")

    ratios = [r["cost"][-1] / r["eps_T"][-1] if r["eps"] > 0 else float("nan") for r in rows]
    r = rows[int(np.nanargmax(ratios))] if np.any(np.isfinite(ratios)) else rows[0]
    verdict = (f"With {r['expert_labels']} expert labels BC errs on {100 * r['eps']:.1f}% of expert states but its cost over "
               f"T = {HORIZONS[-1]} steps of its own episodes is {r['cost'][-1]:.0f}, {r['cost'][-1] / max(r['eps_T'][-1], 1e-9):.1f}x "
               f"the eps T = {r['eps_T'][-1]:.0f} of an imitator that stays on the expert's states (bound eps T^2 = {r['eps_T2'][-1]:.0f}).")
    result = {"env": "CartPole-v1", "horizons": list(HORIZONS), "rows": rows, "cost_over_eps_T": ratios, "verdict": verdict,
              "settings": {"sizes": list(sizes), "episodes": episodes, "bc_steps": bc_steps, "seed": seed}}
    result["files"] = write_outputs(out, "compounding", result, fig)
    return result
