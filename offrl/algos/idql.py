"""IDQL (Hansen-Estruch et al. 2023, "IDQL: Implicit Q-Learning as an Actor-Critic Method with Diffusion Policies").

IQL's critic (:mod:`offrl.algos.iql`'s losses, imported) with a diffusion model of the behaviour
policy in place of IQL's advantage-weighted Gaussian actor; the policy is extracted at action time:

* value:     ``L_V = mean |tau - 1{u<0}| u^2``, ``u = min_k Q'_k(s, a) - V(s)``
* critic:    ``L_Q = sum_k mean (Q_k(s, a) - r - gamma * mask * V(s'))^2``
* behaviour: ``L_eps = E ||eps_theta(s, sqrt(abar_t) a + sqrt(1 - abar_t) eps, t) - eps||^2``
  (:mod:`offrl.algos.generative`; VP schedule, ``T = 5`` steps), sampled from an EMA of ``theta``
* acting:    ``a_1..a_N ~ pi_beta(. | s)`` by ancestral sampling, then ``a = a_argmax_i Q'(s, a_i)``
  (``selection="argmax"``), or ``a_i`` drawn with probability ``prop. to w_i``,
  ``w_i = |tau - 1{Q'(s, a_i) < V(s)}| / |Q'(s, a_i) - V(s)|`` (``selection="expectile_weights"``).

The expectile weights are the paper's importance weights of the policy the expectile critic
implies (its Section 4); the authors' released evaluation (``eval_actions`` in
``jaxrl5/agents/ddpm_iql/ddpm_iql_learner.py``) takes the argmax of the target critic over the
``N`` samples instead, and that is the default here because the authors' evaluation loop
(``jaxrl5/evaluation.py``) acts with it. (The same file's ``sample_implicit_policy`` keeps only the ``|tau - 1{.}|``
factor of the weights; offrl follows the paper's formula, with ``|Q - V|`` floored at 1e-6.)

Defaults follow the authors' D4RL launcher (``train_ddpm_iql_offline.py``): T = 5, VP betas,
N = 64 (swept over 16/64/256), expectile 0.7 for locomotion (0.9 for AntMaze), EMA rate 0.001 of
the sampled denoiser, Adam 3e-4 with a cosine decay of the actor's rate, critics (256, 256),
returns normalised as IQL's. Where offrl differs from that code: the denoiser is an MLP with
LayerNorm (the code's is a 3-block LayerNorm ResNet with dropout 0.1), its time input
sinusoidal features (the code learns Fourier features), and each update takes one step of
every network on one minibatch (the code takes two denoiser steps per critic step).

Example::

    agent = create(Config(), obs_dim=17, action_dim=6, key=jax.random.key(0))
    agent, metrics = update(agent, batch)
    actions = act(agent, observations)          # N x T denoiser calls per state
"""

from __future__ import annotations

from dataclasses import dataclass

import flax
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos import generative, iql
from offrl.algos.common import Batch, apply_gradients_with_loss, hyperparameter, learning_rate_scale, make_train_state, min_q_value
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.planning import PlanningPolicy, act_by_planning
from offrl.algos.ranges import (ANY_REAL, BOOL, DISCOUNT, LEARNING_RATE, POLYAK, POSITIVE_INT, REWARD_SCALING, WIDTHS,
                                Interval, OneOf, OrNone, param)
from offrl.nets import EnsembleCritic, ValueNet


