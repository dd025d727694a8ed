"""Fitted Q evaluation (FQE; Le, Voloshin & Yue 2019, "Batch Policy Learning under Constraints").

FQE regresses ``Q_theta`` onto the target policy's Bellman backup on logged transitions::

    y_i = r_i + gamma * m_i * E_{a'~pi(.|s'_i)} Qbar(s'_i, a')      (m_i = 0 at a true terminal)
    L(theta) = mean_i (Q_theta(s_i, a_i) - y_i)^2

with ``Qbar`` a Polyak-averaged target network (``tau``), or a copy of ``Q_theta`` refreshed
every ``target_update_period`` steps (the paper's iterations of fitted regression).

How fast the value propagates is set by the target network. If ``Q_theta`` tracked its target
``T Qbar`` exactly, the Polyak update ``Qbar <- (1 - tau) Qbar + tau T Qbar`` contracts the
error by ``1 - tau (1 - gamma)`` per step, so after ``n`` steps from ``Q = 0`` a fraction about
``exp(-n tau (1 - gamma))`` of an infinite-horizon value is still missing (a hard copy every
``K`` steps: ``gamma^(n / K)``). At ``gamma = 0.99`` and the common ``tau = 0.005`` that is 61%
missing after 10k steps and 1% only after 92k; the default ``tau = 0.05`` reaches 1% in ~9k
steps (``benchmarks/results/ope-curve-*`` and ``docs/ope.md`` measure it on Hopper data).

The regression target is scaled: FQE fits ``Q / c`` on rewards ``r / c`` (the backup is linear
in ``r``, so the fixed point is ``Q^pi / c`` exactly) with ``c = mean|r| * min(1 / (1 - gamma), H)``
(:func:`return_scale`, ``H`` the longest episode), and every value it returns is multiplied
back by ``c``; the critic's outputs and Adam's steps are then of order 1 whatever the reward units.

:func:`train_until_flat` trains in chunks and stops when, over the last ``w`` chunks, every
policy's direct estimate moved by at most ``tolerance`` relative and its mean loss by at most
``loss_tolerance`` relative to the ``w`` chunks before (:func:`has_flattened`), or at a cap; it
returns the curve. With the Polyak rate above, a window of ``W`` steps closes a fraction
``1 - exp(-W tau (1 - gamma))`` of the remaining gap, so a relative change below ``tolerance``
bounds the remaining gap by about ``tolerance / (1 - exp(-W tau (1 - gamma)))``.

Divergence is judged per policy after every chunk (:func:`diverged`), on each seed's direct
estimate ``J_ps`` and chunk-mean loss ``L_ps``, given the data's value range ``[lo, hi]``
(:func:`value_bounds`, where every policy's value lies), a ``margin`` and a ``loss_growth`` factor.
Policy ``p`` diverges at the first chunk ``T`` at which, for some seed ``s``,

* its estimate stayed outside the range by more than ``margin`` of its width for a whole window,
  ``J_ps < lo - margin * d`` or ``J_ps > hi + margin * d`` at each of chunks ``T-w+1..T``
  (``d = max(hi - lo, c)``, ``c`` the return scale; a non-finite estimate counts), or
* its loss grew: ``mean(L_ps over chunks T-w+1..T) > loss_growth * min_j mean(L_ps over chunks j-w+1..j)``
  over the earlier windows ``j <= T - w`` (judged from ``T >= 2 w`` chunks; a non-finite loss counts).

A converging fit's loss falls and levels off while a diverging one's grows geometrically: on the
15 Hopper candidates of the DOPE run the window loss of the 14 that did not diverge never rose above
2.2x its earlier minimum in 60k steps, while the diverging one passed 3x at 43k steps and 4x at
44k (defaults: ``margin = 0.1``, ``loss_growth = 4``; the margin only keeps noise at a bound
from counting, since a diverging estimate grows without bound). The estimate must stay out for a
window because a critic still far from its fit swings: in the same run one candidate read -70 (the
range was [0, 621]) at 2000 steps and 82 at 3000. All seeds of a diverged policy are then rolled
back to the last chunk at which every seed's estimate was inside the range and the loss test passed
(its initialisation if none) and stay there; the stopping rule is applied to the other policies only, and the curve records
``diverged_at`` (the chunk's step), ``frozen_at`` and the reason.

``layer_norm=True`` puts a LayerNorm after each hidden layer of the critic, the remedy for Q
divergence of Yue et al. (2023). Off by default: on the DOPE candidates of the generated Hopper
medium tier it cut FQE's runaways from 5 of 14 to 2 but the rest settled on the same
over-estimates (Spearman 0.20, was 0.12), and on HalfCheetah it drove the std-0.5 candidates below
zero (MAE 24% of the value range, was 15%); ``benchmarks/README.md`` has the table.

* Continuous: ``pi(.|s')`` is the Gaussian ``N(mu(s'), sigma(s')^2)`` truncated to the action
  box (:class:`GaussianTarget`; :mod:`offrl.ope.policies` defines it and the importance weights
  use the same density), and the expectation is the mean over ``next_action_samples`` draws
  ``a'_k``, redrawn at every step (antithetic pairs of quantiles ``u, 1 - u``). The sampled
  target is an unbiased estimate of the backup, so the regression has the same fixed point as
  the exact expectation. ``sigma = 0`` (a plain array of actions) is the deterministic backup
  ``Qbar(s', mu(s'))``.
* Discrete: the network outputs one value per action and the backup is
  ``sum_a' pi(a'|s') Qbar(s', a')``.

The policy enters only through ``pi(.|s')``, computed once for the whole dataset before
training, so one jitted ``lax.scan`` chunk updates ``P`` policies x ``S`` seeds at once
(``vmap`` over both) with the dataset on the device. :func:`state_values` returns
``V(s) = E_{a~pi(.|s)} Q(s, a)`` the same way (the mean over ``value_samples`` draws, from a
fixed key); the direct method is ``J = mean_i V(s_i0)`` over the data's episode start states,
and DR's control variate uses the same ``V``.

Example::

    mean, std = policy.distribution(ds.next_observations)
    scale = return_scale(ds.rewards, 0.99, int(ds.episode_lengths().max()))
    data = fqe_data(ds, GaussianTarget(mean[None], std[None]), policy.action_low, policy.action_high, scale)
    agents = create(FQEConfig(), data, seeds=2)
    s0 = ds.observations[ds.episode_bounds()[0]]
    m0, sd0 = policy.distribution(s0)
    probe = lambda agents: state_values(agents, data, s0, GaussianTarget(m0[None], sd0[None])).mean(-1)   # (P, S)
    bounds = value_bounds(ds.rewards, 0.99, int(ds.episode_lengths().max()))
    agents, metrics, curve = train_until_flat(agents, data, probe, max_steps=50_000, window=3, bounds=bounds)
    curve.diverged()                                                      # [] unless a policy ran away
    q = q_values(agents, data, ds.observations, ds.actions)               # (P, S, N)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from flax.training.train_state import TrainState

from offrl.nets import MLP, Critic


@dataclass(frozen=True)
class FQEConfig:
    hidden_dims: tuple[int, ...] = (256, 256)   # critic MLP (d3rlpy's FQE default encoder is 256x256)
    learning_rate: float = 3e-4                 # Adam (d3rlpy: 1e-4; on the scaled target 3e-4 converges sooner, docs/ope.md)
    discount: float = 0.99
    tau: float = 0.05                           # Polyak rate of the target network (0.005 left half of a gamma-0.99 value unpropagated after 10k steps; see the docstring) ...
    target_update_period: int = 0               # ... or, when > 0, a hard copy every this many steps (d3rlpy: 100)
    batch_size: int = 256
    num_actions: int | None = None              # discrete: the critic outputs one Q per action
    next_action_samples: int = 2                # continuous: draws a' ~ pi(.|s') averaged in each backup (one antithetic pair)
    value_samples: int = 16                     # continuous: draws a ~ pi(.|s) averaged in V(s)
    normalize_returns: bool = True              # regress Q / c with c = return_scale(rewards, discount, longest episode)
    layer_norm: bool = False                    # LayerNorm after each hidden layer (Yue et al. 2023); off by default, see the docstring
    seed: int = 0


class GaussianTarget(NamedTuple):
    """A continuous target policy's ``pi(.|s_i)`` per row: the truncated Gaussian with
    ``mean`` and ``std`` in env units, ``(..., N, d)`` each (see :mod:`offrl.ope.policies`)."""

    mean: jax.Array
    std: jax.Array


class FQEData(NamedTuple):
    """Device arrays: shared transitions, and per-policy ``next_policy = pi(.|s'_i)`` with
    leading axes ``(P, N)``: a :class:`GaussianTarget` (continuous), deterministic actions
    ``(P, N, d)`` (continuous, ``sigma = 0``) or probabilities ``(P, N, A)`` (discrete).
    ``rewards`` are divided by ``value_scale`` (the critic learns ``Q / value_scale``)."""

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_observations: jax.Array
    masks: jax.Array
    next_policy: jax.Array | GaussianTarget
    obs_mean: jax.Array
    obs_std: jax.Array
    action_low: jax.Array
    action_high: jax.Array
    value_scale: jax.Array

    def normalize(self, obs):
        return (jnp.asarray(obs, jnp.float32) - self.obs_mean) / self.obs_std


class FQEAgent(struct.PyTreeNode):
    critic: TrainState
    target_params: dict
    step: jax.Array
    config: FQEConfig = struct.field(pytree_node=False)


def return_scale(rewards, discount: float, horizon: int) -> float:
    """``c = mean_i |r_i| * min(1 / (1 - gamma), H)``: the size of a discounted return of a
    ``H``-step episode (``H`` the data's longest), 1 when every reward is 0."""
    size = float(np.mean(np.abs(np.asarray(rewards, np.float64)))) if len(rewards) else 0.0
    horizon = min(1.0 / (1.0 - discount), float(horizon)) if discount < 1 else float(horizon)
    return size * max(horizon, 1.0) if size > 0 else 1.0


def value_bounds(rewards, discount: float, horizon: int) -> tuple[float, float]:
    """``[min(0, min r), max(0, max r)] * h`` with ``h = 1 / (1 - gamma)`` (``H`` at ``gamma = 1``):
    every policy's value lies inside, so an FQE estimate outside it has diverged."""
    r = np.asarray(rewards, np.float64)
    h = 1.0 / (1.0 - discount) if discount < 1 else float(horizon)
    return min(0.0, float(r.min())) * h, max(0.0, float(r.max())) * h


def fqe_data(dataset, next_policy, action_low=None, action_high=None, value_scale: float = 1.0) -> FQEData:
    """Put ``dataset`` on the device with observations standardised and rewards divided by
    ``value_scale`` (:func:`return_scale`); ``next_policy`` as in :class:`FQEData` for each of
    ``P`` policies; the action box ``[action_low, action_high]`` (default unbounded) truncates a
    :class:`GaussianTarget`."""
    obs = np.asarray(dataset.observations, np.float32)
    mean, std = obs.mean(0), obs.std(0) + 1e-3
    norm = lambda x: jnp.asarray((np.asarray(x, np.float32) - mean) / std)  # noqa: E731
    dim = int(np.asarray(dataset.actions).reshape(len(obs), -1).shape[1])
    box = lambda b, inf: jnp.full((dim,), inf, jnp.float32) if b is None else jnp.asarray(np.broadcast_to(b, (dim,)), jnp.float32)  # noqa: E731
    policy = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), next_policy)
    rewards = np.asarray(dataset.rewards, np.float64) / value_scale
    return FQEData(norm(obs), jnp.asarray(dataset.actions, jnp.float32), jnp.asarray(rewards, jnp.float32),
                   norm(dataset.next_observations), jnp.asarray(1.0 - dataset.terminals, jnp.float32),
                   policy, jnp.asarray(mean), jnp.asarray(std), box(action_low, -np.inf), box(action_high, np.inf),
                   jnp.asarray(value_scale, jnp.float32))


