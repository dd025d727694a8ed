"""TD3+BC (Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning").

TD3 plus a behaviour-cloning term in the actor loss and normalised observations::

    L_pi = -lambda mean Q_1(s, pi(s)) + mean (pi(s) - a)^2,   lambda = alpha / mean |Q_1(s, pi(s))|

The update is :mod:`offrl.algos.td3`'s with ``alpha`` set; only the defaults differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from offrl.algos import td3
from offrl.algos.td3 import Agent, act, actor_loss, bc_weight, create, critic_loss, explore, q_value, update
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import BOOL, NON_NEGATIVE, OrNone, param

__all__ = ["Config", "Agent", "create", "update", "act", "explore", "q_value", "actor_loss", "critic_loss", "bc_weight"]


@dataclass(frozen=True)
class Config(td3.Config):
    """TD3+BC hyperparameters: TD3's fields (see :class:`offrl.algos.td3.Config`) with the
    paper's defaults (Table 3: alpha 2.5, sigma 0.2, c 0.5, delay 2, normalised states)."""

    alpha: float | None = param(2.5, OrNone(NON_NEGATIVE))  #: weight of Q against the BC term (lambda = alpha / mean|Q|)
    normalize_observations: bool = param(True, BOOL)  #: the paper normalises states with dataset mean/std


SPEC = AlgorithmSpec(name="td3_bc", finetunable=True, explore=explore, traced_fields=td3.SPEC.traced_fields)
