"""A learned dynamics model: a probabilistic ensemble, its fit, rollouts of a policy in it, a model buffer.

Every member ``i`` of the ensemble is a Gaussian over the normalised change of state and the
reward (Chua et al. 2018, PETS; Janner et al. 2019, MBPO; Yu et al. 2020, MOPO)::

    x = ((s, a) - mu_x) / sigma_x,   y = ((s' - s, r) - mu_y) / sigma_y
    p_i(y | x) = N(m_i(x), diag(exp(v_i(x))))
    v_i = v_max - softplus(v_max - h),  v_i = v_min + softplus(v_i - v_min)     (learned bounds)
    L   = sum_i mean_rows,dims [(m_i - y)^2 exp(-v_i) + v_i] + 0.01 sum_i (v_max,i - v_min,i)
          + sum_layers c_l / 2 ||W_l||^2 + BCE(terminal logit, terminal)

The members are one vmapped network (one parameter tree with a leading member axis). Each
member sees its own shuffle of the training rows; a held-out split (``holdout_ratio`` of the
rows, at most ``max_holdout``) scores every epoch, and a member's parameters are kept only when
its held-out MSE improves by more than 1%. Training stops after ``model_patience`` epochs in
which no member improved (MBPO's rule); the ``num_elites`` members with the lowest held-out
MSE are the elites that rollouts sample from.

Terminals: the env's known termination function when one is registered for the dataset's env
(:data:`TERMINATIONS`: Hopper's and Walker2d's health conditions; HalfCheetah and Pendulum
never terminate), otherwise the learned terminal head (``sigmoid(logit) > 0.5``), trained by the
BCE term above on the data's terminals.

A rollout is one ``lax.scan`` over the horizon; every step evaluates all members on all rows
at once, draws a random elite per row and a Gaussian sample; rows stop at a terminal.
:class:`ModelBuffer` is a fixed-size ring on the device that keeps only the live rows of each
rollout (compacted with a cumulative sum, so shapes stay static).

Example::

    model = init_dynamics(DynamicsSettings(), obs_dim=3, action_dim=1, key=jax.random.key(0))
    model, report = fit_dynamics(model, data, key)           # data: the engine's device arrays
    traj = rollout(model, policy, start_observations, key, horizon=5)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from offrl.algos.ranges import Interval, LEARNING_RATE, NON_NEGATIVE, OneOf, OrNone, POSITIVE_INT, WIDTHS, param
from offrl.errors import ConfigError

# ---------------------------------------------------------------------- termination functions


def _never(obs, actions, next_obs):
    return jnp.zeros(next_obs.shape[:-1], bool)


def _hopper(obs, actions, next_obs):
    """Gymnasium Hopper's health check on ``s'``: ``z > 0.7``, ``|angle| < 0.2``, ``|s'[1:]| < 100``."""
    z, angle = next_obs[..., 0], next_obs[..., 1]
    healthy = jnp.all(jnp.isfinite(next_obs), -1) & jnp.all(jnp.abs(next_obs[..., 1:]) < 100.0, -1)
    return ~(healthy & (z > 0.7) & (jnp.abs(angle) < 0.2))


def _walker2d(obs, actions, next_obs):
    """Gymnasium Walker2d's health check on ``s'``: ``0.8 < z < 2`` and ``-1 < angle < 1``."""
    z, angle = next_obs[..., 0], next_obs[..., 1]
    return ~((z > 0.8) & (z < 2.0) & (angle > -1.0) & (angle < 1.0))


#: env family (:func:`offrl.envs.env_family`) -> ``terminal(s, a, s') -> bool``, in raw observations.
TERMINATIONS: dict[str, Callable] = {"hopper": _hopper, "walker2d": _walker2d, "halfcheetah": _never,
                                     "pendulum": _never, "none": _never}
TERMINATION_CHOICES = ("auto", "learned", *TERMINATIONS)


