"""Advantage-Weighted Actor-Critic (Nair, Gupta, Dalal & Levine 2020, "AWAC: Accelerating
Online Reinforcement Learning with Offline Datasets", arXiv:2006.09359), offline phase.

* critic: ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * min_j Q'_j(s', a'))^2``, ``a' ~ pi(.|s')``
  (twin critics as in SAC, but no entropy bonus: the official offline runs set SAC's alpha to 0)
* actor:  ``L_pi = -mean_i w_i log pi(a_i | s_i)``, ``w = exp(A / lambda)`` with
  ``A(s, a) = min_k Q_k(s, a) - min_k Q_k(s, a_pi)``, ``a_pi ~ pi(.|s)`` (a one-sample
  estimate of ``V^pi(s) = E_pi Q(s, .)``), weights treated as constants.

The weights are normalised over the minibatch, ``w_i = B * softmax_i(A_i / lambda)`` (mean 1),
as the authors' released code does (``normalize_over_batch``): it is the same maximiser as
``exp(A / lambda)`` up to a per-batch constant and cannot overflow. ``normalize_weights=False``
uses the raw ``exp(A / lambda)`` clipped at ``max_weight`` instead (IQL's convention).

The policy is a Gaussian with ``tanh``-squashed mean and a state-independent log-std clipped to
``[-6, 0]``; the deterministic action is the mean.

Example::

    agent = create(Config(), obs_dim=17, action_dim=6, key=jax.random.PRNGKey(0))
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
from offrl.algos.common import Batch, apply_gradients_with_loss, make_train_state, min_q_value, td_critic_loss
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import BOOL, DISCOUNT, Interval, LEARNING_RATE, NON_NEGATIVE, POLYAK, POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import EnsembleCritic, GaussianActor, gaussian_log_prob


@dataclass(frozen=True)
class Config:
    """AWAC hyperparameters; defaults are the paper's MuJoCo settings (Appendix, Table of
    hyperparameters) and the authors' released rlkit configuration where the paper is silent."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the policy (paper: 3e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the twin Q-functions (paper: 3e-4)
    actor_weight_decay: float = param(1e-4, NON_NEGATIVE)  #: L2 penalty added to the policy gradient (released code: 1e-4)
    actor_hidden_dims: tuple[int, ...] = param((256, 256, 256, 256), WIDTHS)  #: policy MLP (released code: 4 x 256)
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: Q-function MLPs (released code: 2 x 256)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    lam: float = param(1.0, POSITIVE)  #: lambda, temperature of exp(A / lambda) (paper: 1.0; the released MuJoCo script uses 2.0)
    normalize_weights: bool = param(True, BOOL)  #: w = B * softmax(A / lambda) over the batch (released code); else min(exp(A / lambda), max_weight)
    max_weight: float = param(100.0, POSITIVE)  #: clip of exp(A / lambda) when normalize_weights is False
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critic (paper: 5e-3)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (clipped double Q: min)
    log_std_min: float = param(-6.0, Interval(-20.0, 2.0))  #: lower clip of the policy log-std (released code)
    log_std_max: float = param(0.0, Interval(-20.0, 2.0))  #: upper clip of the policy log-std (released code)
    ORDERED_FIELDS: ClassVar = (("log_std_min", "log_std_max"),)  #: pairs that must increase (checked with the ranges)
    batch_size: int = param(1024, POSITIVE_INT)  #: minibatch size (paper: 1024)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


# ---------------------------------------------------------------------- losses
critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch, weights: jax.Array):
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    log_probs = gaussian_log_prob(mean, log_std, batch.actions)
    return losses.weighted_nll(log_probs, weights), {"log_prob": log_probs.mean()}


def sample_actions(key, mean, log_std):
    """``a = clip(mean + std * eps, -1, 1)``: a policy sample inside the action box."""
    return jnp.clip(mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape), -1.0, 1.0)


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, next_key, pi_key = jax.random.split(agent.rng, 3)
    batch_size = batch.observations.shape[0]

    # One policy pass over s and s', one critic pass over (s, a) and (s, a_pi).
    mean, log_std = agent.actor.apply_fn(
        agent.actor.params, jnp.concatenate([batch.observations, batch.next_observations]))
    pi_actions = sample_actions(pi_key, mean[:batch_size], log_std[:batch_size])
    next_actions = sample_actions(next_key, mean[batch_size:], log_std[batch_size:])

    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    target = batch.rewards + cfg.discount * batch.masks * next_q

    q_both = agent.critic.apply_fn(
        agent.critic.params, jnp.concatenate([batch.observations, batch.observations]),
        jnp.concatenate([batch.actions, pi_actions])).min(0)
    advantages = q_both[:batch_size] - q_both[batch_size:]
    weights = losses.advantage_weights(advantages, 1.0 / cfg.lam, cfg.max_weight, normalize_over_batch=cfg.normalize_weights)

    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, weights)
    agent = agent.replace(
        actor=actor, critic=critic,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, cfg.tau),
        rng=rng, step=agent.step + 1,
    )
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "q": c_aux["q"], "adv": advantages.mean(),
               "weight_max": weights.max(), "log_prob": a_aux["log_prob"]}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    mean, _ = agent.actor.apply_fn(agent.actor.params, observations)
    return mean


q_value = min_q_value


def explore(agent: Agent, observations: jax.Array, key: jax.Array) -> jax.Array:
    """A sample of the Gaussian policy, clipped to the action box (exploration when fine-tuning online)."""
    mean, log_std = agent.actor.apply_fn(agent.actor.params, observations)
    return jnp.clip(mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape), -1.0, 1.0)


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, rng = jax.random.split(key, 3)
    obs = jnp.zeros((1, obs_dim))
    act_ = jnp.zeros((1, action_dim))
    actor_net = GaussianActor(action_dim, config.actor_hidden_dims, tanh_squash=False, state_dependent_std=False,
                              log_std_min=config.log_std_min, log_std_max=config.log_std_max)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    actor_tx = optax.chain(optax.add_decayed_weights(config.actor_weight_decay), optax.adam(config.actor_lr))
    critic_params = critic_net.init(critic_key, obs, act_)
    return Agent(
        actor=TrainState.create(apply_fn=actor_net.apply, params=actor_net.init(actor_key, obs), tx=actor_tx),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


SPEC = AlgorithmSpec(name="awac", finetunable=True, explore=explore)
