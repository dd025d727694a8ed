"""Generative behaviour models of actions given states: a DDPM diffusion model and a flow-matching model.

Shared by :mod:`offrl.algos.idql` (diffusion) and :mod:`offrl.algos.fql` (flow); both learn
``p(a | s)`` from the data's actions in ``[-1, 1]^d`` with one network ``f_theta(s, x, t)``
(:class:`ActionField`) and sample with one ``lax.scan`` over the steps, batched over the rows of
``observations`` (repeat a state ``N`` times to draw ``N`` candidates; ``vmap`` over states).

Diffusion (Ho et al. 2020), ``T`` steps, ``abar_t = prod_{i<=t} (1 - beta_i)``::

    x_t = sqrt(abar_t) a + sqrt(1 - abar_t) eps,            L_eps = E ||eps_theta(s, x_t, t) - eps||^2
    x_{t-1} = (x_t - beta_t / sqrt(1 - abar_t) eps_theta(s, x_t, t)) / sqrt(1 - beta_t) + sigma_t z,
    sigma_t^2 = beta_t (no noise at the last step), x_T ~ N(0, I), each step clipped to [-1, 1].

``sigma_t^2 = beta_t`` is one of Ho et al.'s two choices and the one of IDQL's code; with few
steps it keeps more of the data's spread than the other, the posterior variance
``beta_t (1 - abar_{t-1}) / (1 - abar_t)`` (``tests/algos/test_generative.py`` checks both with
the exact noise predictor of a Gaussian). Schedules: the variance-preserving (VP) betas of IDQL's code
(:func:`vp_schedule`, ``beta_min = 0.1, beta_max = 10``) and Diffuser's cosine one
(:func:`offrl.algos.diffuser.cosine_schedule`, shared with this module: same :class:`Schedule`).

Flow matching (Lipman et al. 2023; the linear path of rectified flow, Liu et al. 2023), noise
``x_0 ~ N(0, I)``, data ``x_1 = a``, ``t ~ U[0, 1]``::

    x_t = (1 - t) x_0 + t x_1,                                L_v = E ||v_theta(s, x_t, t) - (x_1 - x_0)||^2
    Euler with K steps: x_{k+1} = x_k + v_theta(s, x_k, k / K) / K,   the sample is clip(x_K, -1, 1).

Example::

    net = ActionField(action_dim=2, hidden_dims=(64, 64))
    actions = euler_sample(lambda x, t: net.apply(params, obs, x, t), noise, num_steps=10)
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from offrl.algos.diffuser import Schedule, _time_embedding, cosine_schedule, q_sample, schedule_from_betas
from offrl.nets import MLP

__all__ = ["ActionField", "Schedule", "cosine_schedule", "vp_schedule", "schedule_from_betas", "noise_prediction_loss",
           "diffusion_loss", "ddpm_step", "ddpm_sample", "flow_path", "velocity_loss", "flow_matching_loss",
           "euler_sample", "mish"]


def mish(x):
    """``x tanh(softplus(x))`` (Misra 2019), IDQL's activation."""
    return x * jnp.tanh(jax.nn.softplus(x))


class ActionField(nn.Module):
    """``f(s, x, t) -> (B, action_dim)``: an MLP over ``[s, x, time features]``; the noise
    predictor of a diffusion model (integer ``t``, ``time_embedding_dim`` sinusoidal features) or
    the velocity of a flow (``t`` in ``[0, 1]`` used as it is when ``time_embedding_dim == 0``,
    as FQL does)."""

    action_dim: int
    hidden_dims: Sequence[int] = (256, 256)
    time_embedding_dim: int = 0
    activation: Callable = nn.relu
    layer_norm: bool = False

    @nn.compact
    def __call__(self, observations, x, t):
        t = jnp.broadcast_to(jnp.asarray(t), x.shape[:-1])
        time = _time_embedding(t, self.time_embedding_dim) if self.time_embedding_dim else t[..., None].astype(x.dtype)
        h = jnp.concatenate([observations, x, time], axis=-1)
        h = MLP(tuple(self.hidden_dims), activation=self.activation, activate_final=True, layer_norm=self.layer_norm)(h)
        return nn.Dense(self.action_dim)(h)


