"""Run an exported Decision Transformer with NumPy alone (no JAX import): for deployment.

``offrl export RUN`` on a ``dt`` run writes ``policy.npz`` (the transformer's arrays under the
names below, loaded with ``allow_pickle=False``) and ``policy.json`` (``"policy":
"decision_transformer"``, sizes, ``return_scale``, the default ``target_return``). The forward
pass is the one of :class:`offrl.algos.dt.DecisionTransformer`: for the last ``K`` steps
``(R_k, s_k, a_k, t_k)`` with validity ``v_k``::

    e = E_time[min(t_k, T - 1)]
    tokens = LN(interleave(R_k W_R + b_R + e, s_k W_s + b_s + e, a_k W_a + b_a + e))   (3K tokens)
    x = x + Attn(LN(x)),  x = x + W_2 act(W_1 LN(x))                   (per block; causal, padding masked)
    a_t = tanh(LN(x)[state token of step t] W_head + b_head)

with ``LN`` a LayerNorm (epsilon ``1e-6``), ``act`` the run's ``activation`` (``policy.json``'s
``"activation"``: ReLU, or GELU's tanh approximation; exports that lack the key are GELU), and attention
from token ``i`` to token ``j`` allowed iff ``j <= i`` and (``j`` is valid or ``j == i``).

The policy holds the episode's context as the JAX rollout carry does (:mod:`offrl.algos.dt`):
the last ``K`` steps and the remaining target return, which drops by ``reward / return_scale``
after every step. Per episode: ``policy.reset(target_return=...)`` (env units; default: the run's
target), then for every step ``action = policy.act(obs)`` (``(obs_dim,) -> (action_dim,)``, or batched
``(B, obs_dim)``) and, once the environment has answered, ``policy.observe(reward)``.
"""

from __future__ import annotations

import numpy as np

KIND = "decision_transformer"
LAYER_NORM_EPSILON = 1e-6


def layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = np.maximum((x * x).mean(axis=-1, keepdims=True) - mean * mean, 0.0)
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPSILON) * scale + bias


def gelu(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU (Flax's ``nn.gelu`` default)."""
    return 0.5 * x * (1.0 + np.tanh(np.float32(np.sqrt(2.0 / np.pi)) * (x + np.float32(0.044715) * x**3)))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0))


ACTIVATIONS = {"gelu": gelu, "relu": relu}


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def attention_allowed(valid: np.ndarray) -> np.ndarray:
    """``(B, T, T)``: query ``i`` may see key ``j`` iff ``j <= i`` and (``valid[j]`` or ``j == i``)."""
    T = valid.shape[-1]
    return np.tril(np.ones((T, T), bool))[None] & (valid[:, None, :] | np.eye(T, dtype=bool)[None])


