"""Flow Q-learning (Park, Li & Levine 2025, "Flow Q-Learning").

A flow-matching model of the behaviour policy (:mod:`offrl.algos.generative`), distilled into a
one-step policy ``mu(s, z)`` that also maximises Q, so acting needs no iterative sampling:

* behaviour flow: ``L_v = E ||v_theta(s, (1 - t) z + t a, t) - (a - z)||^2``, ``z ~ N(0, I)``, ``t ~ U[0, 1]``;
  its sample ``a_flow(s, z)`` is ``K = flow_steps`` Euler steps from ``z`` (clipped to [-1, 1])
* one-step policy: ``L_mu = -lambda mean_i mean_k Q_k(s_i, mu_i) + alpha mean_{i,j} (mu_ij - a_flow,ij)^2``,
  ``mu_i = mu(s_i, z_i)``, ``a_flow,i = a_flow(s_i, z_i)``: the same noise for both, ``a_flow`` held
  fixed, the mean over the action dimensions too (as in the authors' code, so their ``alpha``
  values carry over); ``lambda = 1`` or, with ``normalize_q_loss``, ``1 / mean |mean_k Q_k|`` (held fixed)
* critic: ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * agg_k Q'_k(s', mu(s', z')))^2``,
  ``agg`` the mean over the two critics or their min (``q_agg``)

Acting: ``act(s) = mu(s, 0)`` (deterministic: the noise's mean), exploration online
``mu(s, z), z ~ N(0, I)`` (the authors' action rule in evaluation and fine-tuning alike).

Defaults are the authors' (``agents/fql.py`` of github.com/seohongpark/fql): Adam 3e-4 for every
network, batch 256, four layers of 512, LayerNorm in the critics only, gamma 0.99, Polyak 0.005,
``q_agg="mean"``, 10 flow steps, ``alpha = 10``. ``alpha`` is tuned per task family (the
repository's README lists every command of the paper): OGBench antmaze and antsoccer 10,
humanoidmaze 30, cube, scene 300, puzzle 1000; D4RL AntMaze 10 (large: 3), Adroit 3000 to 30000
with ``q_agg="min"`` (also for OGBench antmaze); gamma 0.995 for the giant and humanoid mazes and
antsoccer. The README recommends ``normalize_q_loss=True`` (not used in the paper) for new tasks,
with alpha in 0.03 .. 10.

Where offrl differs from the authors' code: the one-step policy is a ReLU MLP with a ``tanh``
output (theirs: GELU, unbounded and clipped to [-1, 1] before the critic), so ``offrl export``
writes it as the house NumPy MLP (the noise input's weights drop out at ``z = 0``); the
deterministic ``act`` uses ``z = 0`` where their evaluation samples ``z``; each network has its
own Adam state (theirs: one Adam over all; Adam is per-parameter, so the steps agree).

Example::

    agent = create(Config(), obs_dim=17, action_dim=6, key=jax.random.key(0))
    agent, metrics = update(agent, batch)
"""

from __future__ import annotations

from dataclasses import dataclass

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos import generative
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, make_train_state, mlp_policy_layers, td_critic_loss
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import (ANY_REAL, BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, POLYAK, POSITIVE_INT, REWARD_SCALING,
                                WIDTHS, OneOf, param)
from offrl.nets import MLP, EnsembleCritic, default_init


@dataclass(frozen=True)
class Config:
    """FQL hyperparameters; defaults are the authors' (module docstring; ``alpha`` is per task)."""

    learning_rate: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of every network
    hidden_dims: tuple[int, ...] = param((512, 512, 512, 512), WIDTHS)  #: MLP widths of the flow, the one-step policy and Q
    critic_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the critics (authors: on)
    actor_layer_norm: bool = param(False, BOOL)  #: LayerNorm in the flow's velocity net (authors: off)
    flow_steps: int = param(10, POSITIVE_INT)  #: K, Euler steps of the behaviour flow's sampler
    alpha: float = param(10.0, NON_NEGATIVE)  #: weight of the distillation term (per task: 3 .. 30000)
    normalize_q_loss: bool = param(False, BOOL)  #: divide the Q term by mean |Q| (README's advice for new tasks)
    q_agg: str = param("mean", OneOf(("mean", "min")))  #: aggregation of the target critics ("min": clipped double Q)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critic
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (authors: 2)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none" (authors), "returns" or a number
    reward_bias: float = param(0.0, ANY_REAL)  #: added to rewards after scaling (D4RL AntMaze: -1)


class OneStepPolicy(nn.Module):
    """``mu(s, z) = tanh(f([s, z]))`` in ``[-1, 1]^d``: the deployed policy."""

    action_dim: int
    hidden_dims: tuple[int, ...] = (256, 256)

    @nn.compact
    def __call__(self, observations, noise):
        x = MLP(self.hidden_dims, activate_final=True)(jnp.concatenate([observations, noise], axis=-1))
        return jnp.tanh(nn.Dense(self.action_dim, kernel_init=default_init(1e-2))(x))


