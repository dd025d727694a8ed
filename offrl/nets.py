"""Networks shared by every algorithm (Flax linen): MLPs, vmapped critic ensembles, policies, VAE.

Conventions: actions live in ``[-1, 1]^d`` inside the engine (datasets are rescaled by the
action space bounds); observations are normalised outside the networks when asked for.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@jax.custom_batching.custom_vmap
def _qr(z):
    q, r = jnp.linalg.qr(z)
    return q, r


@_qr.def_vmap
def _qr_one_matrix_at_a_time(axis_size, in_batched, z):
    """Batched (a vmap over seeds or ensemble members), the QR runs one matrix at a time.

    jaxlib's CPU QR kernel splits a batch over the intra-op thread pool and blocks its thread
    until the pieces finish; inside one compiled program two such kernels can run at once, and on a
    2-thread pool both threads then wait on work queued behind them forever (observed: a jitted
    ``vmap`` of CQL's ``create`` hung in ``OrthogonalQr -> ParallelBatchMap`` on every run). The
    per-matrix LAPACK calls, and so the values, are those of the batched kernel."""
    (batched,) = in_batched
    if not batched:
        return _qr.fun(z), (False, False)
    return jax.lax.map(_qr, z), (True, True)


def orthogonal(scale: float = 1.0, column_axis: int = -1):
    """``jax.nn.initializers.orthogonal`` (the same draws and values) with a QR that does not
    deadlock inside a compiled, vmapped initialiser as jax's batched one did
    (:func:`_qr_one_matrix_at_a_time`; ``tests/engine/test_init.py``)."""
    import math

    import numpy as np

    def init(key, shape, dtype=jnp.float32):
        if len(shape) < 2:
            raise ValueError("orthogonal initializer requires at least a 2D shape")
        n, m = math.prod(shape) // shape[column_axis], shape[column_axis]
        z = jax.random.normal(key, (max(n, m), min(n, m)), dtype)
        q, r = _qr(z)
        q = q * jnp.expand_dims(jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1)), -2)
        if n < m:
            q = q.T
        q = jnp.moveaxis(jnp.reshape(q, tuple(np.delete(shape, column_axis)) + (shape[column_axis],)), -1, column_axis)
        return jnp.array(scale, dtype) * q

    return init


def default_init(scale: float = jnp.sqrt(2.0)):
    return orthogonal(scale)


class MLP(nn.Module):
    """``Dense -> act`` stacks; ``activate_final`` applies the activation after the last layer."""

    hidden_dims: Sequence[int]
    activation: Callable = nn.relu
    activate_final: bool = False
    layer_norm: bool = False
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x, training: bool = False):
        for i, size in enumerate(self.hidden_dims):
            x = nn.Dense(size, kernel_init=default_init())(x)
            if i + 1 < len(self.hidden_dims) or self.activate_final:
                if self.layer_norm:
                    x = nn.LayerNorm()(x)
                x = self.activation(x)
                if self.dropout > 0:
                    x = nn.Dropout(self.dropout, deterministic=not training)(x)
        return x


class Critic(nn.Module):
    """``Q(s, a)``: one scalar per row."""

    hidden_dims: Sequence[int] = (256, 256)
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs, actions):
        x = jnp.concatenate([obs, actions], axis=-1)
        return MLP((*self.hidden_dims, 1), layer_norm=self.layer_norm)(x).squeeze(-1)


class EnsembleCritic(nn.Module):
    """``num_qs`` independent critics evaluated with one vmapped call: output ``(num_qs, batch)``.

    ``broadcast_inputs`` changes the layout, not the numbers' meaning or the parameters: the inputs
    are broadcast to every member before the vmapped call. With a shared input, the first layer's
    product is one ``(rows, num_qs * width)`` matmul whose output XLA then transposes to
    ``(num_qs, rows, width)``, forward and again backward. On many rows that transpose costs
    more than it saves (CQL's critic on 31 x 256 rows: 5% more updates/s broadcast), on a batch of
    256 rows the merged matmul wins (TD3+BC: 5% fewer broadcast); benchmarks/README.md, "CQL and
    BCQ against their matmul ceiling".
    """

    hidden_dims: Sequence[int] = (256, 256)
    num_qs: int = 2
    layer_norm: bool = False
    broadcast_inputs: bool = False

    @nn.compact
    def __call__(self, obs, actions):
        ensemble = nn.vmap(
            Critic,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0 if self.broadcast_inputs else None,
            out_axes=0,
            axis_size=self.num_qs,
        )
        if self.broadcast_inputs:
            obs = jnp.broadcast_to(obs, (self.num_qs, *obs.shape))
            actions = jnp.broadcast_to(actions, (self.num_qs, *actions.shape))
        return ensemble(self.hidden_dims, self.layer_norm)(obs, actions)


class ValueNet(nn.Module):
    """``V(s)``: one scalar per row."""

    hidden_dims: Sequence[int] = (256, 256)
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs):
        return MLP((*self.hidden_dims, 1), layer_norm=self.layer_norm)(obs).squeeze(-1)


class DeterministicActor(nn.Module):
    """``a = tanh(f(s))`` in ``[-1, 1]^d`` (TD3, TD3+BC, BC-MSE)."""

    action_dim: int
    hidden_dims: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, obs):
        x = MLP(self.hidden_dims, activate_final=True)(obs)
        return jnp.tanh(nn.Dense(self.action_dim, kernel_init=default_init(1e-2))(x))


class GaussianActor(nn.Module):
    """Diagonal Gaussian policy; returns ``(mean, log_std)`` of the *pre-squash* distribution.

    ``tanh_squash=True`` (SAC, CQL): actions are ``tanh(u)``, ``u ~ N(mean, std)``; use
    :func:`tanh_gaussian_sample` / :func:`tanh_gaussian_log_prob`.
    ``tanh_squash=False`` (IQL, AWAC, BC): the mean is squashed, ``mean = tanh(f(s))``, and
    log-probs are plain Gaussian (:func:`gaussian_log_prob`); deterministic action = mean.
    ``state_dependent_std=False`` uses one learned log-std vector (IQL's choice).
    """

    action_dim: int
    hidden_dims: Sequence[int] = (256, 256)
    tanh_squash: bool = True
    state_dependent_std: bool = True
    log_std_min: float = LOG_STD_MIN
    log_std_max: float = LOG_STD_MAX

    @nn.compact
    def __call__(self, obs):
        x = MLP(self.hidden_dims, activate_final=True)(obs)
        mean = nn.Dense(self.action_dim, kernel_init=default_init(1e-2))(x)
        if self.state_dependent_std:
            log_std = nn.Dense(self.action_dim, kernel_init=default_init(1e-2))(x)
        else:
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
            log_std = jnp.broadcast_to(log_std, mean.shape)
        if not self.tanh_squash:
            mean = jnp.tanh(mean)
        log_std = jnp.clip(log_std, self.log_std_min, self.log_std_max)
        return mean, log_std


def gaussian_log_prob(mean, log_std, actions):
    """``log N(a; mean, exp(log_std)^2)`` summed over action dimensions."""
    z = (actions - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)


def _tanh_log_det(u):
    # log |d tanh(u)/du| = log(1 - tanh(u)^2), written stably.
    return 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def tanh_gaussian_sample(key, mean, log_std):
    """Reparameterised sample ``a = tanh(mean + std * eps)`` and its log-prob."""
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    log_prob = gaussian_log_prob(mean, log_std, u) - jnp.sum(_tanh_log_det(u), axis=-1)
    return jnp.tanh(u), log_prob


def tanh_gaussian_log_prob(mean, log_std, actions, eps: float = 1e-6):
    """Log-prob of squashed actions in ``(-1, 1)`` (clipped by ``eps`` to stay finite)."""
    a = jnp.clip(actions, -1 + eps, 1 - eps)
    u = jnp.arctanh(a)
    return gaussian_log_prob(mean, log_std, u) - jnp.sum(_tanh_log_det(u), axis=-1)


class VAE(nn.Module):
    """Conditional VAE ``p(a | s)`` for BCQ: encoder ``(s, a) -> z``, decoder ``(s, z) -> a``."""

    action_dim: int
    latent_dim: int
    hidden_dims: Sequence[int] = (750, 750)

    def setup(self):
        self.encoder = MLP(self.hidden_dims, activate_final=True)
        self.enc_mean = nn.Dense(self.latent_dim)
        self.enc_log_std = nn.Dense(self.latent_dim)
        self.decoder = MLP((*self.hidden_dims, self.action_dim))

    def __call__(self, obs, actions, key):
        h = self.encoder(jnp.concatenate([obs, actions], -1))
        mean, log_std = self.enc_mean(h), jnp.clip(self.enc_log_std(h), -4.0, 15.0)
        z = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return self.decode(obs, z), mean, log_std

    def decode(self, obs, z):
        return jnp.tanh(self.decoder(jnp.concatenate([obs, z], -1)))

    def sample(self, obs, key):
        z = jnp.clip(jax.random.normal(key, (*obs.shape[:-1], self.latent_dim)), -0.5, 0.5)
        return self.decode(obs, z)
