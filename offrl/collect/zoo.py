"""A behaviour-policy zoo on disk: policy snapshots, their measured returns, the replay history.

Layout (nothing is pickled; arrays are msgpack / HDF5, facts are JSON)::

    zoo/
      zoo.json                      env, config, seed, snapshots [{step, file, return_mean, ...}], references
      snapshots/step_0000000.msgpack  actor parameters (flax.serialization msgpack)
      snapshots/step_0000000.json     that snapshot's facts (step, returns, network shape)
      replay.hdf5                   every transition of training, in the D4RL layout, with
                                    infos/action_log_probs, infos/action_mean, infos/action_std

Step 0 is the randomly initialised actor (the ``random`` tier's policy).

A :class:`BehaviorPolicy` acts in the environment's units: ``a_env = low + (tanh(u) + 1) (high - low) / 2``
with ``u ~ N(mean, std)``; its log-prob is the density of ``a_env``, i.e. the ``[-1, 1]``
density minus ``sum(log((high - low) / 2))``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offrl.errors import ConfigError

REPLAY_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
REPLAY_INFO_KEYS = ("action_log_probs", "action_mean", "action_std")


def snapshot_name(step: int) -> str:
    return f"step_{step:07d}"


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as indented JSON at ``path`` atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False))
    tmp.replace(path)


# ---------------------------------------------------------------------- policies
def exact_dense(x: np.ndarray, kernel, bias) -> np.ndarray:
    """``x @ kernel + bias`` in float64 with one fixed order of operations: each product and each
    partial sum is a single IEEE-754 operation in NumPy's own loops (no BLAS kernel chosen by the
    processor, no fused multiply-add), so every x86-64 host computes the same bits."""
    x = np.asarray(x, np.float64)
    return np.sum(x[:, :, None] * np.asarray(kernel, np.float64)[None], axis=1) + np.asarray(bias, np.float64)


def exact_mlp(x: np.ndarray, layers: dict) -> np.ndarray:
    """A Flax ``MLP``'s ``Dense_0 .. Dense_k`` (ReLU between, none after the last) by :func:`exact_dense`."""
    names = sorted(layers, key=lambda n: int(n.split("_")[1]))
    for i, name in enumerate(names):
        x = exact_dense(x, layers[name]["kernel"], layers[name]["bias"])
        if i + 1 < len(names):
            x = np.maximum(x, 0.0)
    return x


def _libm(fn):
    # The C library's scalar functions (Python's ``math``), not NumPy's SIMD kernels, whose float64
    # exp/log/tanh are chosen by the processor's instruction set and may differ in the last bit.
    return np.vectorize(fn, otypes=[np.float64])


_exp, _log1p, _tanh = _libm(math.exp), _libm(math.log1p), _libm(math.tanh)