@dataclass(frozen=True)
class Config:
    """IDQL hyperparameters; defaults are the authors' D4RL locomotion settings (module docstring)."""

    actor_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the denoiser (cosine-decayed to 0)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the twin Q-functions
    value_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of V
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: MLP widths of Q and V
    actor_hidden_dims: tuple[int, ...] = param((256, 256, 256), WIDTHS)  #: MLP widths of the denoiser eps_theta(s, x_t, t)
    actor_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the denoiser (the authors' LN-ResNet has it)
    time_embedding_dim: int = param(16, Interval(2, 1024, "[]", integer=True))  #: sinusoidal features of the step t
    diffusion_steps: int = param(5, POSITIVE_INT)  #: T, denoising steps per sample (authors: 5)
    beta_schedule: str = param("vp", OneOf(("vp", "cosine")))  #: "vp" (authors) or Diffuser's "cosine"
    num_samples: int = param(64, POSITIVE_INT)  #: N, candidate actions sampled per state (authors: 64)
    selection: str = param("argmax", OneOf(("argmax", "expectile_weights")))  #: how one of the N is chosen (module docstring)
    actor_ema: float = param(0.001, POLYAK)  #: Polyak rate of the sampled denoiser copy (authors: 0.001; 1 = no EMA)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    expectile: float = param(0.7, Interval(0.0, 1.0, "()"))  #: tau of the expectile value loss (0.7 locomotion, 0.9 AntMaze)
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critic
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (clipped double Q: min)
    batch_size: int = param(256, POSITIVE_INT)  #: minibatch size
    cosine_actor_lr: bool = param(True, BOOL)  #: cosine decay of the denoiser's lr over ``schedule_steps``
    schedule_steps: int | None = param(None, OrNone(POSITIVE_INT))  #: steps of the lr schedule (None: the run's --steps)
    normalize_observations: bool = param(False, BOOL)  #: z-score observations with dataset statistics
    reward_scaling: str = param("returns", REWARD_SCALING)  #: "returns": r * 1000 / (max return - min return) (locomotion)
    reward_bias: float = param(0.0, ANY_REAL)  #: added to rewards after scaling (AntMaze uses -1)


class Agent(flax.struct.PyTreeNode):
    actor: TrainState            # the denoiser eps_theta(s, x_t, t)
    actor_ema_params: dict       # its EMA, the copy that samples
    critic: TrainState
    value: TrainState
    target_critic_params: dict
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    hparams: dict = flax.struct.field(default_factory=dict)  #: traced values of SPEC.traced_fields in a sweep (else empty)


def denoiser(config: Config, action_dim: int) -> generative.ActionField:
    return generative.ActionField(action_dim, tuple(config.actor_hidden_dims), time_embedding_dim=config.time_embedding_dim,
                                  activation=generative.mish, layer_norm=config.actor_layer_norm)


def schedule(config: Config) -> generative.Schedule:
    steps = config.diffusion_steps
    return generative.vp_schedule(steps) if config.beta_schedule == "vp" else generative.cosine_schedule(steps)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, value_key, rng = jax.random.split(key, 4)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = denoiser(config, action_dim)
    critic_net = EnsembleCritic(config.hidden_dims, num_qs=config.num_qs)
    value_net = ValueNet(config.hidden_dims)
    actor_lr = config.actor_lr
    if config.cosine_actor_lr:
        actor_lr = optax.cosine_decay_schedule(config.actor_lr, max(1, config.schedule_steps or 1_000_000))
    actor_params = actor_net.init(actor_key, obs, act, jnp.zeros((1,), jnp.int32))
    critic_params = critic_net.init(critic_key, obs, act)
    return Agent(
        actor=make_train_state(actor_net, actor_params, actor_lr),
        actor_ema_params=actor_params,
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        value=make_train_state(value_net, value_net.init(value_key, obs), config.value_lr),
        target_critic_params=critic_params,
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


# ---------------------------------------------------------------------- losses
value_loss = iql.value_loss
critic_loss = iql.critic_loss


def denoiser_loss(params, agent: Agent, batch: Batch, key):
    """``L_eps`` (:func:`offrl.algos.generative.diffusion_loss`) of the data's actions given their states."""
    return generative.diffusion_loss(params, agent.actor.apply_fn, schedule(agent.config), batch.observations,
                                     batch.actions, key)


def expectile_weights(q: jax.Array, v: jax.Array, expectile) -> jax.Array:
    """``|tau - 1{q < v}| / max(|q - v|, 1e-6)``: the importance weight of each candidate under the
    policy an expectile critic implies (the paper's Section 4)."""
    return jnp.abs(expectile - (q < v)) / jnp.maximum(jnp.abs(q - v), 1e-6)


# ---------------------------------------------------------------------- update
def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    rng, key = jax.random.split(agent.rng)
    target_q = agent.critic.apply_fn(agent.target_critic_params, batch.observations, batch.actions).min(0)
    next_v = agent.value.apply_fn(agent.value.params, batch.next_observations)
    value, v_loss, v_aux = apply_gradients_with_loss(agent.value, value_loss, agent, batch, target_q,
                                                     lr_scale=learning_rate_scale(agent, "value_lr"))
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, next_v,
                                                      lr_scale=learning_rate_scale(agent, "critic_lr"))
    actor, a_loss, _ = apply_gradients_with_loss(agent.actor, denoiser_loss, agent, batch, key,
                                                 lr_scale=learning_rate_scale(agent, "actor_lr"))
    agent = agent.replace(
        actor=actor, critic=critic, value=value,
        actor_ema_params=losses.soft_update(agent.actor_ema_params, actor.params, agent.config.actor_ema),
        target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, hyperparameter(agent, "tau")),
        rng=rng, step=agent.step + 1,
    )
    v = v_aux["v"]
    return agent, {"value_loss": v_loss, "critic_loss": c_loss, "actor_loss": a_loss, "v": v.mean(), "q": c_aux["q"],
                   "adv": (target_q - v).mean()}


# ---------------------------------------------------------------------- acting
def plan(agent: Agent, observation: jax.Array, key: jax.Array) -> jax.Array:
    """One action for one (agent-unit) observation: ``N`` diffusion samples, one chosen by the critic."""
    cfg = agent.config
    sample_key, choice_key = jax.random.split(key)
    action_dim = agent.actor_ema_params["params"]["Dense_0"]["bias"].shape[0]
    obs = jnp.broadcast_to(observation, (cfg.num_samples, observation.shape[-1]))
    eps_fn = lambda s, x, t: agent.actor.apply_fn(agent.actor_ema_params, s, x, t)  # noqa: E731
    candidates = generative.ddpm_sample(eps_fn, schedule(cfg), obs, action_dim, sample_key)
    q = agent.critic.apply_fn(agent.target_critic_params, obs, candidates).min(0)
    if cfg.selection == "argmax":
        return candidates[jnp.argmax(q)]
    v = agent.value.apply_fn(agent.value.params, observation[None])[0]
    weights = expectile_weights(q, v, cfg.expectile)
    return candidates[jax.random.categorical(choice_key, jnp.log(weights))]


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    """``plan`` for each row, with a fixed sampling key (deterministic)."""
    return act_by_planning(plan, agent, observations)


q_value = min_q_value


def rollout_policy(agents, info, seeds: int, envs_per_seed: int):
    """``(policy, None)``: fresh samples from every env's state at every step (its ``seconds_per_action`` times them)."""
    return PlanningPolicy(plan, info, seeds), None


#: not exportable: an action is N x T denoiser passes and a critic, not one MLP pass
SPEC = AlgorithmSpec(name="idql", exportable=False, rollout_policy=rollout_policy,
                     traced_fields=("discount", "expectile", "tau", "actor_lr", "critic_lr", "value_lr"))
