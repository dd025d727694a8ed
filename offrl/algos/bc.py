"""Behaviour cloning: supervised regression of the logged actions on the observations.

* ``loss="gaussian"`` (default): maximum likelihood of a diagonal Gaussian policy,
  ``L = -mean_i log N(a_i; mu(s_i), sigma(s_i)^2)`` with ``mu = tanh(f(s))``;
  the deterministic action is ``mu(s)``.
* ``loss="mse"``: a deterministic ``tanh`` policy, ``L = mean_{i,j} (pi(s_i)_j - a_ij)^2``
  (the BC baseline of Fujimoto & Gu 2021).

BC has no critic, so :func:`q_value` returns ``None`` (no extrapolation monitor).
"""

from __future__ import annotations

from dataclasses import dataclass

import flax
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.common import Batch, apply_gradients_with_loss, make_train_state
from offrl.nets import DeterministicActor, GaussianActor, gaussian_log_prob


@dataclass(frozen=True)
class Config:
    """BC hyperparameters; defaults follow the BC baseline of TD3+BC (Fujimoto & Gu 2021) / CORL."""

    learning_rate: float = 3e-4     #: Adam learning rate
    hidden_dims: tuple[int, ...] = (256, 256)  #: MLP widths
    batch_size: int = 256           #: minibatch size
    loss: str = "gaussian"          #: "gaussian" (maximum likelihood) or "mse" (deterministic)
    discount: float = 0.99          #: only used to report discounted evaluation returns
    normalize_observations: bool = True  #: z-score observations with dataset statistics
    reward_scaling: str = "none"    #: rewards are unused by BC


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


def _actor_net(config: Config, action_dim: int):
    if config.loss == "mse":
        return DeterministicActor(action_dim, config.hidden_dims)
    if config.loss == "gaussian":
        return GaussianActor(action_dim, config.hidden_dims, tanh_squash=False, state_dependent_std=True)
    from offrl.errors import ConfigError

    raise ConfigError(f"config field 'loss' is {config.loss!r}; use 'gaussian' or 'mse' (e.g. --set loss=mse).")


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, rng = jax.random.split(key)
    net = _actor_net(config, action_dim)
    params = net.init(actor_key, jnp.zeros((1, obs_dim)))
    return Agent(make_train_state(net, params, config.learning_rate), rng, jnp.zeros((), jnp.int32), config)


def actor_loss(params, agent: Agent, batch: Batch):
    if agent.config.loss == "mse":
        predicted = agent.actor.apply_fn(params, batch.observations)
        return losses.bc_mse(predicted, batch.actions), {"mse": losses.bc_mse(predicted, batch.actions)}
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    log_probs = gaussian_log_prob(mean, log_std, batch.actions)
    return losses.bc_nll(log_probs), {"mse": losses.bc_mse(mean, batch.actions)}


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    actor, loss, aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch)
    return agent.replace(actor=actor, step=agent.step + 1), {"actor_loss": loss, "mse": aux["mse"]}


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    out = agent.actor.apply_fn(agent.actor.params, observations)
    return out if agent.config.loss == "mse" else out[0]


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array):
    return None
