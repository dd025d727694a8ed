"""What the demos share: a scripted CartPole expert, expert data, a small BC fit and its rollouts.

The expert is the linear controller ``a = 1{theta + 0.5 * theta_dot > 0}`` (push the cart
towards the side the pole falls to); it balances CartPole-v1 for the full 500 steps from every
start state tried (seeds 0..9), so it stands in for a queried zoo expert without training one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ENV_ID = "CartPole-v1"
BC_OVERRIDES = {"hidden_dims": "32,32", "batch_size": "64", "learning_rate": "3e-3"}


def cartpole_expert(obs: np.ndarray) -> np.ndarray:
    """``(B, 4)`` CartPole observations -> ``(B,)`` expert actions."""
    obs = np.asarray(obs, np.float32).reshape(-1, 4)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def rollout(act, episodes: int, seed: int, max_steps: int | None = None, env_id: str = ENV_ID) -> dict:
    """Run ``act(obs) -> (B,) actions`` for ``episodes`` side-by-side episodes (resets seeded
    ``seed + k``); returns the visited ``observations`` (alive steps only), ``lengths``, ``returns``
    and ``steps`` (``(episodes, T, obs_dim)``, every step including those after an episode ended)."""
    import jax

    from offrl.rollout import VectorEnv, run_episodes

    env = VectorEnv(env_id, episodes)
    visited: list[np.ndarray] = []

    def policy(params, carry, obs, key):
        visited.append(obs.copy())
        return np.asarray(act(obs)).reshape(-1, 1), carry

    try:
        out = run_episodes(env, policy, None, [seed + k for k in range(episodes)], jax.random.PRNGKey(seed), max_steps=max_steps)
    finally:
        env.close()
    lengths = np.asarray(out["length"])
    steps = np.stack(visited, axis=1)  # (episodes, T, obs_dim)
    alive = np.arange(steps.shape[1])[None, :] < lengths[:, None]
    return {"observations": steps[alive], "lengths": lengths, "returns": np.asarray(out["return"]), "steps": steps}


def labelled_dataset(observations: np.ndarray, actions: np.ndarray, num_actions: int = 2, action_low=None,
                     action_high=None):
    """A :class:`offrl.data.Dataset` of states labelled with actions (for BC: rewards and
    successors are placeholders). ``num_actions > 0``: ``Discrete`` actions; ``0``: continuous
    actions in the box ``[action_low, action_high]``."""
    from offrl.data import Dataset

    n = len(observations)
    terminals = np.zeros(n, bool)
    if num_actions:
        metadata = {"num_actions": num_actions}
    else:
        metadata = {"action_low": np.asarray(action_low, float).tolist(), "action_high": np.asarray(action_high, float).tolist()}
    return Dataset.from_arrays(observations, np.asarray(actions).reshape(n, -1), np.zeros(n, np.float32), terminals,
                               next_observations=observations, metadata=metadata)


def fit_bc(observations: np.ndarray, actions: np.ndarray, steps: int, seed: int = 0, num_actions: int = 2,
           action_low=None, action_high=None, overrides: dict | None = None):
    """BC on ``(observations, actions)`` with the engine: ``discrete_bc`` (cross-entropy) when
    ``num_actions > 0``, else ``bc`` (MSE on actions rescaled from ``[action_low, action_high]`` to
    ``[-1, 1]``). Returns ``act(obs) -> actions``: ``(B,)`` greedy indices or ``(B, action_dim)``
    env-unit actions. ``overrides`` replace :data:`BC_OVERRIDES`' config fields."""
    import jax

    from offrl.engine import train

    algo, base = ("discrete_bc", BC_OVERRIDES) if num_actions else ("bc", {**BC_OVERRIDES, "loss": "mse"})
    overrides = {**base, **(overrides or {})}
    data = labelled_dataset(observations, actions, num_actions, action_low, action_high)
    run = train(algo, data, steps=steps, seed=seed, eval_every=steps, eval_episodes=0, log_every=steps, progress=False,
                config_overrides=overrides)
    agent = jax.tree_util.tree_map(lambda x: x[0], run.agent)
    act_fn = jax.jit(run.module.act)
    info = run.info
    if num_actions:
        return lambda obs: np.asarray(act_fn(agent, info.normalize(np.asarray(obs, np.float32))))
    return lambda obs: info.to_env_action(np.asarray(act_fn(agent, info.normalize(np.asarray(obs, np.float32)))))


def write_outputs(out, name: str, result: dict, figure) -> dict:
    """``out/<name>.json`` and ``out/<name>.png``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, default=float) + "\n")
    figure.savefig(out / f"{name}.png", dpi=120, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return {"json": str(out / f"{name}.json"), "figure": str(out / f"{name}.png")}