def num_policies(data: FQEData) -> int:
    return int(jax.tree_util.tree_leaves(data.next_policy)[0].shape[0])


# ---------------------------------------------------------------------- the target policy's actions
def truncated_gaussian_quantile(u, mean, std, low, high) -> jax.Array:
    """The action at quantiles ``u`` of ``N(mean, std^2)`` truncated to ``[low, high]``:
    ``mean + std * Phi^-1(Phi(alpha) + u (Phi(beta) - Phi(alpha)))``; ``std = 0`` gives ``mean``."""
    safe = jnp.where(std > 0, std, 1.0)
    lo = jax.scipy.special.ndtr((low - mean) / safe)
    hi = jax.scipy.special.ndtr((high - mean) / safe)
    z = jax.scipy.special.ndtri(lo + u * (hi - lo))
    return jnp.clip(jnp.where(std > 0, mean + std * z, mean), low, high)


def sample_actions(key, target: GaussianTarget, low, high, num: int) -> jax.Array:
    """``num`` draws from each row's truncated Gaussian, ``(num, B, d)``, in antithetic pairs
    (quantiles ``u`` and ``1 - u``, ``u`` uniform on ``(1e-6, 1 - 1e-6)``: each draw has the
    policy's law cut at 4.75 standard deviations, and a pair cancels ``Q``'s linear term in ``a``)."""
    eps = 1e-6
    u = jax.random.uniform(key, ((num + 1) // 2, *target.mean.shape), minval=eps, maxval=1 - eps)
    u = jnp.concatenate([u, 1.0 - u])[:num]
    return truncated_gaussian_quantile(u, target.mean, target.std, low, high)


# ---------------------------------------------------------------------- network and losses
def critic_module(config: FQEConfig) -> nn.Module:
    if config.num_actions:
        return MLP((*config.hidden_dims, config.num_actions), layer_norm=config.layer_norm)
    return Critic(tuple(config.hidden_dims), layer_norm=config.layer_norm)


def q_of(module, params, obs, actions, config: FQEConfig) -> jax.Array:
    """``Q(s, a)``; for a discrete critic ``actions`` holds the action index in column 0."""
    if config.num_actions:
        values = module.apply(params, obs)
        return jnp.take_along_axis(values, actions[:, :1].astype(jnp.int32), axis=-1)[:, 0]
    return module.apply(params, obs, actions)


def policy_value(module, params, obs, policy, config: FQEConfig, key=None, low=None, high=None,
                 num_samples: int = 1) -> jax.Array:
    """``E_{a~pi(.|s)} Q(s, a)``: ``sum_a pi(a|s) Q(s, a)`` (discrete: ``policy`` = probabilities),
    ``Q(s, policy)`` (continuous actions) or the mean of ``Q(s, a_k)`` over ``num_samples`` draws
    (a :class:`GaussianTarget`, with ``key`` and the box)."""
    if config.num_actions:
        return jnp.sum(module.apply(params, obs) * policy, axis=-1)
    if isinstance(policy, GaussianTarget):
        actions = sample_actions(key, policy, low, high, num_samples)
        return module.apply(params, jnp.broadcast_to(obs, (num_samples, *obs.shape)), actions).mean(0)
    return module.apply(params, obs, policy)


def fqe_target(rewards: jax.Array, masks: jax.Array, next_values: jax.Array, discount: float) -> jax.Array:
    """``y = r + gamma * m * E_{a'~pi(.|s')} Qbar(s', a')`` (``next_values`` is the expectation)."""
    return rewards + discount * masks * next_values


def fqe_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """``mean (Q(s, a) - y)^2``."""
    return jnp.mean((q - target) ** 2)


# ---------------------------------------------------------------------- create / update
def create(config: FQEConfig, data: FQEData, seeds: int = 1) -> FQEAgent:
    """``P x S`` agents (leading axes: policies, seeds), seed ``s`` initialised from ``config.seed + s``."""
    module = critic_module(config)
    policies = num_policies(data)

    def one(seed):
        obs, act = data.observations[:1], data.actions[:1]
        params = module.init(jax.random.PRNGKey(seed), obs) if config.num_actions else module.init(jax.random.PRNGKey(seed), obs, act)
        state = TrainState.create(apply_fn=module.apply, params=params, tx=optax.adam(config.learning_rate))
        return FQEAgent(state, params, jnp.zeros((), jnp.int32), config)

    def build(seed_ids):                # one compiled call, not one dispatch per initialiser op
        per_seed = jax.vmap(one)(seed_ids)
        return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (policies, *x.shape)), per_seed)

    return jax.jit(build)(jnp.arange(seeds) + config.seed)


