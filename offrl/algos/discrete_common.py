"""What the discrete-action algorithms share: Q and logit networks, losses on arrays, export.

A discrete algorithm module declares ``SPEC = AlgorithmSpec(..., action_space="discrete")``
(:mod:`offrl.algos.contract`); the engine then hands it
``action_dim = num_actions`` (the width of its heads) and integer actions ``(B,)`` int32 in
``0 .. num_actions - 1``. ``act(agent, obs) -> (B,) int32`` and
``q_value(agent, obs, actions) -> (B,)`` follow the continuous family's interface otherwise.

Losses (each tested against hand-computed numbers in ``tests/algos/test_discrete_losses.py``):

* ``categorical_cross_entropy = -mean_i log softmax(logits_i)[a_i]``
* ``huber(x) = x^2 / 2 if |x| <= 1 else |x| - 1/2`` (DQN's TD loss, Mnih et al. 2015)
* ``dqn_target = r + gamma * mask * Q'(s', argmax_a Q(s', a))`` with double Q (van Hasselt et
  al. 2016), ``r + gamma * mask * max_a Q'(s', a)`` without
* ``discrete_cql_penalty = mean_i [logsumexp_a Q(s_i, a) - Q(s_i, a_i)]`` (Kumar et al. 2020, eq. 4)
* ``bcq_allowed = G(a|s) / max_a' G(a'|s) > threshold`` (Fujimoto et al. 2019, discrete BCQ)
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from offrl.nets import MLP

# ---------------------------------------------------------------------- networks
class DiscreteHead(nn.Module):
    """``f(s) -> (B, num_actions)``: Q-values of every action, or logits."""

    num_actions: int
    hidden_dims: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, obs):
        return MLP((*self.hidden_dims, self.num_actions))(obs)


class DiscreteCritic(nn.Module):
    """``num_qs`` independent Q heads in one vmapped call: ``(num_qs, B, num_actions)``."""

    num_actions: int
    hidden_dims: Sequence[int] = (256, 256)
    num_qs: int = 1

    @nn.compact
    def __call__(self, obs):
        ensemble = nn.vmap(DiscreteHead, variable_axes={"params": 0}, split_rngs={"params": True},
                           in_axes=None, out_axes=0, axis_size=self.num_qs)
        return ensemble(self.num_actions, self.hidden_dims)(obs)


def take(values: jax.Array, actions: jax.Array) -> jax.Array:
    """``values[..., i, actions[i]]``: the entry of each row's action (``values`` ``(..., B, A)``)."""
    index = jnp.broadcast_to(actions.astype(jnp.int32), values.shape[:-1])
    return jnp.take_along_axis(values, index[..., None], axis=-1).squeeze(-1)


# ---------------------------------------------------------------------- losses
def categorical_cross_entropy(logits: jax.Array, actions: jax.Array) -> jax.Array:
    """``-mean_i log softmax(logits_i)[a_i]``."""
    return -take(jax.nn.log_softmax(logits, axis=-1), actions).mean()


def huber(x: jax.Array, delta: float = 1.0) -> jax.Array:
    """Elementwise Huber: ``x^2 / 2`` for ``|x| <= delta``, ``delta * (|x| - delta / 2)`` beyond."""
    a = jnp.abs(x)
    return jnp.where(a <= delta, 0.5 * x**2, delta * (a - 0.5 * delta))


def q_td_loss(q_data: jax.Array, target: jax.Array, use_huber: bool = True) -> jax.Array:
    """``sum_k mean_i huber(Q_k(s_i, a_i) - y_i)`` (or squared error); ``q_data`` ``(num_qs, B)`` or ``(B,)``."""
    diff = jnp.atleast_2d(q_data) - jax.lax.stop_gradient(target)
    per = huber(diff) if use_huber else diff**2
    return per.mean(axis=-1).sum()


def dqn_target(rewards: jax.Array, masks: jax.Array, next_q_target: jax.Array, discount: float,
               next_q_online: jax.Array | None = None) -> jax.Array:
    """``r + gamma * mask * Q'(s', a*)``: ``a* = argmax Q_online(s')`` (double DQN) when
    ``next_q_online`` is given, else ``a* = argmax Q'(s')`` (DQN's max). Q arrays are ``(B, A)``."""
    if next_q_online is None:
        next_v = next_q_target.max(-1)
    else:
        next_v = take(next_q_target, next_q_online.argmax(-1))
    return rewards + discount * masks * next_v


def discrete_cql_penalty(q_all: jax.Array, actions: jax.Array) -> jax.Array:
    """``mean_i [logsumexp_a Q(s_i, a) - Q(s_i, a_i)]`` (summed over a leading ensemble axis)."""
    q_all = q_all if q_all.ndim == 3 else q_all[None]
    gap = jax.nn.logsumexp(q_all, axis=-1) - take(q_all, actions)
    return gap.mean(-1).sum()


def bcq_allowed(behavior_logits: jax.Array, threshold: float) -> jax.Array:
    """``G(a|s) / max_a' G(a'|s) > threshold`` as a boolean ``(B, A)`` mask (the argmax always passes)."""
    log_probs = jax.nn.log_softmax(behavior_logits, axis=-1)
    return log_probs - log_probs.max(-1, keepdims=True) >= jnp.log(threshold)


def masked_argmax(q: jax.Array, allowed: jax.Array) -> jax.Array:
    """``argmax_a Q(s, a)`` over the allowed actions only."""
    return jnp.where(allowed, q, -jnp.inf).argmax(-1).astype(jnp.int32)


# ---------------------------------------------------------------------- export
def head_layers(params, index: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(kernel, bias), ...]`` of a :class:`DiscreteHead` (``index``: one head of a :class:`DiscreteCritic`)."""
    params = params["params"] if "params" in params else params
    if index is not None:
        (name,) = params.keys()
        params = jax.tree_util.tree_map(lambda x: x[index], params[name])
    mlp = params["MLP_0"]
    return [(mlp[f"Dense_{i}"]["kernel"], mlp[f"Dense_{i}"]["bias"]) for i in range(len(mlp))]
