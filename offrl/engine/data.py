"""Data preparation: a dataset becomes a dict of device arrays in the agent's units.

The engine puts ``observations, actions, rewards, next_observations, masks`` on the device
(actions rescaled into ``[-1, 1]`` by the dataset's action box, optional observation and reward
scaling), plus whatever the algorithm asks for through its spec's optional hook
(:mod:`offrl.algos.contract`)::

    extra_arrays(dataset, info, config) -> dict[str, np.ndarray]    # one row per transition

(e.g. Cal-QL's ``mc_returns``). Minibatches are drawn on the device by the spec's optional
``sample(data, key, batch_size)``, by default :func:`sample_transitions`: i.i.d. rows,
``tree_map(lambda x: x[idx], data)``, returned as a :class:`offrl.algos.common.Batch` whose
``extras`` carry the algorithm's own arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offrl.errors import ConfigError

#: the arrays every transition-based algorithm gets.
TRANSITION_KEYS = ("observations", "actions", "rewards", "next_observations", "masks")


@dataclass(frozen=True)
class DataInfo:
    """How raw env quantities map to the agent's: everything needed to deploy the policy.

    ``obs_agent = (obs - obs_mean) / obs_std``; ``action_env = low + (a + 1) / 2 * (high - low)``;
    ``reward_agent = reward_scale * r + reward_bias``. With ``Discrete`` actions
    (``num_actions > 0``) an action is an integer in ``0 .. num_actions - 1``, the same for the
    agent and the env, and ``action_dim = num_actions`` (the width of a Q or logit head).
    """

    obs_dim: int
    action_dim: int
    obs_mean: list
    obs_std: list
    action_low: list
    action_high: list
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    env_id: str | None = None
    num_actions: int = 0

    @property
    def discrete(self) -> bool:
        return self.num_actions > 0

    @property
    def agent_action_shape(self) -> tuple[int, ...]:
        """The shape of one agent action: ``()`` for a discrete index, ``(action_dim,)`` otherwise."""
        return () if self.discrete else (self.action_dim,)

    def normalize(self, obs):
        return (np.asarray(obs, np.float32) - np.asarray(self.obs_mean, np.float32)) / np.asarray(self.obs_std, np.float32)

    def to_env_action(self, actions):
        if self.discrete:
            return np.asarray(actions).reshape(-1, 1).astype(np.int64)
        low, high = np.asarray(self.action_low, np.float32), np.asarray(self.action_high, np.float32)
        return low + (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (high - low)

    def to_agent_action(self, actions):
        if self.discrete:
            return np.asarray(actions).reshape(-1).astype(np.int32)
        low, high = np.asarray(self.action_low, np.float32), np.asarray(self.action_high, np.float32)
        return np.clip(2.0 * (np.asarray(actions, np.float32) - low) / (high - low) - 1.0, -1.0, 1.0)

    def scale_rewards(self, rewards):
        return (np.asarray(rewards, np.float32) * self.reward_scale + self.reward_bias).astype(np.float32)


def reward_scale(dataset, scaling) -> float:
    """The multiplier of a config's ``reward_scaling``: ``"none"``, ``"returns"`` (``1000 / (max
    episode return - min episode return)``, IQL's locomotion choice) or a number."""
    scaling = "none" if scaling is None else str(scaling).lower()
    if scaling in ("none", "", "1", "1.0"):
        return 1.0
    if scaling == "returns":
        returns = dataset.episode_returns()
        spread = float(returns.max() - returns.min()) if len(returns) else 0.0
        return 1000.0 / spread if spread > 0 else 1.0
    try:
        return float(scaling)
    except ValueError:
        raise ConfigError(f"config field 'reward_scaling' is {scaling!r}; use 'none', 'returns' or a number.") from None


def data_info(dataset, config, env_id: str | None = None) -> DataInfo:
    """The :class:`DataInfo` of ``dataset`` under ``config``'s data options."""
    from offrl.data.checks import action_bounds, num_discrete_actions

    num_actions = num_discrete_actions(dataset, env_id)
    low, high = action_bounds(dataset, env_id, from_data=True)
    obs_dim = int(np.prod(dataset.observations.shape[1:]))
    if getattr(config, "normalize_observations", False):
        mean, std = (x.reshape(-1) for x in dataset.observation_stats())
    else:
        mean, std = np.zeros(obs_dim, np.float32), np.ones(obs_dim, np.float32)
    action_dim = num_actions or int(np.prod(dataset.actions.shape[1:]))
    return DataInfo(obs_dim, action_dim, mean.tolist(), std.tolist(),
                    np.asarray(low, np.float32).tolist(), np.asarray(high, np.float32).tolist(),
                    reward_scale(dataset, getattr(config, "reward_scaling", "none")),
                    float(getattr(config, "reward_bias", 0.0)), env_id, num_actions)


