"""Diffuser (Janner et al. 2022): planning by denoising whole state-action trajectories.

A temporal U-Net ``f_theta(x_t, t)`` denoises trajectories ``x = (s_h, a_h)_{h<H}`` (agent
units: normalised states, actions in ``[-1, 1]``) under a DDPM schedule (Ho et al. 2020) with
the cosine ``alpha_bar`` of Nichol & Dhariwal 2021::

    q(x_t | x_0) = N(sqrt(abar_t) x_0, (1 - abar_t) I),
    L = E sum_{h,c} w_{h,c} (y - f_theta(x_t, t))_{h,c}^2 / sum w,   y = x_0 (default) or eps,
        w = first_action_weight on the entries of a_0, 1 elsewhere;
    q(x_{t-1} | x_t, x_0) = N(c0_t x_0 + ct_t x_t, var_t),
        c0_t = beta_t sqrt(abar_{t-1}) / (1 - abar_t),  ct_t = (1 - abar_{t-1}) sqrt(alpha_t) / (1 - abar_t),
        var_t = beta_t (1 - abar_{t-1}) / (1 - abar_t).

The sampler plugs the denoiser's ``x0_hat`` into the posterior mean. The network predicts
``x_0`` itself (``predict_epsilon=False``, the paper's locomotion setting): with the noise
target, ``x0_hat = (x_t - sqrt(1 - abar_t) eps_hat) / sqrt(abar_t)`` multiplies any error of
``eps_hat`` by ``1 / sqrt(abar_t)``, about 100 at the cosine schedule's first reverse step
(``beta_T`` clipped to 0.999, ``abar_T ~ 1e-4``), so a noise predictor trained for a few
thousand updates starts every plan far outside the data and its first actions are unrelated
to the state. The ``x_0`` target has no such amplification.

A value net ``J(x_t, t)`` regresses the discounted return from the segment's first step
(divided by ``return_scale``) on noisy trajectories. Sampling is guided by its gradient
(``mu <- mu + guidance_scale * var_t * grad_x J(mu, t)``) and the current state is inpainted
(``x[0, states] = s`` at the start and after every step). Both nets learn on the inputs they see
when planning: ``x_t`` with its first state clean (:func:`noisy_conditioned`, as the paper's
``apply_conditioning`` in training); a denoiser that only ever saw that entry noised ignores it,
and its plans' first actions do not depend on the state. ``num_samples`` plans are drawn per state, the one
with the highest ``J`` is kept and its first action executed; planning repeats at every step
(receding horizon).

Defaults are a small-data CPU configuration (horizon 4, U-Net widths (32, 32), Adam lr 1e-3,
batch 64; the paper's 20 diffusion steps, x_0 target, a_0 weight and guidance scale); the
paper's locomotion configuration is horizon 32, U-Net widths 32 x (1, 2, 4, 8), Adam lr 2e-4,
batch 32 (``--set horizon=32 --set unet_dims=32,64,128,256 --set learning_rate=2e-4
--set batch_size=32``).

No critic for the extrapolation monitor (:func:`q_value` returns ``None``); ``offrl export``
does not support Diffuser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState

from offrl.algos.contract import AlgorithmSpec
from offrl.algos.ranges import (BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, POSITIVE, POSITIVE_INT, REWARD_SCALING,
                                WIDTHS, Interval, param)
from offrl.algos.planning import PlanningPolicy, act_by_planning
from offrl.errors import ConfigError


@dataclass(frozen=True)
class Config:
    """Diffuser hyperparameters: a small-data CPU configuration (the paper's sizes in the module docstring)."""

    #: runs saved before these fields existed predicted the noise with unweighted losses
    ABSENT = {"predict_epsilon": True, "first_action_weight": 1.0}

    learning_rate: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of both nets (paper: 2e-4)
    predict_epsilon: bool = param(False, BOOL)  #: the denoiser's target: the noise eps (True) or x_0 (False, the paper's locomotion setting)
    first_action_weight: float = param(10.0, POSITIVE)  #: loss weight of a_0's entries (the paper's action_weight)
    batch_size: int = param(64, POSITIVE_INT)  #: trajectory segments per minibatch (paper: 32)
    horizon: int = param(4, Interval(2, 100_000, "[]", integer=True))  #: H, steps per planned trajectory (paper: 32)
    diffusion_steps: int = param(20, POSITIVE_INT)  #: DDPM steps (the paper's 20)
    unet_dims: tuple[int, ...] = param((32, 32), WIDTHS)  #: channels per U-Net level; H must divide by 2^(levels-1) (paper: 32,64,128,256)
    value_hidden_dims: tuple[int, ...] = param((128, 128), WIDTHS)  #: value net MLP widths
    guidance_scale: float = param(0.1, NON_NEGATIVE)  #: step size of the value-gradient guidance (0: unguided)
    num_samples: int = param(4, POSITIVE_INT)  #: plans sampled per state; the highest J is executed
    return_scale: float = param(100.0, POSITIVE)  #: value targets are discounted returns / this
    discount: float = param(0.99, DISCOUNT)  #: discount of the value targets and of reported returns
    normalize_observations: bool = param(True, BOOL)  #: z-score states with dataset statistics
    reward_scaling: str = param("none", REWARD_SCALING)  #: unused: value targets use raw rewards


class Agent(flax.struct.PyTreeNode):
    actor: TrainState    # the denoiser eps_theta
    value: TrainState    # J(x_t, t)
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)
    action_dim: int = flax.struct.field(pytree_node=False, default=1)   # the trajectory's last channels


