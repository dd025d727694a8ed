"""What MOPO, MOBILE and COMBO share: a SAC learner trained on a mix of real and model transitions.

Per update, inside the compiled chunk (:func:`model_batch`)::

    step == 0:                 fit the dynamics ensemble to the whole dataset (offrl.dynamics.fit_dynamics)
    step % rollout_every == 0: roll the current policy out from rollout_starts dataset states for
                               rollout_length model steps; keep the live rows in the model buffer
    batch = real rows (real_ratio of batch_size) + model-buffer rows (the rest)

The whole dataset reaches ``update`` through :func:`sample` (``batch.extras["dataset"]``: the
device arrays themselves, no copy), so fitting the model and drawing rollout starts need no
engine hook. ``lax.cond`` on the step stays a real branch because the engine keeps the step
counter unbatched, so the fit runs once and the rollout every ``rollout_every`` updates. The model,
its elites and the model buffer live in the agent, so checkpoints and resumes carry them.

The policy is SAC's tanh-Gaussian actor with automatic entropy tuning (:mod:`offrl.algos.sac`)
and a cosine-decayed actor learning rate, as OfflineRL-Kit runs all three algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass

import flax
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from offrl import dynamics as dyn
from offrl import losses
from offrl.algos import sac
from offrl.algos.common import Batch, apply_gradients_with_loss, make_train_state, min_q_value, scalar_train_state
from offrl.algos.ranges import ANY_REAL, BOOL, DISCOUNT, Interval, LEARNING_RATE, OrNone, POLYAK, POSITIVE, POSITIVE_INT, REWARD_SCALING, WIDTHS, param
from offrl.nets import EnsembleCritic, GaussianActor, tanh_gaussian_sample


@dataclass(frozen=True)
class ModelBasedConfig(dyn.DynamicsSettings):
    """The fields every model-based algorithm has (defaults: OfflineRL-Kit's D4RL runs of MOPO)."""

    actor_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of the policy, cosine-decayed to 0 (OfflineRL-Kit: 1e-4)
    critic_lr: float = param(3e-4, LEARNING_RATE)  #: Adam learning rate of the critics (3e-4)
    entropy_alpha_lr: float = param(1e-4, LEARNING_RATE)  #: Adam learning rate of log(entropy_alpha) (1e-4)
    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS)  #: actor and critic widths (MOPO, MOBILE: 2 x 256)
    num_qs: int = param(2, POSITIVE_INT)  #: critics in the ensemble (clipped double Q)
    critic_layer_norm: bool = param(False, BOOL)  #: LayerNorm after every hidden layer of the critics (MOPO, MOBILE: on)
    discount: float = param(0.99, DISCOUNT)  #: gamma
    tau: float = param(0.005, POLYAK)  #: Polyak rate of the target critics
    batch_size: int = param(256, POSITIVE_INT)  #: rows per update, real and model together
    initial_entropy_alpha: float = param(1.0, POSITIVE)  #: SAC's entropy coefficient at the start (log alpha = 0)
    target_entropy: float | None = param(None, OrNone(ANY_REAL))  #: None: -action_dim
    real_ratio: float = param(0.05, Interval(0.0, 1.0, "[]"))  #: share of real rows in each batch (MOPO, MOBILE: 0.05)
    rollout_length: int = param(5, POSITIVE_INT)  #: model steps per rollout, h (paper settings per dataset)
    rollout_starts: int = param(50_000, POSITIVE_INT)  #: dataset states a rollout starts from (rollout batch size: 50,000)
    rollout_every: int = param(1_000, POSITIVE_INT)  #: updates between rollouts (rollout frequency: 1,000)
    model_retain_rollouts: int = param(5, POSITIVE_INT)  #: rollouts the model buffer holds (model retain epochs: 5)
    cosine_actor_lr: bool = param(True, BOOL)  #: cosine decay of the actor lr over schedule_steps
    schedule_steps: int | None = param(None, OrNone(POSITIVE_INT))  #: steps of the lr schedule (None: the run's --steps)
    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number (the model predicts scaled rewards)
    reward_bias: float = param(0.0, ANY_REAL)  #: added to rewards after scaling

    def __post_init__(self):
        dyn.check_settings(self)


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    critic: TrainState
    target_critic_params: dict
    log_entropy_alpha: TrainState
    dynamics: dyn.Dynamics
    buffer: dyn.ModelBuffer
    rng: jax.Array
    step: jax.Array
    config: ModelBasedConfig = flax.struct.field(pytree_node=False)


