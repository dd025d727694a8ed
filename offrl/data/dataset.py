"""The offline dataset: an episodic struct-of-arrays of logged transitions.

``terminals`` marks a true end of the MDP (the target does not bootstrap: ``y = r``);
``timeouts`` marks a truncation (time limit, end of logging) where the next state is still
a normal state and the target bootstraps: ``y = r + gamma * V(s')``. Confusing the two is the
most common silent bug in custom offline datasets, so every constructor validates them.

An episode ends at every step where ``terminals | timeouts`` is set; the last step of the
arrays always closes an episode (treated as a timeout if neither flag is set).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from offrl.errors import DatasetError

REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")


@dataclass(frozen=True)
class Dataset:
    """Logged transitions ``(s, a, r, s', terminal, timeout)`` with episode structure.

    Arrays are indexed by transition ``i`` (``N`` rows). ``infos`` holds per-transition
    extras such as ``action_log_probs`` (log pi_b(a|s) of the behaviour policy),
    ``action_mean`` and ``action_std``; ``metadata`` holds JSON-serialisable facts
    (``env_id``, ``tier``, ``policy_return``, ``seed``, ``generator``, ...).

    Example::

        ds = Dataset.from_arrays(observations=obs, actions=act, rewards=rew,
                                 terminals=term, timeouts=tout)
        ds.episode_returns()       # one return per episode
        ds.returns_to_go(0.99)     # discounted return from every step
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    next_observations: np.ndarray
    infos: Mapping[str, np.ndarray] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<arrays>"

    def __post_init__(self) -> None:
        validate_arrays(self._arrays(), source=self.source)

    def _arrays(self) -> dict[str, np.ndarray]:
        out = {k: getattr(self, k) for k in REQUIRED_KEYS}
        out.update({f"infos/{k}": v for k, v in self.infos.items()})
        return out

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        observations,
        actions,
        rewards,
        terminals,
        timeouts=None,
        next_observations=None,
        infos: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        source: str = "<arrays>",
    ) -> "Dataset":
        """Build a dataset from the user's own arrays, converting dtypes and checking them.

        ``timeouts`` defaults to all-False except the last step. When ``next_observations``
        is missing it is derived within episodes as D4RL's ``qlearning_dataset`` does: the
        step before each episode boundary has no successor in the data, so boundary steps
        that are timeouts (not terminals) are dropped; terminal steps keep
        ``next_observations = observations`` (never used, since the target does not
        bootstrap there).
        """
        obs = _as_float(observations, "observations", source)
        act = _as_float(actions, "actions", source)
        rew = _as_float(rewards, "rewards", source)
        term = _as_bool(terminals, "terminals", source)
        n = len(obs)
        if timeouts is None:
            tout = np.zeros(n, dtype=bool)
            if n:
                tout[-1] = not term[-1]
        else:
            tout = _as_bool(timeouts, "timeouts", source)
        infos = {k: np.asarray(v) for k, v in (infos or {}).items()}
        metadata = dict(metadata or {})
        if next_observations is None:
            _check_lengths({"observations": obs, "actions": act, "rewards": rew,
                            "terminals": term, "timeouts": tout, **infos}, source)
            obs, act, rew, term, tout, nxt, infos = derive_next_observations(
                obs, act, rew, term, tout, infos)
            metadata.setdefault("next_observations", "derived within episodes (D4RL qlearning_dataset rule)")
        else:
            nxt = _as_float(next_observations, "next_observations", source)
        if len(tout) and not (term[-1] or tout[-1]):
            tout = tout.copy()
            tout[-1] = True
        return cls(obs, act, rew, term, tout, nxt, infos, metadata, source)

    # ------------------------------------------------------------------ structure
    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.observations.shape[1:]))

    @property
    def action_dim(self) -> int:
        return int(np.prod(self.actions.shape[1:]))

    @property
    def dones(self) -> np.ndarray:
        """Episode boundaries: ``terminals | timeouts``."""
        return self.terminals | self.timeouts

    def episode_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, ends)`` with ``ends`` exclusive: episode ``k`` is ``[starts[k], ends[k])``."""
        ends = np.flatnonzero(self.dones) + 1
        if len(self) and (len(ends) == 0 or ends[-1] != len(self)):
            ends = np.append(ends, len(self))
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        return starts, ends.astype(np.int64)

    @property
    def num_episodes(self) -> int:
        return len(self.episode_bounds()[0])

    def episode_lengths(self) -> np.ndarray:
        starts, ends = self.episode_bounds()
        return ends - starts

    def episode_returns(self) -> np.ndarray:
        """Undiscounted return of each episode."""
        starts, _ = self.episode_bounds()
        if len(self) == 0:
            return np.zeros(0)
        return np.add.reduceat(self.rewards.astype(np.float64), starts)

    def returns_to_go(self, gamma: float = 1.0) -> np.ndarray:
        """Discounted return from every step to its episode's end: ``G_t = r_t + gamma G_{t+1}``."""
        out = np.zeros(len(self), dtype=np.float64)
        running = 0.0
        dones = self.dones
        for i in range(len(self) - 1, -1, -1):
            if dones[i]:
                running = 0.0
            running = float(self.rewards[i]) + gamma * running
            out[i] = running
        return out

    def observation_stats(self, eps: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
        """Per-dimension mean and std of observations (std floored at ``eps``)."""
        mean = self.observations.mean(axis=0)
        std = self.observations.std(axis=0) + eps
        return mean.astype(np.float32), std.astype(np.float32)

    # ------------------------------------------------------------------ transforms
    def replace(self, **changes) -> "Dataset":
        return dataclasses.replace(self, **changes)

    def select(self, index: np.ndarray) -> "Dataset":
        """Rows ``index`` (a boolean mask or integer indices), keeping infos and metadata."""
        return Dataset(
            self.observations[index], self.actions[index], self.rewards[index],
            self.terminals[index], self.timeouts[index], self.next_observations[index],
            {k: v[index] for k, v in self.infos.items()}, dict(self.metadata), self.source)

    def episodes(self, which) -> "Dataset":
        """Whole episodes by episode number (a list or array of ints)."""
        starts, ends = self.episode_bounds()
        idx = np.concatenate([np.arange(starts[k], ends[k]) for k in which]) if len(which) else np.zeros(0, int)
        return self.select(idx)

    @staticmethod
    def concatenate(parts: list["Dataset"], metadata: Mapping[str, Any] | None = None) -> "Dataset":
        """Join datasets end to end; each part's last step must close its episode."""
        if not parts:
            raise DatasetError("Dataset.concatenate needs at least one dataset; pass a non-empty list.")
        keys = set.intersection(*(set(p.infos) for p in parts)) if parts else set()
        cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
        return Dataset(cat("observations"), cat("actions"), cat("rewards"), cat("terminals"),
                       cat("timeouts"), cat("next_observations"),
                       {k: np.concatenate([p.infos[k] for p in parts]) for k in sorted(keys)},
                       dict(metadata if metadata is not None else parts[0].metadata),
                       "+".join(p.source for p in parts))

    def arrays(self) -> dict[str, np.ndarray]:
        """All arrays by their D4RL key (``infos/<name>`` for infos)."""
        return self._arrays()

    def __repr__(self) -> str:
        return (f"Dataset({self.source!r}, transitions={len(self)}, episodes={self.num_episodes}, "
                f"obs_dim={self.obs_dim}, action_dim={self.action_dim}, infos={sorted(self.infos)})")


# ---------------------------------------------------------------------- helpers
def derive_next_observations(obs, act, rew, term, tout, infos):
    """D4RL ``qlearning_dataset`` rule: ``s'_t = s_{t+1}`` within an episode.

    A step that ends an episode by timeout has no logged successor and is dropped;
    a terminal step keeps itself as successor (the target does not bootstrap).
    """
    n = len(obs)
    nxt = np.empty_like(obs)
    if n > 1:
        nxt[:-1] = obs[1:]
    if n:
        nxt[-1] = obs[-1]
    nxt[term] = obs[term]
    keep = ~tout
    if n and not (term[-1] or tout[-1]):
        keep[-1] = False
    # The step before a dropped timeout step now ends its episode: mark it a timeout.
    new_tout = np.zeros(n, dtype=bool)
    dropped = np.flatnonzero(~keep)
    prev = dropped - 1
    prev = prev[(prev >= 0)]
    prev = prev[keep[prev] & ~term[prev]]
    new_tout[prev] = True
    sel = lambda a: a[keep]  # noqa: E731
    return (sel(obs), sel(act), sel(rew), sel(term), sel(new_tout), sel(nxt),
            {k: sel(v) for k, v in infos.items()})


def _as_float(x, key, source) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise DatasetError(f"{source}: key '{key}' is not a rectangular numeric array ({exc}); pass one array of shape (N, ...).") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise DatasetError(f"{source}: key '{key}' has dtype {arr.dtype}, expected numbers; convert it to float32.")
    return arr.astype(np.float32, copy=False)


def _as_bool(x, key, source) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise DatasetError(f"{source}: key '{key}' has dtype {arr.dtype}, expected booleans (0/1).")
    if arr.dtype != bool:
        bad = np.flatnonzero((arr != 0) & (arr != 1))
        if len(bad):
            raise DatasetError(f"{source}: key '{key}' must hold only 0/1, but row {bad[0]} is {arr.reshape(-1)[bad[0]]!r}.")
    return arr.astype(bool)


def _check_lengths(arrays: Mapping[str, np.ndarray], source: str) -> None:
    n = len(arrays["rewards"]) if "rewards" in arrays else None
    for key, arr in arrays.items():
        if arr.ndim == 0:
            raise DatasetError(f"{source}: key '{key}' is a scalar; expected one row per transition.")
        if n is not None and arr.shape[0] != n:
            raise DatasetError(f"{source}: key '{key}' has {arr.shape[0]} rows but 'rewards' has {n}; all keys need one row per transition.")


def validate_arrays(arrays: Mapping[str, np.ndarray], source: str = "<arrays>") -> None:
    """Refuse malformed transition arrays with one sentence naming the key and first bad row."""
    for key in REQUIRED_KEYS:
        if key not in arrays:
            raise DatasetError(f"{source}: missing key '{key}'; a dataset needs {', '.join(REQUIRED_KEYS)}.")
    _check_lengths(arrays, source)
    for key in ("observations", "actions", "next_observations"):
        if arrays[key].ndim < 2:
            raise DatasetError(f"{source}: key '{key}' has shape {arrays[key].shape}; expected (N, dim), one row per transition.")
    if arrays["observations"].shape[1:] != arrays["next_observations"].shape[1:]:
        raise DatasetError(f"{source}: 'next_observations' has shape {arrays['next_observations'].shape[1:]} per row but 'observations' has {arrays['observations'].shape[1:]}; both must describe the same state.")
    for key in ("rewards", "terminals", "timeouts"):
        if arrays[key].ndim != 1:
            raise DatasetError(f"{source}: key '{key}' has shape {arrays[key].shape}; expected (N,), one value per transition.")
    for key in ("terminals", "timeouts"):
        if arrays[key].dtype != bool:
            raise DatasetError(f"{source}: key '{key}' has dtype {arrays[key].dtype}; expected bool.")
    for key, arr in arrays.items():
        if np.issubdtype(arr.dtype, np.floating):
            finite = np.isfinite(arr).all(axis=tuple(range(1, arr.ndim)))
            if not finite.all():
                row = int(np.flatnonzero(~finite)[0])
                raise DatasetError(f"{source}: key '{key}' has a NaN or inf value at row {row}; clean or drop that transition.")
    both = np.flatnonzero(arrays["terminals"] & arrays["timeouts"])
    if len(both):
        raise DatasetError(f"{source}: row {both[0]} has both 'terminals' and 'timeouts' set; a step either ends the MDP (terminal) or is truncated (timeout), not both.")
