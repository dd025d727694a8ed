"""Trajectory Transformer (Janner et al. 2021): a GPT over discretised trajectories, planning by beam search.

Every transition becomes ``D = obs_dim + action_dim + 2`` tokens ``(s^1..s^n, a^1..a^m, r, R)``
with ``R`` the discounted return-to-go. Each dimension ``i`` is discretised on its own into
``num_bins`` bins (``"uniform"``: equal widths over the data's range; ``"quantile"``: equal
counts), and token ``i`` of a transition has id ``i * num_bins + bin`` so every dimension has
its own vocabulary. A causal :class:`offrl.nets_seq.GPT` with learned position embeddings
is trained by teacher forcing:

    L = - sum_t valid_t log p(x_{t+1} | x_{<=t}) / sum_t valid_t

over windows of ``sequence_length`` transitions (left-padded at episode starts, as DT's).

Planning (:func:`plan`): from the current state's tokens, ``beam_width`` beams sample
``horizon`` transitions token by token (actions, next states: sampled; reward and
return-to-go: their expectations over the bin centres give the score). After each
transition, beams are ranked by ``sum_h gamma^h r_h + gamma^{h+1} R_h`` and the better half
is duplicated over the worse half (an expansion factor of 2, as the paper's default). The
first action of the best beam is executed (receding horizon). Planning time per action is
reported by :func:`rollout_policy` (``planning_seconds``).

The default sizes are a small CPU configuration; the paper's locomotion configuration is
4 layers, 4 heads, 128-wide embeddings, 100 bins, sequences of 10 transitions, beam width
128, horizon 15, discount 0.99, Adam lr 6e-4, batch 256 (``--set embed_dim=128 ...``).

TT has no critic, so :func:`q_value` returns ``None``; ``offrl export`` does not support it.
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
from offrl.algos.ranges import BOOL, DISCOUNT, LEARNING_RATE, OneOf, POSITIVE_INT, REWARD_SCALING, Interval, param
from offrl.algos.planning import PlanningPolicy, act_by_planning
from offrl.errors import ConfigError
from offrl.nets_seq import GPT


class _Edges:
    """``None`` or a flat tuple of finite floats (the fitted bin edges)."""

    invalid_examples = ((float("nan"),), (0.0, float("inf")), 3.0, ("x",))

    def contains(self, value) -> bool:
        if value is None:
            return True
        if not isinstance(value, (tuple, list)):
            return False
        try:
            return all(np.isfinite(float(v)) for v in value)
        except (TypeError, ValueError):
            return False

    def __str__(self) -> str:
        return "None or a flat tuple of finite numbers (fitted by offrl train)"


EDGES = _Edges()


@dataclass(frozen=True)
class Config:
    """TT hyperparameters: a small CPU configuration (the paper's sizes in the module docstring)."""

    learning_rate: float = param(6e-4, LEARNING_RATE)  #: Adam learning rate (the paper's)
    batch_size: int = param(64, POSITIVE_INT)  #: windows per minibatch
    num_bins: int = param(100, Interval(2, 10_000, "[]", integer=True))  #: bins per dimension (the paper's 100)
    discretisation: str = param("quantile", OneOf(("quantile", "uniform")))  #: bin edges: equal counts or equal widths
    sequence_length: int = param(4, POSITIVE_INT)  #: transitions per training window (paper: 10)
    embed_dim: int = param(64, POSITIVE_INT)  #: token embedding width (paper: 128)
    num_layers: int = param(2, POSITIVE_INT)  #: transformer blocks (paper: 4)
    num_heads: int = param(2, POSITIVE_INT)  #: attention heads (paper: 4)
    dropout: float = param(0.1, Interval(0.0, 1.0, "[)"))  #: dropout in the GPT
    horizon: int = param(4, POSITIVE_INT)  #: planning horizon in transitions (paper: 15)
    beam_width: int = param(16, Interval(2, 100_000, "[]", integer=True))  #: beams kept (paper: 128)
    discount: float = param(0.99, DISCOUNT)  #: discount of the return-to-go tokens and the beam score
    bin_edges: tuple | None = param(None, EDGES)  #: fitted per-dimension bin edges, flat (set from the dataset at train time)
    normalize_observations: bool = param(False, BOOL)  #: the bins already adapt to each dimension's scale
    reward_scaling: str = param("none", REWARD_SCALING)  #: unused: rewards are tokens in env units


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


class Windows(NamedTuple):
    tokens: jax.Array   # (B, L * D) int32
    valid: jax.Array    # (B, L * D) bool


# ----------------------------------------------------------------------------- tokeniser
def fit_bin_edges(x: np.ndarray, num_bins: int, kind: str) -> np.ndarray:
    """``(D, num_bins + 1)`` edges per column of ``x`` (``(n, D)``): uniform over [min, max] or quantiles."""
    x = np.asarray(x, np.float64)
    if kind == "uniform":
        lo, hi = x.min(axis=0), x.max(axis=0)
        edges = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, num_bins + 1)[None]
    else:
        edges = np.quantile(x, np.linspace(0.0, 1.0, num_bins + 1), axis=0).T
    edges = np.maximum.accumulate(edges, axis=1)
    widths = np.diff(edges, axis=1)
    edges[:, 1:] = edges[:, :1] + np.cumsum(np.maximum(widths, 1e-6), axis=1)  # no empty bins
    return edges.astype(np.float32)