def create(config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    actor_key, critic_key, model_key, rng = jax.random.split(key, 4)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor_net = GaussianActor(action_dim, tuple(config.hidden_dims), tanh_squash=True, state_dependent_std=True)
    critic_net = EnsembleCritic(tuple(config.hidden_dims), num_qs=config.num_qs, layer_norm=config.critic_layer_norm)
    critic_params = critic_net.init(critic_key, obs, act)
    actor_lr = config.actor_lr
    if config.cosine_actor_lr:
        actor_lr = optax.cosine_decay_schedule(config.actor_lr, max(1, config.schedule_steps or 1_000_000))
    capacity = config.rollout_starts * config.rollout_length * config.model_retain_rollouts
    return Agent(
        actor=make_train_state(actor_net, actor_net.init(actor_key, obs), actor_lr),
        critic=make_train_state(critic_net, critic_params, config.critic_lr),
        target_critic_params=critic_params,
        log_entropy_alpha=scalar_train_state(config.initial_entropy_alpha, config.entropy_alpha_lr),
        dynamics=dyn.init_dynamics(config, obs_dim, action_dim, model_key),
        buffer=dyn.buffer_init(capacity, obs_dim, action_dim),
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        config=config,
    )


def config_for_dataset(config, dataset, info):
    """Resolve ``termination="auto"`` to the env's registered function (or "learned"); refuse a
    dataset too small for the model's held-out split."""
    import dataclasses

    dyn.holdout_size(config, len(dataset))
    if config.termination == "auto":
        config = dataclasses.replace(config, termination=dyn.termination_for_env(info.env_id))
    return config


def sample(data: dict, key: jax.Array, batch_size: int) -> Batch:
    """I.i.d. real rows, with the whole dataset (the same device arrays) in ``extras["dataset"]``."""
    idx = jax.random.randint(key, (batch_size,), 0, data["rewards"].shape[0])
    batch = Batch.from_rows(jax.tree_util.tree_map(lambda x: x[idx], data))
    return batch._replace(extras={**batch.extras, "dataset": data})


# ---------------------------------------------------------------------- the real/model mix
def policy_sample(agent: Agent, observations: jax.Array, key: jax.Array) -> jax.Array:
    """``a ~ pi(.|s)``: the stochastic policy the rollouts follow."""
    mean, log_std = agent.actor.apply_fn(agent.actor.params, observations)
    return tanh_gaussian_sample(key, mean, log_std)[0]


def fit(agent: Agent, dataset: dict) -> Agent:
    model, _ = dyn.fit_dynamics(agent.dynamics, dataset, jax.random.fold_in(agent.rng, 1))
    return agent.replace(dynamics=model)


def refill(agent: Agent, dataset: dict) -> Agent:
    """One rollout of the current policy from ``rollout_starts`` dataset states into the buffer."""
    cfg = agent.config
    start_key, rollout_key = jax.random.split(jax.random.fold_in(agent.rng, 2))
    starts = dataset["observations"][jax.random.randint(start_key, (cfg.rollout_starts,), 0, dataset["rewards"].shape[0])]
    traj, valid = dyn.rollout(agent.dynamics, lambda o, k: policy_sample(agent, o, k), starts, rollout_key,
                              cfg.rollout_length)
    return agent.replace(buffer=dyn.buffer_add(agent.buffer, traj, valid))


def model_batch(agent: Agent, batch: Batch, reward_penalty: float = 0.0):
    """``(agent, mixed batch, metrics)``: fit at step 0, refill every ``rollout_every`` updates, then
    ``batch`` becomes its first ``real_ratio * batch_size`` rows plus model rows whose rewards are
    ``r - reward_penalty * u(s, a)`` (MOPO's penalty; 0 for the others). ``extras["is_model"]``
    marks the model rows."""
    cfg = agent.config
    dataset = batch.extras["dataset"]
    agent = jax.lax.cond(agent.step == 0, fit, lambda a, d: a, agent, dataset)
    agent = jax.lax.cond(agent.step % cfg.rollout_every == 0, refill, lambda a, d: a, agent, dataset)
    size = batch.rewards.shape[0]
    n_real = int(round(cfg.real_ratio * size))
    fake = dyn.buffer_sample(agent.buffer, jax.random.fold_in(agent.rng, 3), size - n_real)
    penalised = fake.rewards - reward_penalty * fake.uncertainty
    cat = lambda real, model: jnp.concatenate([real[:n_real], model])  # noqa: E731
    mixed = Batch(cat(batch.observations, fake.observations), cat(batch.actions, fake.actions),
                  cat(batch.rewards, penalised), cat(batch.next_observations, fake.next_observations),
                  cat(batch.masks, fake.masks),
                  extras={"is_model": jnp.arange(size) >= n_real})
    model = agent.dynamics
    mean = lambda x: x.mean() if x.size else jnp.zeros(())  # noqa: E731  (real_ratio 1: no model rows)
    metrics = {"model_holdout_mse": model.holdout_mse[model.elites].mean(), "model_epochs": model.epochs,
               "model_buffer_size": agent.buffer.size, "model_reward": mean(penalised),
               "model_uncertainty": mean(fake.uncertainty)}
    return agent, mixed, metrics


# ---------------------------------------------------------------------- the SAC learner
def deterministic_target(agent: Agent, batch: Batch, key: jax.Array) -> jax.Array:
    """``y = r + gamma * mask * min_k Q'_k(s', a')``, ``a' ~ pi(.|s')`` (no entropy term: MOBILE's and COMBO's backup)."""
    next_actions = policy_sample(agent, batch.next_observations, key)
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    return batch.rewards + agent.config.discount * batch.masks * next_q


def sac_update(agent: Agent, batch: Batch, target: jax.Array, key: jax.Array, critic_loss=sac.critic_loss,
               *critic_args):
    """Critic step on ``critic_loss(params, agent, batch, target, *critic_args)``, then SAC's actor
    and entropy steps on the new critic, then the Polyak step; ``(agent, metrics)``."""
    cfg = agent.config
    critic, c_loss, c_aux = apply_gradients_with_loss(agent.critic, critic_loss, agent, batch, target, *critic_args)
    agent = agent.replace(critic=critic)
    actor, a_loss, a_aux = apply_gradients_with_loss(agent.actor, sac.actor_loss, agent, batch, key)
    target_entropy = -batch.actions.shape[-1] if cfg.target_entropy is None else cfg.target_entropy
    log_entropy_alpha, t_loss, _ = apply_gradients_with_loss(agent.log_entropy_alpha, sac.entropy_alpha_loss,
                                                             a_aux["log_probs"], target_entropy)
    agent = agent.replace(actor=actor, log_entropy_alpha=log_entropy_alpha, step=agent.step + 1,
                          target_critic_params=losses.soft_update(agent.target_critic_params, critic.params, cfg.tau))
    metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "entropy_alpha_loss": t_loss,
               "entropy_alpha": jnp.exp(log_entropy_alpha.params["value"]), "entropy": -a_aux["log_probs"].mean(),
               **c_aux}
    return agent, metrics


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    mean, _ = agent.actor.apply_fn(agent.actor.params, observations)
    return jnp.tanh(mean)


q_value = min_q_value