def update(agent: FQEAgent, data: FQEData, next_policy, seed_key: jax.Array) -> tuple[FQEAgent, dict]:
    """One FQE step for one agent (``next_policy``: this agent's policy's ``pi(.|s')``)."""
    config = agent.config
    module = critic_module(config)
    key = jax.random.fold_in(seed_key, agent.step)
    idx = jax.random.randint(key, (config.batch_size,), 0, data.rewards.shape[0])
    obs, act, nxt = data.observations[idx], data.actions[idx], data.next_observations[idx]
    policy = jax.tree_util.tree_map(lambda x: x[idx], next_policy)
    next_values = policy_value(module, agent.target_params, nxt, policy, config, jax.random.fold_in(key, 1),
                               data.action_low, data.action_high, config.next_action_samples)
    target = jax.lax.stop_gradient(fqe_target(data.rewards[idx], data.masks[idx], next_values, config.discount))

    def loss_fn(params):
        q = q_of(module, params, obs, act, config)
        return fqe_loss(q, target), q

    (loss, q), grads = jax.value_and_grad(loss_fn, has_aux=True)(agent.critic.params)
    critic = agent.critic.apply_gradients(grads=grads)
    if config.target_update_period > 0:
        refresh = (agent.step + 1) % config.target_update_period == 0
        target_params = jax.tree_util.tree_map(lambda new, old: jnp.where(refresh, new, old), critic.params, agent.target_params)
    else:
        target_params = optax.incremental_update(critic.params, agent.target_params, config.tau)
    agent = agent.replace(critic=critic, target_params=target_params, step=agent.step + 1)
    return agent, {"fqe/loss": loss, "fqe/q_mean": q.mean()}