@dataclass
class BehaviorPolicy:
    """A tanh-Gaussian SAC actor (:func:`offrl.algos.sac.make_actor`) with the env's action bounds,
    loaded from a snapshot; ``params`` are the actor's inner Flax parameters (the snapshot file)."""

    params: Any
    obs_dim: int
    action_dim: int
    hidden_dims: tuple[int, ...]
    action_low: np.ndarray
    action_high: np.ndarray
    step: int = 0
    info: dict | None = None

    def __post_init__(self):
        import jax
        import jax.numpy as jnp

        from offrl.algos import sac

        self.action_low = np.asarray(self.action_low, np.float32)
        self.action_high = np.asarray(self.action_high, np.float32)
        self.actor_def = make_actor(self.hidden_dims, self.action_dim)
        self.log_scale = float(np.sum(np.log((self.action_high - self.action_low) / 2.0)))
        apply, low, high, log_scale = self.actor_def.apply, jnp.asarray(self.action_low), jnp.asarray(self.action_high), self.log_scale

        def sample(params, observations, key):
            a, log_probs, mean, std = sac.sample_from_actor(apply, {"params": params}, observations, key)
            return low + (a + 1.0) * (high - low) / 2.0, log_probs - log_scale, mean, std

        def deterministic(params, observations):
            a = sac.deterministic_from_actor(apply, {"params": params}, observations)
            return low + (a + 1.0) * (high - low) / 2.0

        self._sample, self._deterministic = jax.jit(sample), jax.jit(deterministic)

    def to_env(self, normalized_actions: np.ndarray) -> np.ndarray:
        return self.action_low + (np.asarray(normalized_actions) + 1.0) * (self.action_high - self.action_low) / 2.0

    def to_normalized(self, env_actions: np.ndarray) -> np.ndarray:
        return 2.0 * (np.asarray(env_actions) - self.action_low) / (self.action_high - self.action_low) - 1.0

    def sample(self, key, observations):
        """``(env_actions, log_probs_env, mean_u, std_u)`` for a batch of observations."""
        return tuple(np.asarray(x) for x in self._sample(self.params, observations, key))

    def deterministic(self, observations) -> np.ndarray:
        return np.asarray(self._deterministic(self.params, observations))

    def rollout_policy(self, stochastic: bool = True):
        """This policy as an :mod:`offrl.rollout` policy ``act(params, carry, obs, key)`` (call it
        with ``self.params``); the stochastic one reports ``action_log_probs`` (env units),
        ``action_mean`` and ``action_std`` as extras."""
        if not stochastic:
            return lambda params, carry, obs, key: (self._deterministic(params, obs), carry)

        def act(params, carry, obs, key):
            actions, log_probs, mean, std = self._sample(params, obs, key)
            return actions, carry, {"action_log_probs": log_probs, "action_mean": mean, "action_std": std}

        return act

    def reproducible_rollout_policy(self, seed: int):
        """The stochastic :meth:`rollout_policy` computed so that any x86-64 host gives the same
        bits: the actor in float64 by :func:`exact_mlp`, ``exp``/``tanh`` from the C library and the
        Gaussian noise from NumPy's ``Generator(PCG64(seed))``; the env receives the float32
        rounding of the action. XLA's code for the jitted actor depends on the processor (vector
        width, fused multiply-add), and one flipped bit in a chaotic MuJoCo rollout changes the
        rest of the episode, so tier datasets built with :meth:`rollout_policy` differ between
        hosts. The key passed by the rollout loop is not used."""
        from offrl.nets import LOG_STD_MAX, LOG_STD_MIN

        rng = np.random.Generator(np.random.PCG64(seed))
        low, high = self.action_low.astype(np.float64), self.action_high.astype(np.float64)
        log_scale, half_log_2pi, log_2 = self.log_scale, 0.5 * math.log(2.0 * math.pi), math.log(2.0)

        def act(params, carry, obs, key):
            h = exact_mlp(obs, params["MLP_0"])
            h = np.maximum(h, 0.0)
            mean = exact_dense(h, params["Dense_0"]["kernel"], params["Dense_0"]["bias"])
            log_std = np.clip(exact_dense(h, params["Dense_1"]["kernel"], params["Dense_1"]["bias"]), LOG_STD_MIN, LOG_STD_MAX)
            std = _exp(log_std)
            eps = rng.standard_normal(mean.shape)
            u = mean + std * eps
            softplus = np.maximum(-2.0 * u, 0.0) + _log1p(_exp(-np.abs(-2.0 * u)))
            log_probs = (np.sum(-0.5 * eps * eps - log_std - half_log_2pi, axis=-1)
                         - np.sum(2.0 * (log_2 - u - softplus), axis=-1) - log_scale)
            actions = low + (_tanh(u) + 1.0) * (high - low) / 2.0
            return actions, carry, {"action_log_probs": log_probs.astype(np.float32), "action_mean": mean.astype(np.float32),
                                    "action_std": std.astype(np.float32)}

        return act

    def log_prob(self, observations, env_actions) -> np.ndarray:
        """``log pi(a_env | s)`` recomputed from the parameters (density in env units)."""
        import jax.numpy as jnp

        from offrl.nets import tanh_gaussian_log_prob

        mean, log_std = self.actor_def.apply({"params": self.params}, jnp.asarray(observations, jnp.float32))
        norm = jnp.asarray(self.to_normalized(env_actions), jnp.float32)
        return np.asarray(tanh_gaussian_log_prob(mean, log_std, norm)) - self.log_scale


def epsilon_greedy_log_probs(q: np.ndarray, actions: np.ndarray, epsilon: float) -> np.ndarray:
    """``log((1 - eps) 1{a = argmax Q} + eps / n)`` for each row of ``q`` ``(B, n)``."""
    n = q.shape[-1]
    greedy = q.argmax(-1)
    return np.log((1.0 - epsilon) * (actions == greedy) + epsilon / n)


