"""Sequence networks shared by the sequence-model algorithms (Flax linen): a causal GPT.

A :class:`GPT` is a stack of pre-LayerNorm transformer blocks (GPT-2's layout, Radford et al.
2019) over token embeddings ``x`` of shape ``(B, T, E)`` with a validity mask ``valid``
``(B, T)`` (``False`` on padding). Token ``i`` attends to token ``j`` iff ``j <= i`` and ``j`` is
valid (or ``j == i``, so that a padded row still has one key and stays finite)::

    attention(q, k, v)_i = sum_j softmax_j(q_i . k_j / sqrt(d) + mask_ij) v_j,
    mask_ij = 0 if allowed(i, j) else -1e9.

Token ``i``'s output therefore depends on tokens ``0..i`` only (the causal property the tests
check by perturbing a later token).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


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
        qkv = nn.Dense(3 * E)(x).reshape(B, T, 3, self.num_heads, head_dim)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, H, T, D)
        logits = jnp.einsum("bhid,bhjd->bhij", q, k) / jnp.sqrt(head_dim).astype(x.dtype)
        logits = jnp.where(mask, logits, -1e9)
        weights = nn.Dropout(self.dropout, deterministic=not training)(jax.nn.softmax(logits, axis=-1))
        out = jnp.einsum("bhij,bhjd->bhid", weights, v).transpose(0, 2, 1, 3).reshape(B, T, E)
        return nn.Dropout(self.dropout, deterministic=not training)(nn.Dense(E)(out))


class TransformerBlock(nn.Module):
    """``x + attn(LN(x))`` then ``x + MLP(LN(x))`` with a 4x GELU MLP."""

    embed_dim: int
    num_heads: int
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x, mask, training: bool = False):
        x = x + CausalSelfAttention(self.embed_dim, self.num_heads, self.dropout)(nn.LayerNorm()(x), mask, training)
        h = nn.Dense(4 * self.embed_dim)(nn.LayerNorm()(x))
        h = nn.Dense(self.embed_dim)(nn.gelu(h))
        return x + nn.Dropout(self.dropout, deterministic=not training)(h)


class GPT(nn.Module):
    """``num_layers`` :class:`TransformerBlock` s and a final LayerNorm: ``(B, T, E) -> (B, T, E)``."""

    embed_dim: int = 128
    num_layers: int = 3
    num_heads: int = 1
    dropout: float = 0.1

    @nn.compact
    def __call__(self, x, valid, training: bool = False):
        mask = attention_mask(valid)
        x = nn.Dropout(self.dropout, deterministic=not training)(x)
        for _ in range(self.num_layers):
            x = TransformerBlock(self.embed_dim, self.num_heads, self.dropout)(x, mask, training)
        return nn.LayerNorm()(x)