@partial(jax.jit, static_argnums=(2,))
def train_chunk(agents: FQEAgent, data: FQEData, num_steps: int) -> tuple[FQEAgent, dict]:
    """``num_steps`` updates of every ``(policy, seed)`` agent in one ``lax.scan``; metrics are
    the chunk's means, ``(P, S)`` each, in the critic's units (``Q / value_scale``)."""
    seeds = agents.step.shape[1]
    seed_keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(seeds) + agents.config.seed + 1000)

    def one(agent, next_policy, seed_key):
        def body(a, _):
            return update(a, data, next_policy, seed_key)
        agent, metrics = jax.lax.scan(body, agent, None, length=num_steps)
        return agent, jax.tree_util.tree_map(lambda m: m.mean(0), metrics)

    over_seeds = jax.vmap(one, in_axes=(0, None, 0))
    return jax.vmap(over_seeds, in_axes=(0, 0, None))(agents, data.next_policy, seed_keys)


def train(agents: FQEAgent, data: FQEData, num_steps: int, chunk: int = 1000, progress=None) -> tuple[FQEAgent, dict]:
    """Run ``num_steps`` updates in chunks (Python touches the loop once per chunk)."""
    metrics = {}
    done = 0
    while done < num_steps:
        k = min(chunk, num_steps - done)
        agents, metrics = train_chunk(agents, data, k)
        done += k
        if progress is not None:
            progress(done)
    return agents, jax.tree_util.tree_map(np.asarray, metrics)


