"""DAgger (Ross, Gordon & Bagnell 2011, "A Reduction of Imitation Learning and Structured
Prediction to No-Regret Online Learning") against behaviour cloning with the same number of
expert labels, on one continuous and one discrete env.

DAgger iterates: run the current policy ``pi_i`` (the expert at ``i = 1``, i.e. ``beta_1 = 1``,
``beta_i = 0`` after) for ``labels_per_iteration`` steps, ask the expert to label every state it
visited, aggregate ``D <- D u {(s, pi*(s))}`` and refit ``pi_{i+1}`` by BC on ``D``. The labels
come from the states the learner itself reaches, so the mistakes that BC's expert-only data
never shows get corrected. BC gets as many labels collected the same way with the expert
driving (``beta_i = 1`` throughout): ``labels_per_iteration`` steps of the expert from the same
start states, the clone refit on all of them each iteration.

The two tasks and their labellers:

* **Pendulum-v1** (continuous): a *trained zoo expert*, the SAC actor bundled with offrl
  (:mod:`offrl.demos.experts`, exported as NumPy arrays from an ``offrl collect
  train-behavior`` zoo), queried on the true state. The imitator sees the state with a noisy
  angular velocity (``N(0, 0.3^2)``) and the previous torque, a nuisance caused by whoever
  drives: the expert's torques persist, so BC on expert episodes leans on it and, deployed,
  keeps repeating its own last torque; DAgger's labels on the clone's own states break that.
* **MountainCar-v0** (discrete): a *scripted expert* (push along the velocity,
  :func:`offrl.demos.causal_confusion.mountain_car_expert`), observed through
  :mod:`offrl.demos.causal_confusion`'s noisy velocity with the previous action as a nuisance.
  BC on expert episodes latches onto the nuisance however many labels it gets; DAgger's labels
  on the learner's own states break its correlation with the expert's action. The discrete
  zoo expert (CartPole-v1's DQN, bundled too) is not used here: CartPole is too forgiving to
  separate the two (benchmarks/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from offrl.demos.common import fit_bc, rollout, write_outputs


@dataclass
class Task:
    """One env for DAgger: ``visit(act, n, seed) -> (observations, expert labels)`` for the first
    ``n`` steps ``act`` takes (``act=None``: the expert drives), ``evaluate(act, episodes, seed)
    -> mean return`` and the action space for BC."""

    env_id: str
    labeller: str
    visit: Callable
    evaluate: Callable
    num_actions: int = 0
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    bc_overrides: dict | None = None  #: config fields of the clone beyond :data:`offrl.demos.common.BC_OVERRIDES`


def _first_steps(play_one, n: int, seed: int):
    """Episodes from ``play_one(seed) -> (observations, labels)`` until ``n`` steps are gathered
    (resets seeded ``seed, seed + 1000, ...``)."""
    obs, labels, k = [], [], 0
    while sum(map(len, obs)) < n:
        o, y = play_one(seed + 1000 * k)
        obs.append(o)
        labels.append(y)
        k += 1
    return np.concatenate(obs)[:n], np.concatenate(labels)[:n]


#: the swing-up is a sharp function of the state: a wider clone than the discrete one
PENDULUM_BC = {"hidden_dims": "128,128", "batch_size": "128", "learning_rate": "1e-3"}


def play_with_previous_action(env_id: str, expert, act, episodes: int, seed: int, noise: float, noisy_index: int) -> dict:
    """Episodes where the imitator sees ``[obs with N(0, noise^2) on obs[noisy_index], previous
    action]`` (the previous action is a nuisance caused by whoever drives, 0 at the start);
    ``act(seen)`` drives (``act=None``: the expert on the true observation). Returns the seen
    observations of alive steps, the expert's labels there and the episode returns."""
    import jax

    from offrl.rollout import VectorEnv, run_episodes

    rng = np.random.default_rng(seed)
    seen_steps, labels = [], []

    def policy(params, prev, obs, key):
        noisy = np.array(obs, np.float32)
        noisy[:, noisy_index] += rng.normal(0.0, noise, len(obs))
        seen = np.concatenate([noisy, prev], axis=1).astype(np.float32)
        label = np.asarray(expert(obs), np.float32).reshape(len(obs), -1)
        actions = label if act is None else np.asarray(act(seen), np.float32).reshape(len(obs), -1)
        seen_steps.append(seen)
        labels.append(label)
        return actions, actions

    env = VectorEnv(env_id, episodes)
    try:
        out = run_episodes(env, policy, None, [seed + k for k in range(episodes)], jax.random.PRNGKey(seed),
                           carry=np.zeros((episodes, 1), np.float32))
    finally:
        env.close()
    alive = np.arange(len(seen_steps))[None, :] < np.asarray(out["length"])[:, None]
    return {"observations": np.stack(seen_steps, 1)[alive], "labels": np.stack(labels, 1)[alive],
            "returns": np.asarray(out["return"])}


def pendulum_task(noise: float = 0.3) -> Task:
    """Pendulum-v1 labelled by the bundled SAC zoo expert; the imitator sees a noisy angular
    velocity and the previous torque (the nuisance)."""
    from offrl.demos.experts import load_expert

    expert = load_expert("pendulum-sac")
    env_id = "Pendulum-v1"

    def visit(act, n, seed):
        def one(s):
            out = play_with_previous_action(env_id, expert, act, 1, s, noise, 2)
            return out["observations"], out["labels"]
        return _first_steps(one, n, seed)

    def evaluate(act, episodes, seed):
        return float(play_with_previous_action(env_id, expert, act, episodes, seed, noise, 2)["returns"].mean())

    return Task(env_id, f"zoo expert pendulum-sac ({expert.meta['source'].split(' (')[0]})", visit, evaluate, 0,
                expert.action_low, expert.action_high, PENDULUM_BC)


