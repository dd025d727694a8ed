"""SAC-N (An, Moon, Kim & Song 2021, "Uncertainty-Based Offline Reinforcement Learning with
Diversified Q-Ensemble", NeurIPS; arXiv:2110.01548) and, with ``diversity_weight > 0``, EDAC.

Soft actor-critic (:mod:`offrl.algos.sac`) with ``N`` critics and the minimum over all of them
in both the target and the actor: the minimum of ``N`` noisy estimates is pessimistic in
proportion to their spread, which is large exactly where the data has no actions. For a
batch ``(s, a, r, s', m)``::

    a' ~ pi(.|s'),   y = r + gamma * m * (min_{k<=N} Q'_k(s', a') - alpha log pi(a'|s'))
    L_Q     = sum_k mean_i (Q_k(s_i, a_i) - y_i)^2  +  eta * ESD
    L_pi    = mean_i (alpha log pi(a~_i|s_i) - min_k Q_k(s_i, a~_i)),   a~ ~ pi(.|s) reparameterised
    L_alpha = -mean_i log(alpha) (log pi(a~_i|s_i) + H_target),         H_target = -dim(A)

EDAC's ensemble similarity term (An et al., eq. 6; :mod:`offrl.algos.edac` sets ``eta``) is the
mean pairwise cosine similarity of the critics' action gradients at the data's actions::

    g_k = grad_a Q_k(s, a),   ESD = 1/(N-1) * mean_i sum_{k != l} <g_k, g_l> / (|g_k| |g_l|)

Minimising it spreads the critics' gradients apart, so fewer critics give the same
pessimism. The sum over pairs is computed as ``|sum_k u_k|^2 - sum_k |u_k|^2`` with
``u_k = g_k / |g_k|``: linear in ``N``, not quadratic. All ``N`` critics are one vmapped network
(:class:`offrl.nets.EnsembleCritic`); the gradients come from one backward pass through it
with a separate copy of the actions per critic.

Where offrl follows which source
--------------------------------
* Update order alpha -> actor -> critic, as in the authors' code (CORL keeps it and reports
  it works better than SAC's critic -> actor -> alpha); ``L_Q`` without SAC's 1/2, as the
  authors (it sets the scale that ``eta`` multiplies).
* Defaults are the authors' / CORL's D4RL locomotion ones: Adam 3e-4 for actor, critics and
  alpha, 3 x 256 MLPs, batch 256, ``gamma`` 0.99, ``tau`` 5e-3, initial alpha 1, no state or
  reward normalisation. ``N`` is tuned per dataset (SAC-N: halfcheetah 10, walker2d 20,
  hopper 200-500); offrl defaults to 10, CORL's default and the cheapest that works on
  halfcheetah; ``--set num_qs=...`` sets the others.
* Initialisation is offrl's orthogonal one, not the authors' PyTorch uniform with biases 0.1
  (LB-SAC's ablation found that initialisation unimportant).

Example::

    run = offrl.train("sac_n", "hopper-medium-20k-v0", steps=50_000, config_overrides={"num_qs": "20"})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from offrl import losses
from offrl.algos import sac
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, min_q_value
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import ANY_REAL, BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, OrNone, POLYAK, POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.algos.sac import Agent
from offrl.nets import Critic

__all__ = ["Config", "Agent", "create", "update", "act", "explore", "q_value", "critic_loss",
           "ensemble_gradient_diversity", "critic_action_gradients", "PerMemberActionCritic"]


@dataclass(frozen=True)
class Config:
    """SAC-N hyperparameters; defaults are the authors' / CORL's D4RL locomotion settings (module docstring)."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the policy (paper: 3e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the critics (paper: 3e-4)
    entropy_alpha_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of log(entropy_alpha) (paper: 3e-4)
    hidden_dims: tuple[int, ...] = param((256, 256, 256), WIDTHS)  #: MLP widths of actor and critics (paper: 3 x 256)
    num_qs: int = param(10, POSITIVE_INT)  #: N, critics in the ensemble (paper: 10-500 per dataset)
    diversity_weight: float = param(0.0, NON_NEGATIVE)  #: eta, weight of EDAC's gradient similarity term (0: SAC-N)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critics
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size (paper: 256)
    initial_entropy_alpha: float = param(1.0, POSITIVE)  #: entropy coefficient alpha at the start (authors: log alpha = 0)
    target_entropy: float | None = param(None, OrNone(ANY_REAL))  #: H_target; None: -action_dim
    normalize_observations: bool = param(False, BOOL)  #: z-score observations (paper: off)
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number (paper: none)


create = sac.create  # a tanh-Gaussian actor and an EnsembleCritic of num_qs members