def termination_for_env(env_id: str | None) -> str:
    """The registered termination function's name for ``env_id``, or ``"learned"``."""
    if not env_id:
        return "learned"
    from offrl.envs import env_family

    family = env_family(env_id)
    return family if family in TERMINATIONS else "learned"


# ---------------------------------------------------------------------- settings


@dataclass(frozen=True)
class DynamicsSettings:
    """The dynamics model's fields, shared by the configs of every model-based algorithm (defaults:
    MBPO/MOPO's model, as OfflineRL-Kit runs it: 7 members, 5 elites, 4 x 200 swish layers)."""

    ensemble_size: int = param(7, POSITIVE_INT)  #: members of the probabilistic ensemble (MOPO: 7)
    num_elites: int = param(5, POSITIVE_INT)  #: members rollouts sample from, lowest held-out MSE (MOPO: 5)
    model_hidden_dims: tuple[int, ...] = param((200, 200, 200, 200), WIDTHS)  #: widths of each member (MOPO: 4 x 200)
    model_lr: float = param(1e-3, LEARNING_RATE)  #: Adam learning rate of the model (MBPO: 1e-3)
    model_weight_decay: float = param(2.5e-5, NON_NEGATIVE)  #: L2 coefficient of the first layer, rising linearly to 4x at the output (MBPO)
    model_batch_size: int = param(256, POSITIVE_INT)  #: rows per member per model gradient step
    holdout_ratio: float = param(0.2, Interval(0.0, 1.0, "()"))  #: share of the rows held out for early stopping and elites
    max_holdout: int = param(1000, POSITIVE_INT)  #: at most this many held-out rows (MBPO)
    model_patience: int = param(5, POSITIVE_INT)  #: stop after this many epochs without a 1% held-out improvement (MBPO: 5)
    model_max_epochs: int | None = param(None, OrNone(POSITIVE_INT))  #: cap on model epochs (None: patience alone stops)
    termination: str = param("auto", OneOf(TERMINATION_CHOICES))  #: "auto": the env's registered function, else "learned"


def check_settings(settings) -> None:
    """Refuse an ensemble with fewer members than elites (values of the wrong type are left to the range check)."""
    members, elites = settings.ensemble_size, settings.num_elites
    if isinstance(members, int) and isinstance(elites, int) and 1 <= members < elites:
        raise ConfigError(f"config field 'num_elites' ({settings.num_elites}) exceeds 'ensemble_size' "
                          f"({settings.ensemble_size}); set e.g. --set num_elites={settings.ensemble_size}.")


def holdout_size(settings, n: int) -> int:
    """Held-out rows of an ``n``-row dataset; refuses a dataset too small to split."""
    held = min(settings.max_holdout, int(settings.holdout_ratio * n))
    if held < 1 or n - held < 2:
        raise ConfigError(f"the dataset has {n} transitions, too few for the dynamics model's held-out split "
                          f"(holdout_ratio {settings.holdout_ratio}); use a dataset with at least "
                          f"{int(2 / settings.holdout_ratio) + 2} transitions.")
    return held


# ---------------------------------------------------------------------- the network


class GaussianMember(nn.Module):
    """One member: ``(x) -> (mean, log-variance, terminal logit)`` with learned log-variance bounds."""

    out_dim: int
    hidden_dims: Sequence[int]

    @nn.compact
    def __call__(self, x):
        for size in self.hidden_dims:
            x = nn.swish(nn.Dense(size)(x))
        h = nn.Dense(2 * self.out_dim + 1)(x)
        mean, raw, logit = h[..., :self.out_dim], h[..., self.out_dim:-1], h[..., -1]
        max_logvar = self.param("max_logvar", nn.initializers.constant(0.5), (self.out_dim,))
        min_logvar = self.param("min_logvar", nn.initializers.constant(-10.0), (self.out_dim,))
        logvar = max_logvar - nn.softplus(max_logvar - raw)
        logvar = min_logvar + nn.softplus(logvar - min_logvar)
        return mean, logvar, logit


