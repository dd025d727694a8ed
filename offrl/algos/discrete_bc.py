"""Discrete behaviour cloning: a categorical policy fitted by cross-entropy,

``L = -mean_i log softmax(f(s_i))[a_i]``,

deployed greedily (``argmax_a f(s)_a``). BC has no critic, so :func:`q_value` returns ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass

import flax
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl.algos.common import Batch, apply_gradients_with_loss, make_train_state
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.discrete_common import DiscreteHead, categorical_cross_entropy, head_layers
from offrl.algos.ranges import BOOL, DISCOUNT, LEARNING_RATE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param


@dataclass(frozen=True)
class Config:
    """Discrete BC hyperparameters."""

    learning_rate: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    discount: float = param(0.99, DISCOUNT)  #: only used to report discounted evaluation returns
    normalize_observations: bool = param(True, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are unused by BC


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, rng = jax.random.split(key)
    net = DiscreteHead(action_dim, config.hidden_dims)
    params = net.init(actor_key, jnp.zeros((1, obs_dim)))
    return Agent(make_train_state(net, params, config.learning_rate), rng, jnp.zeros((), jnp.int32), config)


def actor_loss(params, agent: Agent, batch: Batch):
    logits = agent.actor.apply_fn(params, batch.observations)
    accuracy = (logits.argmax(-1) == batch.actions).mean()
    return categorical_cross_entropy(logits, batch.actions), {"accuracy": accuracy}


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    actor, loss, aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch)
    return agent.replace(actor=actor, step=agent.step + 1), {"actor_loss": loss, "accuracy": aux["accuracy"]}


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    return agent.actor.apply_fn(agent.actor.params, observations).argmax(-1).astype(jnp.int32)


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array):
    return None


def policy_layers(agent: Agent):
    return head_layers(agent.actor.params)


SPEC = AlgorithmSpec(name="discrete_bc", action_space="discrete", policy_layers=policy_layers)
