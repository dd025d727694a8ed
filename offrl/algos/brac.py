"""Behavior Regularized Actor Critic (Wu, Tucker & Nachum 2019, "Behavior Regularized Offline
Reinforcement Learning", arXiv:1911.11361), primal form with a KL divergence.

A learned behaviour policy ``pi_b`` (maximum likelihood on the data) and a divergence estimate
from ``n`` reparameterised samples ``a_j = tanh(u_j) ~ pi(.|s)``::

    D(s) = mean_j [log pi(a_j | s) - log pi_b(a_j | s)]       (a Monte-Carlo KL(pi || pi_b))

* ``penalty="value"`` (BRAC-v): the penalty enters the Bellman target,
  ``y = r + gamma * mask * (min_k Q'_k(s', a') - alpha * D(s'))``, ``a' ~ pi(.|s')``;
  ``penalty="policy"`` (BRAC-p): ``y = r + gamma * mask * min_k Q'_k(s', a')``.
* critic: ``L_Q = sum_k mean (Q_k(s, a) - y)^2``
* actor (both): ``L_pi = mean_i [alpha * D(s_i) - q_on * min_k Q_k(s_i, a_i)]``, ``a_i ~ pi(.|s_i)``,
  with ``q_on = 0`` for the first ``warmup_steps`` updates (the actor first moves towards ``pi_b``).
* behaviour: ``L_b = -mean log pi_b(a | s)`` on the data.

Both policies are tanh-squashed Gaussians; the tanh Jacobian is the same in both log-densities
of a sample, so ``D`` is computed from the pre-squash Gaussians (exact and stable near +-1).

Defaults are the authors' released configuration (google-research ``behavior_regularized_offline_rl``):
KL, value penalty, ``alpha = 0.1`` as in its example scripts, Adam 1e-3 for every network as in its
``train_eval`` (the scripts lower the policy's to 3e-4, which lets the policy trail a sharpening
``pi_b`` so the value penalty's targets drift on near-deterministic data), two critics with the
min over them, batch 256, ``tau = 0.005`` and a 20,000-step warm start. Where offrl differs: the
authors pre-train ``pi_b`` in a separate run and load its checkpoint; offrl trains it in the same
``update`` (one more Adam step on the same minibatch), so a run is one command and the warm start
doubles as the time ``pi_b`` needs to fit; widths are 256 x 256 rather than the authors' 200 x 200.

Example::

    agent = create(Config(penalty="policy"), obs_dim=17, action_dim=6, key=jax.random.key(0))
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
from offrl.algos.ranges import (BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, OneOf, POLYAK,
                                POSITIVE_INT, REWARD_SCALING, WIDTHS, param)
from offrl.nets import EnsembleCritic, GaussianActor, gaussian_log_prob, tanh_gaussian_log_prob


@dataclass(frozen=True)
class Config:
    """BRAC hyperparameters; defaults are the authors' released code's (see the module docstring)."""

    penalty: str = param("value", OneOf(("value", "policy")))  #: "value" (BRAC-v: penalty in the target and the actor) or "policy" (BRAC-p: actor only)
    alpha: float = param(0.1, NON_NEGATIVE)  #: weight of the divergence D (authors' scripts: 0.1)
    num_divergence_samples: int = param(4, POSITIVE_INT)  #: n, policy samples per state in the KL estimate
    warmup_steps: int = param(20_000, NON_NEGATIVE_INT)  #: updates whose actor loss is alpha * D alone (authors: 20,000)
    actor_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the policy (authors' train_eval: 1e-3; their example scripts: 3e-4)
    critic_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the critics (authors: 1e-3)
    behavior_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of pi_b (authors: 1e-3)
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of every network
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critics (authors: 0.005)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble, min over them (authors: 2)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size (authors: 256)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    behavior: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


# ---------------------------------------------------------------------- losses
def sample_kl(log_p: jax.Array, log_q: jax.Array) -> jax.Array:
    """``mean_j (log p(x_j) - log q(x_j))`` over the last axis, ``x_j ~ p``: the Monte-Carlo ``KL(p || q)``."""
    return jnp.mean(log_p - log_q, axis=-1)


def policy_divergence(key, mean, log_std, b_mean, b_log_std, n: int):
    """``(D, actions)``: :func:`sample_kl` of the tanh-Gaussian policy against ``pi_b`` at ``n``
    reparameterised samples per row (shapes ``(B,)`` and ``(B, n, d)``); ``pi_b`` is a constant."""
    u = mean[:, None] + jnp.exp(log_std)[:, None] * jax.random.normal(key, (mean.shape[0], n, mean.shape[-1]))
    b_mean, b_log_std = jax.lax.stop_gradient(b_mean), jax.lax.stop_gradient(b_log_std)
    log_p = gaussian_log_prob(mean[:, None], log_std[:, None], u)
    log_q = gaussian_log_prob(b_mean[:, None], b_log_std[:, None], u)
    return sample_kl(log_p, log_q), jnp.tanh(u)


def behavior_loss(params, agent: Agent, batch: Batch):
    mean, log_std = agent.behavior.apply_fn(params, batch.observations)
    log_probs = tanh_gaussian_log_prob(mean, log_std, batch.actions)
    return losses.bc_nll(log_probs), {"log_prob": log_probs.mean()}


critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch, key):
    cfg = agent.config
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    b_mean, b_log_std = agent.behavior.apply_fn(agent.behavior.params, batch.observations)
    divergence, actions = policy_divergence(key, mean, log_std, b_mean, b_log_std, cfg.num_divergence_samples)
    q = agent.critic.apply_fn(agent.critic.params, batch.observations, actions[:, 0]).min(0)
    q_on = (agent.step >= cfg.warmup_steps).astype(q.dtype)
    return jnp.mean(hyperparameter(agent, "alpha") * divergence - q_on * q), {"divergence": divergence.mean()}


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, target_key, actor_key = jax.random.split(agent.rng, 3)
    behavior, b_loss, b_aux = apply_gradients_with_loss(agent.behavior, behavior_loss, agent, batch)
    agent = agent.replace(behavior=behavior)

    mean, log_std = agent.actor.apply_fn(agent.actor.params, batch.next_observations)
    b_mean, b_log_std = behavior.apply_fn(behavior.params, batch.next_observations)
    next_divergence, next_actions = policy_divergence(target_key, mean, log_std, b_mean, b_log_std,
                                                      cfg.num_divergence_samples)
    next_v = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions[:, 0]).min(0)
    if cfg.penalty == "value":
        next_v = next_v - hyperparameter(agent, "alpha") * next_divergence
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_v
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)

    agent = agent.replace(critic=critic)
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, actor_key)
    agent = agent.replace(
        actor=actor,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
        rng=rng, step=agent.step + 1,
    )
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "behavior_loss": b_loss, "q": c_aux["q"],
               "divergence": a_aux["divergence"], "behavior_log_prob": b_aux["log_prob"]}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    mean, _ = agent.actor.apply_fn(agent.actor.params, observations)
    return jnp.tanh(mean)


q_value = min_q_value


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, behavior_key, rng = jax.random.split(key, 4)
    obs, act_ = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    policy_net = GaussianActor(action_dim, config.hidden_dims, tanh_squash=True, state_dependent_std=True)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    critic_params = critic_net.init(critic_key, obs, act_)
    return Agent(
        actor=make_train_state(policy_net, policy_net.init(actor_key, obs), config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        behavior=make_train_state(policy_net, policy_net.init(behavior_key, obs), config.behavior_lr),
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


SPEC = AlgorithmSpec(name="brac", traced_fields=("discount", "tau", "alpha"))
