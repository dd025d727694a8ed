"""Decision Transformer (Chen et al. 2021): offline RL as return-conditioned sequence modelling.

A causal transformer (:class:`offrl.nets_seq.GPT`) reads the last ``K`` steps as interleaved
tokens ``(R_{t-K+1}, s_{t-K+1}, a_{t-K+1}, ..., R_t, s_t, a_t)``, each token embedded by its own
linear layer plus a learned embedding of the step's timestep within the episode, and predicts
``a_t`` from the output at the state token ``s_t`` through a ``tanh`` head. ``R_t`` is the
return-to-go ``sum_{t' >= t} r_{t'}`` divided by ``return_scale``. Training minimises the
masked mean squared error over the valid steps of a segment::

    L = sum_{b,k} valid_bk ||pi(R, s, a)_bk - a_bk||^2 / (action_dim * sum_{b,k} valid_bk)

Segments are the ``K`` rows ending at a uniformly drawn transition, left-padded (zeros,
``valid = False``) where they would cross the start of its episode.

At evaluation the policy is conditioned on a target return ``R_0``: after every step the
remaining target drops by the observed reward (``R_{t+1} = R_t - r_t / return_scale``) and
the last ``K`` steps are kept as history in the rollout carry (:func:`rollout_policy`).

DT has no critic, so :func:`q_value` returns ``None``.
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
from offrl.algos.ranges import (ANY_REAL, BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE,
                                POSITIVE_INT, REWARD_SCALING, Interval, OneOf, OrNone, param)
from offrl.nets_seq import GPT


@dataclass(frozen=True)
class Config:
    """DT hyperparameters; defaults are the paper's MuJoCo settings (Chen et al. 2021, Table 8 /
    the authors' gym code): context K = 20, 3 layers, 1 head, embedding 128, dropout 0.1, AdamW
    lr 1e-4 with weight decay 1e-4 and a 10k-step linear warm-up, gradient clipping 0.25, batch
    64, return-to-go scale 1000, max episode length 1000.

    The blocks' MLPs use ReLU (``activation``): the authors' gym experiment defaults to ReLU (its
    ``activation_function`` flag; their Atari code and GPT-2 use GELU), and so does d3rlpy's DT,
    the peer ``benchmarks/dt_throughput.py`` times against. ``"gelu"`` (the tanh approximation)
    gives GPT-2's block; runs saved before the field existed used it and still load as GELU."""

    #: runs saved before this field existed used GELU blocks
    ABSENT = {"activation": "gelu"}

    learning_rate: float = param(1e-4, LEARNING_RATE)  #: AdamW learning rate after warm-up
    weight_decay: float = param(1e-4, NON_NEGATIVE)  #: AdamW decoupled weight decay
    warmup_steps: int = param(10_000, NON_NEGATIVE_INT)  #: linear learning-rate warm-up from 0
    max_grad_norm: float = param(0.25, POSITIVE)  #: global gradient-norm clip
    batch_size: int = param(64, POSITIVE_INT)  #: segments per minibatch
    context_length: int = param(20, POSITIVE_INT)  #: K, steps per segment (3K tokens)
    embed_dim: int = param(128, POSITIVE_INT)  #: token embedding width
    num_layers: int = param(3, POSITIVE_INT)  #: transformer blocks
    num_heads: int = param(1, POSITIVE_INT)  #: attention heads (must divide embed_dim)
    dropout: float = param(0.1, Interval(0.0, 1.0, "[)"))  #: dropout on embeddings, attention and MLPs
    activation: str = param("relu", OneOf(("relu", "gelu")))  #: the blocks' MLP activation (authors' gym code: relu)
    max_timestep: int = param(1000, POSITIVE_INT)  #: size of the timestep embedding table (later steps share the last)
    return_scale: float = param(1000.0, POSITIVE)  #: returns-to-go are divided by this
    target_return: float | None = param(None, OrNone(ANY_REAL))  #: evaluation target in env return units (None: the dataset's best episode return)
    discount: float = param(0.99, DISCOUNT)  #: only used to report discounted evaluation returns
    normalize_observations: bool = param(True, BOOL)  #: z-score observations with dataset statistics (as the paper does)
    reward_scaling: str = param("none", REWARD_SCALING)  #: unused: returns-to-go use raw rewards / return_scale


class Agent(flax.struct.PyTreeNode):
    actor: TrainState
    rng: jax.Array
    step: jax.Array
    config: Config = flax.struct.field(pytree_node=False)


