"""Fitted Q evaluation (FQE; Le, Voloshin & Yue 2019, "Batch Policy Learning under Constraints").

FQE regresses ``Q_theta`` onto the target policy's Bellman backup on logged transitions::

    y_i = r_i + gamma * m_i * Qbar(s'_i, pi(s'_i))          (m_i = 0 at a true terminal)
    L(theta) = mean_i (Q_theta(s_i, a_i) - y_i)^2

with ``Qbar`` a Polyak-averaged target network (``tau``), or a copy of ``Q_theta`` refreshed
every ``target_update_period`` steps (the paper's iterations of fitted regression). For a discrete policy the network
outputs one value per action and the backup is ``sum_a' pi(a'|s') Qbar(s', a')``. The policy
enters only through ``pi(s')`` (or ``pi(.|s')``), computed once for the whole dataset before
training, so one jitted ``lax.scan`` chunk updates ``P`` policies x ``S`` seeds at once
(``vmap`` over both) with the dataset on the device. The value estimate is the direct method
``J = mean_i Q(s_i0, pi(s_i0))`` over the data's episode start states. A deterministic policy
is evaluated at its action (not the Gaussian used for importance weights).

Example::

    data = fqe_data(ds, next_actions=policy.mean(ds.next_observations)[None])
    agents = create(FQEConfig(), data, seeds=2)
    agents = train(agents, data, num_steps=20_000)
    q = q_values(agents, data.normalize(ds.observations), ds.actions)     # (P, S, N)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from flax.training.train_state import TrainState

from offrl.nets import MLP, Critic


@dataclass(frozen=True)
class FQEConfig:
    hidden_dims: tuple[int, ...] = (256, 256)   # critic MLP (d3rlpy's FQE default encoder is 256x256)
    learning_rate: float = 1e-4                 # Adam (d3rlpy FQE default)
    discount: float = 0.99
    tau: float = 0.005                          # Polyak rate of the target network ...
    target_update_period: int = 0               # ... or, when > 0, a hard copy every this many steps (d3rlpy: 100)
    batch_size: int = 256
    num_actions: int | None = None              # discrete: the critic outputs one Q per action
    seed: int = 0


class FQEData(NamedTuple):
    """Device arrays: shared transitions, and per-policy ``next_policy`` of shape ``(P, N, ...)``:
    actions ``(P, N, d)`` for continuous policies, probabilities ``(P, N, A)`` for discrete."""

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_observations: jax.Array
    masks: jax.Array
    next_policy: jax.Array
    obs_mean: jax.Array
    obs_std: jax.Array

    def normalize(self, obs):
        return (jnp.asarray(obs, jnp.float32) - self.obs_mean) / self.obs_std


class FQEAgent(struct.PyTreeNode):
    critic: TrainState
    target_params: dict
    step: jax.Array
    config: FQEConfig = struct.field(pytree_node=False)


def fqe_data(dataset, next_policy: np.ndarray) -> FQEData:
    """Put ``dataset`` on the device with observations standardised; ``next_policy`` as in
    :class:`FQEData` (``pi(s'_i)`` or ``pi(.|s'_i)`` for each of ``P`` policies)."""
    obs = np.asarray(dataset.observations, np.float32)
    mean, std = obs.mean(0), obs.std(0) + 1e-3
    norm = lambda x: jnp.asarray((np.asarray(x, np.float32) - mean) / std)  # noqa: E731
    return FQEData(norm(obs), jnp.asarray(dataset.actions, jnp.float32), jnp.asarray(dataset.rewards, jnp.float32),
                   norm(dataset.next_observations), jnp.asarray(1.0 - dataset.terminals, jnp.float32),
                   jnp.asarray(next_policy, jnp.float32), jnp.asarray(mean), jnp.asarray(std))


# ---------------------------------------------------------------------- network and losses
def critic_module(config: FQEConfig) -> nn.Module:
    if config.num_actions:
        return MLP((*config.hidden_dims, config.num_actions))
    return Critic(tuple(config.hidden_dims))


def q_of(module, params, obs, actions, config: FQEConfig) -> jax.Array:
    """``Q(s, a)``; for a discrete critic ``actions`` holds the action index in column 0."""
    if config.num_actions:
        values = module.apply(params, obs)
        return jnp.take_along_axis(values, actions[:, :1].astype(jnp.int32), axis=-1)[:, 0]
    return module.apply(params, obs, actions)


def policy_value(module, params, obs, policy, config: FQEConfig) -> jax.Array:
    """``Q(s, pi(s))`` (continuous ``policy`` = actions) or ``sum_a pi(a|s) Q(s, a)`` (discrete: probabilities)."""
    if config.num_actions:
        return jnp.sum(module.apply(params, obs) * policy, axis=-1)
    return module.apply(params, obs, policy)


def fqe_target(rewards: jax.Array, masks: jax.Array, next_values: jax.Array, discount: float) -> jax.Array:
    """``y = r + gamma * m * Qbar(s', pi(s'))``."""
    return rewards + discount * masks * next_values


def fqe_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """``mean (Q(s, a) - y)^2``."""
    return jnp.mean((q - target) ** 2)


# ---------------------------------------------------------------------- create / update
def create(config: FQEConfig, data: FQEData, seeds: int = 1) -> FQEAgent:
    """``P x S`` agents (leading axes: policies, seeds), seed ``s`` initialised from ``config.seed + s``."""
    module = critic_module(config)
    num_policies = int(data.next_policy.shape[0])

    def one(seed):
        obs, act = data.observations[:1], data.actions[:1]
        params = module.init(jax.random.PRNGKey(seed), obs) if config.num_actions else module.init(jax.random.PRNGKey(seed), obs, act)
        state = TrainState.create(apply_fn=module.apply, params=params, tx=optax.adam(config.learning_rate))
        return FQEAgent(state, params, jnp.zeros((), jnp.int32), config)

    per_seed = jax.vmap(one)(jnp.arange(seeds) + config.seed)
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (num_policies, *x.shape)), per_seed)


def update(agent: FQEAgent, data: FQEData, next_policy: jax.Array, seed_key: jax.Array) -> tuple[FQEAgent, dict]:
    """One FQE step for one agent (``next_policy``: this agent's policy's ``pi(s')``)."""
    config = agent.config
    module = critic_module(config)
    key = jax.random.fold_in(seed_key, agent.step)
    idx = jax.random.randint(key, (config.batch_size,), 0, data.rewards.shape[0])
    obs, act, nxt = data.observations[idx], data.actions[idx], data.next_observations[idx]
    next_values = policy_value(module, agent.target_params, nxt, next_policy[idx], config)
    target = jax.lax.stop_gradient(fqe_target(data.rewards[idx], data.masks[idx], next_values, config.discount))

    def loss_fn(params):
        q = q_of(module, params, obs, act, config)
        return fqe_loss(q, target), q

    (loss, q), grads = jax.value_and_grad(loss_fn, has_aux=True)(agent.critic.params)
    critic = agent.critic.apply_gradients(grads=grads)
    if config.target_update_period > 0:
        refresh = (agent.step + 1) % config.target_update_period == 0
        target_params = jax.tree_util.tree_map(lambda new, old: jnp.where(refresh, new, old), critic.params, agent.target_params)
    else:
        target_params = optax.incremental_update(critic.params, agent.target_params, config.tau)
    agent = agent.replace(critic=critic, target_params=target_params, step=agent.step + 1)
    return agent, {"fqe/loss": loss, "fqe/q_mean": q.mean()}


@partial(jax.jit, static_argnums=(2,))
def train_chunk(agents: FQEAgent, data: FQEData, num_steps: int) -> tuple[FQEAgent, dict]:
    """``num_steps`` updates of every ``(policy, seed)`` agent in one ``lax.scan``."""
    seeds = agents.step.shape[1]
    seed_keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(seeds) + agents.config.seed + 1000)

    def one(agent, next_policy, seed_key):
        def body(a, _):
            return update(a, data, next_policy, seed_key)
        agent, metrics = jax.lax.scan(body, agent, None, length=num_steps)
        return agent, jax.tree_util.tree_map(lambda m: m[-1], metrics)

    over_seeds = jax.vmap(one, in_axes=(0, None, 0))
    return jax.vmap(over_seeds, in_axes=(0, 0, None))(agents, data.next_policy, seed_keys)


def train(agents: FQEAgent, data: FQEData, num_steps: int, chunk: int = 1000, progress=None) -> tuple[FQEAgent, dict]:
    """Run ``num_steps`` updates in chunks (Python touches the loop once per chunk)."""
    metrics = {}
    done = 0
    while done < num_steps:
        k = min(chunk, num_steps - done)
        agents, metrics = train_chunk(agents, data, k)
        done += k
        if progress is not None:
            progress(done)
    return agents, jax.tree_util.tree_map(np.asarray, metrics)


# ---------------------------------------------------------------------- evaluation
@partial(jax.jit, static_argnums=(3,))
def _values(agents: FQEAgent, obs, policy, discrete_or_taken: bool):
    module = critic_module(agents.config)

    def one(agent, pol):
        if discrete_or_taken:
            return q_of(module, agent.critic.params, obs, pol, agent.config)
        return policy_value(module, agent.critic.params, obs, pol, agent.config)

    return jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(0, 0))(agents, policy)


def q_values(agents: FQEAgent, data: FQEData, observations, actions, batch_size: int = 65536) -> np.ndarray:
    """``Q(s_i, a_i)`` of the logged actions: ``(P, S, N)``."""
    obs = data.normalize(observations)
    act = jnp.asarray(actions, jnp.float32)
    num_policies = agents.step.shape[0]
    parts = [np.asarray(_values(agents, obs[i:i + batch_size],
                                jnp.broadcast_to(act[i:i + batch_size], (num_policies, *act[i:i + batch_size].shape)), True))
             for i in range(0, obs.shape[0], batch_size)]
    return np.concatenate(parts, axis=-1)


def state_values(agents: FQEAgent, data: FQEData, observations, policy, batch_size: int = 65536) -> np.ndarray:
    """``V(s_i) = Q(s_i, pi(s_i))`` (or the expectation for discrete): ``(P, S, N)``; ``policy`` is ``(P, N, ...)``."""
    obs = data.normalize(observations)
    policy = jnp.asarray(policy, jnp.float32)
    parts = [np.asarray(_values(agents, obs[i:i + batch_size], policy[:, i:i + batch_size], False))
             for i in range(0, obs.shape[0], batch_size)]
    return np.concatenate(parts, axis=-1)
