"""Conservative Offline Model-Based policy Optimization, COMBO (Yu, Kumar, Rafailov, Rajeswaran,
Levine & Finn 2021, "COMBO: Conservative Offline Model-Based Policy Optimization").

CQL's regulariser (:mod:`offrl.algos.cql`) without an uncertainty estimate: the critic is trained
on real and model transitions (:mod:`offrl.algos.model_based`) and pushed down at the states of
the model's rollouts, up at the data's state-action pairs::

    L_Q = sum_k mean_{mix} (Q_k(s, a) - y)^2 / 2
          + beta * sum_k ( mean_{s ~ rho} lse_k(s) - mean_{(s,a) ~ D} Q_k(s, a) )
    lse_k(s) = T log sum_j exp((Q_k(s, a_j) - log mu(a_j)) / T)
    y = r + gamma * mask * min_k Q'_k(s', a'),  a' ~ pi(.|s')         (deterministic backup)

over ``n_actions`` uniform actions, policy actions at ``s`` and policy actions at ``s'`` (CQL(H)'s
importance-sampled estimator, :func:`offrl.losses.importance_logsumexp`). ``rho`` is the batch's
states, real and model (``conservative_states="mix"``, OfflineRL-Kit's default) or its model rows
only (``"model"``, the paper's ``d_M^pi``).

D4RL settings of OfflineRL-Kit's COMBO runs (``rollout_length`` h, ``cql_weight`` beta):
halfcheetah-medium 5, 0.5; hopper-medium 5, 5.0; walker2d-medium 1, 5.0; halfcheetah-medium-replay
5, 0.5; hopper-medium-replay 5, 0.5; walker2d-medium-replay 1, 0.5; half the batch real
(``real_ratio`` 0.5), 3 x 256 networks.

Example::

    run = offrl.train("combo", "pendulum-medium-replay-v0", steps=20_000,
                      config_overrides={"rollout_starts": 1000, "rollout_every": 100})
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from offrl import losses
from offrl.algos import model_based
from offrl.algos.common import Batch
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.model_based import Agent, act, config_for_dataset, create, q_value, sample
from offrl.algos.ranges import Interval, NON_NEGATIVE, OneOf, POSITIVE, POSITIVE_INT, WIDTHS, param
from offrl.nets import tanh_gaussian_sample

__all__ = ["Config", "Agent", "create", "update", "act", "q_value", "conservative_gap", "critic_loss", "SPEC"]


@dataclass(frozen=True)
class Config(model_based.ModelBasedConfig):
    """COMBO hyperparameters: the model-based fields (:class:`offrl.algos.model_based.ModelBasedConfig`)
    with COMBO's mix, and the conservative penalty's."""

    hidden_dims: tuple[int, ...] = param((256, 256, 256), WIDTHS)  #: actor and critic widths (OfflineRL-Kit: 3 x 256)
    real_ratio: float = param(0.5, Interval(0.0, 1.0, "[]"))  #: share of real rows in each batch (0.5)
    cql_weight: float = param(5.0, NON_NEGATIVE)  #: beta, weight of the conservative penalty (hopper-medium: 5.0)
    n_actions: int = param(10, POSITIVE_INT)  #: actions per source (uniform, pi at s, pi at s') in the log-sum-exp
    logsumexp_temperature: float = param(1.0, POSITIVE)  #: T of the penalty's soft maximum
    conservative_states: str = param("mix", OneOf(("mix", "model")))  #: rho: the batch's states, or its model rows only


def conservative_gap(lse: jax.Array, q_data: jax.Array, rho_weights: jax.Array, data_weights: jax.Array) -> jax.Array:
    """``sum_k ( sum_i w_i lse_k(s_i) / sum w - sum_i v_i Q_k(s_i, a_i) / sum v )`` for ``(K, B)`` arrays and
    row weights ``w`` (the push-down states rho) and ``v`` (the real rows)."""
    push_down = jnp.sum(lse * rho_weights, -1) / jnp.maximum(rho_weights.sum(), 1.0)
    push_up = jnp.sum(q_data * data_weights, -1) / jnp.maximum(data_weights.sum(), 1.0)
    return jnp.sum(push_down - push_up)


def _ood_actions(agent: Agent, batch: Batch, key: jax.Array):
    """``(B, 3n, d)`` uniform, pi(.|s) and pi(.|s') actions and their log densities (constants)."""
    n = agent.config.n_actions
    B, d = batch.actions.shape
    uniform_key, policy_key = jax.random.split(key)
    mean, log_std = agent.actor.apply_fn(agent.actor.params, jnp.concatenate([batch.observations, batch.next_observations]))
    mean, log_std = jnp.repeat(mean[:, None], n, 1), jnp.repeat(log_std[:, None], n, 1)
    policy_actions, policy_log_probs = tanh_gaussian_sample(policy_key, mean, log_std)
    uniform = jax.random.uniform(uniform_key, (B, n, d), minval=-1.0, maxval=1.0)
    actions = jnp.concatenate([uniform, policy_actions[:B], policy_actions[B:]], 1)
    log_densities = jnp.concatenate([jnp.full((B, n), -d * jnp.log(2.0)), policy_log_probs[:B], policy_log_probs[B:]], 1)
    return jax.lax.stop_gradient(actions), jax.lax.stop_gradient(log_densities)


def critic_loss(params, agent: Agent, batch: Batch, target, ood_actions, ood_log_densities):
    cfg = agent.config
    B, M, d = ood_actions.shape
    obs = jnp.concatenate([batch.observations, jnp.repeat(batch.observations, M, axis=0)])
    q_all = agent.critic.apply_fn(params, obs, jnp.concatenate([batch.actions, ood_actions.reshape(B * M, d)]))
    q_data, q_ood = q_all[:, :B], q_all[:, B:].reshape(-1, B, M)
    lse = losses.importance_logsumexp(q_ood, ood_log_densities, cfg.logsumexp_temperature)
    is_model = batch.extras["is_model"].astype(jnp.float32)
    rho = is_model if cfg.conservative_states == "model" else jnp.ones_like(is_model)
    gap = conservative_gap(lse, q_data, rho, 1.0 - is_model)
    td = 0.5 * losses.td_loss(q_data, target)
    return td + cfg.cql_weight * gap, {"td_loss": td, "cql_gap": gap / cfg.num_qs, "q": q_data.mean()}


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    agent, mixed, model_metrics = model_based.model_batch(agent, batch)
    rng, ood_key, target_key, actor_key = jax.random.split(agent.rng, 4)
    agent = agent.replace(rng=rng)
    ood_actions, ood_log_densities = _ood_actions(agent, mixed, ood_key)
    target = model_based.deterministic_target(agent, mixed, target_key)
    agent, metrics = model_based.sac_update(agent, mixed, target, actor_key, critic_loss, ood_actions, ood_log_densities)
    return agent, {**metrics, **model_metrics}


SPEC = AlgorithmSpec(name="combo", config_for_dataset=config_for_dataset, sample=sample)