class Segments(NamedTuple):
    trajectories: jax.Array   # (B, H, obs_dim + action_dim)
    returns: jax.Array        # (B,) scaled discounted return from the first step


# ----------------------------------------------------------------------------- DDPM schedule
class Schedule(NamedTuple):
    betas: jax.Array
    alphas: jax.Array
    alpha_bars: jax.Array
    alpha_bars_prev: jax.Array
    posterior_x0: jax.Array
    posterior_xt: jax.Array
    posterior_var: jax.Array


def cosine_schedule(num_steps: int, s: float = 0.008) -> Schedule:
    """``abar_t = f(t) / f(0)``, ``f(t) = cos^2((t / T + s) / (1 + s) * pi / 2)``, betas clipped to 0.999."""
    t = np.arange(num_steps + 1, dtype=np.float64) / num_steps
    f = np.cos((t + s) / (1 + s) * np.pi / 2) ** 2
    return schedule_from_betas(np.clip(1.0 - f[1:] / f[:-1], 0.0, 0.999))


def schedule_from_betas(betas) -> Schedule:
    """The :class:`Schedule` (alphas, ``abar``, posterior coefficients) of a beta sequence."""
    betas = np.asarray(betas, np.float64)
    alphas = 1.0 - betas
    abar = np.cumprod(alphas)
    abar_prev = np.concatenate([[1.0], abar[:-1]])
    c0 = betas * np.sqrt(abar_prev) / (1.0 - abar)
    ct = (1.0 - abar_prev) * np.sqrt(alphas) / (1.0 - abar)
    var = betas * (1.0 - abar_prev) / (1.0 - abar)
    return Schedule(*(jnp.asarray(x, jnp.float32) for x in (betas, alphas, abar, abar_prev, c0, ct, var)))


def q_sample(schedule: Schedule, x0, t, noise):
    """``x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) noise`` (``t`` per row)."""
    abar = schedule.alpha_bars[t].reshape(-1, *([1] * (x0.ndim - 1)))
    return jnp.sqrt(abar) * x0 + jnp.sqrt(1.0 - abar) * noise


def predict_x0(schedule: Schedule, xt, t, eps):
    """``x0 = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t)``."""
    abar = schedule.alpha_bars[t]
    return (xt - jnp.sqrt(1.0 - abar) * eps) / jnp.sqrt(abar)


# ----------------------------------------------------------------------------- networks
def _mish(x):
    """``x tanh(softplus(x))`` (Misra 2019), the U-Net's activation in the paper."""
    return x * jnp.tanh(jax.nn.softplus(x))


