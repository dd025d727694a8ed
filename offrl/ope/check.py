"""Ground truth for ``--check``: roll each target policy out in its environment.

The value an estimator targets is the expected discounted return ``E[sum_t gamma^t r_t]`` from
the environment's start distribution, in raw reward units, of the target policy ``pi`` the
estimators share: for a continuous policy the Gaussian around its action truncated to the action
box (``policy.sample``; :mod:`offrl.ope.policies`), not its deterministic action, so that the
estimates and the truth answer one question. :func:`true_values` estimates it by
Monte Carlo over ``episodes`` episodes (episode ``k`` reset with ``seed + k``), and also
returns the undiscounted return. (This small loop steps the envs for OPE only; it should call
the shared rollout layer once that exists.)
"""

from __future__ import annotations

import numpy as np

from offrl.errors import OffrlError


def rollout_returns(policy, env_id: str, episodes: int, discount: float, seed: int = 20_000) -> dict[str, np.ndarray]:
    """``{"return", "discounted_return", "length"}`` per episode for actions drawn from
    ``policy.sample`` (env units, inside the box), ``episodes`` envs at once through :mod:`offrl.rollout`."""
    import jax

    from offrl.rollout import VectorEnv, run_episodes

    env = VectorEnv(env_id, episodes)
    try:
        if policy.action_dim != env.action_dim:
            raise OffrlError(f"policy '{policy.name}' outputs {policy.action_dim}-dimensional actions but {env_id} takes "
                             f"{env.action_dim}; pass --env for the policy's own environment.")

        rng = np.random.default_rng(seed)

        def act(params, carry, obs, key):
            return np.clip(policy.sample(obs, rng), env.action_low, env.action_high), carry

        out = run_episodes(env, act, None, [seed + k for k in range(episodes)], jax.random.PRNGKey(seed))
    finally:
        env.close()
    rewards = np.asarray(out["rewards"], np.float64)
    discounts = discount ** np.arange(rewards.shape[1])
    return {"return": np.asarray(out["return"], np.float64), "discounted_return": rewards @ discounts,
            "length": np.asarray(out["length"])}


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


def identical_pairs(policies, observations, atol: float = 1e-6) -> list[tuple[str, str]]:
    """Pairs of candidates whose target distributions agree on every row of ``observations``
    (the same mean action and the same std, within ``atol``): such a pair is one policy counted
    twice, which inflates a ranking experiment."""
    means = [np.asarray(p.mean(observations)) for p in policies]
    stds = [np.asarray(p.stds(observations)) for p in policies]
    return [(policies[i].name, policies[j].name) for i in range(len(policies)) for j in range(i + 1, len(policies))
            if np.allclose(means[i], means[j], atol=atol, rtol=0) and np.allclose(stds[i], stds[j], atol=atol, rtol=0)]
