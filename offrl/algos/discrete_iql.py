"""Discrete Implicit Q-Learning (Kostrikov, Nair & Levine 2021) with a categorical policy.

IQL never evaluates ``Q`` at an action outside the data, so its losses carry over unchanged:

* value:  ``L_V = mean |tau - 1{u<0}| u^2``, ``u = min_k Q'_k(s, a) - V(s)``   (expectile ``tau``)
* critic: ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * V(s'))^2``     (SARSA-style from V)
* actor:  ``L_pi = -mean min(exp(beta (Q'(s,a) - V(s))), max_weight) log softmax(f(s))[a]``

where each ``Q_k(s, .)`` is one head over all actions. The policy is deployed greedily.
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
from offrl.algos.discrete_common import DiscreteCritic, DiscreteHead, head_layers, take
from offrl.algos.ranges import BOOL, DISCOUNT, Interval, LEARNING_RATE, POLYAK, POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import ValueNet


@dataclass(frozen=True)
class Config:
    """Discrete IQL hyperparameters (the paper's tau = 0.7, beta = 3 locomotion values)."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the categorical policy
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the Q heads
    value_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of V
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of every network
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    discount: float = param(0.99, DISCOUNT)  #: gamma
    expectile: float = param(0.7, Interval(0.0, 1.0, "()"))  #: tau of the expectile value loss
    awr_inverse_temperature: float = param(3.0, POSITIVE)  #: beta of the weights exp(beta * A)
    max_weight: float = param(100.0, POSITIVE)  #: clip of exp(beta * A)
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critic
    num_qs: int = param(2, POSITIVE_INT)  #: Q heads in the ensemble (clipped double Q: min)
    normalize_observations: bool = param(True, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    value: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, value_key, rng = jax.random.split(key, 4)
    obs = jnp.zeros((1, obs_dim))
    actor_net = DiscreteHead(action_dim, config.hidden_dims)
    critic_net = DiscreteCritic(action_dim, config.hidden_dims, num_qs=config.num_qs)
    value_net = ValueNet(config.hidden_dims)
    critic_params = critic_net.init(critic_key, obs)
    return Agent(make_train_state(actor_net, actor_net.init(actor_key, obs), config.actor_lr),
                 make_train_state(critic_net, critic_params, config.critic_lr),
                 make_train_state(value_net, value_net.init(value_key, obs), config.value_lr),
                 critic_params, rng, jnp.zeros((), jnp.int32), config)


def value_loss(params, agent: Agent, batch: Batch, target_q):
    v = agent.value.apply_fn(params, batch.observations)
    return losses.expectile_loss(target_q, v, agent.config.expectile), {"v": v}


def critic_loss(params, agent: Agent, batch: Batch, next_v):
    q = take(agent.critic.apply_fn(params, batch.observations), batch.actions)
    target = batch.rewards + agent.config.discount * batch.masks * next_v
    return losses.td_loss(q, target), {"q": q.mean()}


def actor_loss(params, agent: Agent, batch: Batch, advantages):
    log_probs = take(jax.nn.log_softmax(agent.actor.apply_fn(params, batch.observations), axis=-1), batch.actions)
    cfg = agent.config
    weights = losses.advantage_weights(advantages, cfg.awr_inverse_temperature, cfg.max_weight)
    return losses.weighted_nll(log_probs, weights), {"log_prob": log_probs.mean()}


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    target_q = take(agent.critic.apply_fn(agent.target_critic_params, batch.observations), batch.actions).min(0)
    next_v = agent.value.apply_fn(agent.value.params, batch.next_observations)
    value, v_loss, v_aux = apply_gradients_with_loss(agent.value, value_loss, agent, batch, target_q)
    v = jax.lax.stop_gradient(v_aux["v"])
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, target_q - v)
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, next_v)
    agent = agent.replace(actor=actor, critic=critic, value=value, step=agent.step + 1,
                          target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, cfg.tau))
    return agent, {"value_loss": v_loss, "critic_loss": c_loss, "actor_loss": a_loss, "v": v.mean(),
                   "q": c_aux["q"], "adv": (target_q - v).mean(), "log_prob": a_aux["log_prob"]}


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    return agent.actor.apply_fn(agent.actor.params, observations).argmax(-1).astype(jnp.int32)


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array) -> jax.Array:
    return take(agent.critic.apply_fn(agent.critic.params, observations), actions).min(0)


def policy_layers(agent: Agent):
    return head_layers(agent.actor.params)


SPEC = AlgorithmSpec(name="discrete_iql", action_space="discrete", policy_layers=policy_layers)
