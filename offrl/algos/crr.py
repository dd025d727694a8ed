"""Critic Regularized Regression (Wang, Novikov, Zolna et al. 2020, "Critic Regularized
Regression", NeurIPS, arXiv:2006.15134).

CRR clones the data's actions, each weighted by a filter of the critic's advantage:

* critic: ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * min_k Q'_k(s', a'))^2``, ``a' ~ pi'(.|s')``
* advantage: ``A(s, a) = Q(s, a) - V(s)`` with ``V(s) = mean_j Q(s, a_j)`` (``advantage_type="mean"``)
  or ``max_j Q(s, a_j)`` (``"max"``) over ``m`` policy samples ``a_j ~ pi(.|s)``; ``Q = min_k Q_k``
* actor: ``L_pi = -mean_i f(A_i) log pi(a_i | s_i)``, ``f`` a constant:
  ``"binary"``: ``f = 1[A > 0]``; ``"exp"``: ``f = min(exp(A / beta), max_weight)``

Defaults follow the paper's choices that d3rlpy's ``CRRConfig`` also ships (``beta = 1``, weight
clip 20, ``m = 4`` samples, mean advantage, exponential filter, batch 100, Adam 3e-4, a hard
target copy every 100 updates). Where they differ: the paper's critic is distributional (C51),
d3rlpy's and offrl's a plain regression critic; d3rlpy acts with the "critic-weighted policy"
(resampling ``m`` policy actions by ``softmax Q``), offrl's ``act`` is the policy mean, so it is
deterministic and exports as a NumPy MLP. d3rlpy also floors the policy's log-std at -20 (offrl
at -5, ``log_std_min``) and weights the actor with the critic after that update's critic step
(offrl with the one before it; ``advantage_after_critic_step=True`` gives d3rlpy's order).
``target_update_interval=None`` switches to Polyak averaging at rate ``tau``.

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
from offrl.algos.ranges import (BOOL, DISCOUNT, Interval, LEARNING_RATE, OneOf, OrNone, POLYAK, POSITIVE, POSITIVE_INT,
                                REWARD_SCALING, WIDTHS, param)
from offrl.nets import EnsembleCritic, GaussianActor, gaussian_log_prob


@dataclass(frozen=True)
class Config:
    """CRR hyperparameters; defaults are the paper's (Wang et al. 2020, Appendix) as d3rlpy ships them."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the policy (d3rlpy: 3e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the critic (d3rlpy: 3e-4)
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of policy and critic
    discount: float = param(0.99, DISCOUNT)  #: gamma
    weight_type: str = param("exp", OneOf(("exp", "binary")))  #: advantage filter f: "exp" min(exp(A / beta), max_weight) or "binary" 1[A > 0]
    advantage_type: str = param("mean", OneOf(("mean", "max")))  #: V(s) as the mean or the max of Q over policy samples
    advantage_temperature: float = param(1.0, POSITIVE)  #: beta in exp(A / beta) (paper: 1)
    max_weight: float = param(20.0, POSITIVE)  #: clip of exp(A / beta) (paper: 20)
    num_action_samples: int = param(4, POSITIVE_INT)  #: m, policy samples estimating V(s) (paper: 4)
    num_qs: int = param(1, POSITIVE_INT)  #: critics in the ensemble, Q = min over them (paper, d3rlpy: 1)
    log_std_min: float = param(-5.0, Interval(-20.0, 0.0))  #: lower clip of the policy log-std (d3rlpy: -20)
    advantage_after_critic_step: bool = param(False, BOOL)  #: weight the actor with the critic after this update's step (d3rlpy), not before
    target_update_interval: int | None = param(100, OrNone(POSITIVE_INT))  #: hard target copy every this many updates (d3rlpy: 100); None: Polyak with tau
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the targets when target_update_interval is None
    batch_size: int = param(100, POSITIVE_INT)  #: minibatch size (d3rlpy: 100)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    target_actor_params: dict
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


