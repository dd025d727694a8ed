"""Supported Policy OpTimization (Wu, Wu, Qiu, Wang & Long 2022, "Supported Policy Optimization
for Offline Reinforcement Learning", NeurIPS, arXiv:2202.06239).

SPOT is TD3 whose actor is kept on the data's support by a density-based penalty, the negative
ELBO of a conditional VAE of the behaviour policy standing in for ``-log pi_b(a | s)``:

* behaviour density: BCQ's conditional VAE (:class:`offrl.nets.VAE`), trained alone for the first
  ``warmup_steps`` updates with ``L_G = mean (D(s, z) - a)^2 + beta * KL`` and frozen after;
  ``-log pi_b(a | s) ~ nelbo(s, a) = mean_j (D(s, z)_j - a_j)^2 + beta * KL(q(z | s, a) || N(0, I))``
  (means over action and latent dimensions, ``z ~ q(z | s, a)``, averaged over ``num_elbo_samples``).
* critic (TD3): ``a' = clip(pi'(s') + clip(N(0, sigma^2), -c, c), -1, 1)``,
  ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * min_k Q'_k(s', a'))^2``.
* actor, every ``policy_delay`` updates after the warm-up::

    L_pi = -mean Q_1(s, pi(s)) / mean |Q_1(s, pi(s))| + lambda * mean nelbo(s, pi(s))

Defaults are CORL's ``spot.py`` / the authors' code (Adam 1e-4 policy, 3e-4 critics, 1e-3 VAE,
750 x 750 VAE with latent ``2 * action_dim``, ``beta = 0.5``, one ELBO sample, 100,000 VAE
updates first, TD3's 0.2 / 0.5 / delay 2, batch 256, normalised states). ``lambda``: CORL ships
1.0, its AntMaze setting; the paper tunes it per locomotion dataset between 0.05 and 1.0, and
offrl takes 0.1. Where offrl differs: the authors pre-train the VAE in a separate loop; offrl
does it inside ``update`` (a real branch on the step) and fits the critic to the initial policy
meanwhile, so one run is one command. ``offrl finetune`` continues a run with TD3's Gaussian
exploration noise; CORL's online phase also anneals ``lambda``, which offrl does not (yet).

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
from offrl.algos.bcq import vae_loss
from offrl.algos.common import (Batch, apply_gradients_with_loss, hyperparameter, make_train_state, min_q_value, run_if,
                                td_critic_loss)
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import (BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, OrNone, POLYAK,
                                POSITIVE_INT, REWARD_SCALING, WIDTHS, param)
from offrl.algos.td3 import explore
from offrl.nets import VAE, DeterministicActor, EnsembleCritic


@dataclass(frozen=True)
class Config:
    """SPOT hyperparameters; defaults are CORL's spot.py / the authors' code (see the module docstring)."""

    actor_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of the policy (CORL: 1e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the twin critics (CORL: 3e-4)
    vae_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the VAE (CORL: 1e-3)
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: policy and critic MLPs (CORL: 256 x 256)
    vae_hidden_dims: tuple[int, ...] = param((750, 750), WIDTHS)  #: VAE encoder and decoder MLPs (CORL: 750 x 750)
    latent_dim: int | None = param(None, OrNone(POSITIVE_INT))  #: VAE latent size (None: 2 * action_dim, as CORL)
    kl_weight: float = param(0.5, NON_NEGATIVE)  #: beta, KL weight in the VAE loss and the ELBO (CORL: 0.5)
    num_elbo_samples: int = param(1, POSITIVE_INT)  #: latent draws averaged in nelbo(s, pi(s)) (CORL: 1)
    support_weight: float = param(0.1, NON_NEGATIVE)  #: lambda, weight of the density penalty (paper: 0.05..1 per dataset)
    warmup_steps: int = param(100_000, NON_NEGATIVE_INT)  #: updates that train the VAE before the actor (CORL: 100,000)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target actor and critics
    policy_noise: float = param(0.2, NON_NEGATIVE)  #: sigma of the target policy smoothing noise
    noise_clip: float = param(0.5, NON_NEGATIVE)  #: c, clip of that noise
    policy_delay: int = param(2, POSITIVE_INT)  #: critic updates per actor/target update
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (min over them in the target)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size (CORL: 256)
    normalize_observations: bool = param(True, BOOL)  #: z-score observations with dataset statistics (CORL: on)
    reward_scaling: str = param("none", REWARD_SCALING)  #: rewards are used as logged (CORL locomotion: unscaled)
    exploration_noise: float = param(0.1, NON_NEGATIVE)  #: std of the Gaussian noise on pi(s) when fine-tuning online


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    vae: TrainState
    target_actor_params: dict
    target_critic_params: dict
    last_actor_metrics: dict        # actor_loss / nelbo of the latest actor step (0 before it)
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


# ---------------------------------------------------------------------- losses
def negative_elbo(reconstruction, actions, mean, log_std, kl_weight: float) -> jax.Array:
    """Per row: ``mean_j (recon_j - a_j)^2 + kl_weight * KL``, ``KL = -0.5 mean_l (1 + 2 log sigma_l - mu_l^2 - sigma_l^2)``
    (the quantity whose batch mean is the VAE's training loss)."""
    recon = jnp.mean((reconstruction - actions) ** 2, axis=-1)
    kl = -0.5 * jnp.mean(1.0 + 2.0 * log_std - mean**2 - jnp.exp(2.0 * log_std), axis=-1)
    return recon + kl_weight * kl


def density_penalty(agent: Agent, observations, actions, key):
    """``nelbo(s, a)`` averaged over ``num_elbo_samples`` latent draws (differentiable in ``a``)."""
    cfg = agent.config
    n = cfg.num_elbo_samples
    obs, act_ = jnp.repeat(observations, n, axis=0), jnp.repeat(actions, n, axis=0)
    reconstruction, mean, log_std = agent.vae.apply_fn(agent.vae.params, obs, act_, key)
    return negative_elbo(reconstruction, act_, mean, log_std, cfg.kl_weight).reshape(-1, n).mean(-1)


def spot_actor_loss(q, penalty, support_weight: float) -> jax.Array:
    """``-mean Q / mean|Q| + lambda * mean penalty`` with ``mean|Q|`` a constant."""
    return -jnp.mean(q) / jax.lax.stop_gradient(jnp.mean(jnp.abs(q)) + 1e-7) + support_weight * jnp.mean(penalty)


critic_loss = td_critic_loss


def actor_loss(params, agent: Agent, batch: Batch, key):
    policy_actions = agent.actor.apply_fn(params, batch.observations)
    q = agent.critic.apply_fn(agent.critic.params, batch.observations, policy_actions)[0]
    penalty = density_penalty(agent, batch.observations, policy_actions, key)
    return spot_actor_loss(q, penalty, hyperparameter(agent, "support_weight")), {"nelbo": penalty.mean()}


# ---------------------------------------------------------------------- update
def _train_vae(agent: Agent, batch: Batch, key):
    vae, loss, _ = apply_gradients_with_loss(agent.vae, vae_loss, agent, batch, key)
    return vae, loss


def _update_actor(agent: Agent, batch: Batch, key):
    """The actor's step and its target (the critics' targets move every update, outside)."""
    actor, loss, aux = apply_gradients_with_loss(agent.actor, actor_loss, agent, batch, key)
    return agent.replace(actor=actor,
                         target_actor_params=losses.soft_update(agent.target_actor_params, actor.params, hyperparameter(agent, "tau")),
                         last_actor_metrics={"actor_loss": loss, "nelbo": aux["nelbo"]})


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    cfg = agent.config
    rng, vae_key, noise_key, actor_key = jax.random.split(agent.rng, 4)
    warming_up = agent.step < cfg.warmup_steps
    vae, g_loss = run_if(warming_up, lambda c: _train_vae(agent.replace(vae=c[0]), batch, vae_key), (agent.vae, jnp.zeros(())))
    agent = agent.replace(vae=vae, rng=rng)

    next_actions = agent.actor.apply_fn(agent.target_actor_params, batch.next_observations)
    noise_clip = hyperparameter(agent, "noise_clip")
    noise = jnp.clip(hyperparameter(agent, "policy_noise") * jax.random.normal(noise_key, next_actions.shape), -noise_clip, noise_clip)
    next_actions = jnp.clip(next_actions + noise, -1.0, 1.0)
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    target = batch.rewards + hyperparameter(agent, "discount") * batch.masks * next_q
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target)
    agent = agent.replace(critic=critic)

    actor_step = jnp.logical_and(jnp.logical_not(warming_up), agent.step % cfg.policy_delay == 0)
    agent = agent.replace(target_critic_params=losses.soft_update(agent.target_critic_params, critic.params,
                                                                  hyperparameter(agent, "tau")))
    agent = run_if(actor_step, lambda a: _update_actor(a, batch, actor_key), agent)
    metrics = {"critic_loss": c_loss, "vae_loss": g_loss, "q": c_aux["q"], **agent.last_actor_metrics}
    return agent.replace(step=agent.step + 1), metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    return agent.actor.apply_fn(agent.actor.params, observations)


q_value = min_q_value


# ---------------------------------------------------------------------- create
def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, vae_key, sample_key, rng = jax.random.split(key, 5)
    obs, act_ = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = DeterministicActor(action_dim, config.hidden_dims)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    vae_net = VAE(action_dim, config.latent_dim or 2 * action_dim, config.vae_hidden_dims)
    actor_params = actor_net.init(actor_key, obs)
    critic_params = critic_net.init(critic_key, obs, act_)
    zero = jnp.zeros(())
    return Agent(
        actor=make_train_state(actor_net, actor_params, config.actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        vae=make_train_state(vae_net, vae_net.init(vae_key, obs, act_, sample_key), config.vae_lr),
        target_actor_params=actor_params,
        target_critic_params=critic_params,
        last_actor_metrics={"actor_loss": zero, "nelbo": zero},
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


SPEC = AlgorithmSpec(name="spot", finetunable=True, explore=explore,
                     traced_fields=("discount", "tau", "policy_noise", "noise_clip", "support_weight"))
