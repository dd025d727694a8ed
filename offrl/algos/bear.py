"""Bootstrapping Error Accumulation Reduction (Kumar, Fu, Tucker & Levine 2019, "Stabilizing
Off-Policy Q-Learning via Bootstrapping Error Reduction", NeurIPS, arXiv:1906.00949).

BEAR keeps the policy on the support of the data by a sampled MMD to a generative model of it:

* behaviour model: BCQ's conditional VAE (:class:`offrl.nets.VAE`), ``L_G`` as in :mod:`offrl.algos.bcq`.
* MMD between ``n`` policy samples ``x_j ~ pi(.|s)`` and ``n`` VAE samples ``y_j ~ G(s)``::

    MMD(s) = sqrt(mean k(x, x') + mean k(y, y') - 2 mean k(x, y) + 1e-6)
    laplacian: k(x, y) = exp(-|x - y|_1 / (2 sigma)),  gaussian: k(x, y) = exp(-|x - y|_2^2 / (2 sigma))

* critic: ``m`` actions ``a'_j ~ pi(.|s')``, the soft clipped double-Q target
  ``y = r + gamma * mask * max_j [lambda min_k Q'_k(s', a'_j) + (1 - lambda) max_k Q'_k(s', a'_j)]``.
* actor: ``L_pi = mean_i [-q_on * min_k Q_k(s_i, a_i) + alpha * (MMD(s_i) - epsilon)]``, ``a_i ~ pi``,
  ``q_on = 0`` for the first ``warmup_steps`` (the policy first matches the data's support).
* Lagrange multiplier: ``L_alpha = -alpha * mean (MMD - epsilon)``, ``log alpha`` clipped to [-5, 10],
  so ``alpha`` grows while the MMD exceeds ``epsilon``.

Defaults are d3rlpy's ``BEARConfig`` (Adam 1e-4 policy, 3e-4 critics and VAE, 1e-3 multiplier,
batch 256, laplacian kernel with sigma 20, epsilon 0.05, ``n = 4`` MMD samples, ``m = 10`` target
samples, ``lambda = 0.75``, a 40,000-step warm-up), which follow the authors' code; the
authors' example runs use the laplacian kernel with sigma 10 or the gaussian with sigma 20, and
5 MMD samples. Where offrl differs: d3rlpy adds SAC's learned entropy bonus to the policy loss
and the authors' a standard-deviation penalty over the critics; offrl's loss is the paper's
(min over the critics, no entropy term), and ``act`` is the deterministic ``tanh(mean)`` rather
than the best of several policy samples, so the policy exports as a NumPy MLP.

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
from offrl.algos.bcq import soft_clipped_q, vae_loss
from offrl.algos.common import (Batch, apply_gradients_with_loss, hyperparameter, make_train_state, min_q_value, scalar_train_state,
                                td_critic_loss)
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import (BOOL, DISCOUNT, Interval, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, OneOf, OrNone,
                                POLYAK, POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param)
from offrl.nets import VAE, EnsembleCritic, GaussianActor

LOG_ALPHA_MIN, LOG_ALPHA_MAX = -5.0, 10.0


@dataclass(frozen=True)
class Config:
    """BEAR hyperparameters; defaults are d3rlpy's BEARConfig, after the authors' code (see the module docstring)."""

    actor_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of the policy (d3rlpy: 1e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the critics (d3rlpy: 3e-4)
    vae_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the VAE (d3rlpy: 3e-4)
    alpha_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of log alpha (d3rlpy: 1e-3)
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: policy and critic MLPs
    vae_hidden_dims: tuple[int, ...] = param((750, 750), WIDTHS)  #: VAE encoder and decoder MLPs (authors: 750 x 750)
    latent_dim: int | None = param(None, OrNone(POSITIVE_INT))  #: VAE latent size (None: 2 * action_dim)
    kl_weight: float = param(0.5, NON_NEGATIVE)  #: KL weight of the VAE loss (d3rlpy: 0.5)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critics
    lmbda: float = param(0.75, Interval(0.0, 1.0))  #: lambda of the soft clipped double-Q target (d3rlpy: 0.75)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (d3rlpy: 2)
    num_target_samples: int = param(10, POSITIVE_INT)  #: m, policy actions per next state in the target (d3rlpy: 10)
    num_mmd_samples: int = param(4, POSITIVE_INT)  #: n, samples of each distribution in the MMD (d3rlpy: 4)
    mmd_kernel: str = param("laplacian", OneOf(("laplacian", "gaussian")))  #: MMD kernel (d3rlpy: laplacian)
    mmd_sigma: float = param(20.0, POSITIVE)  #: kernel width sigma (d3rlpy: 20)
    mmd_epsilon: float = param(0.05, NON_NEGATIVE)  #: epsilon, the MMD the multiplier enforces (d3rlpy: 0.05)
    initial_alpha: float = param(1.0, POSITIVE)  #: starting Lagrange multiplier (d3rlpy: 1)
    warmup_steps: int = param(40_000, NON_NEGATIVE_INT)  #: updates whose policy loss is the MMD term alone (d3rlpy: 40,000)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size (d3rlpy: 256)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    vae: TrainState
    log_alpha: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


# ---------------------------------------------------------------------- losses
def mmd(x: jax.Array, y: jax.Array, kernel: str, sigma: float) -> jax.Array:
    """Sampled maximum mean discrepancy between ``x`` and ``y`` (``(B, n, d)`` each), per row:
    ``sqrt(mean k(x, x') + mean k(y, y') - 2 mean k(x, y) + 1e-6)`` (the module docstring's kernels)."""

    def mean_kernel(a, b):
        diff = a[:, :, None, :] - b[:, None, :, :]
        distance = jnp.abs(diff).sum(-1) if kernel == "laplacian" else (diff**2).sum(-1)
        return jnp.exp(-distance / (2.0 * sigma)).mean((1, 2))

    return jnp.sqrt(mean_kernel(x, x) + mean_kernel(y, y) - 2.0 * mean_kernel(x, y) + 1e-6)


def sample_policy(key, mean, log_std, n: int):
    """``n`` reparameterised tanh-Gaussian actions per row: ``(B, n, d)``."""
    u = mean[:, None] + jnp.exp(log_std)[:, None] * jax.random.normal(key, (mean.shape[0], n, mean.shape[-1]))
    return jnp.tanh(u)


critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch, data_samples, key):
    cfg = agent.config
    mean, log_std = agent.actor.apply_fn(params, batch.observations)
    samples = sample_policy(key, mean, log_std, cfg.num_mmd_samples)
    distance = mmd(samples, data_samples, cfg.mmd_kernel, hyperparameter(agent, "mmd_sigma"))
    q = agent.critic.apply_fn(agent.critic.params, batch.observations, samples[:, 0]).min(0)
    q_on = (agent.step >= cfg.warmup_steps).astype(q.dtype)
    alpha = jnp.exp(agent.log_alpha.params["value"])
    return jnp.mean(-q_on * q + alpha * (distance - hyperparameter(agent, "mmd_epsilon"))), {"mmd": distance}


