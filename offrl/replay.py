"""A replay buffer on the device: fixed capacity, circular, sampled inside jit.

Rows are dicts of arrays, one leading row axis, with keys ``observations``, ``actions``
(in ``[-1, 1]``), ``rewards``, ``next_observations``, ``masks`` (``1 - terminal``) and any
extras. Every function is pure and jittable, so a training chunk can add the latest rows and
run ``K`` scanned updates sampling from the buffer in one compiled call, and it vmaps over
seeds (one buffer per seed, an unbatched offline dataset shared by all).

Mixed sampling (offline-to-online fine-tuning, "replay mixing"): a batch of ``B`` rows holds
exactly ``round(B * f)`` i.i.d. rows of the offline data and ``B - round(B * f)`` i.i.d. rows of
the buffer's filled part, offline first. Example::

    buffer = init_buffer({"observations": np.zeros(3), "rewards": np.zeros(())}, capacity=1000)
    buffer = add_rows(buffer, {"observations": obs_k, "rewards": rewards_k})   # (k, ...) rows
    batch = sample_mixed(offline, buffer, key, batch_size=256, offline_fraction=0.5)
"""

from __future__ import annotations

from typing import Mapping

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


class OnlineBuffer(flax.struct.PyTreeNode):
    """``data[k]`` has shape ``(capacity, ...)``; rows ``[0, size)`` are filled; ``ptr`` is the
    next row to write (the oldest row once the buffer is full)."""

    data: dict[str, jax.Array]
    size: jax.Array
    ptr: jax.Array


def _capacity(buffer: OnlineBuffer) -> int:
    return int(next(iter(buffer.data.values())).shape[0])


def init_buffer(example_row: Mapping[str, object], capacity: int) -> OnlineBuffer:
    """An empty buffer of ``capacity`` rows shaped and typed like ``example_row`` (one row, no
    leading axis)."""
    if capacity < 1:
        raise ValueError(f"a replay buffer needs a positive capacity, got {capacity}")
    data = {}
    for name, value in example_row.items():
        value = np.asarray(value)
        data[name] = jnp.zeros((capacity, *value.shape), value.dtype)
    return OnlineBuffer(data=data, size=jnp.zeros((), jnp.int32), ptr=jnp.zeros((), jnp.int32))


def add_rows(buffer: OnlineBuffer, rows: Mapping[str, jax.Array]) -> OnlineBuffer:
    """Write ``k`` rows (``k <= capacity``) at ``ptr``, wrapping around and overwriting the oldest."""
    if set(rows) != set(buffer.data):
        raise KeyError(f"rows have keys {sorted(rows)}, the buffer holds {sorted(buffer.data)}")
    k = int(next(iter(rows.values())).shape[0])
    capacity = _capacity(buffer)
    if k > capacity:
        raise ValueError(f"cannot add {k} rows to a buffer of capacity {capacity} at once")
    idx = (buffer.ptr + jnp.arange(k, dtype=jnp.int32)) % capacity
    data = {name: buffer.data[name].at[idx].set(jnp.asarray(rows[name], buffer.data[name].dtype)) for name in buffer.data}
    return OnlineBuffer(data=data, size=jnp.minimum(buffer.size + k, capacity).astype(jnp.int32),
                        ptr=((buffer.ptr + k) % capacity).astype(jnp.int32))


def _take(data: Mapping[str, jax.Array], idx: jax.Array) -> dict[str, jax.Array]:
    return jax.tree_util.tree_map(lambda x: x[idx], dict(data))


def sample_rows(buffer: OnlineBuffer, key: jax.Array, batch_size: int) -> dict[str, jax.Array]:
    """``batch_size`` rows drawn i.i.d. (with replacement) among the filled rows (row 0 of the
    empty buffer when nothing is filled yet)."""
    idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(buffer.size, 1))
    return _take(buffer.data, idx)


def sample_mixed(offline: Mapping[str, jax.Array] | None, buffer: OnlineBuffer | None, key: jax.Array,
                 batch_size: int, offline_fraction: float) -> dict[str, jax.Array]:
    """Exactly ``n = round(batch_size * offline_fraction)`` i.i.d. rows of ``offline`` followed by
    ``batch_size - n`` i.i.d. filled rows of ``buffer``.

    ``offline_fraction`` is a static Python float in ``[0, 1]``: 0 samples the buffer only
    (``offline`` may be ``None``), 1 the offline data only (``buffer`` may be ``None``). The
    batch has the buffer's keys (the offline dict must hold them; its other arrays are left
    out), or the offline keys when there is no buffer. Vmaps over seeds with ``offline``
    unbatched (``in_axes=None``) and ``buffer`` and ``key`` batched.
    """
    if not 0.0 <= offline_fraction <= 1.0:
        raise ValueError(f"offline_fraction must lie in [0, 1], got {offline_fraction}")
    n_offline = int(round(batch_size * offline_fraction))
    n_online = batch_size - n_offline
    if n_offline and offline is None:
        raise ValueError("sample_mixed needs offline data when offline_fraction > 0")
    if n_online and buffer is None:
        raise ValueError("sample_mixed needs a buffer when offline_fraction < 1")
    offline_key, online_key = jax.random.split(key)
    if n_online == 0:
        n_rows = next(iter(offline.values())).shape[0]
        return _take(offline, jax.random.randint(offline_key, (n_offline,), 0, n_rows))
    online = sample_rows(buffer, online_key, n_online)
    if n_offline == 0:
        return online
    missing = sorted(set(online) - set(offline))
    if missing:
        raise KeyError(f"the offline data lacks the buffer's arrays {missing}")
    n_rows = next(iter(offline.values())).shape[0]
    idx = jax.random.randint(offline_key, (n_offline,), 0, n_rows)
    rows = _take({name: offline[name] for name in online}, idx)
    return {name: jnp.concatenate([rows[name], online[name]]) for name in online}
