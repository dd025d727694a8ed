"""The device replay buffer: wrap-around, sampling only filled rows, exact offline:online mixing, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.replay import add_rows, init_buffer, sample_mixed, sample_rows

ROW = {"observations": np.zeros(2, np.float32), "rewards": np.zeros((), np.float32), "masks": np.ones((), np.float32)}


def rows(start, k):
    ids = np.arange(start, start + k, dtype=np.float32)
    return {"observations": np.stack([ids, -ids], 1), "rewards": ids, "masks": np.ones(k, np.float32)}


def test_init_buffer_shapes_and_dtypes():
    buffer = init_buffer({**ROW, "flag": np.zeros(3, bool)}, capacity=5)
    assert buffer.data["observations"].shape == (5, 2) and buffer.data["rewards"].shape == (5,)
    assert buffer.data["flag"].dtype == jnp.bool_ and int(buffer.size) == 0 and int(buffer.ptr) == 0


def test_add_rows_wraps_around_and_overwrites_the_oldest():
    buffer = init_buffer(ROW, capacity=5)
    add = jax.jit(add_rows)
    buffer = add(buffer, rows(0, 3))
    assert (int(buffer.size), int(buffer.ptr)) == (3, 3)
    buffer = add(buffer, rows(3, 3))  # rows 3, 4 fill the end, row 5 overwrites row 0
    assert (int(buffer.size), int(buffer.ptr)) == (5, 1)
    np.testing.assert_array_equal(buffer.data["rewards"], [5, 1, 2, 3, 4])
    np.testing.assert_array_equal(buffer.data["observations"][:, 1], [-5, -1, -2, -3, -4])
    buffer = add(buffer, rows(6, 5))  # a full lap
    np.testing.assert_array_equal(buffer.data["rewards"], [10, 6, 7, 8, 9])
    assert (int(buffer.size), int(buffer.ptr)) == (5, 1)
    with pytest.raises(ValueError, match="capacity 5"):
        add_rows(buffer, rows(0, 6))
    with pytest.raises(KeyError):
        add_rows(buffer, {"rewards": np.zeros(1)})


def test_sample_rows_only_from_filled_rows():
    buffer = add_rows(init_buffer(ROW, capacity=100), rows(1, 7))  # rewards 1..7 in rows 0..6
    batch = jax.jit(sample_rows, static_argnums=2)(buffer, jax.random.PRNGKey(0), 4000)
    values = np.asarray(batch["rewards"])
    assert set(np.unique(values)) == set(range(1, 8))  # all filled rows, never an empty (zero) one
    np.testing.assert_array_equal(np.asarray(batch["observations"])[:, 0], values)  # rows stay whole
    counts = np.bincount(values.astype(int), minlength=8)[1:]
    assert counts.min() > 4000 / 7 * 0.8  # roughly uniform


def test_sample_mixed_exact_counts_per_batch():
    offline = {"observations": jnp.ones((50, 2)), "rewards": jnp.full(50, -1.0), "masks": jnp.ones(50),
               "mc_returns": jnp.zeros(50)}
    buffer = add_rows(init_buffer(ROW, capacity=64), rows(1, 10))
    sample = jax.jit(sample_mixed, static_argnums=(3, 4))
    for fraction, n_offline in ((0.5, 16), (0.25, 8), (0.3, 10), (0.0, 0), (1.0, 32)):
        total_offline = 0
        for i in range(50):
            batch = sample(offline, buffer, jax.random.PRNGKey(i), 32, fraction)
            r = np.asarray(batch["rewards"])
            assert r.shape == (32,)
            assert np.all(r[:n_offline] == -1) and np.all(r[n_offline:] >= 1)  # offline first, then filled rows
            total_offline += int((r == -1).sum())
        assert total_offline == 50 * n_offline
    assert set(sample(offline, buffer, jax.random.PRNGKey(0), 32, 0.5)) == set(ROW)
    assert set(sample_mixed(offline, None, jax.random.PRNGKey(0), 8, 1.0)) == set(offline)
    assert set(sample_mixed(None, buffer, jax.random.PRNGKey(0), 8, 0.0)) == set(ROW)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sample_mixed(offline, buffer, jax.random.PRNGKey(0), 8, 1.5)
    with pytest.raises(KeyError, match="masks"):
        sample_mixed({"observations": offline["observations"], "rewards": offline["rewards"]}, buffer,
                     jax.random.PRNGKey(0), 8, 0.5)


def test_vmapped_over_seeds_with_shared_offline_data():
    offline = {"observations": jnp.zeros((30, 2)), "rewards": jnp.full(30, -1.0), "masks": jnp.ones(30)}
    buffers = jax.vmap(lambda _: init_buffer(ROW, capacity=16))(jnp.arange(2))
    new_rows = {k: jnp.stack([v, v + 100]) for k, v in rows(1, 5).items()}  # seed 1's rows are 101..105
    buffers = jax.jit(jax.vmap(add_rows))(buffers, new_rows)
    np.testing.assert_array_equal(buffers.size, [5, 5])
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    mixed = jax.jit(jax.vmap(lambda o, b, k: sample_mixed(o, b, k, 20, 0.25), in_axes=(None, 0, 0)))
    batch = mixed(offline, buffers, keys)
    r = np.asarray(batch["rewards"])
    assert r.shape == (2, 20)
    assert np.all(r[:, :5] == -1)
    assert set(np.unique(r[0, 5:])) <= set(range(1, 6)) and set(np.unique(r[1, 5:])) <= set(range(101, 106))
    assert not np.array_equal(r[0, 5:], r[1, 5:] - 100)  # each seed draws its own rows
