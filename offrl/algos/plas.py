"""Policy in the Latent Action Space (Zhou, Bajracharya & Held 2020, "PLAS: Latent Action Space
for Offline Reinforcement Learning", CoRL, arXiv:2011.07213).

PLAS acts only through the decoder of a generative model of the data, so every action it takes
is one the data makes likely:

* behaviour model: BCQ's conditional VAE ``G(a | s)`` (:class:`offrl.nets.VAE`, latent
  ``2 * action_dim``), trained alone for the first ``warmup_steps`` updates and frozen after.
* latent policy: ``z = pi(s) = z_max * tanh(f(s))`` and the action ``a = D(s, pi(s))``.
* critic: ``a' = D(s', pi'(s'))``,
  ``y = r + gamma * mask * [lambda min_k Q'_k(s', a') + (1 - lambda) max_k Q'_k(s', a')]``,
  ``L_Q = sum_k mean (Q_k(s, a) - y)^2``.
* actor, after the warm-up: ``L_pi = -mean Q_1(s, D(s, pi(s)))``; targets Polyak-averaged.

Defaults are d3rlpy's ``PLASConfig`` (Adam 1e-4 policy and VAE, 1e-3 critics, batch 100,
``lambda = 0.75``, ``tau = 0.005``, KL weight 0.5, a 500,000-update VAE warm-up) with the paper's
networks (400 x 300 policy and critics, 750 x 750 VAE, ``z_max = 2``). Where offrl differs: d3rlpy
trains nothing but the VAE during the warm-up; offrl by default also fits the critic then (to the
current decoder's actions; the actor waits), which reports a falling critic loss from the first
update. ``critic_during_warmup=False`` gives d3rlpy's schedule. On short budgets lower
``warmup_steps``: no policy is learned before it. The policy is a latent network plus a decoder,
so it has no NumPy MLP export.

Example::

    agent = create(Config(warmup_steps=10_000), obs_dim=17, action_dim=6, key=jax.random.key(0))
    agent, metrics = update(agent, batch)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.bcq import soft_clipped_q, vae_loss
from offrl.algos.common import (Batch, apply_gradients_with_loss, hyperparameter, make_train_state, min_q_value, run_if,
                                td_critic_loss)
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import (BOOL, DISCOUNT, Interval, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, OrNone, POLYAK,
                                POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param)
from offrl.nets import MLP, VAE, EnsembleCritic, default_init


@dataclass(frozen=True)
class Config:
    """PLAS hyperparameters; defaults are d3rlpy's PLASConfig with the paper's networks (see the module docstring)."""

    actor_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of the latent policy (d3rlpy: 1e-4)
    critic_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the critics (d3rlpy: 1e-3)
    vae_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of the VAE (d3rlpy: 1e-4)
    hidden_dims: tuple[int, ...] = param((400, 300), WIDTHS)  #: latent policy and critic MLPs (paper: 400 x 300)
    vae_hidden_dims: tuple[int, ...] = param((750, 750), WIDTHS)  #: VAE encoder and decoder MLPs (paper: 750 x 750)
    latent_dim: int | None = param(None, OrNone(POSITIVE_INT))  #: VAE latent size (None: 2 * action_dim, as the paper)
    max_latent_action: float = param(2.0, POSITIVE)  #: z_max, the bound of the latent action (paper: 2)
    kl_weight: float = param(0.5, NON_NEGATIVE)  #: KL weight of the VAE loss (d3rlpy: 0.5)
    warmup_steps: int = param(500_000, NON_NEGATIVE_INT)  #: updates that train the VAE, before the policy (d3rlpy: 500,000)
    critic_during_warmup: bool = param(True, BOOL)  #: also fit the critics during the warm-up (False: d3rlpy, VAE only)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target policy and critics
    lmbda: float = param(0.75, Interval(0.0, 1.0))  #: lambda of the soft clipped double-Q target (d3rlpy: 0.75)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (d3rlpy: 2)
    batch_size: int = param(100, POSITIVE_INT)  #: minibatch size (d3rlpy: 100)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged


# ---------------------------------------------------------------------- networks
class LatentActor(nn.Module):
    """``z = z_max * tanh(f(s))``: a deterministic action in the VAE's latent space."""

    latent_dim: int
    hidden_dims: Sequence[int] = (400, 300)
    max_latent_action: float = 2.0

    @nn.compact
    def __call__(self, obs):
        x = MLP(self.hidden_dims, activate_final=True, name="latent_mlp")(obs)
        return self.max_latent_action * jnp.tanh(nn.Dense(self.latent_dim, kernel_init=default_init(1e-2), name="latent_head")(x))


