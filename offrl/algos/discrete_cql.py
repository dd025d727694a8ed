"""Discrete CQL (Kumar, Zhou, Tucker & Levine 2020, "Conservative Q-Learning for Offline RL", eq. 4
with the log-sum-exp regulariser, on a DQN backbone as in their Atari experiments):

``L = mean_i huber(Q(s_i, a_i) - y_i) + alpha * mean_i [logsumexp_a Q(s_i, a) - Q(s_i, a_i)]``

with DQN's bootstrap ``y`` (:mod:`offrl.algos.dqn`, double-Q optional). The penalty pushes down
every action's Q in proportion to its softmax weight and pushes up the logged action's, so the
greedy policy stays on the data's support and ``Q`` sits below the realised return.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax

from offrl.algos import dqn
from offrl.algos.common import Batch, apply_gradients_with_loss
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.discrete_common import discrete_cql_penalty, q_td_loss, take
from offrl.algos.dqn import Agent, act, create, policy_layers, q_value  # noqa: F401
from offrl.algos.ranges import NON_NEGATIVE, param


@dataclass(frozen=True)
class Config(dqn.Config):
    """DQN's hyperparameters plus the conservative weight (d3rlpy's DiscreteCQL default: 1)."""

    cql_alpha: float = param(1.0, NON_NEGATIVE)  #: alpha, weight of logsumexp_a Q(s, a) - Q(s, a_data)


def critic_loss(params, agent: Agent, batch: Batch, target: jax.Array):
    q_all = dqn.q_all(agent, params, batch.observations)
    q = take(q_all, batch.actions)
    td = q_td_loss(q, target, agent.config.huber_loss)
    penalty = discrete_cql_penalty(q_all, batch.actions)
    return td + agent.config.cql_alpha * penalty, {"q": q.mean(), "td_loss": td, "cql_penalty": penalty}


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    target = dqn.bootstrap_target(agent, batch)
    critic, loss, aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    return dqn.soft_update_target(agent, critic), {"critic_loss": loss, **aux, "target": target.mean()}


SPEC = AlgorithmSpec(name="discrete_cql", action_space="discrete", policy_layers=policy_layers)
