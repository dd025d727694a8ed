"""Soft Actor-Critic with automatic entropy tuning (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications", arXiv:1812.05905): offrl's online learner.

For a batch ``(s, a, r, s', m)`` with ``m = 1 - terminal`` (timeouts still bootstrap)::

    a' ~ pi(.|s'),   y = r + gamma * m * (min_k Q'_k(s', a') - alpha * log pi(a'|s'))
    L_Q     = 1/2 * sum_k mean_i (Q_k(s_i, a_i) - y_i)^2
    L_pi    = mean_i (alpha * log pi(a~_i|s_i) - min_k Q_k(s_i, a~_i)),   a~ ~ pi(.|s) reparameterised
    L_alpha = -mean_i log(alpha) * (log pi(a~_i|s_i) + H_target),        H_target = -dim(A)
    theta'  <- tau * theta + (1 - tau) * theta'

The 1/2 in ``L_Q`` is the paper's (``J_Q``) and Stable-Baselines3's; Adam's steps do not
depend on a constant factor of the loss (up to its epsilon), so it only changes the logged
value. One update runs critic, then actor (on the new critic), then ``alpha``, then the
Polyak step of the target critics. ``pi`` is a tanh-squashed diagonal Gaussian acting in
``[-1, 1]^d``; the caller rescales actions to the environment's bounds.

SAC is online: it is not in ``offrl.algos.ALGORITHM_NAMES`` (``offrl train`` trains from a
fixed dataset); ``offrl collect train-behavior`` runs it with :mod:`offrl.rollout` and the device
replay buffer of :mod:`offrl.replay`. Example::

    agent = create(Config(), obs_dim=3, action_dim=1, key=jax.random.PRNGKey(0))
    agent, metrics = jax.jit(update)(agent, batch)        # batch: offrl.algos.common.Batch
    actions, log_probs, mean_u, std_u = sample_actions(agent, observations, key)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import flax
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.common import (Batch, apply_gradients_with_loss, hyperparameter, make_train_state, min_q_value,
                                scalar_train_state)
from offrl.algos.ranges import ANY_REAL, DISCOUNT, LEARNING_RATE, POLYAK, POSITIVE, POSITIVE_INT, WIDTHS, OrNone, param
from offrl.nets import EnsembleCritic, GaussianActor, tanh_gaussian_sample


@dataclass(frozen=True)
class Config:
    """SAC hyperparameters; defaults follow Haarnoja et al. 2018b (Table 1, MuJoCo)."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the policy (paper: 3e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the critics (paper: 3e-4)
    entropy_alpha_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of log(entropy_alpha) (paper: 3e-4)
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of actor and critics (paper: 2 x 256)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (paper: clipped double Q)
    discount: float = param(0.99, DISCOUNT)  #: gamma (paper)
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critics (paper)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size (paper)
    initial_entropy_alpha: float = param(1.0, POSITIVE)  #: entropy coefficient alpha at the start (SB3 and jaxrl; the paper leaves it open)
    target_entropy: float | None = param(None, OrNone(ANY_REAL))  #: H_target; None: -action_dim (paper's heuristic)

    RENAMED: ClassVar[dict[str, str]] = {"init_temperature": "initial_entropy_alpha",
                                         "temperature_lr": "entropy_alpha_lr"}


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    target_critic_params: dict
    log_entropy_alpha: TrainState
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


