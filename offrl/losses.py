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


def awr_loss(log_probs: jax.Array, advantages: jax.Array, beta: float) -> jax.Array:
    """Advantage-weighted regression (Peng et al. 2019; IQL's policy extraction).

    ``L = -mean_i exp(beta * A_i) log pi(a_i | s_i)``, with the weights treated as constants.
    No clipping here: IQL clips the weight at 100, which the caller does by passing
    ``min(A, log(100) / beta)``.
    """
    weights = jax.lax.stop_gradient(jnp.exp(beta * advantages))
    return -jnp.mean(weights * log_probs)


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


def sac_actor_loss(q: jax.Array, log_probs: jax.Array, temperature: jax.Array) -> jax.Array:
    """Soft actor loss (Haarnoja et al. 2018): ``L = mean_i (alpha log pi(a_i|s_i) - Q(s_i, a_i))``, ``a_i ~ pi``."""
    return jnp.mean(jax.lax.stop_gradient(temperature) * log_probs - q)


def temperature_loss(log_temperature: jax.Array, log_probs: jax.Array, target_entropy: float) -> jax.Array:
    """Automatic entropy tuning (Haarnoja et al. 2018b): ``L = -mean_i log_alpha (log pi(a_i|s_i) + H_target)``."""
    return -jnp.mean(log_temperature * jax.lax.stop_gradient(log_probs + target_entropy))


def soft_update(target_params, online_params, tau: float):
    """Polyak averaging ``theta' <- tau * theta + (1 - tau) * theta'`` on every leaf."""
    return jax.tree_util.tree_map(lambda t, o: tau * o + (1.0 - tau) * t, target_params, online_params)