def _time_embedding(t, dim: int):
    half = dim // 2
    freqs = jnp.exp(-jnp.log(10_000.0) * jnp.arange(half) / max(half - 1, 1))
    angles = t[..., None].astype(jnp.float32) * freqs
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


class ResidualTemporalBlock(nn.Module):
    """Two ``Conv1D(k=5) -> GroupNorm -> Mish`` layers with the time embedding added between them."""

    channels: int

    @nn.compact
    def __call__(self, x, time):
        groups = min(8, self.channels)
        h = _mish(nn.GroupNorm(groups)(nn.Conv(self.channels, (5,), padding="SAME")(x)))
        h = h + nn.Dense(self.channels)(_mish(time))[:, None]
        h = _mish(nn.GroupNorm(groups)(nn.Conv(self.channels, (5,), padding="SAME")(h)))
        skip = nn.Conv(self.channels, (1,))(x) if x.shape[-1] != self.channels else x
        return h + skip


class TemporalUNet(nn.Module):
    """``(B, H, C), (B,) -> (B, H, C)``: residual blocks, downsampling by 2 per level, and back up with skips."""

    dims: tuple[int, ...]

    @nn.compact
    def __call__(self, x, t):
        channels = x.shape[-1]
        time = nn.Dense(self.dims[0])(_mish(nn.Dense(4 * self.dims[0])(_time_embedding(t, self.dims[0]))))
        skips = []
        for i, dim in enumerate(self.dims):
            x = ResidualTemporalBlock(dim)(x, time)
            skips.append(x)
            if i + 1 < len(self.dims):
                x = nn.Conv(dim, (3,), strides=(2,), padding="SAME")(x)
        x = ResidualTemporalBlock(self.dims[-1])(x, time)
        for i, dim in reversed(list(enumerate(self.dims))):
            if i + 1 < len(self.dims):
                x = nn.ConvTranspose(dim, (4,), strides=(2,), padding="SAME")(x)
            x = ResidualTemporalBlock(dim)(jnp.concatenate([x, skips[i]], axis=-1), time)
        return nn.Conv(channels, (1,), name="out")(x)


class TrajectoryValue(nn.Module):
    """``J(x_t, t)``: an MLP over the flattened trajectory and the time embedding."""

    hidden_dims: tuple[int, ...]

    @nn.compact
    def __call__(self, x, t):
        h = jnp.concatenate([x.reshape(x.shape[0], -1), _time_embedding(t, 32)], axis=-1)
        for dim in self.hidden_dims:
            h = _mish(nn.Dense(dim)(h))
        return nn.Dense(1)(h)[:, 0]


# ----------------------------------------------------------------------------- data
def extra_arrays(dataset, info, config: Config) -> dict[str, np.ndarray]:
    """``segment_starts``: rows where a whole ``H``-step segment fits in the episode (cycled to
    ``n`` rows, so a uniform row draws a near-uniform start); ``segment_returns``: the
    discounted return from each row / ``return_scale``; ``horizon``: a zero-size ``(n, 0, H)``
    array whose shape carries ``H`` to :func:`sample`."""
    n = len(dataset)
    if n == 0:
        raise ConfigError("the dataset has no episode (0 transitions); Diffuser needs at least one episode.")
    starts, ends = dataset.episode_bounds()
    longest = int((ends - starts).max())
    H = config.horizon
    if H > longest:
        raise ConfigError(f"config field 'horizon' is {H} but the longest episode has {longest} steps; use --set horizon=<= {longest}.")
    levels = len(config.unet_dims) - 1
    if H % (2 ** levels):
        raise ConfigError(f"config field 'horizon' is {H}; with {levels + 1} U-Net levels it must be a multiple of {2 ** levels}.")
    ok = np.concatenate([np.arange(s, e - H + 1) for s, e in zip(starts, ends) if e - s >= H])
    return {"segment_starts": ok[np.arange(n) % len(ok)].astype(np.int32),
            "segment_returns": (dataset.returns_to_go(config.discount) / config.return_scale).astype(np.float32),
            "horizon": np.zeros((n, 0, H), np.float32)}