class Agent(flax.struct.PyTreeNode):
    actor: TrainState               # latent policy pi(s) -> z
    critic: TrainState
    vae: TrainState
    target_actor_params: dict
    target_critic_params: dict
    last_actor_loss: jax.Array      # of the latest actor step (0 during the warm-up)
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


# ---------------------------------------------------------------------- losses
def decode(agent: Agent, actor_params, observations):
    """``D(s, pi(s))``, the action of the latent policy at ``actor_params``."""
    z = agent.actor.apply_fn(actor_params, observations)
    return agent.vae.apply_fn(agent.vae.params, observations, z, method="decode")


critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch):
    actions = decode(agent, params, batch.observations)
    return -jnp.mean(agent.critic.apply_fn(agent.critic.params, batch.observations, actions)[0]), {}


# ---------------------------------------------------------------------- update
def _train_vae(agent: Agent, batch: Batch, key):
    vae, loss, _ = apply_gradients_with_loss(agent.vae, vae_loss, agent, batch, key)
    return vae, loss


def _update_actor(agent: Agent, batch: Batch):
    """The latent policy's step and its target (past the warm-up; the critics' targets move every update)."""
    actor, loss, _ = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch)
    return agent.replace(actor=actor, last_actor_loss=loss,
                         target_actor_params=losses.soft_update(agent.target_actor_params, actor.params, hyperparameter(agent, "tau")))


def _update_critic(agent: Agent, batch: Batch):
    """One TD step of the critics toward the soft clipped double-Q target, and their Polyak targets."""
    next_actions = decode(agent, agent.target_actor_params, batch.next_observations)
    next_q = soft_clipped_q(agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions),
                            hyperparameter(agent, "lmbda"))
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_q
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    agent = agent.replace(critic=critic, target_critic_params=losses.soft_update(
        agent.target_critic_params, critic.params, hyperparameter(agent, "tau")))
    return agent, {"critic_loss": c_loss, "q": c_aux["q"], "target_q": next_q.mean()}


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, vae_key = jax.random.split(agent.rng)
    warming_up = agent.step < cfg.warmup_steps
    vae, g_loss = run_if(warming_up, lambda c: _train_vae(agent.replace(vae=c[0]), batch, vae_key), (agent.vae, jnp.zeros(())))
    agent = agent.replace(vae=vae, rng=rng)

    zero = jnp.zeros(())
    if cfg.critic_during_warmup:
        agent, critic_metrics = _update_critic(agent, batch)
    else:                                            # d3rlpy: nothing but the VAE moves during the warm-up
        agent, critic_metrics = run_if(jnp.logical_not(warming_up), lambda c: _update_critic(c[0], batch),
                                       (agent, {"critic_loss": zero, "q": zero, "target_q": zero}))
    agent = run_if(jnp.logical_not(warming_up), lambda a: _update_actor(a, batch), agent)
    metrics = {**critic_metrics, "actor_loss": agent.last_actor_loss, "vae_loss": g_loss}
    return agent.replace(step=agent.step + 1), metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    return decode(agent, agent.actor.params, observations)


q_value = min_q_value


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, vae_key, sample_key, rng = jax.random.split(key, 5)
    obs, act_ = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    latent_dim = config.latent_dim or 2 * action_dim
    actor_net = LatentActor(latent_dim, config.hidden_dims, config.max_latent_action)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    vae_net = VAE(action_dim, latent_dim, config.vae_hidden_dims)
    actor_params = actor_net.init(actor_key, obs)
    critic_params = critic_net.init(critic_key, obs, act_)
    return Agent(
        actor=make_train_state(actor_net, actor_params, config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        vae=make_train_state(vae_net, vae_net.init(vae_key, obs, act_, sample_key), config.vae_lr),
        target_actor_params=actor_params,
        target_critic_params=critic_params,
        last_actor_loss=jnp.zeros(()),
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


SPEC = AlgorithmSpec(name="plas", traced_fields=("discount", "tau", "lmbda"), exportable=False)