def check_action_family(module, info: DataInfo, source: str = "the dataset") -> None:
    """Refuse a continuous algorithm on discrete actions and the reverse, naming the family that
    fits (the spec's ``action_space``)."""
    if module is None:
        return
    from offrl.algos import algorithm_names, algorithm_spec

    spec = algorithm_spec(module)
    wants = spec.action_space
    have = "discrete" if info.discrete else "continuous"
    if wants == have:
        return
    what = f"{info.num_actions} discrete actions" if info.discrete else f"continuous {info.action_dim}-dimensional actions"
    raise ConfigError(f"{source} has {what} but --algo {spec.name} is a {wants}-action algorithm; "
                      f"use a {have} one: {', '.join(algorithm_names(action_space=have))}.")


def device_free_bytes(device=None) -> tuple[int | None, str]:
    """``(bytes free, device name)`` where the engine puts its arrays: an accelerator's
    ``bytes_limit - bytes_in_use`` (``jax.Device.memory_stats``); on the CPU, whose arrays live in
    host memory, the kernel's ``MemAvailable``. ``None`` when the platform reports neither."""
    import jax

    device = device or jax.devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), str(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, f"{device} (host memory)"
    except OSError:  # pragma: no cover - platforms without /proc
        pass
    return None, str(device)


def array_bytes(rows: int, info: DataInfo) -> int:
    """Bytes of the engine's transition arrays for ``rows`` transitions (float32; int32 actions
    when discrete): observations and next observations, actions, rewards, masks."""
    action_width = 1 if info.discrete else info.action_dim
    return 4 * rows * (2 * info.obs_dim + action_width + 2)


def check_fits_device(rows: int, info: DataInfo, source: str = "the dataset", free=None) -> None:
    """Refuse, in one line and before anything is written, a dataset whose arrays cannot all be
    put on the device. offrl samples minibatches on the device from device-resident arrays and
    has no host-resident sampling path, so the fix is a smaller file or a device with more memory.
    ``free`` (``(bytes, name)``) overrides :func:`device_free_bytes` (tests)."""
    need = array_bytes(rows, info)
    have, name = free if free is not None else device_free_bytes()
    # the arrays, plus one host temporary of the widest key while they are made
    if have is not None and need + 4 * rows * max(info.obs_dim, 1) > 0.9 * have:
        raise ConfigError(f"{source}: its {rows:,} transitions need {need / 1e9:,.2f} GB of arrays on {name}, "
                          f"which has {have / 1e9:,.2f} GB free; offrl keeps the whole dataset on the device and "
                          "has no host-resident sampling path, so train on a smaller file (fewer transitions) "
                          "or on a device with more memory.")


def prepare_data(dataset, config, env_id: str | None = None, module=None):
    """``(device_arrays, DataInfo)``: the transition arrays in agent units, plus the arrays of
    ``module``'s ``extra_arrays`` hook when its spec has one. Refuses (:func:`check_fits_device`)
    a dataset whose arrays do not fit in the device's free memory."""
    import jax.numpy as jnp

    from offrl.algos import algorithm_spec

    info = data_info(dataset, config, env_id)
    check_action_family(module, info, getattr(dataset, "source", "the dataset"))
    n = len(dataset)
    check_fits_device(n, info, getattr(dataset, "source", "the dataset"))
    normalize = bool(getattr(config, "normalize_observations", False))
    mean, std = np.asarray(info.obs_mean, np.float32), np.asarray(info.obs_std, np.float32)

    # One key at a time, so that at most one host temporary exists beside the device copies.
    def observations(x):
        x = x.reshape(n, -1).astype(np.float32, copy=False)
        return (x - mean) / std if normalize else x

    makers = {
        "observations": lambda: observations(dataset.observations),
        "actions": lambda: info.to_agent_action(dataset.actions.reshape(n, -1)),
        "rewards": lambda: info.scale_rewards(dataset.rewards),
        "next_observations": lambda: observations(dataset.next_observations),
        "masks": lambda: 1.0 - dataset.terminals.astype(np.float32),
    }
    data = {k: jnp.asarray(make(), dtype=jnp.int32 if k == "actions" and info.discrete else jnp.float32)
            for k, make in makers.items()}
    extra = algorithm_spec(module).extra_arrays if module is not None else None
    if extra is not None:
        for key, value in extra(dataset, info, config).items():
            if key in data:
                raise ConfigError(f"{module.__name__}: extra_arrays returned '{key}', which the engine already provides.")
            value = np.asarray(value)
            if value.shape[0] != n:
                raise ConfigError(f"{module.__name__}: extra_arrays['{key}'] has {value.shape[0]} rows; the dataset has {n}.")
            data[key] = jnp.asarray(value)
    return data, info


def sample_transitions(data: dict, key, batch_size: int):
    """``batch_size`` i.i.d. rows of every array in ``data`` as a :class:`Batch` (the default sampler)."""
    import jax

    from offrl.algos.common import Batch

    idx = jax.random.randint(key, (batch_size,), 0, data["rewards"].shape[0])
    return Batch.from_rows(jax.tree_util.tree_map(lambda x: x[idx], data))


def sampler(module):
    """The spec's ``sample(data, key, batch_size)`` hook, or :func:`sample_transitions`."""
    from offrl.algos import algorithm_spec

    return algorithm_spec(module).sample or sample_transitions