def sample(data: dict, key: jax.Array, batch_size: int) -> Segments:
    """``batch_size`` whole ``H``-step segments ``[s, a]`` from within episodes."""
    n = data["rewards"].shape[0]
    H = data["horizon"].shape[-1]
    first = data["segment_starts"][jax.random.randint(key, (batch_size,), 0, n)]
    idx = first[:, None] + jnp.arange(H)[None]
    x = jnp.concatenate([data["observations"][idx], data["actions"][idx]], axis=-1)
    return Segments(x, data["segment_returns"][first])


# ----------------------------------------------------------------------------- learning
def loss_weights(horizon: int, obs_dim: int, action_dim: int, first_action_weight: float):
    """``(H, obs_dim + action_dim)`` weights ``w``: 0 on the conditioned ``s_0``, ``first_action_weight``
    on ``a_0``, 1 elsewhere."""
    w = jnp.ones((horizon, obs_dim + action_dim))
    return w.at[0, :obs_dim].set(0.0).at[0, obs_dim:].set(first_action_weight)


def noisy_conditioned(schedule: Schedule, x0, t, noise, obs_dim: int):
    """``q_sample`` with the first state kept clean (``x_t[:, 0, :obs_dim] = x0[:, 0, :obs_dim]``): the
    conditioning the sampler applies, so the nets learn on the inputs they see when planning."""
    return q_sample(schedule, x0, t, noise).at[:, 0, :obs_dim].set(x0[:, 0, :obs_dim])


def denoising_loss(params, apply_fn, schedule: Schedule, x0, key, weights, predict_epsilon: bool, obs_dim: int):
    """``E_{t, eps} sum w (y - f_theta(x_t, t))^2 / sum w``, ``x_t`` from :func:`noisy_conditioned`,
    ``y = eps`` or ``x0`` (``weights`` ``(H, C)``, mean over rows)."""
    t_key, n_key = jax.random.split(key)
    t = jax.random.randint(t_key, (x0.shape[0],), 0, schedule.betas.shape[0])
    noise = jax.random.normal(n_key, x0.shape)
    target = noise if predict_epsilon else x0
    error = (apply_fn(params, noisy_conditioned(schedule, x0, t, noise, obs_dim), t) - target) ** 2
    return jnp.mean(jnp.sum(weights * error, axis=(1, 2))) / jnp.sum(weights)


def value_loss(params, apply_fn, schedule: Schedule, x0, returns, key, obs_dim: int):
    """``E_t (J(x_t, t) - G)^2`` on noisy trajectories (first state clean, :func:`noisy_conditioned`)."""
    t_key, n_key = jax.random.split(key)
    t = jax.random.randint(t_key, (x0.shape[0],), 0, schedule.betas.shape[0])
    xt = noisy_conditioned(schedule, x0, t, jax.random.normal(n_key, x0.shape), obs_dim)
    return jnp.mean((apply_fn(params, xt, t) - returns) ** 2)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    d_key, v_key, rng = jax.random.split(key, 3)
    x = jnp.zeros((1, config.horizon, obs_dim + action_dim))
    t = jnp.zeros((1,), jnp.int32)
    unet, value = TemporalUNet(tuple(config.unet_dims)), TrajectoryValue(tuple(config.value_hidden_dims))
    actor = TrainState.create(apply_fn=unet.apply, params=unet.init(d_key, x, t), tx=optax.adam(config.learning_rate))
    critic = TrainState.create(apply_fn=value.apply, params=value.init(v_key, x, t), tx=optax.adam(config.learning_rate))
    return Agent(actor, critic, rng, jnp.zeros((), jnp.int32), config, action_dim)


def update(agent: Agent, batch: Segments) -> tuple[Agent, dict[str, jax.Array]]:
    schedule = cosine_schedule(agent.config.diffusion_steps)
    rng, d_key, v_key = jax.random.split(agent.rng, 3)
    config = agent.config
    _, H, C = batch.trajectories.shape
    obs_dim = C - agent.action_dim
    weights = loss_weights(H, obs_dim, agent.action_dim, config.first_action_weight)
    d_loss, d_grads = jax.value_and_grad(denoising_loss)(agent.actor.params, agent.actor.apply_fn, schedule,
                                                         batch.trajectories, d_key, weights, config.predict_epsilon,
                                                         obs_dim)
    v_loss, v_grads = jax.value_and_grad(value_loss)(agent.value.params, agent.value.apply_fn, schedule,
                                                     batch.trajectories, batch.returns, v_key, obs_dim)
    agent = agent.replace(actor=agent.actor.apply_gradients(grads=d_grads), value=agent.value.apply_gradients(grads=v_grads),
                          rng=rng, step=agent.step + 1)
    return agent, {"actor_loss": d_loss, "value_loss": v_loss}