class Agent(flax.struct.PyTreeNode):
    actor: TrainState            # the one-step policy mu(s, z)
    flow: TrainState             # the behaviour flow's velocity v_theta(s, x, t)
    critic: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, flow_key, critic_key, rng = jax.random.split(key, 4)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = OneStepPolicy(action_dim, tuple(config.hidden_dims))
    flow_net = generative.ActionField(action_dim, tuple(config.hidden_dims), activation=nn.gelu,
                                      layer_norm=config.actor_layer_norm)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs, layer_norm=config.critic_layer_norm)
    critic_params = critic_net.init(critic_key, obs, act)
    return Agent(
        actor=make_train_state(actor_net, actor_net.init(actor_key, obs, act), config.learning_rate),
        flow=make_train_state(flow_net, flow_net.init(flow_key, obs, act, jnp.zeros((1,))), config.learning_rate),
        critic=make_train_state(critic_net, critic_params, config.learning_rate),
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


# ---------------------------------------------------------------------- losses
def flow_actions(agent: Agent, observations, noise):
    """``a_flow(s, z)``: ``flow_steps`` Euler steps of the behaviour flow from ``z``, clipped to [-1, 1]."""
    velocity = lambda x, t: agent.flow.apply_fn(agent.flow.params, observations, x, t)  # noqa: E731
    return generative.euler_sample(velocity, noise, agent.config.flow_steps)


def one_step_objective(q, policy_actions, flow_targets, alpha, normalize_q_loss: bool = False):
    """``-lambda mean q + alpha mean_{i,j} (mu_ij - a_flow,ij)^2`` with ``q`` the critics' mean at
    ``mu`` (``(B,)``); ``lambda = 1 / mean |q|`` (no gradient) when ``normalize_q_loss``."""
    q_term = -jnp.mean(q)
    if normalize_q_loss:
        q_term = q_term / jax.lax.stop_gradient(jnp.mean(jnp.abs(q)))
    distill = jnp.mean((policy_actions - flow_targets) ** 2)
    return q_term + alpha * distill, {"distill_loss": distill, "q_loss": q_term}


def actor_loss(params, agent: Agent, batch: Batch, noise, targets):
    mu = agent.actor.apply_fn(params, batch.observations, noise)
    q = agent.critic.apply_fn(agent.critic.params, batch.observations, mu).mean(0)
    return one_step_objective(q, mu, targets, hyperparameter(agent, "alpha"), agent.config.normalize_q_loss)


def flow_loss(params, agent: Agent, batch: Batch, key):
    """``L_v`` of the data's actions (:func:`offrl.algos.generative.flow_matching_loss`)."""
    return generative.flow_matching_loss(params, agent.flow.apply_fn, batch.observations, batch.actions, key)


critic_loss = td_critic_loss


def aggregate(q: jax.Array, q_agg: str) -> jax.Array:
    """``(num_qs, B) -> (B,)``: the critics' mean or min."""
    return q.min(0) if q_agg == "min" else q.mean(0)


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, next_key, noise_key, flow_key = jax.random.split(agent.rng, 4)
    shape = batch.actions.shape
    next_actions = agent.actor.apply_fn(agent.actor.params, batch.next_observations, jax.random.normal(next_key, shape))
    next_q = aggregate(agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions), cfg.q_agg)
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_q
    noise = jax.random.normal(noise_key, shape)
    targets = jax.lax.stop_gradient(flow_actions(agent, batch.observations, noise))
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, noise, targets)
    flow, f_loss, _ = apply_gradients_with_loss(agent.flow, flow_loss, agent, batch, flow_key)
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    agent = agent.replace(
        actor=actor, flow=flow, critic=critic, rng=rng, step=agent.step + 1,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
    )
    return agent, {"critic_loss": c_loss, "actor_loss": a_loss, "flow_loss": f_loss, "q": c_aux["q"], **a_aux}


# ---------------------------------------------------------------------- acting
def act(agent: Agent, observations: jax.Array) -> jax.Array:
    """``mu(s, 0)``."""
    noise = jnp.zeros((*observations.shape[:-1], agent.actor.params["params"]["Dense_0"]["bias"].shape[0]))
    return agent.actor.apply_fn(agent.actor.params, observations, noise)


def explore(agent: Agent, observations: jax.Array, key: jax.Array) -> jax.Array:
    """``mu(s, z)``, ``z ~ N(0, I)`` (exploration when fine-tuning online, as the authors act)."""
    noise = jax.random.normal(key, (*observations.shape[:-1], agent.actor.params["params"]["Dense_0"]["bias"].shape[0]))
    return agent.actor.apply_fn(agent.actor.params, observations, noise)


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array) -> jax.Array:
    """The critics aggregated as in the TD target (``q_agg``)."""
    return aggregate(agent.critic.apply_fn(agent.critic.params, observations, actions), agent.config.q_agg)


def policy_layers(agent: Agent):
    """The one-step policy at ``z = 0`` as ``[(kernel, bias), ...]``: the first kernel without its noise rows."""
    layers = mlp_policy_layers(agent.actor.params)
    action_dim = layers[-1][1].shape[0]
    kernel, bias = layers[0]
    return [(kernel[:-action_dim], bias), *layers[1:]]


SPEC = AlgorithmSpec(name="fql", finetunable=True, explore=explore, policy_layers=policy_layers,
                     traced_fields=("discount", "tau", "alpha"))
