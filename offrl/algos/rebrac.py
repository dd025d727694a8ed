"""ReBRAC (Tarasov, Kurenkov, Nikulin & Kolesnikov 2023, "Revisiting the Minimalist Approach to
Offline Reinforcement Learning", NeurIPS; arXiv:2305.09836).

TD3+BC (:mod:`offrl.algos.td3_bc`) with a behaviour-cloning penalty in the critic's target as
well as in the actor, LayerNorm critics, deeper networks and a large batch. For a batch
``(s, a, r, s', m, a'_D)``, where ``a'_D`` is the data's action at ``s'`` (the next row of the
same episode)::

    a'   = clip(pi'(s') + clip(N(0, sigma^2), -c, c), -1, 1)
    y    = r + gamma * m * (min_k Q'_k(s', a') - beta_Q * k' * ||a' - a'_D||^2)
    L_Q  = sum_k mean_i (Q_k(s_i, a_i) - y_i)^2
    L_pi = mean_i (beta_pi * ||pi(s_i) - a_i||^2 - lambda * min_k Q_k(s_i, pi(s_i))),
           lambda = 1 / mean_i |min_k Q_k(s_i, pi(s_i))|   (held constant; 1 with normalize_q off)

``k'`` is 1 where the data holds the next action and 0 where it does not (an episode cut by a
timeout, or rows whose successor is not the next row), so the penalty is never taken against
a wrong action. The actor and the target networks are updated every ``policy_delay`` critic
updates, as in TD3.

Where offrl follows which source
--------------------------------
* Defaults are the authors' D4RL locomotion settings (their code, also CORL's
  ``configs/offline/rebrac/*``): Adam 1e-3 for both networks, 3 x 256 MLPs, batch 1024,
  LayerNorm in the critics only, ``gamma`` 0.99, ``tau`` 5e-3, TD3's noise 0.2 / 0.5 and delay 2,
  no state or reward normalisation. The two BC weights are tuned per dataset in the paper
  (hopper-medium 0.01 / 0.01, halfcheetah-medium 0.001 / 0.01, walker2d-medium 0.05 / 0.1,
  hopper-medium-replay 0.05 / 0.5, walker2d-medium-replay 0.05 / 0.01, halfcheetah-medium-replay
  0.01 / 0.001 for actor / critic); offrl's default is hopper-medium's 0.01 / 0.01, the
  most common pair, and ``--set actor_bc_weight=... critic_bc_weight=...`` sets the others.
* The BC terms sum over action dimensions (the authors' ``||.||^2``), unlike TD3+BC's mean;
  with ``lambda = 1 / mean|Q|`` the actor's BC weight is the paper's ``beta`` directly.
* LayerNorm sits before each hidden activation (:class:`offrl.nets.MLP`); the authors' code
  normalises after the ReLU. Both bound the critic's features; offrl keeps its shared MLP.
* Initialisation is offrl's orthogonal one, not the authors' PyTorch-style uniform with
  biases 0.1 (the paper reports no ablation of it).
* The authors drop timeout transitions (their dataset has no next action there); offrl keeps
  them and switches the critic penalty off at those rows (``k' = 0``). The next action is
  looked up once, when the data are prepared (:func:`extra_arrays`): row ``i + 1`` continues
  row ``i`` when ``s'_i = s_{i+1}``, which also holds for data that are not stored episode by
  episode; minibatches carry ``next_actions`` and ``next_action_known`` in ``extras``.
* Online fine-tuning (``offrl finetune``, as CORL fine-tunes ReBRAC) keeps the critic penalty:
  the online learner's successor rule (:mod:`offrl.engine.online`) stores, for each online row,
  the action taken at the next env step of the same episode (the exploring policy's, as the
  dataset's next action is the behaviour policy's), with ``k' = 0`` at an episode's last row.

Example::

    run = offrl.train("rebrac", "hopper-medium-20k-v0", steps=50_000)
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from offrl import losses
from offrl.algos import td3
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, make_train_state, min_q_value, td_critic_loss
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, POLYAK, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.algos.td3 import Agent
from offrl.nets import DeterministicActor, EnsembleCritic

__all__ = ["Config", "Agent", "create", "update", "act", "explore", "q_value", "critic_target", "actor_objective",
           "actor_loss", "critic_loss", "extra_arrays", "next_action_arrays"]


@dataclass(frozen=True)
class Config:
    """ReBRAC hyperparameters; defaults are the authors' D4RL locomotion settings (see the module docstring)."""

    actor_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the policy (paper: 1e-3)
    critic_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the critics (paper: 1e-3)
    hidden_dims: tuple[int, ...] = param((256, 256, 256), WIDTHS)  #: MLP widths of actor and critics (paper: 3 x 256)
    critic_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the critics' hidden layers (paper: on)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target networks
    policy_noise: float = param(0.2, NON_NEGATIVE)  #: sigma of the target policy smoothing noise
    noise_clip: float = param(0.5, NON_NEGATIVE)  #: c, clip of that noise
    policy_delay: int = param(2, POSITIVE_INT)  #: critic updates per actor/target update
    actor_bc_weight: float = param(0.01, NON_NEGATIVE)  #: beta_pi, weight of ||pi(s) - a||^2 in the actor (hopper-medium: 0.01)
    critic_bc_weight: float = param(0.01, NON_NEGATIVE)  #: beta_Q, weight of ||a' - a'_D||^2 in the target (hopper-medium: 0.01)
    normalize_q: bool = param(True, BOOL)  #: divide the actor's Q term by mean|Q| (paper: on)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (min over all)
    batch_size: int = param(1024, POSITIVE_INT)  #: minibatch size (paper: 1024)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations (paper: off for locomotion)
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number (paper: none for locomotion)
    exploration_noise: float = param(0.1, NON_NEGATIVE)  #: std of the Gaussian noise on pi(s) when fine-tuning online (TD3's 0.1)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, rng = jax.random.split(key, 3)
    obs, act_ = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = DeterministicActor(action_dim, tuple(config.hidden_dims))
    critic_net = EnsembleCritic(tuple(config.hidden_dims), num_qs=config.num_qs, layer_norm=config.critic_layer_norm)
    actor_params = actor_net.init(actor_key, obs)
    critic_params = critic_net.init(critic_key, obs, act_)
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