# ----------------------------------------------------------------------------- diffusion
def vp_schedule(num_steps: int, beta_min: float = 0.1, beta_max: float = 10.0) -> Schedule:
    """``beta_t = 1 - exp(-beta_min / T - (beta_max - beta_min) (2t - 1) / (2 T^2))``, ``t = 1..T``:
    the discretised variance-preserving SDE (Song et al. 2021), IDQL's default."""
    t = np.arange(1, num_steps + 1, dtype=np.float64)
    T = float(num_steps)
    return schedule_from_betas(1.0 - np.exp(-beta_min / T - 0.5 * (beta_max - beta_min) * (2 * t - 1) / T**2))


def noise_prediction_loss(predicted_noise: jax.Array, noise: jax.Array) -> jax.Array:
    """``mean (eps_theta - eps)^2`` over rows and action dimensions."""
    return jnp.mean((predicted_noise - noise) ** 2)


def diffusion_loss(params, apply_fn, schedule: Schedule, observations, actions, key):
    """``L_eps`` on one draw of ``t ~ U{0..T-1}`` and ``eps ~ N(0, I)`` per row; ``apply_fn(params, s, x, t)``."""
    t_key, n_key = jax.random.split(key)
    t = jax.random.randint(t_key, (actions.shape[0],), 0, schedule.betas.shape[0])
    noise = jax.random.normal(n_key, actions.shape)
    loss = noise_prediction_loss(apply_fn(params, observations, q_sample(schedule, actions, t, noise), t), noise)
    return loss, {}


def ddpm_step(schedule: Schedule, x, t, eps, z, clip: bool = True):
    """One ancestral step ``x_t -> x_{t-1}`` (module docstring) with predicted noise ``eps`` and fresh ``z``."""
    mean = (x - schedule.betas[t] / jnp.sqrt(1.0 - schedule.alpha_bars[t]) * eps) / jnp.sqrt(schedule.alphas[t])
    x = mean + jnp.where(t > 0, jnp.sqrt(schedule.betas[t]), 0.0) * z
    return jnp.clip(x, -1.0, 1.0) if clip else x


def ddpm_sample(eps_fn, schedule: Schedule, observations, action_dim: int, key, clip: bool = True):
    """Actions ``(B, action_dim)`` for ``observations`` ``(B, obs_dim)`` by ancestral sampling from
    ``x_T ~ N(0, I)``: one ``lax.scan`` over ``t = T-1 .. 0``; ``eps_fn(s, x, t)`` with ``t`` ``(B,)``."""
    T = schedule.betas.shape[0]
    B = observations.shape[0]
    start_key, step_key = jax.random.split(key)
    step_keys = jax.random.split(step_key, T)

    def body(x, inputs):
        t, k = inputs
        eps = eps_fn(observations, x, jnp.full((B,), t, jnp.int32))
        return ddpm_step(schedule, x, t, eps, jax.random.normal(k, x.shape), clip), None

    x, _ = jax.lax.scan(body, jax.random.normal(start_key, (B, action_dim)), (jnp.arange(T - 1, -1, -1), step_keys))
    return jnp.clip(x, -1.0, 1.0)


# ----------------------------------------------------------------------------- flow matching
def flow_path(x0, x1, t):
    """``x_t = (1 - t) x0 + t x1`` (``t`` per row, broadcast over the action dimensions)."""
    t = jnp.asarray(t)[..., None]
    return (1.0 - t) * x0 + t * x1


def velocity_loss(predicted_velocity, x0, x1) -> jax.Array:
    """``mean (v_theta - (x1 - x0))^2`` over rows and action dimensions."""
    return jnp.mean((predicted_velocity - (x1 - x0)) ** 2)


def flow_matching_loss(params, apply_fn, observations, actions, key):
    """``L_v`` on one draw of ``x0 ~ N(0, I)`` and ``t ~ U[0, 1]`` per row; ``apply_fn(params, s, x, t)``."""
    n_key, t_key = jax.random.split(key)
    x0 = jax.random.normal(n_key, actions.shape)
    t = jax.random.uniform(t_key, (actions.shape[0],))
    return velocity_loss(apply_fn(params, observations, flow_path(x0, actions, t), t), x0, actions), {}


def euler_sample(velocity_fn, x0, num_steps: int, clip: bool = True):
    """``x_K`` from ``x_0`` by ``K = num_steps`` Euler steps of ``velocity_fn(x, t)`` (``t`` a scalar),
    one ``lax.scan``; clipped to ``[-1, 1]`` at the end (FQL clips its flow actions)."""
    def body(x, k):
        return x + velocity_fn(x, k / num_steps) / num_steps, None

    x, _ = jax.lax.scan(body, x0, jnp.arange(num_steps, dtype=jnp.float32))
    return jnp.clip(x, -1.0, 1.0) if clip else x