def make_actor(config: Config, action_dim: int) -> GaussianActor:
    """The tanh-Gaussian policy network (its variables are ``{"params": ...}``)."""
    return GaussianActor(action_dim, tuple(config.hidden_dims), tanh_squash=True, state_dependent_std=True)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, rng = jax.random.split(key, 3)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = make_actor(config, action_dim)
    critic_net = EnsembleCritic(tuple(config.hidden_dims), num_qs=config.num_qs)
    critic_params = critic_net.init(critic_key, obs, act)
    return Agent(
        actor=make_train_state(actor_net, actor_net.init(actor_key, obs), config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        target_critic_params=critic_params,
        log_entropy_alpha=scalar_train_state(config.initial_entropy_alpha, config.entropy_alpha_lr),
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


# ---------------------------------------------------------------------- losses
def soft_target(agent: Agent, batch: Batch, key: jax.Array) -> jax.Array:
    """``y = r + gamma * m * (min_k Q'_k(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(.|s')``."""
    mean, log_std = agent.actor.apply_fn(agent.actor.params, batch.next_observations)
    next_actions, next_log_probs = tanh_gaussian_sample(key, mean, log_std)
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    entropy_alpha = jnp.exp(agent.log_entropy_alpha.params["value"])
    return losses.soft_td_target(batch.rewards, batch.masks, next_q, next_log_probs, entropy_alpha,
                                 hyperparameter(agent, "discount"))


def critic_loss(params, agent: Agent, batch: Batch, target: jax.Array):
    """``1/2 * sum_k mean_i (Q_k(s_i, a_i) - y_i)^2`` (half of :func:`offrl.losses.td_loss`)."""
    q = agent.critic.apply_fn(params, batch.observations, batch.actions)
    return 0.5 * losses.td_loss(q, target), {"q": q.mean()}


def actor_loss(params, agent: Agent, batch: Batch, key: jax.Array):
    """``mean_i (alpha log pi(a~_i|s_i) - min_k Q_k(s_i, a~_i))`` (:func:`offrl.losses.sac_actor_loss`)."""
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    actions, log_probs = tanh_gaussian_sample(key, mean, log_std)
    q = min_q_value(agent, batch.observations, actions)
    entropy_alpha = jnp.exp(agent.log_entropy_alpha.params["value"])
    return losses.sac_actor_loss(q, log_probs, entropy_alpha), {"log_probs": log_probs}


def entropy_alpha_loss(params, log_probs: jax.Array, target_entropy: float):
    """``-mean_i log(alpha) (log pi(a~_i|s_i) + H_target)`` (:func:`offrl.losses.entropy_alpha_loss`)."""
    return losses.entropy_alpha_loss(params["value"], log_probs, target_entropy), {}


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, target_key, actor_key = jax.random.split(agent.rng, 3)
    target = soft_target(agent, batch, target_key)
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    agent = agent.replace(critic=critic)
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, actor_key)
    target_entropy = -batch.actions.shape[-1] if cfg.target_entropy is None else cfg.target_entropy
    log_entropy_alpha, t_loss, _ = apply_gradients_with_loss(agent.log_entropy_alpha, entropy_alpha_loss,
                                                             a_aux["log_probs"], target_entropy)
    agent = agent.replace(
        actor=actor, log_entropy_alpha=log_entropy_alpha,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, cfg.tau),
        rng=rng, step=agent.step + 1,
    )
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "entropy_alpha_loss": t_loss,
               "entropy_alpha": jnp.exp(log_entropy_alpha.params["value"]), "entropy": -a_aux["log_probs"].mean(),
               **c_aux}
    return agent, metrics


# ---------------------------------------------------------------------- acting
def sample_from_actor(apply_fn, params, observations: jax.Array, key: jax.Array):
    """``(actions, log_probs, mean_u, std_u)`` of the tanh-Gaussian actor ``apply_fn(params, .)``:
    ``actions = tanh(u)``, ``u ~ N(mean_u, std_u^2)``, ``log_probs`` the density of ``actions`` in
    ``[-1, 1]^d`` (change of variables through tanh)."""
    mean, log_std = apply_fn(params, observations)
    actions, log_probs = tanh_gaussian_sample(key, mean, log_std)
    return actions, log_probs, mean, jnp.exp(log_std)


def sample_actions(agent: Agent, observations: jax.Array, key: jax.Array):
    """The behaviour of SAC during training: :func:`sample_from_actor` with the agent's actor."""
    return sample_from_actor(agent.actor.apply_fn, agent.actor.params, observations, key)


def deterministic_from_actor(apply_fn, params, observations: jax.Array) -> jax.Array:
    """``tanh(mean_u)`` in ``[-1, 1]``, the mode-like action of the tanh-Gaussian actor."""
    mean, _ = apply_fn(params, observations)
    return jnp.tanh(mean)


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    """Deterministic ``tanh(mean_u)`` in ``[-1, 1]``."""
    return deterministic_from_actor(agent.actor.apply_fn, agent.actor.params, observations)


q_value = min_q_value


#: SAC is the online behaviour learner of ``offrl collect train-behavior`` (not a registered offline
#: algorithm); its spec lets the online learner read its hooks like any algorithm's.
SPEC = AlgorithmSpec(name="sac", explore=sample_actions)
