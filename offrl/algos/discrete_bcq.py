"""Discrete BCQ (Fujimoto, Conti, Ghavamzadeh & Pineau 2019, "Benchmarking Batch Deep
Reinforcement Learning Algorithms"): Q-learning whose max only ranges over actions the
behaviour model ``G(a|s)`` finds likely enough,

``A(s) = {a : G(a|s) / max_a' G(a'|s) > threshold}``,
``y = r + gamma * mask * Q'(s', argmax_{a in A(s')} Q(s', a))``,
``L = mean huber(Q(s, a) - y) + mean -log G(a|s)``  (``G`` fitted by cross-entropy).

The policy is ``argmax_{a in A(s)} Q(s, a)``; ``threshold = 0`` is double DQN and
``threshold = 1`` is (greedy) behaviour cloning. Default ``threshold = 0.3`` (the paper's).
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
from offrl.algos.discrete_common import (DiscreteCritic, DiscreteHead, bcq_allowed,
                                         categorical_cross_entropy, masked_argmax, q_td_loss, take)
from offrl.algos.ranges import BOOL, DISCOUNT, Interval, LEARNING_RATE, POLYAK, POSITIVE_INT, REWARD_SCALING, WIDTHS, param


@dataclass(frozen=True)
class Config:
    """Discrete BCQ hyperparameters."""

    learning_rate: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of Q and of G
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of both networks
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target Q-network
    threshold: float = param(0.3, Interval(0.0, 1.0, "[]"))  #: keep actions with G(a|s) / max G > threshold
    normalize_observations: bool = param(True, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number


class Agent(flax.struct.PyTreeNode):
    critic: TrainState
    behavior: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    critic_key, behavior_key, rng = jax.random.split(key, 3)
    obs = jnp.zeros((1, obs_dim))
    critic_net = DiscreteCritic(action_dim, config.hidden_dims, num_qs=1)
    behavior_net = DiscreteHead(action_dim, config.hidden_dims)
    critic_params = critic_net.init(critic_key, obs)
    return Agent(make_train_state(critic_net, critic_params, config.learning_rate),
                 make_train_state(behavior_net, behavior_net.init(behavior_key, obs), config.learning_rate),
                 critic_params, rng, jnp.zeros((), jnp.int32), config)


def _allowed(agent: Agent, observations: jax.Array) -> jax.Array:
    return bcq_allowed(agent.behavior.apply_fn(agent.behavior.params, observations), agent.config.threshold)


def critic_loss(params, agent: Agent, batch: Batch, target: jax.Array):
    q = take(agent.critic.apply_fn(params, batch.observations)[0], batch.actions)
    return q_td_loss(q, target), {"q": q.mean()}


def behavior_loss(params, agent: Agent, batch: Batch):
    return categorical_cross_entropy(agent.behavior.apply_fn(params, batch.observations), batch.actions), {}


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    allowed = _allowed(agent, batch.next_observations)
    next_online = agent.critic.apply_fn(agent.critic.params, batch.next_observations)[0]
    next_target = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations)[0]
    target = batch.rewards + cfg.discount * batch.masks * take(next_target, masked_argmax(next_online, allowed))
    critic, c_loss, aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    behavior, b_loss, _ = apply_gradients_with_loss(agent.behavior, behavior_loss, agent, batch)
    agent = agent.replace(critic=critic, behavior=behavior, step=agent.step + 1,
                          target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, cfg.tau))
    return agent, {"critic_loss": c_loss, "behavior_loss": b_loss, "q": aux["q"],
                   "allowed_fraction": allowed.mean()}


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    q = agent.critic.apply_fn(agent.critic.params, observations)[0]
    return masked_argmax(q, _allowed(agent, observations))


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array) -> jax.Array:
    return take(agent.critic.apply_fn(agent.critic.params, observations)[0], actions)


#: not exportable: the greedy action is masked by the behaviour model, which the MLP export does not hold
SPEC = AlgorithmSpec(name="discrete_bcq", action_space="discrete", exportable=False)
