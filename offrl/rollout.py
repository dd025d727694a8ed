"""The one environment loop: vectorised Gymnasium envs and policies with an explicit carry.

Every piece of offrl that steps an environment (evaluation, the tier collector, SAC training,
offline-to-online fine-tuning) goes through this module; ``env.step`` appears nowhere else.

A *policy* is a function ``act(params, carry, obs, key)`` returning ``(actions, carry)`` or
``(actions, carry, extras)``:

- ``obs``: ``(num_envs, obs_dim)`` float32 raw environment observations;
- ``actions``: ``(num_envs, action_dim)`` in the environment's units (the policy does its own
  observation normalisation and ``[-1, 1] -> [low, high]`` rescaling);
- ``carry``: any pytree or ``None``, threaded from one step to the next (a sequence model's
  history lives there); ``reset_carry(carry, done_mask) -> carry`` resets the rows of envs
  that start a new episode;
- ``act.observe(carry, rewards, done) -> carry`` (optional attribute): called by
  :func:`run_episodes` after every env step with that step's rewards and end flags (a
  return-conditioned policy subtracts the rewards from its remaining target there);
- ``key``: ``jax.random.fold_in(key, t)`` at env step ``t``;
- ``extras``: an optional dict of per-env arrays recorded at every step (the collector saves
  them as ``infos/<name>``).

The policy is called once per env step for all envs at once (finished or out-of-budget envs
included, so the batch shape never changes); the envs themselves are stepped in a Python
loop. Example::

    env = VectorEnv("Pendulum-v1", num_envs=4)
    act = lambda params, carry, obs, key: (np.zeros((len(obs), 1), np.float32), carry)
    out = run_episodes(env, act, None, seeds=[0, 1, 2, 3], key=jax.random.PRNGKey(0))
    out["return"]   # (4,) undiscounted returns
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from offrl.errors import ConfigError

Policy = Callable[..., tuple]


def _call(act: Policy, params, carry, obs: np.ndarray, key) -> tuple[np.ndarray, Any, dict]:
    out = act(params, carry, obs, key)
    if len(out) == 2:
        actions, carry = out
        extras = {}
    else:
        actions, carry, extras = out
    return np.asarray(actions, np.float32), carry, extras


class VectorEnv:
    """``num_envs`` Gymnasium envs (:func:`offrl.envs.make_env`) stepped in lockstep.

    Observations are flattened to ``(obs_dim,)`` float32 rows. ``step(actions, active)`` leaves
    inactive envs untouched: their row of ``next_obs`` repeats their last observation, their
    reward is 0 and both flags are ``False``. Envs do not reset themselves
    (:class:`OnlineRollout` does that).
    """

    def __init__(self, env_id: str, num_envs: int, **make_kwargs):
        from offrl.envs import make_env

        if num_envs < 1:
            raise ConfigError(f"num_envs must be a positive integer, got {num_envs}.")
        self.env_id = env_id
        self.envs = [make_env(env_id, **make_kwargs) for _ in range(num_envs)]
        first = self.envs[0]
        self.num_envs = num_envs
        self.obs_shape = tuple(first.observation_space.shape)
        self.obs_dim = int(np.prod(self.obs_shape))
        space = first.action_space
        #: ``n`` of a ``Discrete`` action space (actions are then one integer per env), else 0.
        self.num_actions = int(space.n) if hasattr(space, "n") else 0
        self.action_dim = 1 if self.num_actions else int(np.prod(space.shape))
        self.action_low = np.asarray(getattr(space, "low", 0), np.float32).reshape(-1)
        self.action_high = np.asarray(getattr(space, "high", max(self.num_actions - 1, 0)), np.float32).reshape(-1)
        self.max_episode_steps = first.spec.max_episode_steps if first.spec is not None else None
        self._obs = np.zeros((num_envs, self.obs_dim), np.float32)

    def reset(self, seeds: Sequence[int | None]) -> np.ndarray:
        """Reset every env, env ``i`` with ``seeds[i]``; returns ``(num_envs, obs_dim)``."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset needs one seed per env ({self.num_envs}), got {len(seeds)}")
        for i, seed in enumerate(seeds):
            self.reset_env(i, seed)
        return self._obs.copy()

    def reset_env(self, index: int, seed: int | None = None) -> np.ndarray:
        """Reset env ``index`` alone (unseeded: it continues its own random stream)."""
        obs, _ = self.envs[index].reset(seed=None if seed is None else int(seed))
        self._obs[index] = np.asarray(obs, np.float32).reshape(-1)
        return self._obs[index].copy()

    def step(self, actions, active=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(next_obs, rewards, terminated, truncated)``, each with a leading ``num_envs`` axis."""
        actions = np.asarray(actions)
        n = self.num_envs
        rewards = np.zeros(n)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        obs = self._obs
        for i, env in enumerate(self.envs):
            if active is not None and not active[i]:
                continue
            o, r, term, trunc, _ = env.step(int(actions[i].reshape(-1)[0]) if self.num_actions else actions[i])
            obs[i] = np.asarray(o, np.float32).reshape(-1)
            rewards[i], terminated[i], truncated[i] = r, term, trunc
        return obs.copy(), rewards, terminated, truncated

    def close(self) -> None:
        for env in self.envs:
            env.close()


class OnlineRollout:
    """An auto-resetting stream of transitions (SAC training, offline-to-online fine-tuning).

    Env ``i`` is first reset with ``seed + i``; when an episode ends it is reset unseeded (its
    own random stream continues), and ``(env index, undiscounted return, length)`` is appended
    to :attr:`finished` (the caller reads and may clear it). ``step`` returns the transition
    batch with ``terminals`` = Gymnasium's ``terminated`` and ``timeouts`` = ``truncated`` and
    not ``terminated``; ``obs`` is then the next observation, or the first of a new episode.
    """

    def __init__(self, env: VectorEnv, seed: int):
        self.env = env
        self.finished: list[tuple[int, float, int]] = []
        self.reset_all([seed + i for i in range(env.num_envs)])

    def reset_all(self, seeds: Sequence[int | None]) -> None:
        """Start new episodes everywhere (the unfinished ones are dropped, not reported)."""
        self.obs = self.env.reset(seeds)
        self._returns = np.zeros(self.env.num_envs)
        self._lengths = np.zeros(self.env.num_envs, np.int64)

    def step(self, actions) -> dict[str, np.ndarray]:
        actions = np.asarray(actions, np.float32)
        next_obs, rewards, terminated, truncated = self.env.step(actions)
        out = {"observations": self.obs, "actions": actions, "rewards": rewards.astype(np.float32),
               "next_observations": next_obs, "terminals": terminated, "timeouts": truncated & ~terminated}
        self._returns += rewards
        self._lengths += 1
        done = terminated | truncated
        obs = next_obs
        if done.any():
            obs = next_obs.copy()
            for i in np.flatnonzero(done):
                self.finished.append((int(i), float(self._returns[i]), int(self._lengths[i])))
                self._returns[i], self._lengths[i] = 0.0, 0
                obs[i] = self.env.reset_env(i)
        self.obs = obs
        return out


def run_episodes(env: VectorEnv, act: Policy, params, seeds: Sequence[int | None], key, carry=None,
                 max_steps: int | None = None) -> dict[str, np.ndarray]:
    """One episode per env, env ``i`` reset with ``seeds[i]``.

    Returns ``return`` (``(n,)`` undiscounted), ``length`` (``(n,)``), ``rewards``
    (``(n, T)`` per-step rewards, zero after an episode's end, ``T`` the longest episode),
    ``first_observations`` (``(n, obs_dim)``) and ``first_actions`` (``(n, action_dim)``, env
    units). ``max_steps`` (default: no limit beyond the envs' own time limits) cuts every
    episode still running after that many steps.
    """
    import jax

    obs = env.reset(seeds)
    n = env.num_envs
    first_obs, first_actions = obs.copy(), None
    done = np.zeros(n, bool)
    lengths = np.zeros(n, np.int64)
    rewards = []
    observe = getattr(act, "observe", None)
    t = 0
    while not done.all() and (max_steps is None or t < max_steps):
        actions, carry, _ = _call(act, params, carry, obs, jax.random.fold_in(key, t))
        if first_actions is None:
            first_actions = actions.copy()
        active = ~done
        obs, r, terminated, truncated = env.step(actions, active)
        if observe is not None:
            carry = observe(carry, r, terminated | truncated)
        rewards.append(r)
        lengths += active
        done |= terminated | truncated
        t += 1
    rewards = np.stack(rewards, axis=1) if rewards else np.zeros((n, 0))
    if first_actions is None:
        first_actions = np.zeros((n, env.action_dim), np.float32)
    return {"return": rewards.sum(axis=1), "length": lengths, "rewards": rewards,
            "first_observations": first_obs, "first_actions": first_actions}


def collect_steps(env: VectorEnv, act: Policy, params, budgets: Sequence[int], seed: int, key, carry=None,
                  reset_carry: Callable | None = None, progress=None) -> dict[str, np.ndarray]:
    """Env ``i`` runs ``budgets[i]`` steps from a reset seeded ``seed * 1000 + i`` (later resets
    unseeded); returns D4RL-layout arrays concatenated env by env.

    Keys: ``observations, actions, rewards, next_observations, terminals`` (Gymnasium's
    ``terminated``), ``timeouts`` (``truncated``, or the budget's end, and not ``terminated``:
    the last, partial episode of each env ends with a timeout), ``infos/<name>`` for each of
    the policy's extras, and ``_cut`` (``True`` on the last row of an episode cut by the
    budget). ``progress``: an :class:`offrl.progress.ProgressBar` advanced every 50 steps.
    """
    import jax

    budgets = np.asarray(budgets, np.int64)
    n = env.num_envs
    if budgets.shape != (n,):
        raise ValueError(f"collect_steps needs one budget per env ({n}), got {budgets.shape}")
    T = int(budgets.max()) if n else 0
    obs = env.reset([seed * 1000 + i for i in range(n)])
    arrays = {"observations": np.zeros((n, T, env.obs_dim), np.float32),
              "actions": np.zeros((n, T, env.action_dim), np.float32),
              "rewards": np.zeros((n, T), np.float32),
              "next_observations": np.zeros((n, T, env.obs_dim), np.float32),
              "terminals": np.zeros((n, T), bool), "timeouts": np.zeros((n, T), bool), "_cut": np.zeros((n, T), bool)}
    for t in range(T):
        active = t < budgets
        actions, carry, extras = _call(act, params, carry, obs, jax.random.fold_in(key, t))
        next_obs, rewards, terminated, truncated = env.step(actions, active)
        last = t == budgets - 1
        arrays["observations"][:, t] = obs
        arrays["actions"][:, t] = actions
        arrays["rewards"][:, t] = rewards
        arrays["next_observations"][:, t] = next_obs
        arrays["terminals"][:, t] = terminated
        arrays["timeouts"][:, t] = ~terminated & (truncated | last)
        arrays["_cut"][:, t] = last & ~(terminated | truncated)
        for name, value in extras.items():
            value = np.asarray(value)
            store = arrays.setdefault(f"infos/{name}", np.zeros((n, T, *value.shape[1:]), value.dtype))
            store[:, t] = value
        restart = active & (terminated | truncated) & (t < budgets - 1)
        obs = next_obs
        for i in np.flatnonzero(restart):
            obs[i] = env.reset_env(i)
        if reset_carry is not None and restart.any():
            carry = reset_carry(carry, restart)
        if progress is not None and t % 50 == 0:
            progress.advance(int(active.sum()) * 50)
    return {k: np.concatenate([v[i, :budgets[i]] for i in range(n)]) for k, v in arrays.items()}
