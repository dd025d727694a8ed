"""Offline TD3 (Fujimoto, van Hoof & Meger 2018) with an optional TD3+BC regulariser.

Critic (twin Q, target policy smoothing)::

    a' = clip(pi'(s') + clip(N(0, sigma^2), -c, c), -1, 1)
    y  = r + gamma * mask * min_k Q'_k(s', a')
    L_Q = sum_k mean (Q_k(s, a) - y)^2

Actor, every ``policy_delay`` steps, with the targets updated at the same time::

    alpha = None (plain TD3):  L_pi = -mean Q_1(s, pi(s))
    alpha = 2.5  (TD3+BC):     L_pi = -lambda mean Q_1(s, pi(s)) + mean (pi(s) - a)^2,
                               lambda = alpha / mean |Q_1(s, pi(s))|

Plain offline TD3 maximises Q at actions the data never shows, so its critic overestimates:
it is offrl's cautionary baseline (``--algo td3``); :mod:`offrl.algos.td3_bc` sets ``alpha``.
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
from offrl.algos.ranges import BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, OrNone, POLYAK, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import DeterministicActor, EnsembleCritic


@dataclass(frozen=True)
class Config:
    """TD3 hyperparameters; defaults are Fujimoto et al. 2018 (author code) / TD3+BC's Table 3."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the policy
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the twin critics
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target networks
    policy_noise: float = param(0.2, NON_NEGATIVE)  #: sigma of the target policy smoothing noise
    noise_clip: float = param(0.5, NON_NEGATIVE)  #: c, clip of that noise
    policy_delay: int = param(2, POSITIVE_INT)  #: critic updates per actor/target update
    alpha: float | None = param(None, OrNone(NON_NEGATIVE))  #: TD3+BC's BC weight (None: no regulariser)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number
    exploration_noise: float = param(0.1, NON_NEGATIVE)  #: std of the Gaussian noise on pi(s) when acting online (TD3 paper: 0.1)
    bc_anneal_steps: int = param(0, NON_NEGATIVE_INT)  #: online fine-tuning: the BC term's weight falls linearly to 0 over these steps
    anneal_start_step: int = param(0, NON_NEGATIVE_INT)  #: the step where that anneal starts (fine-tuning: the offline run's last step)


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    target_actor_params: dict
    target_critic_params: dict
    last_actor_metrics: dict        # actor_loss / bc_mse of the latest actor step (reported in between)
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


def create(config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, rng = jax.random.split(key, 3)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = DeterministicActor(action_dim, config.hidden_dims)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    actor_params = actor_net.init(actor_key, obs)
    critic_params = critic_net.init(critic_key, obs, act)
    return Agent(
        actor=make_train_state(actor_net, actor_params, config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        target_actor_params=actor_params,
        target_critic_params=critic_params,
        last_actor_metrics={"actor_loss": jnp.zeros(()), "bc_mse": jnp.zeros(())},
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


# ---------------------------------------------------------------------- losses
critic_loss = td_critic_loss


def first_critic(agent: Agent, observations, actions):
    """``Q_1(s, a)`` alone (the actor's objective), without evaluating the other critics."""
    params = jax.tree_util.tree_map(lambda x: x[:1], agent.critic.params)
    return EnsembleCritic(agent.config.hidden_dims, num_qs=1).apply(params, observations, actions)[0]


def actor_loss(params, agent: Agent, batch: Batch):
    policy_actions = agent.actor.apply_fn(params, batch.observations)
    q = first_critic(agent, batch.observations, policy_actions)
    mse = losses.bc_mse(policy_actions, batch.actions)
    if agent.config.alpha is None:
        return -jnp.mean(q), {"bc_mse": mse}
    loss = losses.td3_bc_actor_loss(q, policy_actions, batch.actions, hyperparameter(agent, "alpha"))
    # annealed BC (TD3+BC -> TD3 online): subtract the part of the BC term the schedule removes
    return loss - (1.0 - bc_weight(agent.config, agent.step)) * mse, {"bc_mse": mse}


def bc_weight(cfg: Config, step: jax.Array) -> jax.Array:
    """``clip(1 - (step - anneal_start_step) / bc_anneal_steps, 0, 1)``; 1 when no anneal is set."""
    if cfg.bc_anneal_steps <= 0:
        return jnp.ones(())
    return jnp.clip(1.0 - (step - cfg.anneal_start_step) / cfg.bc_anneal_steps, 0.0, 1.0)


# ---------------------------------------------------------------------- update
def _update_actor_and_targets(agent: Agent, batch: Batch):
    actor, loss, aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch)
    tau = hyperparameter(agent, "tau")
    return agent.replace(
        actor=actor,
        target_actor_params=losses.soft_update(agent.target_actor_params, actor.params, tau),
        target_critic_params=losses.soft_update(agent.target_critic_params, agent.critic.params, tau),
        last_actor_metrics={"actor_loss": loss, "bc_mse": aux["bc_mse"]},
    )


def _skip_actor(agent: Agent, batch: Batch):
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
    agent = agent.replace(critic=critic, rng=rng)
    agent = jax.lax.cond(agent.step % cfg.policy_delay == 0, _update_actor_and_targets, _skip_actor, agent, batch)
    return agent.replace(step=agent.step + 1), {"critic_loss": c_loss, "q": c_aux["q"], **agent.last_actor_metrics}


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    return agent.actor.apply_fn(agent.actor.params, observations)


q_value = min_q_value


def explore(agent: Agent, observations: jax.Array, key: jax.Array) -> jax.Array:
    """``clip(pi(s) + N(0, exploration_noise^2), -1, 1)`` (exploration when fine-tuning online)."""
    a = agent.actor.apply_fn(agent.actor.params, observations)
    return jnp.clip(a + agent.config.exploration_noise * jax.random.normal(key, a.shape), -1.0, 1.0)


SPEC = AlgorithmSpec(name="td3", finetunable=True, explore=explore,
                     traced_fields=("discount", "tau", "policy_noise", "noise_clip", "alpha"))