# ---------------------------------------------------------------------- losses
def advantage_filter(advantages: jax.Array, weight_type: str, temperature: float, max_weight: float) -> jax.Array:
    """CRR's ``f(A)`` as a constant: ``1[A > 0]`` (``"binary"``) or ``min(exp(A / temperature), max_weight)`` (``"exp"``)."""
    advantages = jax.lax.stop_gradient(advantages)
    if weight_type == "binary":
        return (advantages > 0).astype(advantages.dtype)
    return jnp.minimum(jnp.exp(advantages / temperature), max_weight)


def state_value(q_samples: jax.Array, advantage_type: str) -> jax.Array:
    """``V(s)`` from ``Q(s, a_j)`` of shape ``(B, m)``: the mean (``"mean"``) or the max (``"max"``) over ``j``."""
    return q_samples.max(-1) if advantage_type == "max" else q_samples.mean(-1)


critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch, weights: jax.Array):
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    log_probs = gaussian_log_prob(mean, log_std, batch.actions)
    return losses.weighted_nll(log_probs, weights), {"log_prob": log_probs.mean()}


def sample_actions(key, mean, log_std):
    """``clip(mean + std * eps, -1, 1)``: policy samples inside the action box."""
    return jnp.clip(mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape), -1.0, 1.0)


def update_target(target, online, step, cfg: Config, tau=None):
    """A hard copy when ``step`` is a multiple of ``target_update_interval``, else Polyak averaging at ``tau``
    (``cfg.tau`` unless a sweep's traced value is passed)."""
    if cfg.target_update_interval is None:
        return losses.soft_update(target, online, cfg.tau if tau is None else tau)
    copy = step % cfg.target_update_interval == 0
    return jax.tree_util.tree_map(lambda t, o: jnp.where(copy, o, t), target, online)


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, next_key, value_key = jax.random.split(agent.rng, 3)
    batch_size, m = batch.observations.shape[0], cfg.num_action_samples

    next_mean, next_log_std = agent.actor.apply_fn(agent.target_actor_params, batch.next_observations)
    next_actions = sample_actions(next_key, next_mean, next_log_std)
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_q

    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    # advantage: one critic pass over the data action and the m policy samples of every state
    mean, log_std = agent.actor.apply_fn(agent.actor.params, batch.observations)
    sampled = sample_actions(value_key, jnp.repeat(mean, m, axis=0), jnp.repeat(log_std, m, axis=0))
    obs_all = jnp.concatenate([batch.observations, jnp.repeat(batch.observations, m, axis=0)])
    critic_params = critic.params if cfg.advantage_after_critic_step else agent.critic.params
    q_all = agent.critic.apply_fn(critic_params, obs_all, jnp.concatenate([batch.actions, sampled])).min(0)
    advantages = q_all[:batch_size] - state_value(q_all[batch_size:].reshape(batch_size, m), cfg.advantage_type)
    weights = advantage_filter(advantages, cfg.weight_type, hyperparameter(agent, "advantage_temperature"),
                               hyperparameter(agent, "max_weight"))

    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, weights)
    step = agent.step + 1
    agent = agent.replace(
        actor=actor, critic=critic,
        target_actor_params=update_target(agent.target_actor_params, actor.params, step, cfg, hyperparameter(agent, "tau")),
        target_critic_params=update_target(agent.target_critic_params, critic.params, step, cfg, hyperparameter(agent, "tau")),
        rng=rng, step=step,
    )
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "q": c_aux["q"], "adv": advantages.mean(),
               "weight_mean": weights.mean(), "log_prob": a_aux["log_prob"]}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    mean, _ = agent.actor.apply_fn(agent.actor.params, observations)
    return mean


q_value = min_q_value


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, rng = jax.random.split(key, 3)
    obs, act_ = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = GaussianActor(action_dim, config.hidden_dims, tanh_squash=False, state_dependent_std=True,
                              log_std_min=config.log_std_min)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    actor_params = actor_net.init(actor_key, obs)
    critic_params = critic_net.init(critic_key, obs, act_)
    return Agent(
        actor=make_train_state(actor_net, actor_params, config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        target_actor_params=actor_params,
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


SPEC = AlgorithmSpec(name="crr", traced_fields=("discount", "tau", "advantage_temperature", "max_weight"))
