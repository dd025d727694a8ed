"""Double DQN (van Hasselt, Guez & Silver 2016) offline: DQN whose bootstrap action comes from
the online network and whose value comes from the target network,
``y = r + gamma * mask * Q'(s', argmax_a Q(s', a))``. Only the default differs from
:mod:`offrl.algos.dqn`.
"""

from __future__ import annotations

from dataclasses import dataclass

from offrl.algos import dqn
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.dqn import Agent, act, create, critic_loss, policy_layers, q_value, update  # noqa: F401
from offrl.algos.ranges import BOOL, param


@dataclass(frozen=True)
class Config(dqn.Config):
    """DQN's hyperparameters with ``double_q=True``."""

    double_q: bool = param(True, BOOL)  #: double DQN: the online network picks the next action


SPEC = AlgorithmSpec(name="double_dqn", action_space="discrete", policy_layers=policy_layers)
