"""Model-Bellman Inconsistency penalised offLine policy optimization, MOBILE (Sun, Zhang, Jia,
Zhang, Yu & Zhang 2023, "Model-Bellman Inconsistency for Model-based Offline Reinforcement Learning").

SAC on real and model transitions (:mod:`offrl.algos.model_based`); the critic's target for a
model transition is lowered by how much the elites disagree about its Bellman backup::

    V'(s')      = min_k Q'_k(s', a'),                      a' ~ pi(.|s')   (soft_backup=False, the authors')
    V'(s')      = min_k Q'_k(s', a') - alpha log pi(a'|s')                 (soft_backup=True, SAC's soft backup)
    T^i Q(s, a) = mean_{j<S} [ r_ij + gamma * m_ij * V'(s'_ij) ],          (s'_ij, r_ij) ~ elite i
    u(s, a)     = std_i T^i Q(s, a)                  (unbiased, over the elites)
    y           = r - beta * u(s, a) * 1{model row} + gamma * mask * V'(s')

``u`` is the spread of the same backup ``y`` uses. The authors' code (the MOBILE repository's
configs and OfflineRL-Kit's ``run_mobile.py``) sets ``deterministic_backup=True`` for every task,
but offrl's default is ``soft_backup=True`` (a departure, for the reason below); their actor loss
and entropy tuning are SAC's either way.
Their penalty is the standard deviation of the next-state values ``mean_j Q'(s'_ij, a'_ij)``
alone (without ``r`` and ``gamma``) and they clip ``y`` at 0; here the estimate is the paper's full
backup and ``y`` is not clipped (Pendulum's rewards are negative). They also cap the entropy
coefficient at 1, which never binds on Pendulum (alpha falls from its initial 1).

Settings of the authors' MOBILE runs (``rollout_length`` h, ``penalty_coef`` beta): hopper-medium
5, 1.5 (alpha fixed at 0.2); halfcheetah-medium 5, 0.5; halfcheetah-medium-replay 5, 0.1;
hopper-medium-replay 5, 0.1; walker2d-medium-expert 1, 1.5 (OfflineRL-Kit's default run); 10
successor samples per elite, 5% real rows, 7 members and 5 elites.

Two defaults depart from the authors'. The critics have LayerNorm (``critic_layer_norm``), for the
reason MOPO's docstring gives (:mod:`offrl.algos.mopo`): without it, the critics of this shared SAC
learner drift above the reward bound on the bundled Pendulum data. With it, Q over the data's
(s, a) reaches -286 at 12k updates against the Monte-Carlo returns' -246 and never rises above 0.
The penalty is small there (beta * u about 0.4 per step against rewards of -4.8: the elites agree
on Pendulum's deterministic dynamics), so on Pendulum MOBILE is close to SAC on the model's rollouts.
Values propagate with a time constant of about ``1 / (tau * (1 - gamma))`` updates; short runs
raise ``tau``. And the backup is SAC's soft one (``soft_backup=True``): on Pendulum it learns
steadily where the authors' deterministic backup keeps swinging; at 12k updates (tau = 0.05, 6
seeds) it scores 100.1 +- 0.5 against 37.4 +- 49.1, 2 of 6 seeds below 0 (docs/models.md).
``--set soft_backup=false`` gives the authors' backup; runs saved before the field existed load
with it (``ABSENT``).

Example::

    run = offrl.train("mobile", "pendulum-medium-replay-v0", steps=20_000,
                      config_overrides={"rollout_starts": 1000, "rollout_every": 100})
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from offrl import dynamics as dyn
from offrl.algos import model_based, sac
from offrl.algos.common import Batch
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.model_based import Agent, act, config_for_dataset, create, q_value, sample
from offrl.algos.ranges import BOOL, NON_NEGATIVE, POSITIVE_INT, param
from offrl.nets import tanh_gaussian_sample

__all__ = ["Config", "Agent", "create", "update", "act", "q_value", "bellman_uncertainty", "critic_target", "SPEC"]


@dataclass(frozen=True)
class Config(model_based.ModelBasedConfig):
    """MOBILE hyperparameters: the model-based fields (:class:`offrl.algos.model_based.ModelBasedConfig`),
    the penalty's weight, the successors drawn per elite and the backup."""

    #: runs saved before ``soft_backup`` existed backed up the deterministic target
    ABSENT = {"soft_backup": False}

    penalty_coef: float = param(1.5, NON_NEGATIVE)  #: beta of y = r - beta * u(s, a) + ... (OfflineRL-Kit: 1.5)
    successor_samples: int = param(10, POSITIVE_INT)  #: S, successors drawn from each elite for T^i Q (10)
    critic_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the critics (not the authors': see the module docstring)
    #: True: V' = min_k Q' - alpha log pi(a'|s') in y and u; False: min_k Q' (the authors': deterministic_backup)
    soft_backup: bool = param(True, BOOL)


def bellman_uncertainty(rewards: jax.Array, masks: jax.Array, next_q: jax.Array, discount,
                        next_log_probs: jax.Array | None = None, entropy_alpha=0.0) -> jax.Array:
    """``std_i mean_j (r_ij + gamma m_ij (Q'_ij - alpha log pi_ij))`` (unbiased over elites ``i``) for
    ``(S, E, N)`` arrays -> ``(N,)``; without ``next_log_probs``, the deterministic ``Q'_ij`` alone."""
    if next_log_probs is not None:
        next_q = next_q - entropy_alpha * next_log_probs
    estimates = jnp.mean(rewards + discount * masks * next_q, axis=0)
    return jnp.std(estimates, axis=0, ddof=1)


def penalty(agent: Agent, batch: Batch, key: jax.Array) -> jax.Array:
    """MOBILE's ``u(s, a)`` of every row of ``batch`` (the current policy and target critics)."""
    cfg = agent.config
    successor_key, action_key = jax.random.split(key)
    next_obs, rewards, masks = dyn.sample_successors(agent.dynamics, batch.observations, batch.actions, successor_key,
                                                     cfg.successor_samples)
    flat = next_obs.reshape(-1, next_obs.shape[-1])
    mean, log_std = agent.actor.apply_fn(agent.actor.params, flat)
    next_actions, next_log_probs = tanh_gaussian_sample(action_key, mean, log_std)
    next_q = agent.critic.apply_fn(agent.target_critic_params, flat, next_actions).min(0).reshape(rewards.shape)
    if not cfg.soft_backup:
        return bellman_uncertainty(rewards, masks, next_q, cfg.discount)
    entropy_alpha = jnp.exp(agent.log_entropy_alpha.params["value"])
    return bellman_uncertainty(rewards, masks, next_q, cfg.discount, next_log_probs.reshape(rewards.shape),
                               entropy_alpha)


def critic_target(agent: Agent, batch: Batch, penalty_key: jax.Array, target_key: jax.Array):
    """``(y, u)`` of every row of a mixed batch: ``y = r - beta u 1{model} + gamma mask V'(s')``."""
    u = jnp.where(batch.extras["is_model"], penalty(agent, batch, penalty_key), 0.0)
    backup = sac.soft_target if agent.config.soft_backup else model_based.deterministic_target
    return backup(agent, batch, target_key) - agent.config.penalty_coef * u, u


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    agent, mixed, model_metrics = model_based.model_batch(agent, batch)
    rng, penalty_key, target_key, actor_key = jax.random.split(agent.rng, 4)
    agent = agent.replace(rng=rng)
    target, u = critic_target(agent, mixed, penalty_key, target_key)
    agent, metrics = model_based.sac_update(agent, mixed, target, actor_key)
    return agent, {**metrics, **model_metrics, "bellman_uncertainty": u.sum() / jnp.maximum(mixed.extras["is_model"].sum(), 1)}


SPEC = AlgorithmSpec(name="mobile", config_for_dataset=config_for_dataset, sample=sample)