def alpha_loss(params, agent: Agent, distance):
    """``-alpha * mean(MMD - epsilon)`` with the MMD a constant."""
    gap = jax.lax.stop_gradient(distance - hyperparameter(agent, "mmd_epsilon"))
    return -jnp.exp(params["value"]) * jnp.mean(gap), {}


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, vae_key, next_key, data_key, actor_key = jax.random.split(agent.rng, 5)
    vae, g_loss, g_aux = apply_gradients_with_loss(agent.vae, vae_loss, agent, batch, vae_key)

    batch_size, m, n = batch.rewards.shape[0], cfg.num_target_samples, cfg.num_mmd_samples
    mean, log_std = agent.actor.apply_fn(agent.actor.params, batch.next_observations)
    next_actions = sample_policy(next_key, mean, log_std, m).reshape(batch_size * m, -1)
    next_obs = jnp.repeat(batch.next_observations, m, axis=0)
    next_q = agent.critic.apply_fn(agent.target_critic_params, next_obs, next_actions)
    next_q = soft_clipped_q(next_q, hyperparameter(agent, "lmbda")).reshape(batch_size, m).max(-1)
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_q
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)

    data_samples = vae.apply_fn(vae.params, jnp.repeat(batch.observations, n, axis=0), data_key, method="sample")
    data_samples = data_samples.reshape(batch_size, n, -1)
    agent = agent.replace(vae=vae, critic=critic)
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, data_samples, actor_key)
    log_alpha, _, _ = apply_gradients_with_loss(agent.log_alpha, alpha_loss, agent, a_aux["mmd"])
    log_alpha = log_alpha.replace(params={"value": jnp.clip(log_alpha.params["value"], LOG_ALPHA_MIN, LOG_ALPHA_MAX)})
    agent = agent.replace(
        actor=actor, log_alpha=log_alpha,
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
        rng=rng, step=agent.step + 1,
    )
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "vae_loss": g_loss, "recon_loss": g_aux["recon"],
               "q": c_aux["q"], "mmd": a_aux["mmd"].mean(), "alpha": jnp.exp(log_alpha.params["value"])}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    mean, _ = agent.actor.apply_fn(agent.actor.params, observations)
    return jnp.tanh(mean)


q_value = min_q_value


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, vae_key, sample_key, rng = jax.random.split(key, 5)
    obs, act_ = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = GaussianActor(action_dim, config.hidden_dims, tanh_squash=True, state_dependent_std=True)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    vae_net = VAE(action_dim, config.latent_dim or 2 * action_dim, config.vae_hidden_dims)
    critic_params = critic_net.init(critic_key, obs, act_)
    return Agent(
        actor=make_train_state(actor_net, actor_net.init(actor_key, obs), config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        vae=make_train_state(vae_net, vae_net.init(vae_key, obs, act_, sample_key), config.vae_lr),
        log_alpha=scalar_train_state(config.initial_alpha, config.alpha_lr),
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


SPEC = AlgorithmSpec(name="bear", traced_fields=("discount", "tau", "lmbda", "mmd_sigma", "mmd_epsilon"))
