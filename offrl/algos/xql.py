"""Extreme Q-Learning, XQL (Garg, Hejna, Geist & Ermon 2023, "Extreme Q-Learning: MaxEnt RL
without Entropy", ICLR; arXiv:2301.02328), offline variant ("X-QL").

IQL (:mod:`offrl.algos.iql`) with the expectile value loss replaced by Gumbel regression, so
that ``V`` estimates the soft maximum of ``Q`` over the data's actions instead of an expectile::

    z    = min((min_k Q'_k(s, a) - V(s)) / beta, z_max)
    L_V  = mean_i exp(-M) (exp(z_i) - z_i - 1),   M = stop_grad(max(max_i z_i, -1))
    L_Q  = sum_k mean_i (Q_k(s_i, a_i) - r_i - gamma * m_i * V(s'_i))^2
    L_pi = -mean_i min(exp(b (Q'(s_i, a_i) - V(s_i))), 100) log pi(a_i | s_i)

Without the clip, ``E[exp(z) - z - 1]`` is minimised where ``E[exp((Q - V) / beta)] = 1``, i.e.
``V(s) = beta * log E_{a~D}[exp(Q(s, a) / beta)]``: the log-partition of a Gumbel, which tends to
``max_a Q`` as ``beta -> 0`` and to ``E[Q]`` as ``beta -> inf``. The factor ``exp(-M)``
(the authors' "rescaled" loss) leaves that minimiser unchanged and keeps ``exp`` from
overflowing on a batch with a large ``z``; ``z_max`` clips outliers (the authors' 7).

Where offrl follows which source
--------------------------------
* The authors' code and JAX-CORL's ``algos/xql.py`` agree on the offline locomotion recipe:
  IQL's networks and learning rates (Adam 3e-4, 2 x 256, cosine-decayed actor), IQL's reward
  scaling (``1000 / (max return - min return)``), the AWR actor with ``b = 3``, LayerNorm on the
  value network, the rescaled Gumbel loss with ``z_max = 7``. offrl follows them.
* ``beta`` (their ``loss_temp``) is tuned per dataset: halfcheetah-medium 1, hopper-medium 5,
  walker2d-medium 10, the medium-expert tiers 1-2. offrl defaults to 2, the middle of that
  range; set it per dataset with ``--set gumbel_temperature=...``.
* Their options for halfcheetah (noise on the value loss's actions) and hopper-medium-expert
  (extra uniform actions) are left out; the critic loss is a squared error (JAX-CORL's Huber
  with ``delta = 20`` is the same for TD errors below 20).

Example::

    run = offrl.train("xql", "hopper-medium-20k-v0", steps=50_000, config_overrides={"gumbel_temperature": "5"})
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from offrl import losses
from offrl.algos import iql
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, min_q_value
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.iql import Agent
from offrl.algos.ranges import (ANY_REAL, BOOL, DISCOUNT, LEARNING_RATE, OrNone, POLYAK, POSITIVE, POSITIVE_INT,
                                REWARD_SCALING, WIDTHS, param)
from offrl.nets import ValueNet

__all__ = ["Config", "Agent", "create", "update", "act", "explore", "q_value", "gumbel_loss", "value_loss",
           "critic_loss", "actor_loss"]


@dataclass(frozen=True)
class Config:
    """XQL hyperparameters; defaults are the authors' offline locomotion settings (module docstring)."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the policy (cosine-decayed to 0)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the twin Q-functions
    value_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of V
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of every network
    value_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the value network (authors: on)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    gumbel_temperature: float = param(2.0, POSITIVE)  #: beta of the Gumbel regression (authors' loss_temp; 1-10 per dataset)
    max_clip: float = param(7.0, POSITIVE)  #: z_max, upper clip of (Q - V) / beta (authors: 7)
    awr_inverse_temperature: float = param(3.0, POSITIVE)  #: b, inverse temperature of the AWR weights exp(b * A)
    max_weight: float = param(100.0, POSITIVE)  #: clip of exp(b * A)
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critic
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (clipped double Q: min)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    cosine_actor_lr: bool = param(True, BOOL)  #: cosine decay of the actor lr over ``schedule_steps``
    schedule_steps: int | None = param(None, OrNone(POSITIVE_INT))  #: steps of the lr schedule (None: the run's --steps)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("returns", REWARD_SCALING)  #: "returns": r * 1000 / (max return - min return) (locomotion)
    reward_bias: float = param(0.0, ANY_REAL)  #: added to rewards after scaling


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    """IQL's agent with a LayerNorm value network (``value_layer_norm``)."""
    return iql.create(config, obs_dim, action_dim, key, value_net=ValueNet(tuple(config.hidden_dims), layer_norm=config.value_layer_norm))


# ---------------------------------------------------------------------- losses
def gumbel_loss(target: jax.Array, value: jax.Array, beta: float, max_clip: float | None = None) -> jax.Array:
    """Rescaled Gumbel regression ``mean_i exp(-M) (exp(z_i) - z_i - 1)``,
    ``z = min((target - value) / beta, max_clip)``, ``M = stop_grad(max(max_i z_i, -1))``.

    Equal to ``exp(-M)`` times ``mean(exp(z) - z - 1)``, whose minimiser over a constant
    ``value`` (no clip) is ``beta * log mean exp(target / beta)``.
    """
    z = (target - value) / beta
    if max_clip is not None:
        z = jnp.minimum(z, max_clip)
    m = jax.lax.stop_gradient(jnp.maximum(jnp.max(z), -1.0))
    return jnp.mean(jnp.exp(z - m) - z * jnp.exp(-m) - jnp.exp(-m))


def value_loss(params, agent: Agent, batch: Batch, target_q):
    cfg = agent.config
    v = agent.value.apply_fn(params, batch.observations)
    return gumbel_loss(target_q, v, hyperparameter(agent, "gumbel_temperature"), cfg.max_clip), {"v": v}


critic_loss = iql.critic_loss
actor_loss = iql.actor_loss


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    target_q = agent.critic.apply_fn(agent.target_critic_params, batch.observations, batch.actions).min(0)
    next_v = agent.value.apply_fn(agent.value.params, batch.next_observations)
    value, v_loss, v_aux = apply_gradients_with_loss(agent.value, value_loss, agent, batch, target_q)
    v = jax.lax.stop_gradient(v_aux["v"])
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, target_q - v)
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, next_v)
    agent = agent.replace(
        actor=actor, critic=critic, value=value,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
        step=agent.step + 1,
    )
    metrics = {"value_loss": v_loss, "critic_loss": c_loss, "actor_loss": a_loss,
               "v": v.mean(), "q": c_aux["q"], "adv": (target_q - v).mean(), "log_prob": a_aux["log_prob"]}
    return agent, metrics


act = iql.act
q_value = min_q_value
explore = iql.explore

#: iql's critic and actor losses read discount, awr_inverse_temperature and max_weight through hyperparameter too.
SPEC = AlgorithmSpec(name="xql", explore=explore,
                     traced_fields=("discount", "tau", "gumbel_temperature", "awr_inverse_temperature", "max_weight"))
