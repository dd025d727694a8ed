"""Run an exported policy with NumPy alone (no JAX import): for deployment.

``offrl export RUN --format numpy`` writes ``policy.npz`` (plain arrays, loaded with
``allow_pickle=False``) and ``policy.json`` (format, dims, env id, provenance). The policy is::

    x = (obs - obs_mean) / obs_std
    x = relu(x W_i + b_i)             for the hidden layers
    a = tanh(x W_out + b_out)          in [-1, 1]
    action = low + (a + 1) / 2 * (high - low)     (the env's action bounds)

or, for a ``Discrete`` action space (``output_activation = "argmax"``), ``action = argmax(x W_out + b_out)``.

Example::

    policy = load_numpy_policy("runs/iql/export")
    action = policy(obs)            # (obs_dim,) -> (action_dim,), or batched (B, obs_dim)

A Decision Transformer export (``"policy": "decision_transformer"`` in ``policy.json``) loads
as a :class:`offrl.policy_dt.NumpyDecisionTransformer`, which also holds its episode context
(``reset(target_return)`` / ``act(obs)`` / ``observe(reward)``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FORMAT = "offrl-numpy-policy"
VERSION = 1


class NumpyPolicy:
    """A deterministic MLP policy held as NumPy arrays (see the module docstring)."""

    def __init__(self, layers, obs_mean, obs_std, action_low, action_high, meta: dict | None = None):
        self.layers = [(np.asarray(w, np.float32), np.asarray(b, np.float32)) for w, b in layers]
        self.obs_mean = np.asarray(obs_mean, np.float32)
        self.obs_std = np.asarray(obs_std, np.float32)
        self.action_low = np.asarray(action_low, np.float32)
        self.action_high = np.asarray(action_high, np.float32)
        self.meta = dict(meta or {})

    @property
    def obs_dim(self) -> int:
        return int(self.layers[0][0].shape[0])

    @property
    def action_dim(self) -> int:
        return int(self.layers[-1][0].shape[1])

    def discrete_action(self, obs) -> np.ndarray:
        """A ``Discrete`` policy's action (exports with ``output_activation = "argmax"``): the
        index of the largest output (Q-value or logit)."""
        x = (np.asarray(obs, np.float32) - self.obs_mean) / self.obs_std
        for w, b in self.layers[:-1]:
            x = np.maximum(x @ w + b, 0.0)
        w, b = self.layers[-1]
        return np.argmax(x @ w + b, axis=-1)

    def normalized_action(self, obs) -> np.ndarray:
        """The action in ``[-1, 1]`` before rescaling to the env's bounds."""
        x = (np.asarray(obs, np.float32) - self.obs_mean) / self.obs_std
        for w, b in self.layers[:-1]:
            x = np.maximum(x @ w + b, 0.0)
        w, b = self.layers[-1]
        return np.tanh(x @ w + b)

    def __call__(self, obs) -> np.ndarray:
        if self.meta.get("output_activation") == "argmax":
            return self.discrete_action(obs)
        a = self.normalized_action(obs)
        return self.action_low + (a + 1.0) * 0.5 * (self.action_high - self.action_low)

    def __repr__(self) -> str:
        sizes = [self.obs_dim] + [w.shape[1] for w, _ in self.layers]
        return f"NumpyPolicy({'x'.join(map(str, sizes))}, env={self.meta.get('env_id')!r}, algo={self.meta.get('algo')!r})"


def save_numpy_policy(folder: str | Path, layers, obs_mean, obs_std, action_low, action_high, meta: dict | None = None) -> Path:
    """Write ``policy.npz`` + ``policy.json`` into ``folder``; returns the folder."""
    arrays = {}
    for i, (w, b) in enumerate(layers):
        arrays[f"layer{i}_kernel"] = w
        arrays[f"layer{i}_bias"] = b
    info = {"num_layers": len(layers), "hidden_activation": "relu", "output_activation": "tanh", **(meta or {})}
    return save_policy_arrays(folder, arrays, obs_mean, obs_std, action_low, action_high, info)


def save_policy_arrays(folder: str | Path, arrays: dict, obs_mean, obs_std, action_low, action_high, meta: dict) -> Path:
    """Write named float32 ``arrays`` plus the observation/action bounds as ``policy.npz`` and
    ``meta`` (with ``format`` and ``version``) as ``policy.json``; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {"obs_mean": obs_mean, "obs_std": obs_std, "action_low": action_low, "action_high": action_high, **arrays}
    np.savez(folder / "policy.npz", **{k: np.asarray(v, np.float32) for k, v in out.items()})
    (folder / "policy.json").write_text(json.dumps({"format": FORMAT, "version": VERSION, **meta}, indent=2))
    return folder


def load_numpy_policy(path: str | Path):
    """Load an exported policy from its folder (or its ``policy.json`` / ``policy.npz``): a
    :class:`NumpyPolicy`, or a :class:`offrl.policy_dt.NumpyDecisionTransformer` for a DT export."""
    from offrl.errors import OffrlError

    path = Path(path)
    folder = path if path.is_dir() else path.parent
    meta_path, arrays_path = folder / "policy.json", folder / "policy.npz"
    if not meta_path.exists() or not arrays_path.exists():
        raise OffrlError(f"{folder} has no policy.json + policy.npz; create them with `offrl export RUN --format numpy`.")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise OffrlError(f"{meta_path} has format {meta.get('format')!r}, expected {FORMAT!r}.")
    with np.load(arrays_path, allow_pickle=False) as data:
        if meta.get("policy") == "decision_transformer":
            from offrl.policy_dt import NumpyDecisionTransformer

            return NumpyDecisionTransformer({k: data[k] for k in data.files}, meta)
        layers = [(data[f"layer{i}_kernel"], data[f"layer{i}_bias"]) for i in range(int(meta["num_layers"]))]
        return NumpyPolicy(layers, data["obs_mean"], data["obs_std"], data["action_low"], data["action_high"], meta)
