"""Seeds across devices: the seed axis sharded over a one-axis :class:`jax.sharding.Mesh`.

Every seed (sweep member) is independent, so the seed-stacked agents and their data keys are
split along their leading axis over ``devices`` devices while the dataset is replicated on
each; the jitted chunk then runs each device's share of the ``vmap`` locally (XLA's SPMD
partitioner), and the results equal the one-device run up to float reassociation.

Example::

    agents, data_keys, data = place(agents, data_keys, data, devices=4)
"""

from __future__ import annotations

from offrl.errors import ConfigError


def seed_mesh(devices: int):
    """A one-axis mesh named ``"seeds"`` over the first ``devices`` devices."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    available = jax.devices()
    if int(devices) < 1:
        raise ConfigError(f"--devices is {devices}; it must be a positive integer.")
    if int(devices) > len(available):
        raise ConfigError(f"--devices {devices}: only {len(available)} {available[0].platform} device(s) are visible; "
                          f"pass --devices {len(available)} or fewer.")
    return Mesh(np.array(available[:int(devices)]), ("seeds",))


def check_divisible(seeds: int, devices: int) -> None:
    if int(seeds) % int(devices):
        raise ConfigError(f"--devices {devices} does not divide the {seeds} seeds (members); "
                          f"pass a --seeds that is a multiple of {devices}, or --devices 1.")


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
