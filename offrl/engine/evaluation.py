"""Evaluation in the environment and the extrapolation monitor.

Every seed's deterministic policy plays ``episodes`` episodes at once through the rollout layer
(:mod:`offrl.rollout`): ``seeds x episodes`` envs in lockstep with ONE jitted policy call per env
step for all of them. Episode ``k`` resets with ``seed = eval_seed + k``, so every evaluation
(and every seed) starts from the same states. Besides the raw and normalized returns it records
the extrapolation monitor: the critic's ``Q(s0, pi(s0))`` at each episode's start state and the
discounted return realised from it, both in the agent's reward units
(``reward_scale * r + reward_bias``).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from offrl.engine.data import DataInfo
from offrl.errors import ConfigError

_POLICY_FNS: dict[str, tuple] = {}


def policy_fns(module, agents, info: DataInfo):
    """Jitted, seed-vmapped ``act`` and ``q_value`` (``None`` without a critic), cached per algorithm."""
    import jax

    if module.__name__ not in _POLICY_FNS:
        one = jax.tree_util.tree_map(lambda x: x[0], agents)
        probe = jax.eval_shape(lambda a: module.q_value(a, np.zeros((1, info.obs_dim), np.float32),
                                                        np.zeros((1, *info.agent_action_shape),
                                                                 np.int32 if info.discrete else np.float32)), one)
        q_fn = jax.jit(jax.vmap(module.q_value)) if probe is not None else None
        _POLICY_FNS[module.__name__] = (jax.jit(jax.vmap(module.act)), q_fn)
    return _POLICY_FNS[module.__name__]


def deterministic_policy(module, agents, info: DataInfo, seeds: int):
    """A rollout-layer policy ``act(params, carry, obs, key) -> (env_actions, carry)`` for
    ``seeds x K`` envs laid out seed-major: raw observations in, env-unit actions out."""
    act_fn, _ = policy_fns(module, agents, info)

    def act(params, carry, obs, key):
        norm = info.normalize(obs).reshape(seeds, -1, info.obs_dim)
        actions = np.asarray(act_fn(params, norm)).reshape(len(obs), *info.agent_action_shape)
        return info.to_env_action(actions), carry

    return act


class Evaluator:
    """Rolls the deterministic policy of every seed for ``episodes`` episodes at once.

    An algorithm whose spec has a ``rollout_policy`` hook (memory or planning:
    :mod:`offrl.algos.contract`) acts through
    ``rollout_policy(agents, info, seeds, envs_per_seed=episodes, **policy_options)`` instead of
    :func:`deterministic_policy`. ``policy_options`` (``{"target_return": R}``) are refused in
    one line unless the spec is ``return_conditioned`` (e.g. DT).
    """

    def __init__(self, module, agents, info: DataInfo, env_id: str, episodes: int, seeds: int, discount: float,
                 eval_seed: int = 10_000, metadata: Mapping | None = None, policy_options: Mapping | None = None):
        from offrl.algos import algorithm_names, algorithm_spec
        from offrl.rollout import VectorEnv

        spec = algorithm_spec(module)
        options = dict(policy_options or {})
        if options and not spec.return_conditioned:
            raise ConfigError(f"--{next(iter(options)).replace('_', '-')} applies to return-conditioned algorithms "
                              f"({', '.join(algorithm_names(return_conditioned=True))}); --algo {spec.name} is not one, drop it.")
        self.module, self.info, self.env_id = module, info, env_id
        self.episodes, self.seeds, self.discount, self.eval_seed = episodes, seeds, discount, eval_seed
        self.metadata = dict(metadata or {})
        self.env = VectorEnv(env_id, seeds * episodes)
        self._carry = None
        if spec.rollout_policy is not None:
            self._act, self._carry = spec.rollout_policy(agents, info, seeds, episodes, **options)
        else:
            self._act = deterministic_policy(module, agents, info, seeds)
        self._q = policy_fns(module, agents, info)[1]

    def __call__(self, agents) -> dict[str, np.ndarray]:
        """Per-seed arrays ``(seeds, episodes)``: return, normalized_score, length, q_estimate, discounted_return."""
        import jax

        from offrl.envs import normalized_score
        from offrl.rollout import run_episodes

        S, K, info = self.seeds, self.episodes, self.info
        reset_seeds = [self.eval_seed + k for _ in range(S) for k in range(K)]
        timed = isinstance(getattr(self._act, "planning_seconds", None), list)
        if timed:                       # planners time every env step; count this evaluation's only
            self._act.planning_seconds.clear()
        out = run_episodes(self.env, self._act, agents, reset_seeds, jax.random.PRNGKey(self.eval_seed), carry=self._carry)
        rewards = info.reward_scale * np.asarray(out["rewards"], np.float64) + info.reward_bias
        steps = np.arange(rewards.shape[1])
        alive = steps[None, :] < np.asarray(out["length"])[:, None]
        disc_returns = np.sum(np.where(alive, rewards * self.discount ** steps[None, :], 0.0), axis=1).reshape(S, K)
        if self._q is None:
            q0 = np.full((S, K), np.nan)
        else:
            obs0 = info.normalize(out["first_observations"]).reshape(S, K, info.obs_dim)
            act0 = info.to_agent_action(out["first_actions"]).reshape(S, K, *info.agent_action_shape)
            q0 = np.asarray(self._q(agents, obs0, act0))
        returns = np.asarray(out["return"], np.float64).reshape(S, K)
        score = normalized_score(self.env_id, returns, self.metadata)
        result = {
            "return": returns,
            "normalized_score": np.full((S, K), np.nan) if score is None else np.asarray(score),
            "length": np.asarray(out["length"]).reshape(S, K),
            "q_estimate": q0,
            "discounted_return": disc_returns,
        }
        if timed:
            result["planning_seconds_per_step"] = np.full((S, K), _mean_after_first(self._act.planning_seconds))
            result["planning_seconds_per_action"] = np.full((S, K), self._act.seconds_per_action)
        return result

    def close(self):
        self.env.close()


def _mean_after_first(times: list) -> float:
    """Mean of ``times`` without the first entry (a compiling call on a fresh policy), NaN if empty."""
    times = times[1:] or times
    return float(np.mean(times)) if times else float("nan")


def summarise_evaluation(result: dict[str, np.ndarray]) -> list[dict[str, float]]:
    """One dict per seed: episode means, plus ``q_ratio = mean Q(s0, pi(s0)) / mean realised
    return`` and ``q_overestimation = mean Q(s0, pi(s0)) - mean realised return`` (positive:
    the critic promises more than the policy delivers, whatever the sign of the rewards; for
    negative returns a ratio below 1 is an overestimate)."""
    rows = []
    for s in range(result["return"].shape[0]):
        q = float(np.mean(result["q_estimate"][s]))
        g = float(np.mean(result["discounted_return"][s]))
        rows.append({
            "eval/return": float(np.mean(result["return"][s])),
            "eval/return_std": float(np.std(result["return"][s])),
            "eval/normalized_score": float(np.mean(result["normalized_score"][s])),
            "eval/length": float(np.mean(result["length"][s])),
            "eval/q_estimate": q,
            "eval/discounted_return": g,
            "eval/q_ratio": q / g if g != 0 and math.isfinite(q) else float("nan"),
            "eval/q_overestimation": q - g,
        })
        if "planning_seconds_per_step" in result:   # TT, Diffuser, IDQL: one planning call per env step
            rows[-1]["eval/planning_ms_per_step"] = 1e3 * float(result["planning_seconds_per_step"][s, 0])
            rows[-1]["eval/planning_ms_per_action"] = 1e3 * float(result["planning_seconds_per_action"][s, 0])
    return rows