class GaussianEnsemble(nn.Module):
    """``size`` members as one vmapped network; inputs ``(size, rows, in)``, outputs with a leading member axis."""

    out_dim: int
    hidden_dims: Sequence[int]
    size: int

    @nn.compact
    def __call__(self, x):
        members = nn.vmap(GaussianMember, variable_axes={"params": 0}, split_rngs={"params": True},
                          in_axes=0, out_axes=0, axis_size=self.size)
        return members(self.out_dim, tuple(self.hidden_dims))(x)


class Dynamics(flax.struct.PyTreeNode):
    """A fitted (or fresh) ensemble: parameters, normaliser statistics, elites, fit report."""

    params: dict
    opt_state: optax.OptState
    input_mean: jax.Array
    input_std: jax.Array
    target_mean: jax.Array
    target_std: jax.Array
    observation_low: jax.Array   #: (obs_dim,) smallest s and s' of the data: model states are clipped to [low, high]
    observation_high: jax.Array  #: (obs_dim,) largest s and s' of the data
    reward_low: jax.Array        #: smallest reward of the data: model rewards are clipped to [low, high]
    reward_high: jax.Array       #: largest reward of the data
    elites: jax.Array         #: (num_elites,) member indices
    holdout_mse: jax.Array    #: (ensemble_size,) best held-out MSE per member (normalised targets)
    epochs: jax.Array         #: epochs the fit ran
    fitted: jax.Array         #: bool: fit_dynamics has run
    settings: DynamicsSettings = flax.struct.field(pytree_node=False)
    obs_dim: int = flax.struct.field(pytree_node=False)

    @property
    def net(self) -> GaussianEnsemble:
        return GaussianEnsemble(self.obs_dim + 1, tuple(self.settings.model_hidden_dims), self.settings.ensemble_size)


def _optimizer(settings) -> optax.GradientTransformation:
    return optax.adam(settings.model_lr)


def init_dynamics(settings, obs_dim: int, action_dim: int, key: jax.Array) -> Dynamics:
    """A fresh ensemble with identity normalisers and the first ``num_elites`` members as elites."""
    check_settings(settings)
    settings = DynamicsSettings(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(DynamicsSettings)})
    net = GaussianEnsemble(obs_dim + 1, tuple(settings.model_hidden_dims), settings.ensemble_size)
    params = net.init(key, jnp.zeros((settings.ensemble_size, 1, obs_dim + action_dim)))
    d_in, d_out = obs_dim + action_dim, obs_dim + 1
    return Dynamics(params=params, opt_state=_optimizer(settings).init(params),
                    input_mean=jnp.zeros(d_in), input_std=jnp.ones(d_in),
                    target_mean=jnp.zeros(d_out), target_std=jnp.ones(d_out),
                    observation_low=jnp.full(obs_dim, -jnp.inf), observation_high=jnp.full(obs_dim, jnp.inf),
                    reward_low=jnp.array(-jnp.inf), reward_high=jnp.array(jnp.inf),
                    elites=jnp.arange(settings.num_elites), holdout_mse=jnp.full(settings.ensemble_size, jnp.inf),
                    epochs=jnp.zeros((), jnp.int32), fitted=jnp.zeros((), bool), settings=settings, obs_dim=obs_dim)


# ---------------------------------------------------------------------- losses


def gaussian_nll(mean: jax.Array, logvar: jax.Array, targets: jax.Array) -> jax.Array:
    """``sum_i mean_rows,dims [(m_i - y)^2 exp(-v_i) + v_i]`` (twice the NLL up to a constant)."""
    per_member = jnp.mean((mean - targets) ** 2 * jnp.exp(-logvar) + logvar, axis=(-2, -1))
    return jnp.sum(per_member)


def weight_decay(params, base: float) -> jax.Array:
    """``sum_l c_l / 2 ||W_l||^2`` over the ``L`` kernels, ``c_l = base (1 + 3 l / (L - 1))``."""
    member = params["params"]["VmapGaussianMember_0"]
    layers = sorted((k for k in member if k.startswith("Dense_")), key=lambda k: int(k.split("_")[1]))
    total = 0.0
    for l, name in enumerate(layers):
        c = base * (1.0 + 3.0 * l / max(len(layers) - 1, 1))
        total = total + 0.5 * c * jnp.sum(member[name]["kernel"] ** 2)
    return total