@dataclass
class DiscreteBehaviorPolicy:
    """An epsilon-greedy policy over a DQN Q-network loaded from a zoo snapshot."""

    params: Any
    obs_dim: int
    num_actions: int
    hidden_dims: tuple[int, ...]
    epsilon: float
    step: int = 0
    info: dict | None = None

    def __post_init__(self):
        import jax
        import jax.numpy as jnp

        from offrl.algos.discrete_common import DiscreteCritic

        net = DiscreteCritic(self.num_actions, tuple(self.hidden_dims), num_qs=1)
        n, eps = self.num_actions, float(self.epsilon)

        def q_values(params, obs):
            return net.apply(params, jnp.asarray(obs, jnp.float32))[0]

        def sample(params, obs, key):
            q = q_values(params, obs)
            greedy = q.argmax(-1)
            explore_key, uniform_key = jax.random.split(key)
            explore = jax.random.uniform(explore_key, greedy.shape) < eps
            actions = jnp.where(explore, jax.random.randint(uniform_key, greedy.shape, 0, n), greedy)
            log_probs = jnp.log((1.0 - eps) * (actions == greedy) + eps / n)
            return actions, log_probs, greedy

        self._q, self._sample = jax.jit(q_values), jax.jit(sample)
        self._greedy = jax.jit(lambda params, obs: q_values(params, obs).argmax(-1))

    def rollout_policy(self, stochastic: bool = True):
        """An :mod:`offrl.rollout` policy (call it with ``self.params``); the epsilon-greedy one
        reports ``action_log_probs`` and ``greedy_actions`` as extras."""
        if not stochastic:
            return lambda params, carry, obs, key: (np.asarray(self._greedy(params, obs))[:, None], carry)

        def act(params, carry, obs, key):
            actions, log_probs, greedy = (np.asarray(x) for x in self._sample(params, obs, key))
            return actions[:, None], carry, {"action_log_probs": log_probs, "greedy_actions": greedy}

        return act

    def reproducible_rollout_policy(self, seed: int):
        """The epsilon-greedy :meth:`rollout_policy` computed so that any x86-64 host gives the
        same actions: the Q-network in float64 by :func:`exact_mlp` and the exploration draws from
        NumPy's ``Generator(PCG64(seed))``. The key passed by the rollout loop is not used."""
        rng = np.random.Generator(np.random.PCG64(seed))
        n, eps = self.num_actions, float(self.epsilon)
        mlp = self.params["params"]["VmapDiscreteHead_0"]["MLP_0"]  # one head: its leading axis has size 1
        layers = {name: {k: np.asarray(v)[0] for k, v in layer.items()} for name, layer in mlp.items()}

        def act(params, carry, obs, key):
            q = exact_mlp(obs, layers)
            greedy = q.argmax(-1)
            explore = rng.random(greedy.shape) < eps
            actions = np.where(explore, rng.integers(0, n, greedy.shape), greedy)
            log_probs = epsilon_greedy_log_probs(q, actions, eps).astype(np.float32)
            return actions[:, None], carry, {"action_log_probs": log_probs, "greedy_actions": greedy}

        return act

    def log_prob(self, observations, actions) -> np.ndarray:
        """``log pi_b(a | s)`` recomputed from the parameters."""
        q = np.asarray(self._q(self.params, observations))
        return epsilon_greedy_log_probs(q, np.asarray(actions).reshape(-1), self.epsilon)


def make_actor(hidden_dims, action_dim: int):
    """The zoo's actor network: SAC's tanh-Gaussian actor with these hidden widths."""
    from offrl.algos import sac

    return sac.make_actor(sac.Config(hidden_dims=tuple(hidden_dims)), action_dim)


def save_snapshot(zoo_dir: Path, step: int, actor_params, facts: dict) -> dict:
    """Write ``snapshots/step_N.msgpack`` (actor params) and ``step_N.json`` (facts)."""
    from flax import serialization

    folder = Path(zoo_dir) / "snapshots"
    folder.mkdir(parents=True, exist_ok=True)
    name = snapshot_name(step)
    (folder / f"{name}.msgpack").write_bytes(serialization.to_bytes(actor_params))
    facts = {"step": int(step), "file": f"snapshots/{name}.msgpack", **facts}
    write_json(folder / f"{name}.json", facts)
    return facts


def snapshot_facts(stochastic_returns, deterministic_returns, episodes: int, step: int) -> dict:
    """The measured returns a snapshot records (stochastic and deterministic evaluations)."""
    return {"return_mean": float(stochastic_returns.mean()), "return_std": float(stochastic_returns.std()),
            "returns": stochastic_returns.tolist(), "deterministic_return_mean": float(deterministic_returns.mean()),
            "deterministic_returns": deterministic_returns.tolist(), "eval_episodes": episodes, "replay_rows": step}


def record_snapshot(zoo_dir: Path, index: dict, entry: dict, step: int, start: float, eval_time: float) -> None:
    """Append ``entry`` to the zoo index, update its progress and speed (evaluation time excluded)
    and rewrite ``zoo.json``."""
    import time

    index["snapshots"].append(entry)
    index["steps_done"] = step
    elapsed = time.perf_counter() - start
    index["env_steps_per_s"] = step / max(elapsed - eval_time, 1e-9) if step else None
    index["wall_time_s"] = elapsed
    write_json(Path(zoo_dir) / "zoo.json", index)


def load_zoo_index(zoo_dir) -> dict:
    path = Path(zoo_dir) / "zoo.json"
    if not path.exists():
        raise ConfigError(f"'{zoo_dir}' is not a behaviour-policy zoo (no zoo.json); make one with `offrl collect train-behavior --env ENV --out {zoo_dir}`.")
    return json.loads(path.read_text())