def mountain_car_task(noise: float = 0.003) -> Task:
    """MountainCar-v0 with a noisy velocity and the previous action as a nuisance, labelled by the
    scripted expert."""
    from offrl.demos.causal_confusion import ENV, play

    def visit(act, n, seed):
        def one(s):
            out = play(act, 1, s, noise, nuisance=True)
            return out["observations"], out["labels"]
        return _first_steps(one, n, seed)

    def evaluate(act, episodes, seed):
        return float(play(act, episodes, seed, noise, nuisance=True)["returns"].mean())

    return Task(ENV, "scripted expert (push along the velocity)", visit, evaluate, 3)


#: name -> (task factory, labels per iteration): one continuous, one discrete env.
TASKS = {"Pendulum-v1": (pendulum_task, 200), "MountainCar-v0": (mountain_car_task, 200)}


def dagger_vs_bc(task: Task, labels_per_iteration: int, iterations: int, eval_episodes: int, bc_steps: int,
                 seed: int) -> dict:
    """Return vs expert labels for DAgger and for BC with the same labels on ``task``."""
    space = {"num_actions": task.num_actions, "action_low": task.action_low, "action_high": task.action_high,
             "overrides": task.bc_overrides}

    def fit(obs, labels, i):
        return fit_bc(obs, labels, bc_steps, seed=seed + i, **space)

    def evaluate(act, i):
        return task.evaluate(act, eval_episodes, seed + 10_000 + 100 * i)

    observations = labels = bc_observations = bc_labels = None
    act = None  # iteration 1 runs the expert (beta_1 = 1)
    dagger, bc = [], []
    for i in range(iterations):
        # the same start states for both: DAgger's current policy drives, BC's expert drives
        obs, y = task.visit(act, labels_per_iteration, seed + i)
        observations = obs if observations is None else np.concatenate([observations, obs])
        labels = y if labels is None else np.concatenate([labels, y])
        obs, y = (obs, y) if i == 0 else task.visit(None, labels_per_iteration, seed + i)
        bc_observations = obs if bc_observations is None else np.concatenate([bc_observations, obs])
        bc_labels = y if bc_labels is None else np.concatenate([bc_labels, y])
        act = fit(observations, labels, i)
        dagger.append({"labels": int(len(labels)), "return": evaluate(act, i)})
        if i == 0:  # identical data and seed: the same clone
            bc.append(dict(dagger[-1]))
        else:
            bc.append({"labels": int(len(bc_labels)), "return": evaluate(fit(bc_observations, bc_labels, i), i)})
    return {"env": task.env_id, "labeller": task.labeller,
            "action_space": f"Discrete({task.num_actions})" if task.num_actions else
            f"Box({float(task.action_low[0])}, {float(task.action_high[0])})",
            "expert_return": task.evaluate(None, eval_episodes, seed + 500), "dagger": dagger, "bc": bc,
            "mean_return_after_first": {"dagger": float(np.mean([r["return"] for r in dagger[1:]])),
                                        "bc": float(np.mean([r["return"] for r in bc[1:]]))}}


def run(out="offrl-demo/dagger", seed: int = 0, iterations: int = 7, eval_episodes: int = 10, bc_steps: int = 2000,
        tasks=None) -> dict:
    """DAgger vs BC on every task in ``tasks`` (default :data:`TASKS`: name -> (factory, labels per iteration))."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = dict(TASKS if tasks is None else tasks)
    panels = {name: dagger_vs_bc(factory(), per_iter, iterations, eval_episodes, bc_steps, seed)
              for name, (factory, per_iter) in tasks.items()}

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.6), squeeze=False)
    lines = []
    for ax, (name, p) in zip(axes[0], panels.items()):
        ax.plot([r["labels"] for r in p["dagger"]], [r["return"] for r in p["dagger"]], "o-", label="DAgger")
        ax.plot([r["labels"] for r in p["bc"]], [r["return"] for r in p["bc"]], "s--", label="BC (expert driving)")
        ax.axhline(p["expert_return"], ls=":", color="k", label="expert")
        ax.set_xlabel("expert labels")
        ax.set_ylabel("episode return")
        ax.set_title(f"{name}, {p['action_space']}\nlabeller: {p['labeller']}", fontsize=8)
        ax.legend(fontsize=8)
        m = p["mean_return_after_first"]
        lines.append(f"{name}: from {p['dagger'][1]['labels']} to {p['dagger'][-1]['labels']} expert labels DAgger returned "
                     f"{m['dagger']:.0f} on average, BC with as many labels {m['bc']:.0f} (expert {p['expert_return']:.0f}).")
    fig.suptitle("DAgger vs behaviour cloning with the same number of expert labels")
    fig.tight_layout()
    result = {"panels": panels, "verdict": "\n".join(lines),
              "settings": {"seed": seed, "iterations": iterations, "eval_episodes": eval_episodes, "bc_steps": bc_steps,
                           "labels_per_iteration": {k: v[1] for k, v in tasks.items()}}}
    result["files"] = write_outputs(out, "dagger", result, fig)
    return result