def model_loss(params, net: GaussianEnsemble, inputs, targets, terminals, decay: float):
    """The ensemble's training loss (module docstring) on per-member rows ``(M, B, .)``."""
    mean, logvar, logit = net.apply(params, inputs)
    member = params["params"]["VmapGaussianMember_0"]
    bounds = 0.01 * (jnp.sum(member["max_logvar"]) - jnp.sum(member["min_logvar"]))
    bce = jnp.sum(jnp.mean(optax.sigmoid_binary_cross_entropy(logit, terminals), axis=-1))
    nll = gaussian_nll(mean, logvar, targets)
    return nll + bounds + weight_decay(params, decay) + bce, {"model_nll": nll}


def holdout_mse(params, net: GaussianEnsemble, inputs, targets) -> jax.Array:
    """``(M,)`` mean squared error of each member's mean on shared rows ``(B, .)``."""
    m = net.size
    mean, _, _ = net.apply(params, jnp.broadcast_to(inputs, (m, *inputs.shape)))
    return jnp.mean((mean - targets) ** 2, axis=(-2, -1))


# ---------------------------------------------------------------------- fit


def model_arrays(data: dict):
    """``(inputs, targets, terminals)``: ``(s, a)``, ``(s' - s, r)`` and ``1 - mask`` of the engine's arrays."""
    inputs = jnp.concatenate([data["observations"], data["actions"]], -1)
    targets = jnp.concatenate([data["next_observations"] - data["observations"], data["rewards"][:, None]], -1)
    return inputs, targets, 1.0 - data["masks"]


class FitState(flax.struct.PyTreeNode):
    """The fit between epochs (:func:`fit_begin`, :func:`fit_epochs`, :func:`fit_end`): a checkpoint of it
    resumes the fit exactly (``offrl model train --resume``)."""

    params: dict
    opt_state: optax.OptState
    best_params: dict
    best: jax.Array        #: (M,) best held-out MSE per member so far
    since: jax.Array       #: epochs since any member improved by 1%
    count: jax.Array       #: epochs run
    key: jax.Array
    train_idx: jax.Array   #: rows of the training split
    hold_idx: jax.Array    #: rows of the held-out split
    input_mean: jax.Array
    input_std: jax.Array
    target_mean: jax.Array
    target_std: jax.Array


def fit_begin(model: Dynamics, data: dict, key: jax.Array) -> FitState:
    """The split (a permutation of the rows by ``key``), the normalisers of the training split, epoch 0."""
    s = model.settings
    inputs, targets, _ = model_arrays(data)
    n = inputs.shape[0]
    held = holdout_size(s, n)
    perm_key, key = jax.random.split(key)
    order = jax.random.permutation(perm_key, n)
    train_idx, hold_idx = order[: n - held], order[n - held:]
    M = s.ensemble_size
    return FitState(params=model.params, opt_state=model.opt_state, best_params=model.params,
                    best=jnp.full(M, jnp.inf, jnp.float32), since=jnp.zeros((), jnp.int32), count=jnp.zeros((), jnp.int32),
                    key=key, train_idx=train_idx, hold_idx=hold_idx,
                    input_mean=inputs[train_idx].mean(0), input_std=inputs[train_idx].std(0) + 1e-6,
                    target_mean=targets[train_idx].mean(0), target_std=targets[train_idx].std(0) + 1e-6)


def fit_finished(settings, state: FitState) -> jax.Array:
    """True once ``model_patience`` epochs passed without improvement, or ``model_max_epochs`` ran."""
    done = state.since >= settings.model_patience
    if settings.model_max_epochs is not None:
        done = done | (state.count >= settings.model_max_epochs)
    return done