# ---------------------------------------------------------------------- data
def next_action_arrays(observations: np.ndarray, next_observations: np.ndarray, actions: np.ndarray):
    """``(a'_D, k')`` of every row: the next row's action where row ``i + 1`` continues row ``i``
    (``s'_i == s_{i+1}``: not at an episode cut, nor at the last row), with ``k' = 1`` there;
    elsewhere the row's own action and ``k' = 0``."""
    n = len(actions)
    obs, nxt_obs = observations.reshape(n, -1), next_observations.reshape(n, -1)
    known = np.zeros(n, bool)
    known[:-1] = np.all(np.abs(nxt_obs[:-1] - obs[1:]) <= 1e-6, axis=-1)
    next_actions = np.where(known[:, None], np.concatenate([actions[1:], actions[-1:]]), actions)
    return next_actions.astype(np.float32), known.astype(np.float32)


def extra_arrays(dataset, info, config) -> dict[str, np.ndarray]:
    """``next_actions`` (the data's next action in agent units) and ``next_action_known``
    (:func:`next_action_arrays`), put on the device beside the transitions."""
    n = len(dataset)
    actions = info.to_agent_action(dataset.actions.reshape(n, -1))
    next_actions, known = next_action_arrays(np.asarray(dataset.observations, np.float32),
                                             np.asarray(dataset.next_observations, np.float32), actions)
    return {"next_actions": next_actions, "next_action_known": known}