class NumpyDecisionTransformer:
    """A Decision Transformer held as NumPy arrays, with its own episode context (module docstring)."""

    def __init__(self, arrays: dict, meta: dict):
        self.arrays = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
        self.meta = dict(meta)
        self.context_length = int(meta["context_length"])
        self.num_layers, self.num_heads = int(meta["num_layers"]), int(meta["num_heads"])
        self.return_scale = float(meta["return_scale"])
        # exports written before ``activation`` was recorded came from GELU blocks
        activation = meta.get("activation", "gelu")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r} in the export's metadata; expected one of {sorted(ACTIVATIONS)}.")
        self.activation = ACTIVATIONS[activation]
        self.obs_mean, self.obs_std = self.arrays["obs_mean"], self.arrays["obs_std"]
        self.action_low, self.action_high = self.arrays["action_low"], self.arrays["action_high"]
        self._history = None

    @property
    def obs_dim(self) -> int:
        return int(self.arrays["state_embed/kernel"].shape[0])

    @property
    def action_dim(self) -> int:
        return int(self.arrays["action_head/kernel"].shape[1])

    # ------------------------------------------------------------------ the network
    def _dense(self, name, x):
        return x @ self.arrays[f"{name}/kernel"] + self.arrays[f"{name}/bias"]

    def _norm(self, name, x):
        return layer_norm(x, self.arrays[f"{name}/scale"], self.arrays[f"{name}/bias"])

    def forward(self, returns_to_go, observations, actions, timesteps, valid) -> np.ndarray:
        """``(B, K)``, ``(B, K, obs_dim)`` (normalized), ``(B, K, action_dim)`` (in [-1, 1]),
        ``(B, K)`` int, ``(B, K)`` bool -> the predicted actions ``(B, K, action_dim)`` in [-1, 1]."""
        R = np.asarray(returns_to_go, np.float32)
        B, K = R.shape
        table = self.arrays["time_embedding"]
        time = table[np.clip(np.asarray(timesteps), 0, table.shape[0] - 1)]
        r = self._dense("return_embed", R[..., None]) + time
        s = self._dense("state_embed", np.asarray(observations, np.float32)) + time
        a = self._dense("action_embed", np.asarray(actions, np.float32)) + time
        x = self._norm("embed_norm", np.stack([r, s, a], axis=2).reshape(B, 3 * K, -1))
        allowed = attention_allowed(np.repeat(np.asarray(valid, bool), 3, axis=1))[:, None]
        E = x.shape[-1]
        H, D = self.num_heads, E // self.num_heads
        for i in range(self.num_layers):
            qkv = self._dense(f"block{i}/qkv", self._norm(f"block{i}/attention_norm", x)).reshape(B, 3 * K, 3, H, D)
            q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))        # (B, H, T, D)
            logits = np.where(allowed, q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(D)), np.float32(-1e9))
            out = (softmax(logits) @ v).transpose(0, 2, 1, 3).reshape(B, 3 * K, E)
            x = x + self._dense(f"block{i}/attention_out", out)
            h = self.activation(self._dense(f"block{i}/mlp_in", self._norm(f"block{i}/mlp_norm", x)))
            x = x + self._dense(f"block{i}/mlp_out", h)
        state_out = self._norm("final_norm", x).reshape(B, K, 3, E)[:, :, 1]
        return np.tanh(self._dense("action_head", state_out))

    # ------------------------------------------------------------------ the episode context
    def reset(self, target_return=None, num_envs: int = 1) -> None:
        """Start ``num_envs`` episodes conditioned on ``target_return`` (env units; a scalar or one
        per env; default: the run's ``target_return``)."""
        if target_return is None:
            target_return = self.meta.get("target_return") or 0.0
        K, n = self.context_length, int(num_envs)
        self._history = {"returns_to_go": np.zeros((n, K), np.float32),
                         "observations": np.zeros((n, K, self.obs_dim), np.float32),
                         "actions": np.zeros((n, K, self.action_dim), np.float32),
                         "timesteps": np.zeros((n, K), np.int64), "valid": np.zeros((n, K), bool)}
        self.remaining = np.broadcast_to(np.asarray(target_return, np.float32) / np.float32(self.return_scale), (n,)).copy()
        self.timestep = np.zeros(n, np.int64)

    def act(self, obs) -> np.ndarray:
        """Append the step ``(remaining target, obs, t)`` to the context and return the action in
        env units. A single ``(obs_dim,)`` observation gives ``(action_dim,)``. The first call
        without :meth:`reset` starts episodes at the run's target."""
        obs = np.asarray(obs, np.float32)
        single = obs.ndim == 1
        obs = np.atleast_2d(obs)
        if self._history is None:
            self.reset(num_envs=len(obs))
        if len(obs) != len(self.remaining):
            raise ValueError(f"act got {len(obs)} observations but reset() started {len(self.remaining)} episodes; "
                             f"call reset(target_return, num_envs={len(obs)}) first.")
        history = {k: np.roll(v, -1, axis=1) for k, v in self._history.items()}
        history["returns_to_go"][:, -1] = self.remaining
        history["observations"][:, -1] = (obs - self.obs_mean) / self.obs_std
        history["actions"][:, -1] = 0.0
        history["timesteps"][:, -1] = self.timestep
        history["valid"][:, -1] = True
        a = self.forward(history["returns_to_go"], history["observations"], history["actions"],
                         history["timesteps"], history["valid"])[:, -1]
        history["actions"][:, -1] = a
        self._history = history
        action = self.action_low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self.action_high - self.action_low)
        return action[0] if single else action

    def observe(self, reward) -> None:
        """After an env step: the remaining target drops by ``reward / return_scale``; time advances."""
        if self._history is None:
            raise ValueError("observe() before act(): call reset(target_return) and act(obs) first.")
        self.remaining = (self.remaining - np.asarray(reward, np.float32) / np.float32(self.return_scale)).astype(np.float32)
        self.timestep = self.timestep + 1

    __call__ = act

    def __repr__(self) -> str:
        return (f"NumpyDecisionTransformer(K={self.context_length}, layers={self.num_layers}, "
                f"env={self.meta.get('env_id')!r}, target_return={self.meta.get('target_return')})")
