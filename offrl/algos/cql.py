"""Conservative Q-Learning, CQL(H) and CQL(rho) (Kumar, Zhou, Tucker & Levine 2020) on a SAC actor.

Critic: the soft-Bellman regression plus a penalty that pushes Q down on out-of-distribution
actions and up on the data's actions; ``variant="h"`` (the default) is CQL(H)::

    L_Q = sum_k mean (Q_k(s,a) - y)^2 + alpha_cql * sum_k mean_i (lse_k(s_i) - Q_k(s_i, a_i))
    y   = r + gamma * mask * min_k Q'_k(s', a'),   a' ~ pi(.|s')
    lse_k(s) = log sum_j exp(Q_k(s, a_j) - log mu(a_j))      (importance-sampled, eq. in App. F)

over ``n_actions`` uniform actions (``log mu = -d log 2``), ``n_actions`` policy actions at
``s`` and ``n_actions`` policy actions at ``s'`` (``log mu = log pi``), all evaluated at ``s``.
With ``lagrange=True`` the weight is ``alpha' = exp(log_alpha')``, tuned by dual gradient
steps so that ``alpha_cql * (lse - Q_data)`` stays near ``target_action_gap``.

CQL(rho) (``variant="rho"``, the paper's eq. 4 and Appendix A) replaces the entropy regulariser
of the inner maximisation ``max_mu E_mu[Q] + R(mu)`` by ``R(mu) = -T KL(mu || rho)``. Its
maximiser is ``mu*(a|s) = rho(a|s) exp(Q(s,a) / T) / Z(s)``, and the penalty per critic becomes
the ``exp(Q / T)``-weighted average of Q under the prior::

    R_k(s) = E_{a~rho}[(exp(Q_k(s,a) / T) / Z_k(s)) Q_k(s,a)] - Q_k(s, a_data)
           ~ sum_j w_kj Q_k(s, a_j) - Q_k(s, a_data),   w_kj = softmax_j(Q_k(s, a_j) / T),  a_j ~ rho(.|s)

offrl follows the paper's choice ``rho = pi_{k-1}``, the policy of the previous iteration: the
``n_actions`` actions ``a_j`` are drawn at ``s`` from the actor as it is before this update's
actor step. The weights are the importance ratio ``mu* / rho = exp(Q / T) / Z``, self-normalised
over the samples (``Z`` estimated by their mean), and are held constant in the gradient
(``stop_gradient``): by Danskin's theorem the gradient of the inner maximum
``T log E_rho[exp(Q / T)]`` with respect to Q is ``E_{mu*}[grad Q]``, which is the gradient of the
written penalty with ``mu*`` fixed, so the penalty's value is the paper's expression and its
gradient the exact one of the min-max objective. No uniform or next-state actions enter, and
``importance_sampling`` does not apply. The authors' released code implements only CQL(H); the
Gym defaults above are kept for both variants.

Actor (SAC with automatic entropy): ``L_pi = mean (alpha log pi(a|s) - min_k Q_k(s, a))``,
``a ~ pi``; for the first ``bc_warmup_steps`` the actor clones the data instead
(``L_pi = mean (alpha log pi(a~|s) - log pi(a_data|s))``).

The warm-up likelihood needs ``u = atanh(a_data)``, infinite for saturated actions ``|a| = 1``;
data actions are first clipped to ``[-1 + bc_action_eps, 1 - bc_action_eps]``. With a tiny eps
(1e-6: ``u = 7.25``) saturated actions dominate the Gaussian fit in ``u``-space, so the default
clips at 1e-2 (``u = 2.65``); the measurements are in benchmarks/README.md.

Choosing the penalty weight: with ``cql_alpha`` 0 (offline SAC) Q diverges; too small a weight
keeps Q bounded but above the realised return, and the policy collapses after the warm-up into
states the data never visits, where the critic's estimate is unchecked; a larger one keeps Q
below it (benchmarks/README.md). The penalty's gradient does not scale with the rewards while
the TD error's does, so scaling the rewards down (``reward_scaling``) strengthens the penalty
too. The Lagrangian variant
(``lagrange=True``) tunes alpha towards a target gap instead.

Offline->online options: ``calibrated`` is Cal-QL (:mod:`offrl.algos.cal_ql`: the policy-action
terms of ``lse`` use ``max(Q(s, a_pi), V_mu(s))`` with the data's Monte-Carlo return ``V_mu``);
``cql_alpha_decay`` multiplies the penalty weight by ``exp(-lambda (t - t_0))`` after
``decay_start_step`` (``offrl finetune --alpha-decay``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import flax
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, make_train_state, min_q_value, scalar_train_state
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import ANY_REAL, BOOL, DISCOUNT, Interval, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, OneOf, OrNone, POLYAK, POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import EnsembleCritic, GaussianActor, tanh_gaussian_log_prob, tanh_gaussian_sample


@dataclass(frozen=True)
class Config:
    """CQL hyperparameters; defaults are the paper's Gym-MuJoCo settings (Appendix F, author code)."""

    actor_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of the policy (paper: 1e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the critics (paper: 3e-4)
    entropy_alpha_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of log(entropy_alpha), SAC's entropy coefficient
    hidden_dims: tuple[int, ...] = param((256, 256, 256), WIDTHS)  #: MLP widths (author code: 3 x 256)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critics
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    cql_alpha: float = param(5.0, NON_NEGATIVE)  #: weight of the conservative penalty (min_q_weight, Gym: 5)
    n_actions: int = param(10, POSITIVE_INT)  #: sampled actions per source for the log-sum-exp
    logsumexp_temperature: float = param(1.0, POSITIVE)  #: T of the penalty's soft maximum T log sum exp(Q / T) (CQL(rho): of its weights softmax(Q / T))
    importance_sampling: bool = param(True, BOOL)  #: subtract log mu(a) (CQL(H) with importance correction)
    lagrange: bool = param(False, BOOL)  #: tune the penalty weight by dual gradient descent
    target_action_gap: float = param(10.0, NON_NEGATIVE)  #: tau of the Lagrangian variant
    cql_alpha_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of log alpha' (Lagrangian variant)
    initial_entropy_alpha: float = param(1.0, POSITIVE)  #: SAC's entropy coefficient alpha at the start (tuned automatically)
    target_entropy: float | None = param(None, OrNone(ANY_REAL))  #: None: -action_dim
    bc_warmup_steps: int = param(40_000, NON_NEGATIVE_INT)  #: actor clones the data first (policy_eval_start, author code)
    bc_action_eps: float = param(1e-2, Interval(0.0, 1.0, "()"))  #: warm-up likelihood clips data actions to [-1+eps, 1-eps] before atanh
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number
    reward_bias: float = param(0.0, ANY_REAL)  #: added to rewards after scaling
    calibrated: bool = param(False, BOOL)  #: Cal-QL: policy-action Q-values in the penalty lower-bounded by the data's MC return
    cql_alpha_decay: float = param(0.0, NON_NEGATIVE)  #: lambda of cql_alpha * exp(-lambda * (step - decay_start_step)) (offline->online)
    decay_start_step: int = param(0, NON_NEGATIVE_INT)  #: the step where the decay starts (fine-tuning: the offline run's last step)
    variant: str = param("h", OneOf(("h", "rho")))  #: "h": CQL(H), the log-sum-exp penalty; "rho": CQL(rho), the exp(Q/T)-weighted mean of Q under the previous policy

    RENAMED: ClassVar[dict[str, str]] = {"temperature_lr": "entropy_alpha_lr", "cql_temperature": "logsumexp_temperature",
                                         "initial_temperature": "initial_entropy_alpha"}


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    target_critic_params: dict
    log_entropy_alpha: TrainState
    log_cql_alpha: TrainState
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, rng = jax.random.split(key, 3)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = GaussianActor(action_dim, config.hidden_dims, tanh_squash=True, state_dependent_std=True)
    # broadcast inputs: the penalty evaluates the critics on (1 + 3 n_actions) x batch rows (nets.EnsembleCritic)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs, broadcast_inputs=True)
    critic_params = critic_net.init(critic_key, obs, act)
    return Agent(
        actor=make_train_state(actor_net, actor_net.init(actor_key, obs), config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        target_critic_params=critic_params,
        log_entropy_alpha=scalar_train_state(config.initial_entropy_alpha, config.entropy_alpha_lr),
        log_cql_alpha=scalar_train_state(1.0, config.cql_alpha_lr),
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


# ---------------------------------------------------------------------- losses
def calibrate(q_ood: jax.Array, lower_bound: jax.Array, n_uniform: int) -> jax.Array:
    """Cal-QL's bound (Nakamoto et al. 2023, eq. 5): the policy-action Q-values of the penalty,
    ``q_ood[..., n_uniform:]`` (``(K, B, M)``), become ``max(Q(s, a_pi), V_mu(s))`` with
    ``lower_bound = V_mu(s)`` (``(B,)``); the uniform actions' values are left as they are."""
    bounded = jnp.maximum(q_ood[..., n_uniform:], lower_bound[None, :, None])
    return jnp.concatenate([q_ood[..., :n_uniform], bounded], axis=-1)


def penalty_weight(cfg: Config, step: jax.Array, cql_alpha=None) -> jax.Array:
    """``cql_alpha * exp(-cql_alpha_decay * max(0, step - decay_start_step))`` (constant when the decay is 0);
    ``cql_alpha`` defaults to ``cfg.cql_alpha`` (a sweep passes its traced value)."""
    return (cfg.cql_alpha if cql_alpha is None else cql_alpha) * jnp.exp(-cfg.cql_alpha_decay * jnp.maximum(step - cfg.decay_start_step, 0))


def prior_weighted_q(q_prior: jax.Array, temperature) -> jax.Array:
    """CQL(rho)'s ``sum_j w_j Q(s, a_j)``, ``w = stop_gradient(softmax_j(Q(s, a_j) / T))``, over the
    last axis of ``q_prior`` (Q-values of actions drawn from the prior rho)."""
    weights = jax.lax.stop_gradient(jax.nn.softmax(q_prior / temperature, axis=-1))
    return jnp.sum(weights * q_prior, axis=-1)


def critic_loss(params, agent: Agent, batch: Batch, target, ood_actions, ood_log_densities):
    """TD loss plus the CQL(H) penalty (``variant="h"``: ``ood_actions`` is ``(B, M, d)``, densities
    ``(B, M)``) or the CQL(rho) penalty (``"rho"``: ``ood_actions`` are the prior's samples at ``s``;
    the densities are not used)."""
    cfg = agent.config
    B, M, d = ood_actions.shape
    obs_rep = jnp.repeat(batch.observations, M, axis=0)
    q_all = agent.critic.apply_fn(params, jnp.concatenate([batch.observations, obs_rep]),
                                  jnp.concatenate([batch.actions, ood_actions.reshape(B * M, d)]))
    q_data, q_ood = q_all[:, :B], q_all[:, B:].reshape(-1, B, M)
    aux = {}
    if cfg.calibrated:
        lower_bound = batch.extras["mc_returns"]
        aux["calql_bound_rate"] = jnp.mean(q_ood[..., cfg.n_actions:] < lower_bound[None, :, None])
        q_ood = calibrate(q_ood, lower_bound, 0 if cfg.variant == "rho" else cfg.n_actions)
    if cfg.variant == "rho":
        lse = prior_weighted_q(q_ood, hyperparameter(agent, "logsumexp_temperature"))
    else:
        if not cfg.importance_sampling:
            q_ood = jnp.concatenate([q_ood, q_data[:, :, None]], axis=-1)
            ood_log_densities = jnp.zeros(q_ood.shape[1:])
        lse = losses.importance_logsumexp(q_ood, ood_log_densities, hyperparameter(agent, "logsumexp_temperature"))
    weight = penalty_weight(cfg, agent.step, hyperparameter(agent, "cql_alpha"))
    gaps = jnp.stack([losses.cql_penalty(lse[k], q_data[k]) for k in range(cfg.num_qs)])
    td = losses.td_loss(q_data, target)
    if cfg.lagrange:
        cql_alpha = jnp.clip(jnp.exp(jax.lax.stop_gradient(agent.log_cql_alpha.params["value"])), 0.0, 1e6)
        penalty = jnp.sum(cql_alpha * (weight * gaps - hyperparameter(agent, "target_action_gap")))
    else:
        penalty = weight * jnp.sum(gaps)
    return td + penalty, {"td_loss": td, "cql_gap": gaps.mean(), "q": q_data.mean(), "q_ood_lse": lse.mean(), **aux}


def actor_loss(params, agent: Agent, batch: Batch, key):
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    actions, log_probs = tanh_gaussian_sample(key, mean, log_std)
    entropy_alpha = jnp.exp(agent.log_entropy_alpha.params["value"])
    q = min_q_value(agent, batch.observations, actions)
    sac = losses.sac_actor_loss(q, log_probs, entropy_alpha)
    bc = jnp.mean(jax.lax.stop_gradient(entropy_alpha) * log_probs) + losses.bc_nll(
        tanh_gaussian_log_prob(mean, log_std, batch.actions, eps=agent.config.bc_action_eps))
    loss = jnp.where(agent.step < agent.config.bc_warmup_steps, bc, sac)
    return loss, {"log_probs": log_probs}


def entropy_alpha_loss(params, log_probs, target_entropy):
    return losses.entropy_alpha_loss(params["value"], log_probs, target_entropy), {}


def cql_alpha_loss(params, agent: Agent, gaps):
    cql_alpha = jnp.clip(jnp.exp(params["value"]), 0.0, 1e6)
    weight = penalty_weight(agent.config, agent.step, hyperparameter(agent, "cql_alpha"))
    return -0.5 * jnp.sum(cql_alpha * (weight * gaps - hyperparameter(agent, "target_action_gap"))), {}


# ---------------------------------------------------------------------- update
def _sample_ood(agent: Agent, batch: Batch, key):
    """Uniform, current-state and next-state policy actions (``(B, 3n, d)``), their log
    densities, and one next action per row for the Bellman target."""
    cfg = agent.config
    B, d = batch.actions.shape
    n = cfg.n_actions
    uniform_key, policy_key = jax.random.split(key)
    mean, log_std = agent.actor.apply_fn(agent.actor.params, jnp.concatenate([batch.observations, batch.next_observations]))
    mean = jnp.repeat(mean[:, None], n + 1, axis=1)
    log_std = jnp.repeat(log_std[:, None], n + 1, axis=1)
    policy_actions, policy_log_probs = tanh_gaussian_sample(policy_key, mean, log_std)  # (2B, n+1, d)
    current, following = policy_actions[:B, :n], policy_actions[B:, :n]
    current_lp, following_lp = policy_log_probs[:B, :n], policy_log_probs[B:, :n]
    uniform = jax.random.uniform(uniform_key, (B, n, d), minval=-1.0, maxval=1.0)
    uniform_lp = jnp.full((B, n), -d * jnp.log(2.0))
    ood = jax.lax.stop_gradient(jnp.concatenate([uniform, current, following], axis=1))
    log_densities = jax.lax.stop_gradient(jnp.concatenate([uniform_lp, current_lp, following_lp], axis=1))
    return ood, log_densities, jax.lax.stop_gradient(policy_actions[B:, n])


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, ood_key, actor_key = jax.random.split(agent.rng, 3)
    ood_actions, ood_log_densities, next_actions = _sample_ood(agent, batch, ood_key)
    if cfg.variant == "rho":  # rho = pi_{k-1}: the current-state policy actions only
        ood_actions = ood_actions[:, cfg.n_actions:2 * cfg.n_actions]
        ood_log_densities = ood_log_densities[:, cfg.n_actions:2 * cfg.n_actions]
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_q
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, actor_key)
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target,
                                                      ood_actions, ood_log_densities)
    target_entropy = -batch.actions.shape[-1] if cfg.target_entropy is None else cfg.target_entropy
    log_entropy_alpha, t_loss, _ = apply_gradients_with_loss(agent.log_entropy_alpha, entropy_alpha_loss,
                                                             a_aux["log_probs"], target_entropy)
    log_cql_alpha = agent.log_cql_alpha
    if cfg.lagrange:
        gaps = jnp.full((cfg.num_qs,), c_aux["cql_gap"])
        log_cql_alpha, _, _ = apply_gradients_with_loss(agent.log_cql_alpha, cql_alpha_loss, agent, gaps)
    agent = agent.replace(
        actor=actor, critic=critic, log_entropy_alpha=log_entropy_alpha, log_cql_alpha=log_cql_alpha,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
        rng=rng, step=agent.step + 1,
    )
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "entropy_alpha_loss": t_loss,
               "entropy_alpha": jnp.exp(log_entropy_alpha.params["value"]), "entropy": -a_aux["log_probs"].mean(),
               "cql_alpha": jnp.exp(log_cql_alpha.params["value"]) if cfg.lagrange else penalty_weight(cfg, agent.step - 1, hyperparameter(agent, "cql_alpha")),
               **c_aux}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    mean, _ = agent.actor.apply_fn(agent.actor.params, observations)
    return jnp.tanh(mean)


q_value = min_q_value


def explore(agent: Agent, observations: jax.Array, key: jax.Array) -> jax.Array:
    """A sample of the tanh-Gaussian policy (exploration when fine-tuning online)."""
    mean, log_std = agent.actor.apply_fn(agent.actor.params, observations)
    return tanh_gaussian_sample(key, mean, log_std)[0]


SPEC = AlgorithmSpec(name="cql", finetunable=True, explore=explore,
                     traced_fields=("discount", "tau", "cql_alpha", "logsumexp_temperature", "target_action_gap"))