def tokenize(x, edges):
    """Bin index of every entry of ``x`` (``(..., D)``) in ``[0, num_bins)`` (values outside the range clip)."""
    num_bins = edges.shape[1] - 1
    inner = edges[:, 1:-1]
    bins = jnp.sum(x[..., :, None] >= inner, axis=-1)
    return jnp.clip(bins, 0, num_bins - 1).astype(jnp.int32)


def bin_centres(edges):
    return 0.5 * (edges[:, 1:] + edges[:, :-1])


def detokenize(bins, edges):
    """The centre of each bin: ``(..., D)`` values (error at most half a bin width inside the range)."""
    centres = bin_centres(edges)
    return jnp.take_along_axis(jnp.broadcast_to(centres, (*bins.shape[:-1], *centres.shape)), bins[..., None], -1)[..., 0]


# ----------------------------------------------------------------------------- network
class TrajectoryGPT(nn.Module):
    """Token ids ``(B, T)`` -> next-token logits ``(B, T, num_bins)`` over the next dimension's bins."""

    dims: int
    num_bins: int
    max_tokens: int
    embed_dim: int = 64
    num_layers: int = 2
    num_heads: int = 2
    dropout: float = 0.1

    @nn.compact
    def __call__(self, tokens, valid, training: bool = False):
        T = tokens.shape[1]
        positions = jnp.arange(T)   # windows start at a transition boundary
        ids = (positions % self.dims)[None] * self.num_bins + tokens
        x = nn.Embed(self.dims * self.num_bins, self.embed_dim)(ids)
        x = x + nn.Embed(self.max_tokens, self.embed_dim)(positions)[None]
        h = GPT(self.embed_dim, self.num_layers, self.num_heads, self.dropout)(x, valid, training)
        heads = self.param("heads", nn.initializers.lecun_normal(), (self.dims, self.embed_dim, self.num_bins))
        next_dim = (positions + 1) % self.dims
        return jnp.einsum("bte,tek->btk", h, heads[next_dim])


def _net(config: Config, dims: int) -> TrajectoryGPT:
    max_tokens = config.sequence_length * dims
    return TrajectoryGPT(dims, config.num_bins, max_tokens, config.embed_dim, config.num_layers, config.num_heads,
                         config.dropout)


