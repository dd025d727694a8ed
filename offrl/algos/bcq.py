"""Batch-Constrained deep Q-learning, continuous actions (Fujimoto, Meger & Precup 2019,
"Off-Policy Deep Reinforcement Learning without Exploration", ICML, Algorithm 1).

BCQ only ever evaluates actions that a generative model of the data finds likely:

* generative model: a conditional VAE ``G_w(a | s)`` (encoder/decoder 750 x 750, latent
  ``2 * action_dim``), ``L_G = mean (D(s, z) - a)^2 + 0.5 * KL(N(mu, sigma) || N(0, 1))``,
  ``z = mu + sigma * eps``; samples decode ``z ~ clip(N(0, 1), -0.5, 0.5)``.
* perturbation: ``xi_phi(s, a) in [-Phi, Phi]`` nudges a sampled action, ``a~ = clip(a + xi, -1, 1)``;
  ``L_xi = -mean Q_1(s, a + xi_phi(s, a))`` with ``a ~ G(s)``.
* critic: ``L_Q = sum_k mean (Q_k(s, a) - y)^2``, with ``n`` actions ``a'_j = a + xi_phi'(s', a)``,
  ``a ~ G(s')``, and the soft clipped double-Q target
  ``y = r + gamma * mask * max_j [lambda min_k Q'_k(s', a'_j) + (1 - lambda) max_k Q'_k(s', a'_j)]``.
* acting: ``pi(s) = argmax_j Q_1(s, a_j + xi_phi(s, a_j))`` over ``n`` samples ``a_j ~ G(s)``.

Updates run in the paper's order (VAE, then critic, then perturbation, then both targets).
``act`` draws its ``n`` samples with a key derived from the agent's state, so it is
deterministic for a given agent.

Example::

    agent = create(Config(), obs_dim=17, action_dim=6, key=jax.random.PRNGKey(0))
    agent, metrics = update(agent, batch)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.common import Batch, apply_gradients_with_loss, make_train_state, min_q_value, td_critic_loss
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import BOOL, DISCOUNT, Interval, LEARNING_RATE, NON_NEGATIVE, OrNone, POLYAK, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import MLP, VAE, EnsembleCritic


@dataclass(frozen=True)
class Config:
    """BCQ hyperparameters; defaults are the paper's (Section 7 and Appendix D, MuJoCo)."""

    actor_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the perturbation network (paper: 1e-3)
    critic_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the twin Q-functions (paper: 1e-3)
    vae_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the VAE (paper: 1e-3)
    hidden_dims: tuple[int, ...] = param((400, 300), WIDTHS)  #: perturbation and Q-function MLPs (paper: 400 x 300)
    vae_hidden_dims: tuple[int, ...] = param((750, 750), WIDTHS)  #: encoder and decoder MLPs (paper: 750 x 750)
    latent_dim: int | None = param(None, OrNone(POSITIVE_INT))  #: VAE latent size (None: 2 * action_dim, the paper's choice)
    kl_weight: float = param(0.5, NON_NEGATIVE)  #: weight of the KL term in the VAE loss (paper's code: 0.5)
    discount: float = param(0.99, DISCOUNT)  #: gamma (paper: 0.99)
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critic and perturbation nets (paper: 0.005)
    lmbda: float = param(0.75, Interval(0.0, 1.0))  #: lambda of the soft clipped double-Q target (paper: 0.75)
    phi: float = param(0.05, Interval(0.0, 2.0))  #: Phi, the largest perturbation per action dimension (paper: 0.05)
    num_samples: int = param(10, POSITIVE_INT)  #: n, sampled actions at the target and when acting (paper: 10)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (paper: 2)
    batch_size: int = param(100, POSITIVE_INT)  #: minibatch size (paper: 100)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged


# ---------------------------------------------------------------------- networks
class Perturbation(nn.Module):
    """``xi_phi(s, a) = Phi * tanh(f(s, a))``; returns the perturbed action ``clip(a + xi, -1, 1)``."""

    action_dim: int
    hidden_dims: Sequence[int] = (400, 300)
    phi: float = 0.05

    @nn.compact
    def __call__(self, obs, actions):
        x = MLP((*self.hidden_dims, self.action_dim))(jnp.concatenate([obs, actions], -1))
        return jnp.clip(actions + self.phi * jnp.tanh(x), -1.0, 1.0)


class Agent(flax.struct.PyTreeNode):
    actor: TrainState               # perturbation network xi_phi
    critic: TrainState
    vae: TrainState
    target_actor_params: dict
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