# ---------------------------------------------------------------------- training until flat
class FQECurve(NamedTuple):
    """What :func:`train_until_flat` saw after each chunk: ``steps`` ``(T,)``, the probe's
    ``estimates`` ``(T, P)`` (env units, the mean over seeds), the chunk-mean ``losses`` ``(T, P)``
    (critic units, the mean over seeds), wall ``seconds`` ``(T,)``, each seed's estimates
    ``seed_estimates`` ``(T, P, S)``; ``converged`` is False when the cap stopped it (or every policy
    diverged). A diverged policy ``p`` has ``diverged_at[p]`` (the step of the chunk that failed,
    0 = never), ``frozen_at[p]`` (the step whose parameters it keeps, 0 = its initialisation) and
    ``reasons[p]`` (``"estimate"`` or ``"loss"``); its rows after ``diverged_at`` are NaN."""

    steps: np.ndarray
    estimates: np.ndarray
    losses: np.ndarray
    seconds: np.ndarray
    converged: bool
    seed_estimates: np.ndarray | None = None
    diverged_at: np.ndarray | None = None
    frozen_at: np.ndarray | None = None
    reasons: tuple = ()

    def diverged(self) -> list[int]:
        """Indices of the policies that diverged."""
        return [] if self.diverged_at is None else [int(p) for p in np.flatnonzero(self.diverged_at > 0)]

    def to_dict(self) -> dict:
        clean = lambda x: [[None if not np.isfinite(v) else float(v) for v in row] for row in np.asarray(x, np.float64)]  # noqa: E731
        return {"steps": self.steps.tolist(), "estimates": clean(self.estimates), "losses": clean(self.losses),
                "seconds": self.seconds.tolist(), "converged": bool(self.converged),
                "final_step": int(self.steps[-1]) if len(self.steps) else 0,
                "total_seconds": float(self.seconds[-1]) if len(self.seconds) else 0.0,
                "seed_estimates": None if self.seed_estimates is None else [clean(t) for t in self.seed_estimates],
                "diverged_at": None if self.diverged_at is None else [int(v) for v in self.diverged_at],
                "frozen_at": None if self.frozen_at is None else [int(v) for v in self.frozen_at],
                "reasons": list(self.reasons)}


