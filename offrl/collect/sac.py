"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
arXiv:1812.05905) with automatic entropy tuning, used to train behaviour policies.

Losses, for a batch ``(s, a, r, s', m)`` with ``m = 1 - terminal`` (timeouts still bootstrap)::

    a' ~ pi(.|s'),   y = r + gamma * m * (min_j Q'_j(s', a') - alpha * log pi(a'|s'))
    L_Q(theta)   = 1/2 * sum_j E[(Q_j(s, a) - y)^2]
    L_pi(phi)    = E_{a~pi}[alpha * log pi(a|s) - min_j Q_j(s, a)]
    L_alpha      = -E[log alpha * (log pi(a|s) + H_target)],   H_target = -dim(A)
    theta' <- tau * theta + (1 - tau) * theta'

``pi`` is a tanh-squashed diagonal Gaussian (:class:`offrl.nets.GaussianActor`,
``tanh_squash=True``) acting in ``[-1, 1]^d``; the loop rescales to the env's bounds.
``update(agent, batch)`` is pure; :func:`update_many` runs ``K`` updates in one jitted
``lax.scan``; :func:`make_act_fns` builds a jitted act that also returns the log-prob and the
pre-squash mean/std the collector records in ``Dataset.infos`` (:func:`make_act_fns`).

Example::

    agent = create(SACConfig(), obs_dim=3, action_dim=1, key=jax.random.PRNGKey(0))
    agent, metrics = update_many(agent, stacked_batches)   # leading axis = K updates
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import flax
import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from offrl.nets import EnsembleCritic, GaussianActor, tanh_gaussian_sample


@dataclass(frozen=True)
class SACConfig:
    """SAC hyperparameters; defaults follow Haarnoja et al. 2018 (Table 1, MuJoCo).

    actor_lr / critic_lr / temperature_lr: Adam step sizes (3e-4 in the paper).
    hidden_dims: two hidden layers of 256 units for actor and critics (paper).
    num_qs: clipped double-Q, two critics (paper).
    discount: gamma = 0.99 (paper).
    tau: target smoothing coefficient, 0.005 (paper).
    batch_size: 256 (paper).
    init_temperature: alpha at the start (1.0, as SB3 and jaxrl; the paper leaves it open).
    target_entropy: H_target; ``None`` means ``-action_dim`` (paper's heuristic).
    """

    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    hidden_dims: tuple[int, ...] = (256, 256)
    num_qs: int = 2
    discount: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    init_temperature: float = 1.0
    target_entropy: float | None = None


class Batch(NamedTuple):
    """A minibatch in the normalised action space ``[-1, 1]``; ``masks = 1 - terminals``."""

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_observations: jax.Array
    masks: jax.Array


class Temperature(flax.linen.Module):
    """``log alpha`` as a single learned scalar."""

    init_temperature: float = 1.0

    @flax.linen.compact
    def __call__(self):
        log_alpha = self.param("log_alpha", lambda _: jnp.log(jnp.float32(self.init_temperature)))
        return log_alpha


class SACAgent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    target_critic_params: dict
    temperature: TrainState
    rng: jax.Array
    step: jax.Array
    target_entropy: float = flax.struct.field(pytree_node=False)
    config: SACConfig = flax.struct.field(pytree_node=False)


def make_actor(config: SACConfig, action_dim: int) -> GaussianActor:
    return GaussianActor(action_dim=action_dim, hidden_dims=tuple(config.hidden_dims), tanh_squash=True)


def create(config: SACConfig, obs_dim: int, action_dim: int, key: jax.Array) -> SACAgent:
    """Initialise actor, twin critics, target critics and ``log alpha``."""
    actor_key, critic_key, rng = jax.random.split(key, 3)
    obs = jnp.zeros((1, obs_dim), jnp.float32)
    act = jnp.zeros((1, action_dim), jnp.float32)
    actor_def = make_actor(config, action_dim)
    critic_def = EnsembleCritic(hidden_dims=tuple(config.hidden_dims), num_qs=config.num_qs)
    temp_def = Temperature(config.init_temperature)
    actor = TrainState.create(apply_fn=actor_def.apply, params=actor_def.init(actor_key, obs)["params"],
                              tx=optax.adam(config.actor_lr))
    critic_params = critic_def.init(critic_key, obs, act)["params"]
    critic = TrainState.create(apply_fn=critic_def.apply, params=critic_params, tx=optax.adam(config.critic_lr))
    temperature = TrainState.create(apply_fn=temp_def.apply, params=temp_def.init(rng)["params"],
                                    tx=optax.adam(config.temperature_lr))
    target_entropy = float(-action_dim if config.target_entropy is None else config.target_entropy)
    return SACAgent(actor=actor, critic=critic, target_critic_params=critic_params, temperature=temperature,
                    rng=rng, step=jnp.zeros((), jnp.int32), target_entropy=target_entropy, config=config)


# ---------------------------------------------------------------------- losses
def critic_loss(critic_params, agent: SACAgent, batch: Batch, key: jax.Array):
    """``1/2 sum_j E[(Q_j(s,a) - y)^2]`` with the soft, clipped double-Q target ``y``."""
    mean, log_std = agent.actor.apply_fn({"params": agent.actor.params}, batch.next_observations)
    next_actions, next_log_probs = tanh_gaussian_sample(key, mean, log_std)
    next_q = agent.critic.apply_fn({"params": agent.target_critic_params}, batch.next_observations, next_actions).min(0)
    alpha = jnp.exp(agent.temperature.apply_fn({"params": agent.temperature.params}))
    target = batch.rewards + agent.config.discount * batch.masks * (next_q - alpha * next_log_probs)
    target = jax.lax.stop_gradient(target)
    q = agent.critic.apply_fn({"params": critic_params}, batch.observations, batch.actions)
    loss = 0.5 * ((q - target[None]) ** 2).mean(axis=1).sum()
    return loss, {"critic_loss": loss, "q": q.mean()}


def actor_loss(actor_params, agent: SACAgent, batch: Batch, key: jax.Array):
    """``E[alpha log pi(a|s) - min_j Q_j(s, a)]``, ``a`` reparameterised."""
    mean, log_std = agent.actor.apply_fn({"params": actor_params}, batch.observations)
    actions, log_probs = tanh_gaussian_sample(key, mean, log_std)
    q = agent.critic.apply_fn({"params": agent.critic.params}, batch.observations, actions).min(0)
    alpha = jnp.exp(agent.temperature.apply_fn({"params": agent.temperature.params}))
    loss = (alpha * log_probs - q).mean()
    return loss, {"actor_loss": loss, "entropy": -log_probs.mean(), "log_probs": log_probs}


def temperature_loss(temperature_params, agent: SACAgent, log_probs: jax.Array):
    """``-E[log alpha * (log pi + H_target)]`` (log-probs held fixed)."""
    log_alpha = agent.temperature.apply_fn({"params": temperature_params})
    loss = -(log_alpha * jax.lax.stop_gradient(log_probs + agent.target_entropy)).mean()
    return loss, {"temperature_loss": loss, "alpha": jnp.exp(log_alpha)}


# ---------------------------------------------------------------------- update
def update(agent: SACAgent, batch: Batch) -> tuple[SACAgent, dict[str, jax.Array]]:
    """One SAC step: critic, then actor (on the new critic), then alpha, then Polyak targets."""
    rng, critic_key, actor_key = jax.random.split(agent.rng, 3)
    critic_grads, critic_info = jax.grad(critic_loss, has_aux=True)(agent.critic.params, agent, batch, critic_key)
    agent = agent.replace(critic=agent.critic.apply_gradients(grads=critic_grads))
    actor_grads, actor_info = jax.grad(actor_loss, has_aux=True)(agent.actor.params, agent, batch, actor_key)
    agent = agent.replace(actor=agent.actor.apply_gradients(grads=actor_grads))
    log_probs = actor_info.pop("log_probs")
    temp_grads, temp_info = jax.grad(temperature_loss, has_aux=True)(agent.temperature.params, agent, log_probs)
    agent = agent.replace(temperature=agent.temperature.apply_gradients(grads=temp_grads))
    tau = agent.config.tau
    target = jax.tree_util.tree_map(lambda p, t: tau * p + (1 - tau) * t, agent.critic.params, agent.target_critic_params)
    agent = agent.replace(target_critic_params=target, rng=rng, step=agent.step + 1)
    return agent, {**critic_info, **actor_info, **temp_info}


@jax.jit
def update_many(agent: SACAgent, batches: Batch) -> tuple[SACAgent, dict[str, jax.Array]]:
    """``K`` updates in one ``lax.scan``; ``batches`` has a leading axis of length ``K``.

    Returns the metrics of the last update.
    """
    agent, metrics = jax.lax.scan(update, agent, batches)
    return agent, jax.tree_util.tree_map(lambda m: m[-1], metrics)


# ---------------------------------------------------------------------- acting
def make_act_fns(actor_def: GaussianActor):
    """Jitted ``(params, key, obs) -> (action, log_prob, mean, std)`` and ``(params, obs) -> action``.

    ``action = tanh(u)``, ``u ~ N(mean, std)``; ``log_prob`` is the density of ``action``
    in ``[-1, 1]^d`` (change of variables through tanh). ``mean``/``std`` are of ``u``.
    """

    @jax.jit
    def act_stochastic(params, key, obs):
        mean, log_std = actor_def.apply({"params": params}, obs)
        action, log_prob = tanh_gaussian_sample(key, mean, log_std)
        return action, log_prob, mean, jnp.exp(log_std)

    @jax.jit
    def act_deterministic(params, obs):
        mean, _ = actor_def.apply({"params": params}, obs)
        return jnp.tanh(mean)

    return act_stochastic, act_deterministic