# ----------------------------------------------------------------------------- data
def transition_columns(dataset, info, config: Config) -> np.ndarray:
    """``(n, D)`` float columns ``[s, a (agent units, [-1, 1]), r, discounted return-to-go]``."""
    n = len(dataset)
    obs = dataset.observations.reshape(n, -1).astype(np.float32)
    if config.normalize_observations:
        obs = info.normalize(obs)
    actions = info.to_agent_action(dataset.actions.reshape(n, -1))
    rtg = dataset.returns_to_go(config.discount)
    return np.concatenate([obs, actions, dataset.rewards.reshape(n, 1), rtg.reshape(n, 1)], axis=1).astype(np.float32)


def edges_of(config: Config, dims: int) -> np.ndarray:
    """``(dims, num_bins + 1)``: the fitted edges, or uniform edges on ``[-1, 1]`` for a config
    that was never fitted to a dataset (unit tests that skip :func:`config_for_dataset`)."""
    if config.bin_edges is None:
        return np.tile(np.linspace(-1.0, 1.0, config.num_bins + 1, dtype=np.float32), (dims, 1))
    return np.asarray(config.bin_edges, np.float32).reshape(dims, config.num_bins + 1)


def config_for_dataset(config: Config, dataset, info) -> Config:
    """Fit the bin edges of every column of :func:`transition_columns` (stored in the run's config)."""
    import dataclasses

    if len(dataset) == 0:
        return config
    edges = fit_bin_edges(transition_columns(dataset, info, config), config.num_bins, config.discretisation)
    return dataclasses.replace(config, bin_edges=tuple(float(v) for v in edges.reshape(-1)))


def extra_arrays(dataset, info, config: Config) -> dict[str, np.ndarray]:
    """``transition_tokens`` ``(n, D)`` bins, ``episode_starts`` and ``context``, a zero-size
    ``(n, 0, sequence_length)`` array whose shape carries the window length to :func:`sample`."""
    n = len(dataset)
    if n == 0:
        raise ConfigError("the dataset has no episode (0 transitions); TT needs at least one episode.")
    starts, ends = dataset.episode_bounds()
    columns = transition_columns(dataset, info, config)
    tokens = np.asarray(tokenize(jnp.asarray(columns), jnp.asarray(edges_of(config, columns.shape[1]))))
    episode = np.repeat(np.arange(len(starts)), ends - starts)
    return {"transition_tokens": tokens, "episode_starts": starts[episode].astype(np.int32),
            "context": np.zeros((n, 0, config.sequence_length), np.float32)}


def sample(data: dict, key: jax.Array, batch_size: int) -> Windows:
    """Windows of ``L`` transitions ending at uniformly drawn rows, left-padded at episode starts."""
    n, D = data["transition_tokens"].shape
    L = data["context"].shape[-1]
    end = jax.random.randint(key, (batch_size,), 0, n)
    idx = end[:, None] - (L - 1) + jnp.arange(L)[None, :]
    valid = idx >= data["episode_starts"][end][:, None]
    tokens = jnp.where(valid[..., None], data["transition_tokens"][jnp.where(valid, idx, end[:, None])], 0)
    return Windows(tokens.reshape(batch_size, L * D), jnp.repeat(valid, D, axis=1))