# ---------------------------------------------------------------------- the ensemble's action gradients
class PerMemberActionCritic(nn.Module):
    """The :class:`offrl.nets.EnsembleCritic` network (same parameters) evaluated at a separate
    action batch per member: ``actions`` is ``(num_qs, B, action_dim)``, the output ``(num_qs, B)``."""

    hidden_dims: Sequence[int]
    num_qs: int
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs, actions):
        ensemble = nn.vmap(Critic, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=(None, 0),
                           out_axes=0, axis_size=self.num_qs)
        return ensemble(self.hidden_dims, self.layer_norm)(obs, actions)


def critic_action_gradients(critic_params, observations: jax.Array, actions: jax.Array, hidden_dims: Sequence[int],
                            num_qs: int) -> jax.Array:
    """``g[k, i] = grad_a Q_k(s_i, a)`` at ``a = a_i``, shape ``(num_qs, B, action_dim)``: one
    backward pass of ``sum_{k,i} Q_k(s_i, a_{k,i})`` with each member given its own copy of the actions."""
    net = PerMemberActionCritic(tuple(hidden_dims), num_qs)
    copies = jnp.broadcast_to(actions, (num_qs, *actions.shape))
    return jax.grad(lambda a: net.apply(critic_params, observations, a).sum())(copies)


def ensemble_gradient_diversity(action_grads: jax.Array, eps: float = 1e-10) -> jax.Array:
    """EDAC's ``ESD = 1/(N-1) * mean_i sum_{k != l} <u_k, u_l>``, ``u_k = g_k / (|g_k| + eps)``,
    for ``action_grads`` of shape ``(N, B, action_dim)``; 0 for a single critic."""
    n = action_grads.shape[0]
    if n < 2:
        return jnp.zeros(())
    squared = jnp.sum(action_grads**2, axis=-1, keepdims=True)
    norm = jnp.where(squared > 0, jnp.sqrt(jnp.where(squared > 0, squared, 1.0)), 0.0)  # d|g| = 0 at g = 0, not NaN
    unit = action_grads / (norm + eps)
    pairs = jnp.sum(jnp.sum(unit, axis=0) ** 2, axis=-1) - jnp.sum(unit**2, axis=(0, 2))
    return jnp.mean(pairs) / (n - 1)


# ---------------------------------------------------------------------- losses
def critic_loss(params, agent: Agent, batch: Batch, target: jax.Array):
    """``sum_k mean_i (Q_k(s_i, a_i) - y_i)^2 + eta * ESD`` (ESD only when ``eta > 0``)."""
    cfg = agent.config
    q = agent.critic.apply_fn(params, batch.observations, batch.actions)
    td = losses.td_loss(q, target)
    aux = {"q": q.mean(), "q_std": q.std(0).mean(), "td_loss": td}
    if cfg.diversity_weight == 0:
        return td, aux
    grads = critic_action_gradients(params, batch.observations, batch.actions, cfg.hidden_dims, cfg.num_qs)
    diversity = ensemble_gradient_diversity(grads)
    return td + hyperparameter(agent, "diversity_weight") * diversity, {**aux, "diversity_loss": diversity}


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, alpha_key, actor_key, target_key = jax.random.split(agent.rng, 4)
    _, log_probs, _, _ = sac.sample_actions(agent, batch.observations, alpha_key)
    target_entropy = -batch.actions.shape[-1] if cfg.target_entropy is None else cfg.target_entropy
    log_entropy_alpha, t_loss, _ = apply_gradients_with_loss(agent.log_entropy_alpha, sac.entropy_alpha_loss,
                                                             jax.lax.stop_gradient(log_probs), target_entropy)
    agent = agent.replace(log_entropy_alpha=log_entropy_alpha)
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, sac.actor_loss, agent, batch, actor_key)
    agent = agent.replace(actor=actor)
    target = sac.soft_target(agent, batch, target_key)
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    agent = agent.replace(
        critic=critic, rng=rng, step=agent.step + 1,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
    )
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "entropy_alpha_loss": t_loss,
               "entropy_alpha": jnp.exp(log_entropy_alpha.params["value"]), "entropy": -a_aux["log_probs"].mean(), **c_aux}
    return agent, metrics


act = sac.act
q_value = min_q_value


def explore(agent: Agent, observations: jax.Array, key: jax.Array) -> jax.Array:
    """A sample ``tanh(u)``, ``u ~ N(mean, std^2)``, of the policy (exploration when fine-tuning online)."""
    return sac.sample_actions(agent, observations, key)[0]


SPEC = AlgorithmSpec(name="sac_n", finetunable=True, explore=explore, traced_fields=("discount", "tau"))
