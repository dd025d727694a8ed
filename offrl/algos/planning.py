"""What the planning algorithms (``tt``, ``diffuser``) share: acting by a fresh plan from each
state and a rollout-layer policy that plans every env step and times it. (Both declare
``exportable=False`` in their spec: ``offrl export`` refuses them in one line.)

A planner is ``plan(agent, observation, key) -> action`` for one agent-unit observation; the
policy vmaps it over the envs of a seed and over the seeds, jitted once per planner.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np


@functools.cache
def batched_planner(plan):
    """``plan`` jitted over (seeds, envs per seed): agents batched on the seed axis."""
    return jax.jit(jax.vmap(jax.vmap(plan, in_axes=(None, 0, 0)), in_axes=(0, 0, 0)))


def act_by_planning(plan, agent, observations: jax.Array) -> jax.Array:
    """Planned actions for a batch of (agent-unit) observations, with a fixed planning key."""
    keys = jax.random.split(jax.random.PRNGKey(0), observations.shape[0])
    return jax.vmap(plan, in_axes=(None, 0, 0))(agent, observations, keys)


class PlanningPolicy:
    """A rollout-layer policy planning every action from each env's current state;
    ``planning_seconds`` lists the wall time of each env step's planning call for all envs
    together (``seconds_per_action`` divides by them)."""

    def __init__(self, plan, info, seeds: int):
        self.planner, self.info, self.seeds, self.planning_seconds, self.num_envs = batched_planner(plan), info, seeds, [], 0

    def __call__(self, agents, carry, obs, key):
        info, S = self.info, self.seeds
        obs_agent = info.normalize(obs) if agents.config.normalize_observations else obs
        keys = jax.random.split(key, len(obs)).reshape(S, -1, 2)
        start = time.perf_counter()
        actions = np.asarray(self.planner(agents, jnp.asarray(obs_agent, jnp.float32).reshape(S, -1, obs.shape[1]), keys))
        self.planning_seconds.append(time.perf_counter() - start)
        self.num_envs = len(obs)
        return info.to_env_action(actions.reshape(len(obs), -1)), carry

    @property
    def seconds_per_action(self) -> float:
        """Mean planning wall time per action, excluding the first (compiling) call."""
        times = self.planning_seconds[1:] or self.planning_seconds
        return float(np.mean(times)) / max(self.num_envs, 1) if times else float("nan")

