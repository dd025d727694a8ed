"""EDAC, Ensemble-Diversified Actor-Critic (An, Moon, Kim & Song 2021, "Uncertainty-Based Offline
Reinforcement Learning with Diversified Q-Ensemble", NeurIPS; arXiv:2110.01548).

SAC-N (:mod:`offrl.algos.sac_n`) plus the ensemble similarity term in the critics' loss::

    L_Q = sum_k mean_i (Q_k(s_i, a_i) - y_i)^2 + eta * 1/(N-1) * mean_i sum_{k != l} cos(grad_a Q_k, grad_a Q_l)

Pushing the critics' action gradients apart makes their minimum pessimistic with far fewer
critics than SAC-N needs (the paper: 10-50 instead of up to 500). With a single action
dimension every cosine is +-1 and the term has no gradient: EDAC is then SAC-N. The update is
:mod:`offrl.algos.sac_n`'s with ``diversity_weight`` set; only the defaults differ.

Defaults: the paper's / CORL's D4RL locomotion ones, ``eta = 1`` and ``N = 10`` (halfcheetah and
walker2d; hopper uses ``N = 50``: ``--set num_qs=50``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from offrl.algos import sac_n
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import Interval, NON_NEGATIVE, param
from offrl.algos.sac_n import Agent, act, create, critic_loss, explore, q_value, update

__all__ = ["Config", "Agent", "create", "update", "act", "explore", "q_value", "critic_loss"]


@dataclass(frozen=True)
class Config(sac_n.Config):
    """EDAC hyperparameters: SAC-N's fields (see :class:`offrl.algos.sac_n.Config`) with the diversity term on."""

    num_qs: int = param(10, Interval(2, math.inf, "[)", integer=True))  #: N >= 2 critics (paper: 10 halfcheetah/walker2d, 50 hopper)
    diversity_weight: float = param(1.0, NON_NEGATIVE)  #: eta, weight of the gradient similarity term (paper: 1)


SPEC = AlgorithmSpec(name="edac", finetunable=True, explore=explore, traced_fields=("discount", "tau", "diversity_weight"))