# ----------------------------------------------------------------------------- learning
def next_token_nll(logits: jax.Array, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """``-sum valid_t log softmax(logits_t)[tokens_{t+1}] / sum valid_t`` with logits ``(B, T, N)``
    at positions ``0..T-2`` predicting ``tokens[:, 1:]``; ``valid`` marks targets with a valid input."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
    return -jnp.sum(picked * valid) / jnp.maximum(jnp.sum(valid), 1)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    init_key, rng = jax.random.split(key)
    dims = obs_dim + action_dim + 2
    net = _net(config, dims)
    T = config.sequence_length * dims
    params = net.init(init_key, jnp.zeros((1, T), jnp.int32), jnp.ones((1, T), bool))
    actor = TrainState.create(apply_fn=net.apply, params=params, tx=optax.adam(config.learning_rate))
    return Agent(actor, rng, jnp.zeros((), jnp.int32), config)


def actor_loss(params, agent: Agent, batch: Windows, dropout_key):
    logits = agent.actor.apply_fn(params, batch.tokens[:, :-1], batch.valid[:, :-1], training=True,
                                  rngs={"dropout": dropout_key})
    return next_token_nll(logits, batch.tokens[:, 1:], batch.valid[:, 1:] & batch.valid[:, :-1]), {}


def update(agent: Agent, batch: Windows) -> tuple[Agent, dict[str, jax.Array]]:
    rng, dropout_key = jax.random.split(agent.rng)
    (loss, _), grads = jax.value_and_grad(actor_loss, has_aux=True)(agent.actor.params, agent, batch, dropout_key)
    return agent.replace(actor=agent.actor.apply_gradients(grads=grads), rng=rng, step=agent.step + 1), {"actor_loss": loss}


# ----------------------------------------------------------------------------- planning
def plan(agent: Agent, observation: jax.Array, key: jax.Array) -> jax.Array:
    """Beam search from one (agent-unit) observation ``(obs_dim,)``; returns the first action of
    the best beam, ``(action_dim,)`` in ``[-1, 1]``."""
    config = agent.config
    net = agent.actor.apply_fn
    n = observation.shape[0]
    dims = agent.actor.params["params"]["heads"].shape[0]
    m = dims - n - 2
    edges = jnp.asarray(edges_of(config, dims))
    centres = bin_centres(edges)
    W, H, gamma = config.beam_width, config.horizon, config.discount
    L = config.sequence_length
    T = H * dims
    buffer = jnp.zeros((W, max(H, L) * dims), jnp.int32).at[:, :n].set(tokenize(observation, edges[:n])[None])
    valid = jnp.ones((W, L * dims), bool)

    def body(p, state):
        buffer, cum_reward, score, key = state
        key, sub = jax.random.split(key)
        # the model sees the last L transitions (a window starting at a transition boundary)
        start = jnp.maximum(0, ((p - 1) // dims - (L - 1)) * dims)
        window = jax.lax.dynamic_slice(buffer, (0, start), (W, L * dims))
        logits = net(agent.actor.params, window, valid)[:, p - 1 - start]
        dim = p % dims
        token = jax.random.categorical(sub, logits).astype(jnp.int32)
        buffer = buffer.at[:, p].set(token)
        expected = jax.nn.softmax(logits) @ centres[dim]
        h = p // dims
        cum_reward = jnp.where(dim == n + m, cum_reward + gamma**h * expected, cum_reward)
        score = jnp.where(dim == dims - 1, cum_reward + gamma ** (h + 1) * expected, score)
        keep = jnp.argsort(-score)[: W // 2]
        order = jnp.concatenate([keep, keep, keep[: W - 2 * (W // 2)]])
        prune = (dim == dims - 1) & (p < T - 1)
        buffer = jnp.where(prune, buffer[order], buffer)
        cum_reward = jnp.where(prune, cum_reward[order], cum_reward)
        score = jnp.where(prune, score[order], score)
        return buffer, cum_reward, score, key

    buffer, _, score, _ = jax.lax.fori_loop(n, T, body, (buffer, jnp.zeros(W), jnp.zeros(W), key))
    best = buffer[jnp.argmax(score), n:n + m]
    return jnp.clip(detokenize(best, edges[n:n + m]), -1.0, 1.0)


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    """Planned actions for a batch of (agent-unit) observations (a fixed planning key)."""
    return act_by_planning(plan, agent, observations)


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array):
    return None


def rollout_policy(agents, info, seeds: int, envs_per_seed: int):
    """``(policy, None)``: beam-search planning from each env's current state."""
    return PlanningPolicy(plan, info, seeds), None


#: not exportable: every action is a beam search with the GPT, not one forward pass of an MLP
SPEC = AlgorithmSpec(name="tt", exportable=False, extra_arrays=extra_arrays, sample=sample,
                     config_for_dataset=config_for_dataset, rollout_policy=rollout_policy)
