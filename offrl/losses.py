"""Pure loss functions shared by the algorithms, each with its formula.

Every function works on plain arrays, so a test can check it against numbers worked out
by hand. Conventions: a leading ensemble axis on ``q`` (shape ``(num_qs, B)``) is summed
over (each critic gets its own regression loss, as in TD3/SAC/CQL); batch axes are averaged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def bc_nll(log_probs: jax.Array) -> jax.Array:
    """Behaviour cloning by maximum likelihood: ``L = -mean_i log pi(a_i | s_i)``."""
    return -jnp.mean(log_probs)


def bc_mse(predicted_actions: jax.Array, actions: jax.Array) -> jax.Array:
    """Deterministic behaviour cloning: ``L = mean_{i,j} (pi(s_i)_j - a_ij)^2``."""
    return jnp.mean((predicted_actions - actions) ** 2)


def td_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """Temporal-difference regression ``L = sum_k mean_i (Q_k(s_i, a_i) - y_i)^2``.

    ``q`` is ``(B,)`` or ``(num_qs, B)``; ``target`` (``(B,)``) is treated as a constant
    (the caller builds it from target networks, e.g. ``y = r + gamma * mask * Q'(s', a')``).
    """
    target = jax.lax.stop_gradient(target)
    return jnp.sum(jnp.mean((q - target) ** 2, axis=-1))


def expectile_loss(target: jax.Array, value: jax.Array, tau: float) -> jax.Array:
    """Asymmetric least squares (IQL, Kostrikov et al. 2021, eq. 5).

    ``L = mean_i |tau - 1{u_i < 0}| u_i^2`` with ``u = target - value``. For ``tau = 0.5``
    it is half the squared error; ``tau -> 1`` makes ``value`` approach the maximum of
    ``target`` over the data's support.
    """
    u = target - value
    weight = jnp.abs(tau - (u < 0).astype(u.dtype))
    return jnp.mean(weight * u**2)


def advantage_weights(advantages: jax.Array, inverse_temperature: float, max_weight: float | None = None,
                      normalize_over_batch: bool = False) -> jax.Array:
    """Weights of advantage-weighted regression, as constants (no gradient).

    ``w_i = exp(beta * A_i)`` with ``beta = inverse_temperature`` (IQL's beta; AWAC's
    ``1 / lambda``), clipped at ``max_weight`` when given (IQL clips at 100). With
    ``normalize_over_batch`` the weights are ``w_i = B * softmax_i(beta * A_i)`` (mean 1, the
    AWAC authors' code): the same maximiser up to a per-batch constant, and no overflow.
    """
    scaled = jax.lax.stop_gradient(inverse_temperature * advantages)
    if normalize_over_batch:
        return scaled.shape[0] * jax.nn.softmax(scaled)
    weights = jnp.exp(scaled)
    return weights if max_weight is None else jnp.minimum(weights, max_weight)


def weighted_nll(log_probs: jax.Array, weights: jax.Array) -> jax.Array:
    """``L = -mean_i w_i log pi(a_i | s_i)`` with the weights treated as constants."""
    return -jnp.mean(jax.lax.stop_gradient(weights) * log_probs)


def awr_loss(log_probs: jax.Array, advantages: jax.Array, beta: float) -> jax.Array:
    """Advantage-weighted regression (Peng et al. 2019; IQL's policy extraction).

    ``L = -mean_i exp(beta * A_i) log pi(a_i | s_i)``, with the weights treated as constants
    (:func:`advantage_weights` without a clip, then :func:`weighted_nll`).
    """
    return weighted_nll(log_probs, advantage_weights(advantages, beta))


def cql_penalty(q_ood: jax.Array, q_data: jax.Array) -> jax.Array:
    """Conservative Q-learning regulariser (Kumar et al. 2020, CQL(H), eq. 4).

    ``P = mean_i (q_ood_i - q_data_i)``, where ``q_ood_i = log sum_j exp Q(s_i, a_j)``
    over out-of-distribution actions (see :func:`importance_logsumexp`) and ``q_data_i =
    Q(s_i, a_i)``. Summed over a leading ensemble axis like :func:`td_loss`.
    """
    return jnp.sum(jnp.mean(q_ood - q_data, axis=-1))


def importance_logsumexp(q_samples: jax.Array, log_densities: jax.Array, temperature: float = 1.0) -> jax.Array:
    """Importance-sampled soft maximum over sampled actions (CQL(H)'s estimator).

    ``temperature * log sum_j exp((Q(s, a_j) - log mu(a_j | s)) / temperature)`` over the
    last axis, where ``mu`` is the density the action ``a_j`` was drawn from (uniform:
    ``log mu = -d log 2`` on ``[-1, 1]^d``; the policy: its log-prob, treated as constant).
    """
    log_densities = jax.lax.stop_gradient(log_densities)
    return temperature * jax.nn.logsumexp((q_samples - log_densities) / temperature, axis=-1)


def td3_bc_actor_loss(q: jax.Array, policy_actions: jax.Array, actions: jax.Array, alpha: float) -> jax.Array:
    """TD3+BC actor loss (Fujimoto & Gu 2021, eq. 3).

    ``L = -lambda mean_i Q(s_i, pi(s_i)) + mean_{i,j} (pi(s_i)_j - a_ij)^2`` with
    ``lambda = alpha / mean_i |Q(s_i, pi(s_i))|`` treated as a constant.
    """
    lam = alpha / jax.lax.stop_gradient(jnp.mean(jnp.abs(q)))
    return -lam * jnp.mean(q) + bc_mse(policy_actions, actions)


def sac_actor_loss(q: jax.Array, log_probs: jax.Array, entropy_alpha: jax.Array) -> jax.Array:
    """Soft actor loss (Haarnoja et al. 2018): ``L = mean_i (alpha log pi(a_i|s_i) - Q(s_i, a_i))``, ``a_i ~ pi``,
    with the entropy coefficient ``alpha`` held constant."""
    return jnp.mean(jax.lax.stop_gradient(entropy_alpha) * log_probs - q)


def entropy_alpha_loss(log_entropy_alpha: jax.Array, log_probs: jax.Array, target_entropy: float) -> jax.Array:
    """Automatic entropy tuning (Haarnoja et al. 2018b): ``L = -mean_i log_alpha (log pi(a_i|s_i) + H_target)``."""
    return -jnp.mean(log_entropy_alpha * jax.lax.stop_gradient(log_probs + target_entropy))


def soft_td_target(rewards, masks, next_q, next_log_probs, entropy_alpha, discount: float):
    """SAC's soft Bellman target ``y = r + gamma * mask * (Q'(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi``."""
    return rewards + discount * masks * (next_q - entropy_alpha * next_log_probs)


def soft_update(target_params, online_params, tau: float):
    """Polyak averaging ``theta' <- tau * theta + (1 - tau) * theta'`` on every leaf."""
    return jax.tree_util.tree_map(lambda t, o: tau * o + (1.0 - tau) * t, target_params, online_params)