class Segments(NamedTuple):
    """A minibatch of ``K``-step segments, left-padded at episode starts (``valid = False``)."""

    observations: jax.Array     # (B, K, obs_dim)
    actions: jax.Array          # (B, K, action_dim), in [-1, 1]
    returns_to_go: jax.Array    # (B, K), scaled by 1 / return_scale
    timesteps: jax.Array        # (B, K) int32, step within the episode
    valid: jax.Array            # (B, K) bool


class DecisionTransformer(nn.Module):
    """``(R, s, a, t, valid)`` of shape ``(B, K, ...)`` -> predicted actions ``(B, K, action_dim)``."""

    action_dim: int
    embed_dim: int = 128
    num_layers: int = 3
    num_heads: int = 1
    dropout: float = 0.1
    max_timestep: int = 1000
    activation: str = "relu"

    @nn.compact
    def __call__(self, returns_to_go, observations, actions, timesteps, valid, training: bool = False):
        B, K = returns_to_go.shape
        time = nn.Embed(self.max_timestep, self.embed_dim)(jnp.clip(timesteps, 0, self.max_timestep - 1))
        r = nn.Dense(self.embed_dim)(returns_to_go[..., None]) + time
        s = nn.Dense(self.embed_dim)(observations) + time
        a = nn.Dense(self.embed_dim)(actions) + time
        tokens = jnp.stack([r, s, a], axis=2).reshape(B, 3 * K, self.embed_dim)
        tokens = nn.LayerNorm()(tokens)
        h = GPT(self.embed_dim, self.num_layers, self.num_heads, self.dropout, self.activation)(
            tokens, jnp.repeat(valid, 3, axis=1), training)
        state_out = h.reshape(B, K, 3, self.embed_dim)[:, :, 1]
        return jnp.tanh(nn.Dense(self.action_dim, name="action_head")(state_out))


def _net(config: Config, action_dim: int) -> DecisionTransformer:
    return DecisionTransformer(action_dim, config.embed_dim, config.num_layers, config.num_heads, config.dropout,
                               config.max_timestep, config.activation)


# ----------------------------------------------------------------------------- data
def extra_arrays(dataset, info, config: Config) -> dict[str, np.ndarray]:
    """Per-transition ``returns_to_go`` (raw rewards / ``return_scale``), ``timesteps`` (step
    within the episode), ``episode_starts`` (row of the episode's first step) and
    ``context``, a zero-size ``(n, 0, K)`` array whose shape carries ``K`` to :func:`sample`."""
    from offrl.errors import ConfigError

    n = len(dataset)
    if n == 0:
        raise ConfigError("the dataset has no episode (0 transitions); DT needs at least one episode to sample segments from.")
    starts, ends = dataset.episode_bounds()
    lengths = ends - starts
    episode = np.repeat(np.arange(len(starts)), lengths)
    rewards = np.asarray(dataset.rewards, np.float64)
    csum = np.cumsum(rewards)
    end_sum = csum[ends - 1][episode]
    rtg = end_sum - csum + rewards
    return {"returns_to_go": (rtg / config.return_scale).astype(np.float32),
            "timesteps": (np.arange(n) - starts[episode]).astype(np.int32),
            "episode_starts": starts[episode].astype(np.int32),
            "context": np.zeros((n, 0, config.context_length), np.float32)}


def sample(data: dict, key: jax.Array, batch_size: int) -> Segments:
    """``batch_size`` segments: the ``K`` rows ending at uniformly drawn rows, padded before
    the episode's start (pure JAX, traceable inside the scanned chunk)."""
    n = data["rewards"].shape[0]
    K = data["context"].shape[-1]
    end = jax.random.randint(key, (batch_size,), 0, n)
    idx = end[:, None] - (K - 1) + jnp.arange(K)[None, :]
    valid = idx >= data["episode_starts"][end][:, None]
    idx = jnp.where(valid, idx, end[:, None])

    def take(x):
        rows = x[idx]
        return jnp.where(valid.reshape(*valid.shape, *([1] * (rows.ndim - 2))), rows, jnp.zeros_like(rows))

    return Segments(take(data["observations"]), take(data["actions"]), take(data["returns_to_go"]),
                    take(data["timesteps"]), valid)


# ----------------------------------------------------------------------------- learning
def masked_action_mse(predicted: jax.Array, actions: jax.Array, valid: jax.Array) -> jax.Array:
    """``sum valid * ||predicted - actions||^2 / (action_dim * sum valid)`` over ``(B, K, d)``."""
    sq = jnp.sum((predicted - actions) ** 2, axis=-1)
    return jnp.sum(sq * valid) / (actions.shape[-1] * jnp.maximum(jnp.sum(valid), 1))


