"""TD3+BC (Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning").

TD3 plus a behaviour-cloning term in the actor loss and normalised observations::

    L_pi = -lambda mean Q_1(s, pi(s)) + mean (pi(s) - a)^2,   lambda = alpha / mean |Q_1(s, pi(s))|

The update is :mod:`offrl.algos.td3`'s with ``alpha`` set; only the defaults differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from offrl.algos.td3 import Agent, act, actor_loss, create, critic_loss, q_value, update

__all__ = ["Config", "Agent", "create", "update", "act", "q_value", "actor_loss", "critic_loss"]


@dataclass(frozen=True)
class Config:
    """TD3+BC hyperparameters; defaults are the paper's (Table 3: alpha 2.5, sigma 0.2, c 0.5, delay 2)."""

    actor_lr: float = 3e-4          #: Adam learning rate of the policy
    critic_lr: float = 3e-4         #: Adam learning rate of the twin critics
    hidden_dims: tuple[int, ...] = (256, 256)  #: MLP widths
    discount: float = 0.99          #: gamma
    tau: float = 0.005              #: Polyak rate of the target networks
    policy_noise: float = 0.2       #: sigma of the target policy smoothing noise
    noise_clip: float = 0.5         #: c, clip of that noise
    policy_delay: int = 2           #: critic updates per actor/target update
    alpha: float | None = 2.5       #: weight of Q against the BC term (lambda = alpha / mean|Q|)
    num_qs: int = 2                 #: critics in the ensemble
    batch_size: int = 256           #: minibatch size
    normalize_observations: bool = True  #: the paper normalises states with dataset mean/std
    reward_scaling: str = "none"    #: "none", "returns" or a number
