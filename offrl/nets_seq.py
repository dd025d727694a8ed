"""Sequence networks shared by the sequence-model algorithms (Flax linen): a causal GPT.

A :class:`GPT` is a stack of pre-LayerNorm transformer blocks (GPT-2's layout, Radford et al.
2019) over token embeddings ``x`` of shape ``(B, T, E)`` with a validity mask ``valid``
``(B, T)`` (``False`` on padding). Token ``i`` attends to token ``j`` iff ``j <= i`` and ``j`` is
valid (or ``j == i``, so that a padded row still has one key and stays finite)::

    attention(q, k, v)_i = sum_j softmax_j(q_i . k_j / sqrt(d) + mask_ij) v_j,
    mask_ij = 0 if allowed(i, j) else -1e9.

Token ``i``'s output therefore depends on tokens ``0..i`` only (the causal property the tests
check by perturbing a later token).

Dropout (:class:`Dropout`) draws its masks from a counter-based hash instead of one threefry
draw per element: the layer's key (from the ``"dropout"`` rng collection, so every call site and
step still gets fresh, reproducible randomness) gives two 32-bit seeds, and element block ``i``
gets the 32-bit word ``fmix32((i + s_0) * 0x9E3779B9 mod 2^32 XOR s_1)`` (MurmurHash3's
finaliser, a bijection with full avalanche), split into two 16-bit halves ``u``. An element is
kept iff ``u >= round(rate * 2^16)`` and kept elements are scaled by ``1 / (1 - p)`` with
``p = round(rate * 2^16) / 2^16`` the exact drop rate (0.100006 for ``rate = 0.1``), so
``E[dropout(x)] = x`` holds exactly. On this CPU threefry masks were a third of a Decision
Transformer update (``benchmarks/dt_throughput.py``); these cost about 5%. The masks are
uniform and independent enough for regularisation (the tests check the rate, the
unbiasedness and that neighbouring elements and keys are uncorrelated), not a certified
random number generator.

The blocks' dense layers (:class:`Dense`) are ``nn.Dense`` with the same parameters; their
custom VJP only orders the weight-gradient product so that XLA's CPU backend transposes less.
"""

from __future__ import annotations

import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp


_DROP_BITS = 16


def dropout_keep(key: jax.Array, shape: tuple[int, ...], rate: float) -> tuple[jax.Array, float]:
    """``(keep, scale)``: a boolean mask of ``shape`` keeping each element with probability
    ``1 - p`` (``p = round(rate * 2^16) / 2^16``) and the factor ``1 / (1 - p)`` (module docstring)."""
    threshold = int(round(rate * 2 ** _DROP_BITS))
    if threshold >= 2 ** _DROP_BITS:
        raise ValueError(f"dropout rate {rate} drops every element; use a rate in [0, 1).")
    seeds = jax.random.bits(key, (2,), jnp.uint32)
    size = math.prod(shape)
    words = (size + 1) // 2
    h = (jax.lax.iota(jnp.uint32, words) + seeds[0]) * jnp.uint32(0x9E3779B9) ^ seeds[1]
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    h = h ^ (h >> 16)
    halves = jax.lax.bitcast_convert_type(h, jnp.uint16).reshape(-1)[:size].reshape(shape)
    return halves >= jnp.uint16(threshold), 2 ** _DROP_BITS / (2 ** _DROP_BITS - threshold)


class Dropout(nn.Module):
    """Inverted dropout with hash-based masks (:func:`dropout_keep`); identity when
    ``deterministic`` or ``rate == 0``. Draws from the ``"dropout"`` rng collection."""

    rate: float

    @nn.compact
    def __call__(self, x, deterministic: bool):
        if deterministic or self.rate == 0.0:
            return x
        keep, scale = dropout_keep(self.make_rng("dropout"), x.shape, self.rate)
        return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros((), x.dtype))


ACTIVATIONS = {"gelu": nn.gelu, "relu": nn.relu}


@jax.custom_vjp
def _matmul(x, kernel):
    return x @ kernel


def _matmul_fwd(x, kernel):
    return x @ kernel, (x, kernel)


def _matmul_bwd(residuals, g):
    x, kernel = residuals
    rows_x, rows_g = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    # dW = x^T g, computed as (g^T x)^T: the same numbers; XLA's CPU backend lays this order out
    # with a cheaper transpose (a DT update runs ~20% faster, benchmarks/dt_throughput.py)
    return g @ kernel.T, jnp.einsum("nf,ne->fe", rows_g, rows_x).T


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


class Dense(nn.Module):
    """``x @ kernel + bias`` with Flax ``nn.Dense``'s parameters, names and initialisers (LeCun
    normal kernel, zero bias), so checkpoints are interchangeable; only the weight gradient's
    product order differs (:func:`_matmul_bwd`)."""

    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        return _matmul(x, kernel) + bias


def attention_mask(valid: jax.Array) -> jax.Array:
    """``(B, 1, T, T)`` boolean: query ``i`` may see key ``j`` iff ``j <= i`` and (``valid[j]`` or ``j == i``)."""
    T = valid.shape[-1]
    causal = jnp.tril(jnp.ones((T, T), bool))
    allowed = causal[None] & (valid[:, None, :] | jnp.eye(T, dtype=bool)[None])
    return allowed[:, None]


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention under :func:`attention_mask`."""

    embed_dim: int
    num_heads: int
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x, mask, training: bool = False):
        B, T, E = x.shape
        head_dim = E // self.num_heads
        qkv = Dense(3 * E)(x).reshape(B, T, 3, self.num_heads, head_dim)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, H, T, D)
        logits = jnp.einsum("bhid,bhjd->bhij", q, k) / jnp.sqrt(head_dim).astype(x.dtype)
        logits = jnp.where(mask, logits, -1e9)
        weights = Dropout(self.dropout)(jax.nn.softmax(logits, axis=-1), not training)
        out = jnp.einsum("bhij,bhjd->bhid", weights, v).transpose(0, 2, 1, 3).reshape(B, T, E)
        return Dropout(self.dropout)(Dense(E)(out), not training)


class TransformerBlock(nn.Module):
    """``x + attn(LN(x))`` then ``x + MLP(LN(x))`` with a 4x MLP (``activation``: GELU, its tanh
    approximation, or ReLU)."""

    embed_dim: int
    num_heads: int
    dropout: float = 0.0
    activation: str = "gelu"

    @nn.compact
    def __call__(self, x, mask, training: bool = False):
        x = x + CausalSelfAttention(self.embed_dim, self.num_heads, self.dropout)(nn.LayerNorm()(x), mask, training)
        h = Dense(4 * self.embed_dim)(nn.LayerNorm()(x))
        h = Dense(self.embed_dim)(ACTIVATIONS[self.activation](h))
        return x + Dropout(self.dropout)(h, not training)


class GPT(nn.Module):
    """``num_layers`` :class:`TransformerBlock` s and a final LayerNorm: ``(B, T, E) -> (B, T, E)``."""

    embed_dim: int = 128
    num_layers: int = 3
    num_heads: int = 1
    dropout: float = 0.1
    activation: str = "gelu"

    @nn.compact
    def __call__(self, x, valid, training: bool = False):
        mask = attention_mask(valid)
        x = Dropout(self.dropout)(x, not training)
        for _ in range(self.num_layers):
            x = TransformerBlock(self.embed_dim, self.num_heads, self.dropout, self.activation)(x, mask, training)
        return nn.LayerNorm()(x)
