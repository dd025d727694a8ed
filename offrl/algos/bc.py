"""Behaviour cloning: supervised regression of the logged actions on the observations.

* ``loss="mse"`` (default): a deterministic ``tanh`` policy,
  ``L = mean_{i,j} (pi(s_i)_j - a_ij)^2`` (the BC baseline of Fujimoto & Gu 2021, CORL's
  BC and d3rlpy's default deterministic BC).
* ``loss="gaussian"``: maximum likelihood of a diagonal Gaussian,
  ``L = -mean_i log N(a_i; mu(s_i), diag(sigma^2))`` with ``mu = tanh(f(s))`` and one learned
  ``sigma`` per action dimension shared by all states; the deterministic action is the mode
  ``mu(s)``.

Why the Gaussian's std is state-independent by default: the likelihood's gradient with respect
to the mean is ``(mu(s_i) - a_i) / sigma(s_i)^2``, so a state-dependent std weights every
sample's mean error by ``1 / sigma(s_i)^2``. Where logged actions sit on the bound (clipped
torques, saturated ``tanh`` policies) their spread is small, ``sigma(s)`` shrinks towards its
floor and those states take nearly all of the weight; the mean is left under-fit everywhere
else, with the training MSE of the mean barely worse (the pitfall of heteroscedastic likelihood
training described by Seitzer et al. 2022, "On the Pitfalls of Heteroscedastic Uncertainty
Estimation with Probabilistic Neural Networks"). On data where a controller saturates, the
state-dependent std puts nearly all of the ``1 / sigma^2`` weight on the saturated states and the
clone cannot swing the pendulum up (``tests/algos/test_bc.py``; numbers in benchmarks/README.md).
With one shared ``sigma`` the mean's gradient is the MSE
gradient up to a per-dimension scale. ``state_dependent_std=True`` keeps the heteroscedastic
variant for study.

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
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import BOOL, DISCOUNT, LEARNING_RATE, OneOf, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import DeterministicActor, GaussianActor, gaussian_log_prob


@dataclass(frozen=True)
class Config:
    """BC hyperparameters; defaults follow the BC baseline of TD3+BC (Fujimoto & Gu 2021) / CORL."""

    learning_rate: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    loss: str = param("mse", OneOf(("mse", "gaussian")))  #: "mse" (deterministic) or "gaussian" (maximum likelihood)
    state_dependent_std: bool = param(False, BOOL)  #: gaussian only: sigma(s) from the network instead of one learned vector
    discount: float = param(0.99, DISCOUNT)  #: only used to report discounted evaluation returns
    normalize_observations: bool = param(True, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are unused by BC


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


def _actor_net(config: Config, action_dim: int):
    if config.loss == "mse":
        return DeterministicActor(action_dim, config.hidden_dims)
    if config.loss == "gaussian":
        return GaussianActor(action_dim, config.hidden_dims, tanh_squash=False,
                             state_dependent_std=config.state_dependent_std)
    from offrl.errors import ConfigError

    raise ConfigError(f"config field 'loss' is {config.loss!r}; use 'mse' or 'gaussian' (e.g. --set loss=mse).")


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


SPEC = AlgorithmSpec(name="bc")
