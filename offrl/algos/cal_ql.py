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

Two options follow CORL's implementation (``algorithms/finetune/cal_ql.py``):

* ``sparse_reward_bound`` (default off, CORL's locomotion setting; on for sparse-reward tasks such
  as AntMaze): an episode whose rewards are all equal (on a sparse task: one that never reached
  the goal) gets ``V_mu = r / (1 - gamma)`` on every row, the return of failing forever, instead
  of a sum cut at the episode's end. Without it, a failed episode's bound shrinks towards 0 near
  its end, which on a task whose failure reward is negative would *raise* the bound above the
  true value of failing.
* ``calibrated_online`` (default off, as CORL: its online phase drops the bound and is plain
  CQL): whether the bound stays on once ``offrl finetune`` starts; the spec's ``online_config``
  hook sets ``calibrated = calibrated_online`` for the online phase.

Other defaults are CQL's (the paper changes only the bound); the paper's fine-tuning mixes offline
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
           "extra_arrays", "online_extras", "online_config", "monte_carlo_returns", "SPEC"]


@dataclass(frozen=True)
class Config(cql.Config):
    """Cal-QL hyperparameters: CQL's fields (see :class:`offrl.algos.cql.Config`) with the bound on."""

    calibrated: bool = param(True, BOOL)  #: lower-bound the policy-action Q-values by the data's MC return
    sparse_reward_bound: bool = param(False, BOOL)  #: constant-reward (failed) episodes bound by r / (1 - gamma) (CORL: on for AntMaze)
    calibrated_online: bool = param(False, BOOL)  #: keep the bound on when fine-tuning online (CORL: off)


def monte_carlo_returns(rewards: np.ndarray, dones: np.ndarray, discount: float, sparse_reward_bound: bool) -> np.ndarray:
    """``V_mu`` per row: ``G_t = r_t + gamma G_{t+1}`` within each episode (``dones`` marks each
    episode's last row); with ``sparse_reward_bound``, an episode whose rewards are all equal gets
    ``r / (1 - gamma)`` on every row."""
    rewards = np.asarray(rewards, np.float64)
    out = np.zeros(len(rewards), np.float64)
    ends = np.flatnonzero(np.asarray(dones, bool))
    if len(rewards) and (not len(ends) or ends[-1] != len(rewards) - 1):
        ends = np.append(ends, len(rewards) - 1)
    start = 0
    for end in ends:
        episode = rewards[start:end + 1]
        if sparse_reward_bound and np.all(episode == episode[0]):
            out[start:end + 1] = episode[0] / (1.0 - discount)
        else:
            running = 0.0
            for i in range(end, start - 1, -1):
                running = rewards[i] + discount * running
                out[i] = running
        start = end + 1
    return out.astype(np.float32)


def extra_arrays(dataset, info, config) -> dict[str, np.ndarray]:
    """``mc_returns``: discounted returns-to-go of the scaled rewards with ``config.discount``."""
    return {"mc_returns": monte_carlo_returns(info.scale_rewards(dataset.rewards), dataset.dones, config.discount,
                                              config.sparse_reward_bound)}


def online_extras(rewards: np.ndarray, terminal: bool, config) -> dict[str, np.ndarray]:
    """``mc_returns`` of one finished online episode (scaled rewards), for fine-tuning's buffer;
    ``terminal=False`` (a timeout, or a run cut at a restart) ends the sum at the cut, as offline."""
    dones = np.zeros(len(rewards), bool)
    dones[-1] = True
    return {"mc_returns": monte_carlo_returns(rewards, dones, config.discount, config.sparse_reward_bound)}


def online_config(config: Config) -> Config:
    """The online phase's config: the bound stays on only with ``calibrated_online``."""
    import dataclasses

    return dataclasses.replace(config, calibrated=config.calibrated_online)


#: CQL's traced fields but ``discount``: the MC returns are computed with it when the data is prepared.
#: While an online episode is open its rows hold ``mc_returns = -inf``: ``max(Q, -inf) = Q``, no bound.
SPEC = AlgorithmSpec(name="cal_ql", finetunable=True, explore=explore, extra_arrays=extra_arrays,
                     online_extras=online_extras, online_extras_fill={"mc_returns": float("-inf")}, online_config=online_config,
                     traced_fields=tuple(f for f in cql.SPEC.traced_fields if f != "discount"))
