"""Ground truth for ``--check``: roll each policy's deterministic action in its environment.

The value an estimator targets is the expected discounted return ``E[sum_t gamma^t r_t]`` from
the environment's start distribution, in raw reward units; :func:`true_values` estimates it by
Monte Carlo over ``episodes`` episodes (episode ``k`` reset with ``seed + k``), and also
returns the undiscounted return. (This small loop steps the envs for OPE only; it should call
the shared rollout layer once that exists.)
"""

from __future__ import annotations

import numpy as np

from offrl.errors import OffrlError


def rollout_returns(policy, env_id: str, episodes: int, discount: float, seed: int = 20_000) -> dict[str, np.ndarray]:
    """``{"return", "discounted_return", "length"}`` per episode for ``policy.mean`` (env units)."""
    from offrl.envs import make_env

    envs = [make_env(env_id) for _ in range(episodes)]
    try:
        obs = np.stack([np.asarray(env.reset(seed=seed + k)[0], np.float32).reshape(-1) for k, env in enumerate(envs)])
        low, high = envs[0].action_space.low, envs[0].action_space.high
        if policy.action_dim != int(np.prod(envs[0].action_space.shape)):
            raise OffrlError(f"policy '{policy.name}' outputs {policy.action_dim}-dimensional actions but {env_id} takes "
                             f"{int(np.prod(envs[0].action_space.shape))}; pass --env for the policy's own environment.")
        done = np.zeros(episodes, bool)
        ret, disc, lengths, scale = np.zeros(episodes), np.zeros(episodes), np.zeros(episodes, np.int64), np.ones(episodes)
        while not done.all():
            actions = np.clip(policy.mean(obs), low, high)
            for k, env in enumerate(envs):
                if done[k]:
                    continue
                o, r, term, trunc, _ = env.step(actions[k])
                obs[k] = np.asarray(o, np.float32).reshape(-1)
                ret[k] += r
                disc[k] += scale[k] * r
                scale[k] *= discount
                lengths[k] += 1
                done[k] = term or trunc
        return {"return": ret, "discounted_return": disc, "length": lengths}
    finally:
        for env in envs:
            env.close()


def true_values(policies, env_id: str | None, episodes: int, discount: float, seed: int = 20_000) -> dict[str, dict]:
    """Per policy: ``value`` (mean discounted return), its standard error, and ``return``."""
    out = {}
    for policy in policies:
        env = env_id or policy.meta.get("env_id")
        if not env:
            raise OffrlError(f"policy '{policy.name}' records no environment id, so --check cannot roll it out; pass --env (a Gymnasium id).")
        rollouts = rollout_returns(policy, env, episodes, discount, seed)
        d = rollouts["discounted_return"]
        out[policy.name] = {"value": float(d.mean()), "value_se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan"),
                            "return": float(rollouts["return"].mean()), "env": env, "episodes": episodes}
    return out
