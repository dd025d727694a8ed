"""Pendulum-v1 datasets of every kind, from scripted policies (tests only; about 1 s each).

The policies are the swing-up controller of ``tests/engine/pendulum_data.py`` at full gain
(the expert: swings up from every start) and at 0.3 of its gain (a medium policy: pumps too
weakly to reach the top), with Gaussian action noise 0.3, and uniform random torques.
References for the normalized score: uniform actions about -1200, the controller about -125.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

from offrl.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from pendulum_data import swing_up_action  # noqa: E402

REFERENCES = {"ref_min_score": -1200.0, "ref_max_score": -125.0}
KIND_OF = {"random": "random actions", "medium": "one policy", "expert": "one policy",
           "medium-expert": "mixture of policies", "medium-replay": "learning history"}


def controller(gain=1.0, noise=0.3):
    return lambda obs, rng: gain * swing_up_action(obs) + noise * rng.standard_normal(1)


def uniform(obs, rng):
    return rng.uniform(-2.0, 2.0, 1)


def learner(progress: float):
    """An improving learner at ``progress`` in [0, 1]: the controller's action with that probability, else uniform."""
    expert = controller()
    return lambda obs, rng: expert(obs, rng) if rng.random() < progress else uniform(obs, rng)


def rollout(policies, seed=0, metadata=None) -> Dataset:
    """One episode per policy, written in that order."""
    rng = np.random.default_rng(seed)
    env = gym.make("Pendulum-v1")
    cols = {k: [] for k in ("obs", "act", "rew", "nxt", "term", "tout")}
    for i, policy in enumerate(policies):
        obs, _ = env.reset(seed=seed * 10_000 + i)
        done = False
        while not done:
            action = np.clip(policy(obs, rng), -2.0, 2.0).astype(np.float32).reshape(1)
            nxt, reward, term, trunc, _ = env.step(action)
            for k, v in zip(cols, (obs, action, reward, nxt, term, trunc and not term)):
                cols[k].append(v)
            obs, done = nxt, term or trunc
    env.close()
    return Dataset.from_arrays(np.array(cols["obs"]), np.array(cols["act"]), np.array(cols["rew"]),
                               np.array(cols["term"]), timeouts=np.array(cols["tout"]),
                               next_observations=np.array(cols["nxt"]),
                               metadata={"env_id": "Pendulum-v1", "action_low": [-2.0], "action_high": [2.0],
                                         **REFERENCES, **(metadata or {})})


def pendulum_tier(tier: str, episodes: int = 40, seed: int = 0, shuffle: bool = False) -> Dataset:
    """A dataset of ``tier`` (random, medium, expert, medium-expert, medium-replay), labelled as such."""
    medium, expert = controller(gain=0.3), controller()
    policies = {"random": [uniform] * episodes, "medium": [medium] * episodes, "expert": [expert] * episodes,
                "medium-expert": [medium] * (episodes // 2) + [expert] * (episodes - episodes // 2),
                "medium-replay": [learner(i / (episodes - 1)) for i in range(episodes)]}[tier]
    if shuffle:
        np.random.default_rng(seed).shuffle(policies)
    return rollout(policies, seed, metadata={"tier": tier})