# ---------------------------------------------------------------------- losses
def vae_loss_terms(reconstruction, actions, mean, log_std, kl_weight: float):
    """``L_G = mean_{i,j} (recon_ij - a_ij)^2 + kl_weight * KL``, with the Gaussian KL averaged
    over batch and latent dimensions: ``KL = -0.5 mean (1 + 2 log sigma - mu^2 - sigma^2)``.

    Returns ``(loss, reconstruction_loss, kl)``.
    """
    recon = jnp.mean((reconstruction - actions) ** 2)
    kl = -0.5 * jnp.mean(1.0 + 2.0 * log_std - mean**2 - jnp.exp(2.0 * log_std))
    return recon + kl_weight * kl, recon, kl


def soft_clipped_q(q: jax.Array, lmbda: float) -> jax.Array:
    """``lambda * min_k Q_k + (1 - lambda) * max_k Q_k`` over the leading ensemble axis."""
    return lmbda * q.min(0) + (1.0 - lmbda) * q.max(0)


def vae_loss(params, agent: Agent, batch: Batch, key):
    reconstruction, mean, log_std = agent.vae.apply_fn(params, batch.observations, batch.actions, key)
    loss, recon, kl = vae_loss_terms(reconstruction, batch.actions, mean, log_std, agent.config.kl_weight)
    return loss, {"recon": recon, "kl": kl}


critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch, sampled_actions):
    perturbed = agent.actor.apply_fn(params, batch.observations, sampled_actions)
    q1 = agent.critic.apply_fn(agent.critic.params, batch.observations, perturbed)[0]
    return -jnp.mean(q1), {}


# ---------------------------------------------------------------------- update
def _repeat(x: jax.Array, n: int) -> jax.Array:
    """``(B, d) -> (B * n, d)``, each row repeated ``n`` times in a row."""
    return jnp.repeat(x, n, axis=0)


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, vae_key, next_key, actor_key = jax.random.split(agent.rng, 4)
    vae, g_loss, g_aux = apply_gradients_with_loss(agent.vae, vae_loss, agent, batch, vae_key)

    batch_size, n = batch.rewards.shape[0], cfg.num_samples
    next_obs = _repeat(batch.next_observations, n)
    next_actions = vae.apply_fn(vae.params, next_obs, next_key, method="sample")
    next_actions = agent.actor.apply_fn(agent.target_actor_params, next_obs, next_actions)
    next_q = agent.critic.apply_fn(agent.target_critic_params, next_obs, next_actions)
    next_q = soft_clipped_q(next_q, cfg.lmbda).reshape(batch_size, n).max(-1)
    target = batch.rewards + cfg.discount * batch.masks * next_q
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)

    sampled_actions = vae.apply_fn(vae.params, batch.observations, actor_key, method="sample")
    agent = agent.replace(vae=vae, critic=critic)
    actor, a_loss, _ = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, sampled_actions)
    agent = agent.replace(
        actor=actor,
        target_actor_params=losses.soft_update(agent.target_actor_params, actor.params, cfg.tau),
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, cfg.tau),
        rng=rng, step=agent.step + 1,
    )
    metrics = {"vae_loss": g_loss, "recon_loss": g_aux["recon"], "kl": g_aux["kl"],
               "critic_loss": c_loss, "actor_loss": a_loss, "q": c_aux["q"], "target_q": next_q.mean()}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    n = agent.config.num_samples
    obs = observations.reshape(-1, observations.shape[-1])
    repeated = _repeat(obs, n)
    key = jax.random.fold_in(agent.rng, 0)
    candidates = agent.vae.apply_fn(agent.vae.params, repeated, key, method="sample")
    candidates = agent.actor.apply_fn(agent.actor.params, repeated, candidates)
    q1 = agent.critic.apply_fn(agent.critic.params, repeated, candidates)[0].reshape(-1, n)
    candidates = candidates.reshape(obs.shape[0], n, -1)
    best = jnp.take_along_axis(candidates, q1.argmax(-1)[:, None, None], axis=1)[:, 0]
    return best.reshape(*observations.shape[:-1], -1)


q_value = min_q_value


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, vae_key, sample_key, rng = jax.random.split(key, 5)
    obs = jnp.zeros((1, obs_dim))
    act_ = jnp.zeros((1, action_dim))
    actor_net = Perturbation(action_dim, config.hidden_dims, config.phi)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    vae_net = VAE(action_dim, config.latent_dim or 2 * action_dim, config.vae_hidden_dims)
    actor_params = actor_net.init(actor_key, obs, act_)
    critic_params = critic_net.init(critic_key, obs, act_)
    return Agent(
        actor=make_train_state(actor_net, actor_params, config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        vae=make_train_state(vae_net, vae_net.init(vae_key, obs, act_, sample_key), config.vae_lr),
        target_actor_params=actor_params,
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


#: not exportable: the policy decodes candidate actions with the VAE and perturbs them, not one MLP
SPEC = AlgorithmSpec(name="bcq", exportable=False)