# ----------------------------------------------------------------------------- planning
def denoised(schedule: Schedule, xt, t, output, predict_epsilon: bool):
    """The denoiser's ``x0_hat`` from its ``output``: :func:`predict_x0` of a noise prediction, or the output itself."""
    return predict_x0(schedule, xt, t, output) if predict_epsilon else output


def guided_sample(x0_fn, value_fn, schedule: Schedule, shape, observation, obs_dim: int, key, guidance_scale: float):
    """Reverse DDPM from ``N(0, I)`` of ``shape`` ``(B, H, C)`` with value guidance and the first
    state inpainted to ``observation`` (``(obs_dim,)``) at the start and after every step;
    ``x0_fn(x, t)`` (the denoiser's ``x0_hat``) and ``value_fn(x, t)`` act on batches
    (``value_fn`` returns ``(B,)``)."""
    T = schedule.betas.shape[0]
    inpaint = lambda x: x.at[:, 0, :obs_dim].set(observation)  # noqa: E731
    key, sub = jax.random.split(key)
    x = inpaint(jax.random.normal(sub, shape))

    def body(i, state):
        x, key = state
        t = T - 1 - i
        ts = jnp.full((shape[0],), t, jnp.int32)
        x0 = jnp.clip(x0_fn(x, ts), -10.0, 10.0)
        mean = schedule.posterior_x0[t] * x0 + schedule.posterior_xt[t] * x
        grad = jax.grad(lambda m: jnp.sum(value_fn(m, ts)))(mean)
        mean = mean + guidance_scale * schedule.posterior_var[t] * grad
        key, sub = jax.random.split(key)
        noise = jnp.where(t > 0, jnp.sqrt(schedule.posterior_var[t]), 0.0) * jax.random.normal(sub, shape)
        return inpaint(mean + noise), key

    x, _ = jax.lax.fori_loop(0, T, body, (x, key))
    return x


def plan(agent: Agent, observation: jax.Array, key: jax.Array) -> jax.Array:
    """The first action of the best of ``num_samples`` guided plans from ``observation``."""
    config = agent.config
    schedule = cosine_schedule(config.diffusion_steps)
    obs_dim = observation.shape[0]
    channels = agent.actor.params["params"]["out"]["bias"].shape[0]
    x0_fn = lambda x, t: denoised(schedule, x, t[0], agent.actor.apply_fn(agent.actor.params, x, t),  # noqa: E731
                                  config.predict_epsilon)
    value_fn = lambda x, t: agent.value.apply_fn(agent.value.params, x, t)  # noqa: E731
    x = guided_sample(x0_fn, value_fn, schedule, (config.num_samples, config.horizon, channels), observation, obs_dim,
                      key, config.guidance_scale)
    best = jnp.argmax(value_fn(x, jnp.zeros((config.num_samples,), jnp.int32)))
    return jnp.clip(x[best, 0, obs_dim:], -1.0, 1.0)


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    """Planned actions for a batch of (agent-unit) observations (a fixed planning key)."""
    return act_by_planning(plan, agent, observations)


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array):
    return None


def rollout_policy(agents, info, seeds: int, envs_per_seed: int):
    """``(policy, None)``: a fresh guided plan from every env's current state (receding horizon)."""
    return PlanningPolicy(plan, info, seeds), None


#: not exportable: every action is an iterative guided denoising with the U-Net, not one MLP pass
SPEC = AlgorithmSpec(name="diffuser", exportable=False, extra_arrays=extra_arrays, sample=sample,
                     rollout_policy=rollout_policy)