def _schedule(config: Config):
    if config.warmup_steps == 0:
        return config.learning_rate
    return optax.linear_schedule(0.0, config.learning_rate, config.warmup_steps)


def create(config: Config, obs_dim: int, action_dim: int, key: jax.Array) -> Agent:
    init_key, rng = jax.random.split(key)
    net = _net(config, action_dim)
    K = config.context_length
    params = net.init(init_key, jnp.zeros((1, K)), jnp.zeros((1, K, obs_dim)), jnp.zeros((1, K, action_dim)),
                      jnp.zeros((1, K), jnp.int32), jnp.ones((1, K), bool))
    tx = optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                     optax.adamw(_schedule(config), weight_decay=config.weight_decay))
    actor = TrainState.create(apply_fn=net.apply, params=params, tx=tx)
    return Agent(actor, rng, jnp.zeros((), jnp.int32), config)


def actor_loss(params, agent: Agent, batch: Segments, dropout_key: jax.Array):
    predicted = agent.actor.apply_fn(params, batch.returns_to_go, batch.observations, batch.actions,
                                     batch.timesteps, batch.valid, training=True, rngs={"dropout": dropout_key})
    loss = masked_action_mse(predicted, batch.actions, batch.valid)
    return loss, {}


def update(agent: Agent, batch: Segments) -> tuple[Agent, dict[str, jax.Array]]:
    rng, dropout_key = jax.random.split(agent.rng)
    (loss, _), grads = jax.value_and_grad(actor_loss, has_aux=True)(agent.actor.params, agent, batch, dropout_key)
    actor = agent.actor.apply_gradients(grads=grads)
    return agent.replace(actor=actor, rng=rng, step=agent.step + 1), {"actor_loss": loss}


# ----------------------------------------------------------------------------- acting
def predict_last_action(agent: Agent, history: dict) -> jax.Array:
    """The action at the last position of ``history`` (``(B, K, ...)`` arrays named as in
    :class:`Segments`), without dropout."""
    out = agent.actor.apply_fn(agent.actor.params, history["returns_to_go"], history["observations"],
                               history["actions"], history["timesteps"], history["valid"])
    return out[:, -1]


def act(agent: Agent, observations: jax.Array) -> jax.Array:
    """The Markov action: a one-step context ``(R_0, s)`` at timestep 0 with ``R_0`` the
    config's target (``target_return / return_scale``, 0 when unset)."""
    B = observations.shape[0]
    target = (agent.config.target_return or 0.0) / agent.config.return_scale
    history = {"returns_to_go": jnp.full((B, 1), target, jnp.float32), "observations": observations[:, None],
               "actions": jnp.zeros((B, 1, agent.actor.params["params"]["action_head"]["bias"].shape[0])),
               "timesteps": jnp.zeros((B, 1), jnp.int32), "valid": jnp.ones((B, 1), bool)}
    return predict_last_action(agent, history)


def q_value(agent: Agent, observations: jax.Array, actions: jax.Array):
    return None


def export_arrays(agent: Agent) -> tuple[dict[str, np.ndarray], dict]:
    """``(arrays, meta)`` for ``offrl export``: the network's parameters under the names that
    :class:`offrl.policy_dt.NumpyDecisionTransformer` reads, and its sizes and return settings."""
    p = jax.tree_util.tree_map(np.asarray, agent.actor.params["params"])
    config = agent.config
    arrays = {"time_embedding": p["Embed_0"]["embedding"]}
    dense = {"return_embed": p["Dense_0"], "state_embed": p["Dense_1"], "action_embed": p["Dense_2"],
             "action_head": p["action_head"]}
    norms = {"embed_norm": p["LayerNorm_0"], "final_norm": p["GPT_0"]["LayerNorm_0"]}
    for i in range(config.num_layers):
        block = p["GPT_0"][f"TransformerBlock_{i}"]
        attention = block["CausalSelfAttention_0"]
        dense.update({f"block{i}/qkv": attention["Dense_0"], f"block{i}/attention_out": attention["Dense_1"],
                      f"block{i}/mlp_in": block["Dense_0"], f"block{i}/mlp_out": block["Dense_1"]})
        norms.update({f"block{i}/attention_norm": block["LayerNorm_0"], f"block{i}/mlp_norm": block["LayerNorm_1"]})
    for name, layer in dense.items():
        arrays[f"{name}/kernel"], arrays[f"{name}/bias"] = layer["kernel"], layer["bias"]
    for name, layer in norms.items():
        arrays[f"{name}/scale"], arrays[f"{name}/bias"] = layer["scale"], layer["bias"]
    meta = {"policy": "decision_transformer", "context_length": config.context_length, "embed_dim": config.embed_dim,
            "num_layers": config.num_layers, "num_heads": config.num_heads, "max_timestep": config.max_timestep,
            "return_scale": config.return_scale, "target_return": config.target_return,
            "activation": config.activation}
    return arrays, meta