def load_policy(zoo_dir, step: int) -> BehaviorPolicy:
    """Load the snapshot taken at ``step`` from a zoo folder (msgpack, no code execution)."""
    import jax
    import jax.numpy as jnp
    from flax import serialization

    zoo_dir = Path(zoo_dir)
    index = load_zoo_index(zoo_dir)
    json_path = zoo_dir / "snapshots" / f"{snapshot_name(step)}.json"
    if not json_path.exists():
        steps = [s["step"] for s in index.get("snapshots", [])]
        if index.get("packed"):
            raise ConfigError(f"zoo '{zoo_dir}' is packed and keeps only the snapshots at steps {index['packed']['kept_steps']} "
                              f"(random, medium, expert), not {step}; use the full zoo it was packed from.")
        raise ConfigError(f"zoo '{zoo_dir}' has no snapshot at step {step}; available steps: {steps}.")
    facts = json.loads(json_path.read_text())
    if index.get("algorithm") == "DQN":
        return load_discrete_policy(zoo_dir, index, facts)
    hidden = tuple(index["config"]["hidden_dims"])
    obs_dim, action_dim = int(index["obs_dim"]), int(index["action_dim"])
    actor_def = make_actor(hidden, action_dim)
    template = actor_def.init(jax.random.PRNGKey(0), jnp.zeros((1, obs_dim), jnp.float32))["params"]
    params = serialization.from_bytes(template, (zoo_dir / facts["file"]).read_bytes())
    return BehaviorPolicy(params, obs_dim, action_dim, hidden, np.asarray(index["action_low"]),
                          np.asarray(index["action_high"]), step=int(step), info=facts)


def load_discrete_policy(zoo_dir, index: dict, facts: dict) -> DiscreteBehaviorPolicy:
    import jax
    import jax.numpy as jnp
    from flax import serialization

    from offrl.algos.discrete_common import DiscreteCritic

    hidden = tuple(index["config"]["hidden_dims"])
    obs_dim, n = int(index["obs_dim"]), int(index["num_actions"])
    template = DiscreteCritic(n, hidden, num_qs=1).init(jax.random.PRNGKey(0), jnp.zeros((1, obs_dim), jnp.float32))
    params = serialization.from_bytes(template, (Path(zoo_dir) / facts["file"]).read_bytes())
    return DiscreteBehaviorPolicy(params, obs_dim, n, hidden, float(index["behavior_epsilon"]), int(facts["step"]), facts)


# ---------------------------------------------------------------------- replay history
class ReplayWriter:
    """Appends transitions to ``replay.hdf5`` (resizable datasets, D4RL key names)."""

    def __init__(self, path: Path, obs_dim: int, action_dim: int, attrs: dict | None = None,
                 info_shapes: dict[str, tuple] | None = None):
        import h5py

        self.path = Path(path)
        if info_shapes is None:
            info_shapes = {"action_log_probs": (), "action_mean": (action_dim,), "action_std": (action_dim,)}
        with h5py.File(self.path, "w") as f:
            shapes = {"observations": (obs_dim,), "actions": (action_dim,), "rewards": (),
                      "next_observations": (obs_dim,), "terminals": (), "timeouts": (),
                      **{f"infos/{k}": v for k, v in info_shapes.items()}}
            for key, shape in shapes.items():
                dtype = bool if key in ("terminals", "timeouts") else np.float32
                f.create_dataset(key, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                                 chunks=(4096, *shape))
            for k, v in (attrs or {}).items():
                f.attrs[k] = json.dumps(v) if isinstance(v, (dict, list)) else v
        self.size = 0

    def append(self, arrays: dict[str, np.ndarray]) -> None:
        import h5py

        n = len(arrays["rewards"])
        if n == 0:
            return
        with h5py.File(self.path, "a") as f:
            for key, value in arrays.items():
                ds = f[key]
                ds.resize(self.size + n, axis=0)
                ds[self.size:self.size + n] = value
        self.size += n


def read_replay(zoo_dir, stop: int | None = None) -> dict[str, np.ndarray]:
    """The first ``stop`` transitions of the zoo's replay history (all when ``None``)."""
    import h5py

    path = Path(zoo_dir) / "replay.hdf5"
    if not path.exists():
        raise ConfigError(f"zoo '{zoo_dir}' has no replay.hdf5; it is written by `offrl collect train-behavior`.")
    out = {}
    with h5py.File(path, "r") as f:
        for key in REPLAY_KEYS:
            out[key] = f[key][:stop]
        for key in (f["infos"].keys() if "infos" in f else REPLAY_INFO_KEYS):
            out[f"infos/{key}"] = f[f"infos/{key}"][:stop]
    return out