# ---------------------------------------------------------------------- losses
def critic_target(rewards, masks, next_q, next_actions, data_next_actions, known, critic_bc_weight: float,
                  discount: float) -> jax.Array:
    """``y = r + gamma * m * (min_k Q'_k(s', a') - beta_Q * k' * ||a' - a'_D||^2)``; ``next_q`` is
    ``min_k Q'_k(s', a')``."""
    penalty = jnp.sum((next_actions - data_next_actions) ** 2, axis=-1)
    return rewards + discount * masks * (next_q - critic_bc_weight * known * penalty)


def actor_objective(q: jax.Array, policy_actions: jax.Array, actions: jax.Array, actor_bc_weight: float,
                    normalize_q: bool = True) -> jax.Array:
    """``mean_i (beta_pi ||pi(s_i) - a_i||^2 - lambda Q(s_i, pi(s_i)))``, ``lambda = 1 / mean|Q|``
    held constant (or 1 when ``normalize_q`` is off)."""
    lam = 1.0 / jax.lax.stop_gradient(jnp.mean(jnp.abs(q))) if normalize_q else 1.0
    return jnp.mean(actor_bc_weight * jnp.sum((policy_actions - actions) ** 2, axis=-1) - lam * q)


critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch):
    cfg = agent.config
    policy_actions = agent.actor.apply_fn(params, batch.observations)
    q = min_q_value(agent, batch.observations, policy_actions)
    loss = actor_objective(q, policy_actions, batch.actions, hyperparameter(agent, "actor_bc_weight"), cfg.normalize_q)
    return loss, {"bc_mse": losses.bc_mse(policy_actions, batch.actions)}


# ---------------------------------------------------------------------- update
def _update_actor_and_targets(agent: Agent, batch: Batch) -> Agent:
    actor, loss, aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch)
    tau = hyperparameter(agent, "tau")
    return agent.replace(
        actor=actor,
        target_actor_params=losses.soft_update(agent.target_actor_params, actor.params, tau),
        target_critic_params=losses.soft_update(agent.target_critic_params, agent.critic.params, tau),
        last_actor_metrics={"actor_loss": loss, "bc_mse": aux["bc_mse"]},
    )


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, noise_key = jax.random.split(agent.rng)
    next_actions = agent.actor.apply_fn(agent.target_actor_params, batch.next_observations)
    noise_clip = hyperparameter(agent, "noise_clip")
    noise = jnp.clip(hyperparameter(agent, "policy_noise") * jax.random.normal(noise_key, next_actions.shape), -noise_clip, noise_clip)
    next_actions = jnp.clip(next_actions + noise, -1.0, 1.0)
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    if "next_actions" in batch.extras:
        data_next, known = batch.extras["next_actions"], batch.extras["next_action_known"]
    else:  # minibatches of the five transition fields only (a caller's own): no critic penalty
        data_next, known = next_actions, jnp.zeros_like(next_q)
    target = critic_target(batch.rewards, batch.masks, next_q, next_actions, data_next, known,
                           hyperparameter(agent, "critic_bc_weight"), hyperparameter(agent, "discount"))
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    agent = agent.replace(critic=critic, rng=rng)
    agent = jax.lax.cond(agent.step % cfg.policy_delay == 0, _update_actor_and_targets, lambda a, b: a, agent, batch)
    critic_bc_penalty = jnp.mean(known * jnp.sum((next_actions - data_next) ** 2, axis=-1))
    return agent.replace(step=agent.step + 1), {"critic_loss": c_loss, "q": c_aux["q"], "critic_bc_penalty": critic_bc_penalty,
                                                **agent.last_actor_metrics}


act = td3.act
q_value = min_q_value
explore = td3.explore

SPEC = AlgorithmSpec(name="rebrac", finetunable=True, explore=explore, extra_arrays=extra_arrays,
                     traced_fields=("discount", "tau", "policy_noise", "noise_clip", "actor_bc_weight", "critic_bc_weight"))
