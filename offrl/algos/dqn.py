"""Offline DQN (Mnih et al. 2015) on logged data: the unregularised discrete baseline.

The critic regresses onto its own greedy bootstrap, with a Huber loss and a Polyak target:

``L_Q = mean_i huber(Q(s_i, a_i) - y_i)``, ``y_i = r_i + gamma * mask_i * max_a Q'(s'_i, a)``

and ``double_q=True`` (double DQN, van Hasselt et al. 2016) picks the next action with the
online network, ``y_i = r_i + gamma * mask_i * Q'(s'_i, argmax_a Q(s'_i, a))``. Offline, the
max ranges over actions the data never shows, so nothing corrects an overestimate there: this is
the extrapolation error that CQL and BCQ remove (``offrl demo extrapolation`` shows it).

Example::

    agent = create(Config(), obs_dim=4, action_dim=2, key=jax.random.key(0))  # action_dim = num_actions
    agent, metrics = update(agent, batch)        # batch.actions: (B,) int32
"""

from __future__ import annotations

from dataclasses import dataclass

import flax
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.common import Batch, apply_gradients_with_loss, make_train_state
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.discrete_common import DiscreteCritic, dqn_target, head_layers, q_td_loss, take
from offrl.algos.ranges import BOOL, DISCOUNT, LEARNING_RATE, POLYAK, POSITIVE_INT, REWARD_SCALING, WIDTHS, param

@dataclass(frozen=True)
class Config:
    """DQN hyperparameters (Adam and a Polyak target as in the continuous family; Mnih et al.
    2015 copy the target every C steps)."""

    learning_rate: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the Q-network
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of the Q-network
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target network
    double_q: bool = param(False, BOOL)  #: double DQN: the online network picks the next action
    huber_loss: bool = param(True, BOOL)  #: Huber TD loss (DQN's); False: squared error
    normalize_observations: bool = param(True, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number


class Agent(flax.struct.PyTreeNode):
    critic: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    critic_key, rng = jax.random.split(key)
    net = DiscreteCritic(action_dim, config.hidden_dims, num_qs=1)
    params = net.init(critic_key, jnp.zeros((1, obs_dim)))
    return Agent(make_train_state(net, params, config.learning_rate), params, rng, jnp.zeros((), jnp.int32), config)


def q_all(agent: Agent, params, observations: jax.Array) -> jax.Array:
    """``Q(s, .)`` of every action, ``(B, num_actions)``."""
    return agent.critic.apply_fn(params, observations)[0]


def bootstrap_target(agent: Agent, batch: Batch) -> jax.Array:
    """``y = r + gamma * mask * Q'(s', a*)`` (greedy or double-Q ``a*``)."""
    next_target = q_all(agent, agent.target_critic_params, batch.next_observations)
    next_online = q_all(agent, agent.critic.params, batch.next_observations) if agent.config.double_q else None
    return dqn_target(batch.rewards, batch.masks, next_target, agent.config.discount, next_online)


def critic_loss(params, agent: Agent, batch: Batch, target: jax.Array):
    q = take(q_all(agent, params, batch.observations), batch.actions)
    return q_td_loss(q, target, agent.config.huber_loss), {"q": q.mean()}


def soft_update_target(agent: Agent, critic: TrainState) -> Agent:
    return agent.replace(critic=critic, step=agent.step + 1,
                         target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, agent.config.tau))


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    target = bootstrap_target(agent, batch)
    critic, loss, aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    return soft_update_target(agent, critic), {"critic_loss": loss, "q": aux["q"], "target": target.mean()}


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    return q_all(agent, agent.critic.params, observations).argmax(-1).astype(jnp.int32)


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array) -> jax.Array:
    return take(q_all(agent, agent.critic.params, observations), actions)


def policy_layers(agent: Agent):
    """The greedy policy is ``argmax`` over the Q-network's outputs: export its layers."""
    return head_layers(agent.critic.params, 0)


SPEC = AlgorithmSpec(name="dqn", action_space="discrete", policy_layers=policy_layers)
