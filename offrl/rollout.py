"""The one environment loop (minimal version; the full layer lands with the online branch)."""

from __future__ import annotations

import numpy as np


class VectorEnv:
    """``num_envs`` Gymnasium envs stepped in lockstep."""

    def __init__(self, env_id: str, num_envs: int, **make_kwargs):
        from offrl.envs import make_env

        self.envs = [make_env(env_id, **make_kwargs) for _ in range(num_envs)]
        self.num_envs = num_envs
        space = self.envs[0].action_space
        self.obs_dim = int(np.prod(self.envs[0].observation_space.shape))
        self.action_dim = int(np.prod(space.shape))
        self.action_low, self.action_high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)

    def reset(self, seeds):
        return np.stack([np.asarray(env.reset(seed=s)[0], np.float32).reshape(-1) for env, s in zip(self.envs, seeds)])

    def step(self, actions, active=None):
        n = self.num_envs
        active = np.ones(n, bool) if active is None else active
        next_obs = np.zeros((n, self.obs_dim), np.float32)
        rewards, terminated, truncated = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        for i, env in enumerate(self.envs):
            if active[i]:
                o, r, term, trunc, _ = env.step(actions[i])
                next_obs[i], rewards[i], terminated[i], truncated[i] = np.asarray(o, np.float32).reshape(-1), r, term, trunc
        return next_obs, rewards, terminated, truncated

    def close(self):
        for env in self.envs:
            env.close()


def run_episodes(env: VectorEnv, act, params, seeds, key, carry=None) -> dict:
    import jax

    n = env.num_envs
    obs = env.reset(seeds)
    first_obs = obs.copy()
    first_actions = None
    done = np.zeros(n, bool)
    lengths = np.zeros(n, np.int64)
    rewards = []
    t = 0
    while not done.all():
        out = act(params, carry, obs, jax.random.fold_in(key, t))
        actions, carry = out[0], out[1]
        actions = np.asarray(actions)
        if first_actions is None:
            first_actions = actions.copy()
        next_obs, r, term, trunc = env.step(actions, ~done)
        rewards.append(np.where(done, 0.0, r))
        lengths += ~done
        obs = np.where(done[:, None], obs, next_obs)
        done = done | term | trunc
        t += 1
    rewards = np.stack(rewards, axis=1)
    return {"return": rewards.sum(1), "length": lengths, "rewards": rewards,
            "first_observations": first_obs, "first_actions": first_actions}
