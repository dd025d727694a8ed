"""LB-SAC, Large-Batch SAC (Nikulin, Kurenkov, Tarasov & Kolesnikov 2022, "Q-Ensemble for Offline
RL: Don't Scale the Ensemble, Scale the Batch Size"; arXiv:2211.11092).

SAC-N (:mod:`offrl.algos.sac_n`, same losses and update) with a batch of 10,000 instead of 256,
learning rates raised by the square-root rule (``3e-4 * sqrt(10000 / 256) ~ 1.8e-3``) and ten
critics: the large batch lowers the ensemble's minimum on unseen actions as more critics would,
and converges in a few hundred thousand updates instead of millions (the paper: 300k).

Defaults: the paper's and CORL's ``lb_sac.py`` (batch 10,000, lr 0.0018 for actor, critics and
alpha, ``N = 10``, no LayerNorm, offrl's initialisation; the paper found EDAC's initialisation
unimportant). Only the defaults differ from SAC-N.
"""

from __future__ import annotations

from dataclasses import dataclass

from offrl.algos import sac_n
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import LEARNING_RATE, POSITIVE_INT, param
from offrl.algos.sac_n import Agent, act, create, critic_loss, explore, q_value, update

__all__ = ["Config", "Agent", "create", "update", "act", "explore", "q_value", "critic_loss"]


@dataclass(frozen=True)
class Config(sac_n.Config):
    """LB-SAC hyperparameters: SAC-N's fields (see :class:`offrl.algos.sac_n.Config`) with the paper's defaults."""

    actor_lr: float = param(0.0018, LEARNING_RATE)  #: 3e-4 * sqrt(10000 / 256), the paper's square-root rule
    critic_lr: float = param(0.0018, LEARNING_RATE)  #: as actor_lr
    entropy_alpha_lr: float = param(0.0018, LEARNING_RATE)  #: as actor_lr
    batch_size: int = param(10_000, POSITIVE_INT)  #: minibatch size (paper: 10,000)
    num_qs: int = param(10, POSITIVE_INT)  #: N critics (paper: 10)


SPEC = AlgorithmSpec(name="lb_sac", finetunable=True, explore=explore, traced_fields=("discount", "tau"))
