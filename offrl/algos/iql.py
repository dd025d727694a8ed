"""Implicit Q-Learning (Kostrikov, Nair & Levine 2021, "Offline RL with Implicit Q-Learning").

IQL never queries the critic at actions outside the data:

* value:  ``L_V = mean |tau - 1{u<0}| u^2``, ``u = min_k Q'_k(s, a) - V(s)``  (expectile ``tau``)
* critic: ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * V(s'))^2``   (SARSA-style from V)
* actor:  ``L_pi = -mean min(exp(beta (Q'(s,a) - V(s))), 100) log pi(a|s)`` (AWR extraction)

Example::

    agent = create(Config(), obs_dim=17, action_dim=6, key=jax.random.key(0))
    agent, metrics = update(agent, batch)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import flax
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, learning_rate_scale, make_train_state, min_q_value, td_critic_loss
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import ANY_REAL, BOOL, DISCOUNT, Interval, LEARNING_RATE, OrNone, POLYAK, POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import EnsembleCritic, GaussianActor, ValueNet, gaussian_log_prob


@dataclass(frozen=True)
class Config:
    """IQL hyperparameters; defaults are the paper's MuJoCo locomotion settings (Appendix B)."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the policy (cosine-decayed to 0)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the twin Q-functions
    value_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of V
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of every network
    discount: float = param(0.99, DISCOUNT)  #: gamma
    expectile: float = param(0.7, Interval(0.0, 1.0, "()"))  #: tau of the expectile value loss (0.7 for locomotion)
    awr_inverse_temperature: float = param(3.0, POSITIVE)  #: beta, inverse temperature of the AWR weights exp(beta * A) (locomotion: 3)
    max_weight: float = param(100.0, POSITIVE)  #: clip of exp(beta * A)
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critic
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (clipped double Q: min)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    cosine_actor_lr: bool = param(True, BOOL)  #: cosine decay of the actor lr over ``schedule_steps``
    schedule_steps: int | None = param(None, OrNone(POSITIVE_INT))  #: steps of the lr schedule (None: the run's --steps)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("returns", REWARD_SCALING)  #: "returns": r * 1000 / (max return - min return) (locomotion)
    reward_bias: float = param(0.0, ANY_REAL)  #: added to rewards after scaling (AntMaze uses -1)

    RENAMED: ClassVar[dict[str, str]] = {"temperature": "awr_inverse_temperature"}


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    value: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array, value_net: ValueNet | None = None) -> Agent:
    """The agent; ``value_net`` replaces the default ``ValueNet`` (XQL's has LayerNorm)."""
    actor_key, critic_key, value_key, rng = jax.random.split(key, 4)
    obs = jnp.zeros((1, obs_dim))
    act = jnp.zeros((1, action_dim))
    actor_net = GaussianActor(action_dim, config.hidden_dims, tanh_squash=False, state_dependent_std=False)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    value_net = value_net or ValueNet(config.hidden_dims)
    actor_lr = config.actor_lr
    if config.cosine_actor_lr:
        actor_lr = optax.cosine_decay_schedule(config.actor_lr, max(1, config.schedule_steps or 1_000_000))
    critic_params = critic_net.init(critic_key, obs, act)
    return Agent(
        actor=make_train_state(actor_net, actor_net.init(actor_key, obs), actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        value=make_train_state(value_net, value_net.init(value_key, obs), config.value_lr),
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


# ---------------------------------------------------------------------- losses
def value_loss(params, agent: Agent, batch: Batch, target_q):
    v = agent.value.apply_fn(params, batch.observations)
    loss = losses.expectile_loss(target_q, v, hyperparameter(agent, "expectile"))
    return loss, {"v": v}


def critic_loss(params, agent: Agent, batch: Batch, next_v):
    return td_critic_loss(params, agent, batch, batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_v)


def actor_loss(params, agent: Agent, batch: Batch, advantages):
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    log_probs = gaussian_log_prob(mean, log_std, batch.actions)
    weights = losses.advantage_weights(advantages, hyperparameter(agent, "awr_inverse_temperature"),
                                       hyperparameter(agent, "max_weight"))
    return losses.weighted_nll(log_probs, weights), {"log_prob": log_probs.mean()}


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    target_q = agent.critic.apply_fn(agent.target_critic_params, batch.observations, batch.actions).min(0)
    next_v = agent.value.apply_fn(agent.value.params, batch.next_observations)
    value, v_loss, v_aux = apply_gradients_with_loss(agent.value, value_loss, agent, batch, target_q,
                                                     lr_scale=learning_rate_scale(agent, "value_lr"))
    v = jax.lax.stop_gradient(v_aux["v"])
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, target_q - v,
                                                     lr_scale=learning_rate_scale(agent, "actor_lr"))
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, next_v,
                                                      lr_scale=learning_rate_scale(agent, "critic_lr"))
    agent = agent.replace(
        actor=actor, critic=critic, value=value,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
        step=agent.step + 1,
    )
    metrics = {"value_loss": v_loss, "critic_loss": c_loss, "actor_loss": a_loss,
               "v": v.mean(), "q": c_aux["q"], "adv": (target_q - v).mean(), "log_prob": a_aux["log_prob"]}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    mean, _ = agent.actor.apply_fn(agent.actor.params, observations)
    return mean


q_value = min_q_value


def explore(agent: Agent, observations: jax.Array, key: jax.Array) -> jax.Array:
    """A sample of the Gaussian policy, clipped to the action box (exploration when fine-tuning online)."""
    mean, log_std = agent.actor.apply_fn(agent.actor.params, observations)
    return jnp.clip(mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape), -1.0, 1.0)


SPEC = AlgorithmSpec(name="iql", finetunable=True, explore=explore,
                     traced_fields=("discount", "expectile", "awr_inverse_temperature", "max_weight", "tau",
                                    "actor_lr", "critic_lr", "value_lr"))
