"""Training across devices: a one-axis :class:`jax.sharding.Mesh` over the seed axis, or over
the minibatch axis when there is one seed.

Seeds (sweep members) are independent, so with several seeds the seed-stacked agents and their
data keys are split along their leading axis over ``devices`` devices while the dataset is
replicated on each; the jitted chunk then runs each device's share of the ``vmap`` locally.

With one seed the agent and the dataset are replicated and every sampled minibatch is
constrained to be split along its batch axis (:func:`constrain_batch`). XLA's SPMD
partitioner then runs each device's forward and backward pass on its ``B / devices`` rows; a
loss that is a mean over the batch becomes a sum of per-device partial sums, so the gradient is
an all-reduce of per-device gradients (data parallelism), and every device applies the same
optimizer step to its replica. Both ways the results equal the one-device run up to float
reassociation.

Example::

    agents, data_keys, data = place(agents, data_keys, data, devices=4)         # 4 seeds or more
    agents, data_keys, data = place_replicated(agents, data_keys, data, devices=4)  # one seed
"""

from __future__ import annotations

from offrl.errors import ConfigError


def visible_devices() -> int:
    import jax

    return len(jax.devices())


def device_mesh(devices: int, axis: str):
    """A one-axis mesh named ``axis`` over the first ``devices`` devices."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    available = jax.devices()
    if int(devices) < 1:
        raise ConfigError(f"--devices is {devices}; it must be a positive integer or 'auto'.")
    if int(devices) > len(available):
        raise ConfigError(f"--devices {devices}: only {len(available)} {available[0].platform} device(s) are visible; "
                          f"pass --devices {len(available)} or fewer.")
    return Mesh(np.array(available[:int(devices)]), (axis,))


def seed_mesh(devices: int):
    """A one-axis mesh named ``"seeds"`` over the first ``devices`` devices."""
    return device_mesh(devices, "seeds")


def check_divisible(seeds: int, devices: int) -> None:
    if int(seeds) % int(devices):
        raise ConfigError(f"--devices {devices} does not divide the {seeds} seeds (members); "
                          f"pass a --seeds that is a multiple of {devices}, or --devices 1.")


def check_batch_divisible(batch_size: int, devices: int) -> None:
    if int(batch_size) % int(devices):
        raise ConfigError(f"--devices {devices} does not divide batch_size {batch_size} (one seed shards the batch "
                          f"axis); pass --set batch_size=<a multiple of {devices}> or another --devices.")


def resolve_devices(devices, seeds: int, batch_size: int) -> int:
    """``devices`` as an int; ``"auto"`` is the largest visible device count that divides the
    seeds (or, for one seed, the batch size)."""
    if isinstance(devices, str):
        if devices.strip().lower() != "auto":
            try:
                return int(devices)
            except ValueError:
                raise ConfigError(f"--devices {devices!r} is neither a positive integer nor 'auto'.") from None
        split = int(seeds) if int(seeds) > 1 else int(batch_size)
        return max(n for n in range(1, visible_devices() + 1) if split % n == 0)
    return int(devices)


def check_devices(devices: int, seeds: int, batch_size: int) -> None:
    """One sentence for more devices than are visible, or for a seed count (several seeds) or
    batch size (one seed) that ``devices`` does not divide."""
    device_mesh(devices, "check")
    if int(seeds) > 1:
        check_divisible(seeds, devices)
    else:
        check_batch_divisible(batch_size, devices)


def place(agents, data_keys, data, devices: int):
    """``(agents, data_keys)`` sharded along their leading seed axis, ``data`` replicated."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = seed_mesh(devices)
    check_divisible(int(data_keys.shape[0]), devices)
    by_seed = NamedSharding(mesh, PartitionSpec("seeds"))
    replicated = NamedSharding(mesh, PartitionSpec())
    agents = jax.tree_util.tree_map(lambda x: jax.device_put(x, by_seed), agents)
    return agents, jax.device_put(data_keys, by_seed), jax.tree_util.tree_map(lambda x: jax.device_put(x, replicated), data)


def batch_sharding(devices: int):
    """The :class:`~jax.sharding.NamedSharding` that splits an array's leading (batch) axis over ``devices``."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(device_mesh(devices, "batch"), PartitionSpec("batch"))


def place_replicated(agents, data_keys, data, devices: int):
    """``agents``, ``data_keys`` and ``data`` replicated on ``devices`` devices (one seed: the
    batch axis is split inside the chunk by :func:`constrain_batch`)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    replicated = NamedSharding(device_mesh(devices, "batch"), PartitionSpec())
    put = lambda tree: jax.tree_util.tree_map(lambda x: jax.device_put(x, replicated), tree)  # noqa: E731
    return put(agents), put(data_keys), put(data)


def constrain_batch(batch, sharding, batch_size: int):
    """``batch`` with every array whose leading axis has ``batch_size`` rows constrained to
    ``sharding`` (split along that axis); traceable, used inside the jitted chunk."""
    import jax

    def one(x):
        if getattr(x, "ndim", 0) >= 1 and x.shape[0] == batch_size:
            return jax.lax.with_sharding_constraint(x, sharding)
        return x

    return jax.tree_util.tree_map(one, batch)
