"""Calibrated Q-Learning, Cal-QL (Nakamoto, Zhai, Singh, Sobol Mark, Ma, Finn, Kumar & Levine
2023, "Cal-QL: Calibrated Offline RL Pre-Training for Efficient Online Fine-Tuning").

CQL's critic (:mod:`offrl.algos.cql`) with the conservative penalty's policy-action values
bounded below by the value of the behaviour policy, estimated by the Monte-Carlo return of the
data from the same state::

    R(theta) = E_{s~D, a~pi}[ max(Q_theta(s, a), V_mu(s)) ] - E_{(s,a)~D}[ Q_theta(s, a) ]
    V_mu(s_t) = sum_{k>=0} gamma^k r'_{t+k}   (within the episode; r' = reward_scale * r + reward_bias)

so the learned Q is conservative yet never below the data's own return: it is *calibrated*,
which removes the "unlearning dip" when fine-tuning starts (Figure 1 of the paper).

The Monte-Carlo returns come from :func:`extra_arrays` (offline) and :func:`online_extras` (each
finished online episode when fine-tuning), the spec's hooks, computed
with the config's ``discount`` on the engine's *scaled* rewards. An episode cut by a timeout ends
the sum at the cut: the behaviour policy's true return would go on, so ``V_mu`` there is short
by the missing tail (an underestimate for positive rewards, a loose bound; an overestimate for
negative ones, e.g. Pendulum, where the bound is tighter than the truth near the cut).

Defaults are CQL's (the paper changes only the bound); the paper's fine-tuning mixes offline
and online data 50:50 (``offrl finetune --mix-ratio 0.5``, the default).

Example::

    run = offrl.train("cal_ql", "pendulum-medium-replay-v0", steps=20_000)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offrl.algos import cql
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.cql import Agent, act, actor_loss, calibrate, create, critic_loss, explore, q_value, update
from offrl.algos.ranges import BOOL, param

__all__ = ["Config", "Agent", "create", "update", "act", "explore", "q_value", "actor_loss", "critic_loss", "calibrate",
           "extra_arrays", "online_extras", "SPEC"]


@dataclass(frozen=True)
class Config(cql.Config):
    """Cal-QL hyperparameters: CQL's fields (see :class:`offrl.algos.cql.Config`) with the bound on."""

    calibrated: bool = param(True, BOOL)  #: lower-bound the policy-action Q-values by the data's MC return


def extra_arrays(dataset, info, config) -> dict[str, np.ndarray]:
    """``mc_returns``: discounted returns-to-go of the scaled rewards with ``config.discount``."""
    scaled = dataset.replace(rewards=info.scale_rewards(dataset.rewards))
    return {"mc_returns": scaled.returns_to_go(config.discount).astype(np.float32)}


def online_extras(rewards: np.ndarray, terminal: bool, config) -> dict[str, np.ndarray]:
    """``mc_returns`` of one finished online episode (scaled rewards), for fine-tuning's buffer;
    ``terminal=False`` (a timeout, or a run cut at a restart) ends the sum at the cut, as offline."""
    from offrl.data import Dataset

    n = len(rewards)
    dones = np.zeros(n, bool)
    dones[-1] = True
    obs = np.zeros((n, 1), np.float32)
    episode = Dataset.from_arrays(obs, np.zeros((n, 1), np.float32), np.asarray(rewards, np.float32), dones & terminal,
                                  dones & (not terminal), next_observations=obs)
    return {"mc_returns": episode.returns_to_go(config.discount).astype(np.float32)}


#: CQL's traced fields but ``discount``: the MC returns are computed with it when the data is prepared.
#: While an online episode is open its rows hold ``mc_returns = -inf``: ``max(Q, -inf) = Q``, no bound.
SPEC = AlgorithmSpec(name="cal_ql", finetunable=True, explore=explore, extra_arrays=extra_arrays,
                     online_extras=online_extras, online_extras_fill={"mc_returns": float("-inf")},
                     traced_fields=tuple(f for f in cql.SPEC.traced_fields if f != "discount"))