def has_flattened(estimates, losses, window: int, tolerance: float, loss_tolerance: float, floor: float) -> bool:
    """The stopping rule, on per-chunk rows ``estimates`` and ``losses`` ``(T, P)``: with ``w = window``
    chunks and ``T >= 2 w``, every policy's estimate moved by at most ``tolerance`` relative over the
    last ``w`` chunks, ``|J_T - J_{T-w}| <= tolerance * max(|J_T|, floor)``, and its mean loss over the
    last ``w`` chunks is within ``loss_tolerance`` (relative) of the mean over the ``w`` before."""
    estimates, losses = np.asarray(estimates, np.float64), np.asarray(losses, np.float64)
    if window < 1 or len(estimates) < 2 * window:
        return False
    now, before = estimates[-1], estimates[-1 - window]
    flat = np.abs(now - before) <= tolerance * np.maximum(np.abs(now), floor)
    recent, previous = losses[-window:].mean(0), losses[-2 * window:-window].mean(0)
    steady = np.abs(recent - previous) <= loss_tolerance * np.maximum(previous, 1e-12)
    return bool(np.all(flat) and np.all(steady))


def diverged(estimates, losses, window: int, bounds: tuple[float, float] | None, margin: float = 0.1,
             loss_growth: float | None = 4.0, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The divergence rule of the module docstring at the last of ``T`` chunks: ``estimates`` and
    ``losses`` are ``(T, P, S)`` (or ``(T, P)``, one seed) per-chunk rows of each seed's estimate
    and loss; returns ``(by_estimate, by_loss, inside)``, boolean ``(P,)`` each: diverged by the
    estimate test (some seed outside ``[lo - margin d, hi + margin d]`` in each of the last ``window``
    chunks), by the loss test, and every seed's estimate inside that range now. ``bounds=None`` or
    ``loss_growth=None`` turns that test off; ``scale`` is ``c`` (the width's floor)."""
    est = np.asarray(estimates, np.float64)
    loss = np.asarray(losses, np.float64)
    est = est[..., None] if est.ndim == 2 else est
    loss = loss[..., None] if loss.ndim == 2 else loss
    by_estimate = np.zeros(est.shape[1], bool)
    inside = np.ones(est.shape[1], bool)
    if bounds is not None:
        lo, hi = bounds
        slack = margin * max(hi - lo, scale)
        recent = est[-max(window, 1):]
        outside = ~((recent >= lo - slack) & (recent <= hi + slack))                      # NaN counts as outside
        inside = ~outside[-1].any(-1)
        if len(est) >= window:
            by_estimate = np.any(outside.all(0), axis=-1)
    by_loss = np.zeros(loss.shape[1], bool)
    if loss_growth is not None:
        by_loss = np.any(~np.isfinite(loss[-1]), axis=-1)
        if len(loss) >= 2 * window >= 2:
            total = np.concatenate([np.zeros((1, *loss.shape[1:])), np.cumsum(loss, axis=0)])
            means = (total[window:] - total[:-window]) / window          # means[i]: chunks i..i+w-1
            recent, earlier = means[-1], means[:len(means) - window].min(0)
            by_loss |= np.any(~(recent <= loss_growth * earlier), axis=-1)
    return np.asarray(by_estimate, bool), by_loss, inside & ~by_loss


def judge_chunk(seed_estimates, seed_losses, active, window: int, tolerance: float, loss_tolerance: float, floor: float,
                bounds: tuple[float, float] | None, margin: float, loss_growth: float | None,
                scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """What :func:`train_until_flat` decides after a chunk, from the rows so far (``(T, P, S)`` each;
    the rows of policies frozen earlier are NaN): ``(failed, by_estimate, inside, flat)``, where
    ``failed`` (``(P,)``) marks the ``active`` policies that :func:`diverged` now, ``by_estimate`` says
    which test did it, ``inside`` which policies passed both tests at this chunk (the chunks whose
    parameters a rollback may return to), and ``flat`` is :func:`has_flattened` on the seed means of
    the policies still active (False when none is)."""
    by_estimate, by_loss, inside = diverged(seed_estimates, seed_losses, window, bounds, margin, loss_growth, scale)
    failed = active & (by_estimate | by_loss)
    still = active & ~failed
    if not still.any():
        return failed, by_estimate, inside, False
    est = np.asarray(seed_estimates, np.float64)[:, still].mean(-1)
    loss = np.asarray(seed_losses, np.float64)[:, still].mean(-1)
    return failed, by_estimate, inside, has_flattened(est, loss, window, tolerance, loss_tolerance, floor)


@jax.jit
def _where_policies(keep_new, new, old):
    """``new`` for the policies where ``keep_new`` (``(P,)``) holds, ``old`` elsewhere."""
    return jax.tree_util.tree_map(lambda n, o: jnp.where(keep_new.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old)


def train_until_flat(agents: FQEAgent, data: FQEData, probe, max_steps: int, window: int = 5, tolerance: float = 0.01,
                     loss_tolerance: float = 0.1, chunk: int = 1000, progress=None, bounds: tuple[float, float] | None = None,
                     margin: float = 0.1, loss_growth: float | None = 4.0) -> tuple[FQEAgent, dict, FQECurve]:
    """Train in chunks of ``chunk`` steps until :func:`has_flattened` holds for every policy that has
    not diverged (``window`` in chunks), or ``max_steps``; ``probe(agents) -> (P, S)`` (or ``(P,)``)
    is the estimate watched (e.g. each seed's mean ``V`` of the start states), and
    ``floor = 1e-3 * value_scale`` keeps the relative test sane near 0. After each chunk
    :func:`diverged` (``bounds``, ``margin``, ``loss_growth``) marks policies, whose parameters are
    rolled back to their last chunk that passed and frozen there (see the module docstring); the
    returned ``metrics`` are NaN for them."""
    import time

    steps, estimates, losses, seconds, seed_estimates, seed_losses = [], [], [], [], [], []
    metrics, done, t0, converged = {}, 0, time.perf_counter(), False
    policies = agents.step.shape[0]
    floor = 1e-3 * float(data.value_scale)
    active = np.ones(policies, bool)
    good, good_step = agents, np.zeros(policies, np.int64)
    diverged_at, reasons = np.zeros(policies, np.int64), [None] * policies
    while done < max_steps and not converged and active.any():
        k = min(chunk, max_steps - done)
        agents, metrics = train_chunk(agents, data, k)
        done += k
        value = np.asarray(probe(agents), np.float64)
        value = value[:, None] if value.ndim == 1 else value
        loss = np.asarray(metrics["fqe/loss"], np.float64)
        frozen = ~active[:, None]                  # frozen before this chunk: nothing of theirs is recorded
        seed_estimates.append(np.where(frozen, np.nan, value))
        seed_losses.append(np.where(frozen, np.nan, loss))
        failed, by_estimate, inside, converged = judge_chunk(seed_estimates, seed_losses, active, window, tolerance,
                                                             loss_tolerance, floor, bounds, margin, loss_growth,
                                                             float(data.value_scale))
        for p in np.flatnonzero(failed):
            diverged_at[p], reasons[p] = done, "estimate" if by_estimate[p] else "loss"
        passed = active & ~failed & inside
        good = _where_policies(jnp.asarray(passed), agents, good)
        good_step[passed] = done
        active &= ~failed
        if not active.all():
            agents = _where_policies(jnp.asarray(active), agents, good)
        steps.append(done)
        estimates.append(np.where(active | failed, value.mean(-1), np.nan))
        losses.append(np.where(active | failed, loss.mean(-1), np.nan))
        seconds.append(time.perf_counter() - t0)
        if progress is not None:
            progress(done)
    metrics = jax.tree_util.tree_map(lambda m: np.where(active.reshape((-1,) + (1,) * (np.ndim(m) - 1)), np.asarray(m), np.nan), metrics)
    frozen_at = np.where(diverged_at > 0, good_step, 0)
    curve = FQECurve(np.asarray(steps), np.asarray(estimates), np.asarray(losses), np.asarray(seconds), converged,
                     np.asarray(seed_estimates), diverged_at, frozen_at, tuple(reasons))
    return agents, metrics, curve


# ---------------------------------------------------------------------- evaluation
@partial(jax.jit, static_argnums=(3,))
def _values(agents: FQEAgent, obs, policy, discrete_or_taken: bool, key=None, low=None, high=None):
    module = critic_module(agents.config)

    def one(agent, pol):
        if discrete_or_taken:
            return q_of(module, agent.critic.params, obs, pol, agent.config)
        return policy_value(module, agent.critic.params, obs, pol, agent.config, key, low, high, agent.config.value_samples)

    return jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(0, 0))(agents, policy)


def _padded(x, axis: int, length: int):
    """``x`` with its last row along ``axis`` repeated up to ``length`` rows (one compiled shape per call)."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, pad, mode="edge")


def _batches(n: int, batch_size: int) -> tuple[int, int]:
    """``(batch, padded length)``: every batch has the same size, so ``_values`` compiles once."""
    batch = max(1, min(batch_size, n))
    return batch, -(-n // batch) * batch


def q_values(agents: FQEAgent, data: FQEData, observations, actions, batch_size: int = 65536) -> np.ndarray:
    """``Q(s_i, a_i)`` of the logged actions: ``(P, S, N)``."""
    n = len(observations)
    batch, length = _batches(n, batch_size)
    obs = _padded(data.normalize(observations), 0, length)
    act = _padded(jnp.asarray(actions, jnp.float32), 0, length)
    policies = agents.step.shape[0]
    parts = [np.asarray(_values(agents, obs[i:i + batch], jnp.broadcast_to(act[i:i + batch], (policies, *act[i:i + batch].shape)), True))
             for i in range(0, length, batch)]
    return np.concatenate(parts, axis=-1)[..., :n] * float(data.value_scale)


def state_values(agents: FQEAgent, data: FQEData, observations, policy, batch_size: int = 4096, seed: int = 0) -> np.ndarray:
    """``V(s_i) = E_{a~pi(.|s_i)} Q(s_i, a)``: ``(P, S, N)``; ``policy`` is ``pi(.|s_i)`` with leading
    axes ``(P, N)``, as ``next_policy`` in :class:`FQEData`. A :class:`GaussianTarget` is averaged
    over ``value_samples`` draws (key ``seed``, folded with the batch's first row)."""
    n = len(observations)
    batch, length = _batches(n, batch_size)
    obs = _padded(data.normalize(observations), 0, length)
    policy = jax.tree_util.tree_map(lambda x: _padded(jnp.asarray(x, jnp.float32), 1, length), policy)
    key = jax.random.PRNGKey(seed)
    parts = [np.asarray(_values(agents, obs[i:i + batch], jax.tree_util.tree_map(lambda x: x[:, i:i + batch], policy),
                                False, jax.random.fold_in(key, i), data.action_low, data.action_high))
             for i in range(0, length, batch)]
    return np.concatenate(parts, axis=-1)[..., :n] * float(data.value_scale)
