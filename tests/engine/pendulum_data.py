"""A small Pendulum-v1 dataset from a noisy energy-based swing-up controller (tests only).

Pendulum's dynamics are ``theta'' = 15 sin(theta) + 3 u`` (theta = 0 upright), so
``E = 0.5 theta'^2 + 15 cos(theta)`` is conserved without torque and ``dE/dt = 3 u theta'``.
The controller pumps energy towards the upright value ``E* = 15`` with ``u = k (E* - E) theta'``
and switches to a PD stabiliser near the top.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from offrl.data import Dataset


def swing_up_action(obs: np.ndarray) -> np.ndarray:
    cos, sin, theta_dot = obs
    theta = np.arctan2(sin, cos)
    if cos > 0.85:
        u = -(10.0 * theta + 2.0 * theta_dot)
    else:
        energy = 0.5 * theta_dot**2 + 15.0 * cos
        u = 0.5 * (15.0 - energy) * theta_dot
        if abs(theta_dot) < 0.05:
            u = 1.0
    return np.clip(np.array([u], np.float32), -2.0, 2.0)


def make_pendulum_dataset(episodes: int = 20, noise: float = 0.5, random_fraction: float = 0.0, seed: int = 0) -> Dataset:
    """Roll the controller with Gaussian action noise ``noise`` (and a share of random episodes)."""
    rng = np.random.default_rng(seed)
    env = gym.make("Pendulum-v1")
    obs_l, act_l, rew_l, nxt_l, term_l, tout_l = [], [], [], [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed * 1000 + ep)
        random_episode = rng.random() < random_fraction
        done = False
        while not done:
            if random_episode:
                action = rng.uniform(-2, 2, size=1).astype(np.float32)
            else:
                action = np.clip(swing_up_action(obs) + noise * rng.standard_normal(1), -2, 2).astype(np.float32)
            nxt, reward, term, trunc, _ = env.step(action)
            obs_l.append(obs); act_l.append(action); rew_l.append(reward); nxt_l.append(nxt)
            term_l.append(term); tout_l.append(trunc and not term)
            obs, done = nxt, term or trunc
    env.close()
    return Dataset.from_arrays(np.array(obs_l), np.array(act_l), np.array(rew_l), np.array(term_l),
                               timeouts=np.array(tout_l), next_observations=np.array(nxt_l),
                               metadata={"env_id": "Pendulum-v1", "generator": "tests: noisy energy swing-up"},
                               source="pendulum-test")