def fit_epochs(model: Dynamics, state: FitState, data: dict, max_epochs: int | None = None) -> FitState:
    """Epochs until :func:`fit_finished` (or ``max_epochs`` more of them); one ``lax.while_loop``, traceable."""
    s = model.settings
    net = model.net
    inputs, targets, terminals = model_arrays(data)
    n_train = state.train_idx.shape[0]
    batch = min(s.model_batch_size, n_train)
    n_batches = n_train // batch
    x = (inputs - state.input_mean) / state.input_std
    y = (targets - state.target_mean) / state.target_std
    x_hold, y_hold = x[state.hold_idx], y[state.hold_idx]
    tx = _optimizer(s)
    M = s.ensemble_size
    stop = state.count + (max_epochs if max_epochs is not None else jnp.iinfo(jnp.int32).max - state.count)

    def epoch(st: FitState) -> FitState:
        key, shuffle_key = jax.random.split(st.key)
        shuffles = jax.vmap(lambda k: jax.random.permutation(k, st.train_idx))(jax.random.split(shuffle_key, M))

        def minibatch(j, carry):
            params, opt_state = carry
            rows = jax.lax.dynamic_slice_in_dim(shuffles, j * batch, batch, axis=1)  # (M, batch)
            grads, _ = jax.grad(model_loss, has_aux=True)(params, net, x[rows], y[rows], terminals[rows],
                                                          s.model_weight_decay)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        params, opt_state = jax.lax.fori_loop(0, n_batches, minibatch, (st.params, st.opt_state))
        mse = holdout_mse(params, net, x_hold, y_hold)
        improved = (st.best - mse) / jnp.where(jnp.isfinite(st.best), jnp.abs(st.best), 1.0) > 0.01
        improved = improved | ~jnp.isfinite(st.best)
        keep = lambda new, old: jnp.where(improved.reshape((M,) + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
        return st.replace(params=params, opt_state=opt_state,
                          best_params=jax.tree_util.tree_map(keep, params, st.best_params),
                          best=jnp.where(improved, mse, st.best), since=jnp.where(improved.any(), 0, st.since + 1),
                          count=st.count + 1, key=key)

    return jax.lax.while_loop(lambda st: ~fit_finished(s, st) & (st.count < stop), epoch, state)


def fit_end(model: Dynamics, state: FitState, data: dict) -> tuple[Dynamics, dict]:
    """The model with each member's best held-out parameters, the elites, the normalisers and the data's ranges."""
    elites = jnp.argsort(state.best)[: model.settings.num_elites]
    fitted = model.replace(params=state.best_params, opt_state=state.opt_state, input_mean=state.input_mean,
                           input_std=state.input_std, target_mean=state.target_mean, target_std=state.target_std,
                           observation_low=jnp.minimum(data["observations"].min(0), data["next_observations"].min(0)),
                           observation_high=jnp.maximum(data["observations"].max(0), data["next_observations"].max(0)),
                           reward_low=data["rewards"].min(), reward_high=data["rewards"].max(),
                           elites=elites, holdout_mse=state.best, epochs=state.count, fitted=jnp.ones((), bool))
    return fitted, {"model_holdout_mse": state.best[elites].mean(), "model_epochs": state.count}


def fit_dynamics(model: Dynamics, data: dict, key: jax.Array) -> tuple[Dynamics, dict]:
    """Fit ``model`` to the engine's device arrays ``data`` (traceable): :func:`fit_begin`, :func:`fit_epochs`
    until early stopping, :func:`fit_end`. Returns the fitted model and ``{"model_holdout_mse", "model_epochs"}``."""
    state = fit_epochs(model, fit_begin(model, data, key), data)
    return fit_end(model, state, data)


# ---------------------------------------------------------------------- prediction and rollouts


def predict(model: Dynamics, observations: jax.Array, actions: jax.Array):
    """Every member's ``(mean, std, terminal_prob)`` of ``(s' - s, r)`` in the data's units: ``(M, N, obs_dim + 1)``."""
    x = (jnp.concatenate([observations, actions], -1) - model.input_mean) / model.input_std
    m = model.settings.ensemble_size
    mean, logvar, logit = model.net.apply(model.params, jnp.broadcast_to(x, (m, *x.shape)))
    return (mean * model.target_std + model.target_mean, jnp.exp(0.5 * logvar) * model.target_std,
            jax.nn.sigmoid(logit))


def predict_elites(model: Dynamics, observations: jax.Array, actions: jax.Array):
    """Elite ``e`` on its own rows: ``observations (E, R, obs_dim)`` with ``E = num_elites`` ->
    ``(mean, std, terminal_prob)``, ``(E, R, .)``, in the data's units; row ``[e, r]`` equals
    :func:`predict`'s ``[elites[e], r]`` on those rows, at ``1 / ensemble_size`` of its cost."""
    x = (jnp.concatenate([observations, actions], -1) - model.input_mean) / model.input_std
    params = jax.tree_util.tree_map(lambda p: p[model.elites], model.params)
    net = GaussianEnsemble(model.obs_dim + 1, tuple(model.settings.model_hidden_dims), int(model.elites.shape[0]))
    mean, logvar, logit = net.apply(params, x)
    return (mean * model.target_std + model.target_mean, jnp.exp(0.5 * logvar) * model.target_std,
            jax.nn.sigmoid(logit))


def mopo_uncertainty(std: jax.Array) -> jax.Array:
    """MOPO's ``u(s, a) = max_i ||sigma_i(s, a)||_2`` over members ``i`` (Yu et al. 2020, eq. 7; ``std``: ``(M, N, D)``)."""
    return jnp.max(jnp.linalg.norm(std, axis=-1), axis=0)


def clip_to_data(model: Dynamics, next_observations: jax.Array, rewards: jax.Array):
    """``(clip(s', s_low, s_high), clip(r, r_low, r_high))`` with the data's ranges: a model sample never
    leaves the box the data spans (a member extrapolating past it would hand the critic states, and
    rewards, that no real transition can reach: Pendulum's angular velocity beyond its limit of 8)."""
    return (jnp.clip(next_observations, model.observation_low, model.observation_high),
            jnp.clip(rewards, model.reward_low, model.reward_high))


def terminal_function(model: Dynamics) -> Callable | None:
    """The registered termination function, or ``None`` for the learned head ("learned", unresolved "auto")."""
    return TERMINATIONS.get(model.settings.termination)


class Step(NamedTuple):
    next_observations: jax.Array  # (N, obs_dim)
    rewards: jax.Array            # (N,)
    terminals: jax.Array          # (N,) bool
    uncertainty: jax.Array        # (N,) MOPO's u(s, a)


def model_step(model: Dynamics, observations: jax.Array, actions: jax.Array, key: jax.Array) -> Step:
    """One step of the model: a random elite per row, a Gaussian sample of ``(s' - s, r)``."""
    mean, std, terminal_prob = predict(model, observations, actions)
    member_key, noise_key = jax.random.split(key)
    n = observations.shape[0]
    member = model.elites[jax.random.randint(member_key, (n,), 0, model.elites.shape[0])]
    rows = jnp.arange(n)
    sample = mean[member, rows] + std[member, rows] * jax.random.normal(noise_key, mean.shape[1:])
    next_obs, rewards = clip_to_data(model, observations + sample[:, :-1], sample[:, -1])
    fn = terminal_function(model)
    terminals = fn(observations, actions, next_obs) if fn is not None else terminal_prob[member, rows] > 0.5
    return Step(next_obs, rewards, terminals, mopo_uncertainty(std))


class Transitions(NamedTuple):
    """Model transitions with a leading ``(horizon, starts)`` shape (rollouts) or ``(rows,)`` (buffer)."""

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_observations: jax.Array
    masks: jax.Array
    uncertainty: jax.Array


def rollout(model: Dynamics, policy: Callable, start_observations: jax.Array, key: jax.Array, horizon: int):
    """``(Transitions, valid)`` of ``policy(obs, key) -> actions`` run ``horizon`` steps from each start.

    One ``lax.scan`` over the horizon; all starts step together. ``valid[t, n]`` is False once row
    ``n`` has reached a terminal before step ``t``.
    """
    if horizon < 1:
        raise ConfigError(f"the rollout horizon is {horizon}; it must be at least 1 (set --set rollout_length=5).")

    def body(carry, step_key):
        obs, alive = carry
        policy_key, model_key = jax.random.split(step_key)
        actions = policy(obs, policy_key)
        out = model_step(model, obs, actions, model_key)
        transition = Transitions(obs, actions, out.rewards, out.next_observations,
                                 1.0 - out.terminals.astype(jnp.float32), out.uncertainty)
        return (out.next_observations, alive & ~out.terminals), (transition, alive)

    alive = jnp.ones(start_observations.shape[0], bool)
    _, (traj, valid) = jax.lax.scan(body, (start_observations, alive), jax.random.split(key, horizon))
    return traj, valid


# ---------------------------------------------------------------------- model buffer


class ModelBuffer(NamedTuple):
    """A ring of model transitions on the device; ``size`` rows are filled, ``pointer`` is the next write."""

    data: Transitions
    pointer: jax.Array
    size: jax.Array

    @property
    def capacity(self) -> int:
        return self.data.rewards.shape[0]


def buffer_init(capacity: int, obs_dim: int, action_dim: int) -> ModelBuffer:
    z = lambda *shape: jnp.zeros((capacity, *shape), jnp.float32)  # noqa: E731
    return ModelBuffer(Transitions(z(obs_dim), z(action_dim), z(), z(obs_dim), z(), z()),
                       jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def buffer_add(buffer: ModelBuffer, transitions: Transitions, valid: jax.Array) -> ModelBuffer:
    """Append the ``valid`` rows of ``transitions`` (any leading shape), oldest rows overwritten first."""
    flat = jax.tree_util.tree_map(lambda x: x.reshape(valid.size, *x.shape[valid.ndim:]), transitions)
    valid = valid.reshape(-1)
    cap = buffer.capacity
    slot = (buffer.pointer + jnp.cumsum(valid) - 1) % cap
    slot = jnp.where(valid, slot, cap)  # out of range: dropped by the scatter
    data = jax.tree_util.tree_map(lambda b, x: b.at[slot].set(x, mode="drop"), buffer.data, flat)
    count = valid.sum().astype(jnp.int32)
    return ModelBuffer(data, (buffer.pointer + count) % cap, jnp.minimum(buffer.size + count, cap))


def buffer_sample(buffer: ModelBuffer, key: jax.Array, n: int) -> Transitions:
    """``n`` i.i.d. rows of the filled part."""
    idx = jax.random.randint(key, (n,), 0, jnp.maximum(buffer.size, 1))
    return jax.tree_util.tree_map(lambda x: x[idx], buffer.data)


def sample_successors(model: Dynamics, observations: jax.Array, actions: jax.Array, key: jax.Array,
                      num_samples: int):
    """``num_samples`` draws from every elite: ``(next_observations (S, E, N, obs_dim), rewards (S, E, N),
    masks (S, E, N))`` (MOBILE's Bellman estimates need each elite's own successors)."""
    mean, std, terminal_prob = predict(model, observations, actions)
    mean, std, terminal_prob = mean[model.elites], std[model.elites], terminal_prob[model.elites]
    sample = mean + std * jax.random.normal(key, (num_samples, *mean.shape))
    next_obs, rewards = clip_to_data(model, observations + sample[..., :-1], sample[..., -1])
    fn = terminal_function(model)
    obs = jnp.broadcast_to(observations, next_obs.shape)
    act = jnp.broadcast_to(actions, (*next_obs.shape[:-1], actions.shape[-1]))
    terminals = fn(obs, act, next_obs) if fn is not None else jnp.broadcast_to(terminal_prob > 0.5, sample.shape[:-1])
    return next_obs, rewards, 1.0 - terminals.astype(jnp.float32)
