"""TD3-AWR: TD3's critic with an advantage-weighted behaviour-cloning actor (Jackson et al. 2025,
"A Clean Slate for Offline Reinforcement Learning", the Unifloral family's TD3-AWR).

* critic (TD3, target policy smoothing): ``a' = clip(pi'(s') + clip(N(0, sigma^2), -c, c), -1, 1)``,
  ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * min_k Q'_k(s', a'))^2``
* value: ``L_V = mean |tau - 1{u<0}| u^2``, ``u = min_k Q_k(s, a) - V(s)`` (IQL's expectile)
* actor, every ``policy_delay`` updates, with the targets::

    L_pi = -mean_i Q(s_i, pi(s_i)) / mean_i |Q(s_i, pi(s_i))|
           + bc_coef * mean_i w_i * mean_j (pi(s_i)_j - a_ij)^2,
    w_i = min(exp(beta * (min_k Q_k(s_i, a_i) - V(s_i))), max_weight)   (constants)

  with ``Q = min_k Q_k``. It is TD3+BC whose BC term weighs each data action by its advantage:
  with every ``A = 0`` and ``bc_coef = 0.4`` it is exactly TD3+BC with ``alpha = 2.5``.

Defaults are Unifloral's TD3-AWR configuration (Adam 1e-3, batch 1024, LayerNorm critics of
3 x 256, a 3 x 256 actor, two critic updates per actor update, smoothing 0.2 / 0.5, weights
clipped at 100); it sweeps ``beta`` over {0.5, 3, 10}, the expectile over {0.5, 0.7, 0.9} and the
BC weight over 0.0005..1, so offrl takes the middle values (3, 0.7) and the TD3+BC-equivalent
``bc_coef = 0.4``. Where offrl differs: the BC error is averaged over action dimensions, as
TD3+BC does (Unifloral sums them, so its ``bc_coef`` is ``action_dim`` times smaller for the same
loss), and the actor has no LayerNorm, so it exports as a plain NumPy MLP.

Example::

    agent = create(Config(), obs_dim=17, action_dim=6, key=jax.random.key(0))
    agent, metrics = update(agent, batch)
"""

from __future__ import annotations

from dataclasses import dataclass

import flax
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, make_train_state, min_q_value, td_critic_loss
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import (BOOL, DISCOUNT, Interval, LEARNING_RATE, NON_NEGATIVE, POLYAK, POSITIVE, POSITIVE_INT,
                                REWARD_SCALING, WIDTHS, param)
from offrl.nets import DeterministicActor, EnsembleCritic, ValueNet


@dataclass(frozen=True)
class Config:
    """TD3-AWR hyperparameters; defaults are Unifloral's ``td3_awr`` configuration (see the module docstring)."""

    actor_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the policy (Unifloral: 1e-3)
    critic_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the critics (Unifloral: 1e-3)
    value_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of V (Unifloral: 1e-3)
    hidden_dims: tuple[int, ...] = param((256, 256, 256), WIDTHS)  #: MLP widths of actor, critics and V (Unifloral: 3 x 256)
    critic_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the critics and V (Unifloral: on)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target actor and critics
    policy_noise: float = param(0.2, NON_NEGATIVE)  #: sigma of the target policy smoothing noise
    noise_clip: float = param(0.5, NON_NEGATIVE)  #: c, clip of that noise
    policy_delay: int = param(2, POSITIVE_INT)  #: critic updates per actor/target update (Unifloral: 2)
    bc_coef: float = param(0.4, NON_NEGATIVE)  #: weight of the advantage-weighted BC term (0.4: TD3+BC's alpha = 2.5 at A = 0)
    awr_inverse_temperature: float = param(3.0, NON_NEGATIVE)  #: beta in exp(beta * A) (Unifloral sweeps 0.5, 3, 10)
    max_weight: float = param(100.0, POSITIVE)  #: clip of exp(beta * A) (Unifloral: 100)
    expectile: float = param(0.7, Interval(0.0, 1.0, "()"))  #: tau of V's expectile regression (Unifloral sweeps 0.5, 0.7, 0.9)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (min over them)
    batch_size: int = param(1024, POSITIVE_INT)  #: minibatch size (Unifloral: 1024)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics (Unifloral: off)
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    value: TrainState
    target_actor_params: dict
    target_critic_params: dict
    last_actor_metrics: dict        # actor_loss / bc_mse / weight_mean of the latest actor step
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