def config_for_dataset(config: Config, dataset, info=None) -> Config:
    """``target_return=None`` becomes the dataset's best episode return (stored in the run's config)."""
    import dataclasses

    if config.target_return is not None or len(dataset) == 0:
        return config
    return dataclasses.replace(config, target_return=float(np.max(dataset.episode_returns())))


def empty_history(num_envs: int, context_length: int, obs_dim: int, action_dim: int) -> dict:
    """A carry's history of ``num_envs`` rows: all ``K`` positions padding."""
    K = context_length
    return {"returns_to_go": np.zeros((num_envs, K), np.float32),
            "observations": np.zeros((num_envs, K, obs_dim), np.float32),
            "actions": np.zeros((num_envs, K, action_dim), np.float32),
            "timesteps": np.zeros((num_envs, K), np.int32), "valid": np.zeros((num_envs, K), bool)}


def push_step(history: dict, returns_to_go, observations, timesteps) -> dict:
    """Shift every row left by one and write ``(R_t, s_t, a_t = 0, t)`` at the last position."""
    out = {k: np.roll(v, -1, axis=1) for k, v in history.items()}
    out["returns_to_go"][:, -1] = returns_to_go
    out["observations"][:, -1] = observations
    out["actions"][:, -1] = 0.0
    out["timesteps"][:, -1] = timesteps
    out["valid"][:, -1] = True
    return out


class Carry(NamedTuple):
    """A rollout carry: the last ``K`` steps of every env, its remaining (scaled) target and its timestep."""

    history: dict
    remaining: np.ndarray   # (num_envs,) scaled return still to collect
    timestep: np.ndarray    # (num_envs,) int


class TargetReturnPolicy:
    """A rollout-layer policy (:mod:`offrl.rollout`) for ``seeds x episodes`` envs laid out
    seed-major: ``__call__(agents, carry, obs, key) -> (env_actions, carry)`` appends the step to
    the history and acts; ``observe(carry, rewards, done)`` subtracts ``rewards / return_scale``
    from the remaining target and advances the timestep."""

    def __init__(self, agents, info, seeds: int, return_scale: float):
        self.info, self.seeds, self.return_scale = info, seeds, return_scale
        self._predict = _seeds_predict()

    def __call__(self, agents, carry: Carry, obs, key):
        info, S = self.info, self.seeds
        history = push_step(carry.history, carry.remaining, info.normalize(obs), carry.timestep)
        per_seed = {k: v.reshape(S, -1, *v.shape[1:]) for k, v in history.items()}
        actions = np.asarray(self._predict(agents, per_seed)).reshape(len(obs), info.action_dim)
        history["actions"][:, -1] = actions
        return info.to_env_action(actions), carry._replace(history=history)

    def observe(self, carry: Carry, rewards, done) -> Carry:
        remaining = carry.remaining - np.asarray(rewards, np.float32) / self.return_scale
        return carry._replace(remaining=remaining.astype(np.float32), timestep=carry.timestep + 1)


_PREDICT = []


def _seeds_predict():
    if not _PREDICT:
        _PREDICT.append(jax.jit(jax.vmap(predict_last_action)))
    return _PREDICT[0]


def rollout_policy(agents, info, seeds: int, envs_per_seed: int, target_return: float | None = None):
    """``(policy, initial_carry)`` for the evaluator: target-return conditioning with a ``K``-step
    history in the carry (``target_return`` in env units; default the config's)."""
    config = agents.config
    target = config.target_return if target_return is None else float(target_return)
    target = 0.0 if target is None else target
    n = seeds * envs_per_seed
    carry = Carry(empty_history(n, config.context_length, info.obs_dim, info.action_dim),
                  np.full(n, target / config.return_scale, np.float32), np.zeros(n, np.int32))
    return TargetReturnPolicy(agents, info, seeds, config.return_scale), carry


SPEC = AlgorithmSpec(name="dt", return_conditioned=True, extra_arrays=extra_arrays, sample=sample,
                     config_for_dataset=config_for_dataset, rollout_policy=rollout_policy,
                     export_arrays=export_arrays)
