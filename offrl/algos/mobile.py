"""Model-Bellman Inconsistency penalised offLine policy optimization, MOBILE (Sun, Zhang, Jia,
Zhang, Yu & Zhang 2023, "Model-Bellman Inconsistency for Model-based Offline Reinforcement Learning").

SAC on real and model transitions (:mod:`offrl.algos.model_based`); the critic's target for a
model transition is lowered by how much the elites disagree about its Bellman backup::

    T^i Q(s, a) = mean_{j<S} [ r_ij + gamma * m_ij * min_k Q'_k(s'_ij, a'_ij) ],   (s'_ij, r_ij) ~ elite i,  a'_ij ~ pi(.|s'_ij)
    u(s, a)     = std_i T^i Q(s, a)                  (unbiased, over the elites)
    y           = r - beta * u(s, a) * 1{model row} + gamma * mask * min_k Q'_k(s', a')

with a deterministic backup (no entropy term in ``y``). OfflineRL-Kit's implementation takes the
standard deviation of the next-state values ``Q'(s', a')`` alone (without ``r`` and ``gamma``) and
clips ``y`` at 0; here the estimate is the paper's full backup and ``y`` is not clipped (Pendulum's
rewards are negative).

D4RL settings of OfflineRL-Kit's MOBILE runs (``rollout_length`` h, ``penalty_coef`` beta):
hopper-medium 5, 1.5; halfcheetah-medium(-replay) 5, 0.5; walker2d-medium-expert 1, 1.5 (its
default run); 10 successor samples per elite, 5% real rows.

One default departs from the authors': the critics have LayerNorm (``critic_layer_norm``), for the
reason MOPO's docstring gives (:mod:`offrl.algos.mopo`): without it, the critics of this shared SAC
learner drift above the reward bound on the bundled Pendulum data. With it, Q over the data's
(s, a) reaches -286 at 12k updates against the Monte-Carlo returns' -246 and never rises above 0.
The penalty is small there (beta * u about 0.4 per step against rewards of -4.8: the elites agree
on Pendulum's deterministic dynamics), so on Pendulum MOBILE is close to SAC on the model's rollouts.
Values propagate with a time constant of about ``1 / (tau * (1 - gamma))`` updates; short runs
raise ``tau``. Even so, MOBILE's score on Pendulum still swings at 12k updates (docs/models.md).

Example::

    run = offrl.train("mobile", "pendulum-medium-replay-v0", steps=20_000,
                      config_overrides={"rollout_starts": 1000, "rollout_every": 100})
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from offrl import dynamics as dyn
from offrl.algos import model_based
from offrl.algos.common import Batch
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.model_based import Agent, act, config_for_dataset, create, q_value, sample
from offrl.algos.ranges import BOOL, NON_NEGATIVE, POSITIVE_INT, param

__all__ = ["Config", "Agent", "create", "update", "act", "q_value", "bellman_uncertainty", "SPEC"]


@dataclass(frozen=True)
class Config(model_based.ModelBasedConfig):
    """MOBILE hyperparameters: the model-based fields (:class:`offrl.algos.model_based.ModelBasedConfig`),
    the penalty's weight and the successors drawn per elite."""

    penalty_coef: float = param(1.5, NON_NEGATIVE)  #: beta of y = r - beta * u(s, a) + ... (OfflineRL-Kit: 1.5)
    successor_samples: int = param(10, POSITIVE_INT)  #: S, successors drawn from each elite for T^i Q (10)
    critic_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the critics (not the authors': see the module docstring)


def bellman_uncertainty(rewards: jax.Array, masks: jax.Array, next_q: jax.Array, discount) -> jax.Array:
    """``std_i mean_j (r_ij + gamma m_ij Q'_ij)`` (unbiased over elites ``i``) for ``(S, E, N)`` arrays -> ``(N,)``."""
    estimates = jnp.mean(rewards + discount * masks * next_q, axis=0)
    return jnp.std(estimates, axis=0, ddof=1)


def penalty(agent: Agent, batch: Batch, key: jax.Array) -> jax.Array:
    """MOBILE's ``u(s, a)`` of every row of ``batch`` (the current policy and target critics)."""
    successor_key, action_key = jax.random.split(key)
    next_obs, rewards, masks = dyn.sample_successors(agent.dynamics, batch.observations, batch.actions, successor_key,
                                                     agent.config.successor_samples)
    flat = next_obs.reshape(-1, next_obs.shape[-1])
    next_actions = model_based.policy_sample(agent, flat, action_key)
    next_q = agent.critic.apply_fn(agent.target_critic_params, flat, next_actions).min(0).reshape(rewards.shape)
    return bellman_uncertainty(rewards, masks, next_q, agent.config.discount)


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    agent, mixed, model_metrics = model_based.model_batch(agent, batch)
    rng, penalty_key, target_key, actor_key = jax.random.split(agent.rng, 4)
    agent = agent.replace(rng=rng)
    u = jnp.where(mixed.extras["is_model"], penalty(agent, mixed, penalty_key), 0.0)
    target = model_based.deterministic_target(agent, mixed, target_key) - agent.config.penalty_coef * u
    agent, metrics = model_based.sac_update(agent, mixed, target, actor_key)
    return agent, {**metrics, **model_metrics, "bellman_uncertainty": u.sum() / jnp.maximum(mixed.extras["is_model"].sum(), 1)}


SPEC = AlgorithmSpec(name="mobile", config_for_dataset=config_for_dataset, sample=sample)