# ---------------------------------------------------------------------- losses
def awr_bc_actor_loss(q, policy_actions, actions, weights, bc_coef: float):
    """``-mean Q / mean|Q| + bc_coef * mean_i w_i mean_j (pi(s_i)_j - a_ij)^2`` with ``mean|Q|`` and ``w`` constants."""
    q_term = -jnp.mean(q) / jax.lax.stop_gradient(jnp.mean(jnp.abs(q)) + 1e-7)
    squared = jnp.mean((policy_actions - actions) ** 2, axis=-1)
    return q_term + bc_coef * jnp.mean(jax.lax.stop_gradient(weights) * squared)


critic_loss = td_critic_loss


def value_loss(params, agent: Agent, batch: Batch, q_data):
    v = agent.value.apply_fn(params, batch.observations)
    return losses.expectile_loss(q_data, v, hyperparameter(agent, "expectile")), {"v": v}


def actor_loss(params, agent: Agent, batch: Batch, weights):
    policy_actions = agent.actor.apply_fn(params, batch.observations)
    q = agent.critic.apply_fn(agent.critic.params, batch.observations, policy_actions).min(0)
    loss = awr_bc_actor_loss(q, policy_actions, batch.actions, weights, hyperparameter(agent, "bc_coef"))
    return loss, {"bc_mse": losses.bc_mse(policy_actions, batch.actions)}


# ---------------------------------------------------------------------- update
def _update_actor_and_targets(agent: Agent, batch: Batch, weights):
    actor, loss, aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, weights)
    tau = hyperparameter(agent, "tau")
    return agent.replace(
        actor=actor,
        target_actor_params=losses.soft_update(agent.target_actor_params, actor.params, tau),
        target_critic_params=losses.soft_update(agent.target_critic_params, agent.critic.params, tau),
        last_actor_metrics={"actor_loss": loss, "bc_mse": aux["bc_mse"], "weight_mean": weights.mean()},
    )


def _skip_actor(agent: Agent, batch: Batch, weights):
    return agent


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, noise_key = jax.random.split(agent.rng)
    next_actions = agent.actor.apply_fn(agent.target_actor_params, batch.next_observations)
    noise_clip = hyperparameter(agent, "noise_clip")
    noise = jnp.clip(hyperparameter(agent, "policy_noise") * jax.random.normal(noise_key, next_actions.shape), -noise_clip, noise_clip)
    next_actions = jnp.clip(next_actions + noise, -1.0, 1.0)
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_q
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)

    q_data = critic.apply_fn(critic.params, batch.observations, batch.actions).min(0)
    value, v_loss, v_aux = apply_gradients_with_loss(agent.value, value_loss, agent, batch, q_data)
    advantages = q_data - jax.lax.stop_gradient(v_aux["v"])
    weights = losses.advantage_weights(advantages, hyperparameter(agent, "awr_inverse_temperature"),
                                       hyperparameter(agent, "max_weight"))

    agent = agent.replace(critic=critic, value=value, rng=rng)
    agent = jax.lax.cond(agent.step % cfg.policy_delay == 0, _update_actor_and_targets, _skip_actor, agent, batch, weights)
    metrics = {"critic_loss": c_loss, "value_loss": v_loss, "q": c_aux["q"], "adv": advantages.mean(),
               **agent.last_actor_metrics}
    return agent.replace(step=agent.step + 1), metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    return agent.actor.apply_fn(agent.actor.params, observations)


q_value = min_q_value


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, value_key, rng = jax.random.split(key, 4)
    obs, act_ = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = DeterministicActor(action_dim, config.hidden_dims)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs, layer_norm=config.critic_layer_norm)
    value_net = ValueNet(config.hidden_dims, layer_norm=config.critic_layer_norm)
    actor_params = actor_net.init(actor_key, obs)
    critic_params = critic_net.init(critic_key, obs, act_)
    zero = jnp.zeros(())
    return Agent(
        actor=make_train_state(actor_net, actor_params, config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        value=make_train_state(value_net, value_net.init(value_key, obs), config.value_lr),
        target_actor_params=actor_params,
        target_critic_params=critic_params,
        last_actor_metrics={"actor_loss": zero, "bc_mse": zero, "weight_mean": zero},
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


SPEC = AlgorithmSpec(name="td3_awr", traced_fields=("discount", "tau", "policy_noise", "noise_clip", "bc_coef",
                                                    "awr_inverse_temperature", "max_weight", "expectile"))
