"""Behaviour policies for ``Discrete`` action spaces: an online DQN learner and epsilon-greedy policies.

``offrl collect train-behavior`` on an env with a ``Discrete`` action space trains double DQN
(:mod:`offrl.algos.dqn`, the same pure ``update``) online: actions are epsilon-greedy over the
Q-network, with epsilon decayed linearly from 1 to ``epsilon`` over the first ``explore_steps``
and kept there. Every logged action's probability is exact::

    pi_b(a | s) = (1 - eps) * 1{a = argmax_a' Q(s, a')} + eps / num_actions

and recorded as ``infos/action_log_probs`` (with the greedy action as ``infos/greedy_actions``).
Snapshots (Q-network parameters, msgpack) are evaluated epsilon-greedy with the final
``epsilon`` (the tiers' behaviour, "return_mean") and greedily ("deterministic_return_mean");
the tiers of :mod:`offrl.collect.tiers` then pick random / medium / expert snapshots as for SAC.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from offrl.config import ANY_INT, NON_NEGATIVE_INT, POSITIVE_INT, UNIT, OrNone, check_config, param
from offrl.errors import ConfigError

#: replay infos of a discrete zoo (name -> per-row shape).
DISCRETE_INFO_SHAPES = {"action_log_probs": (), "greedy_actions": ()}


@dataclass(frozen=True)
class DQNBehaviorConfig:
    """The loop around DQN (the flags of ``offrl collect train-behavior`` on a discrete env; the
    learner's own settings are :func:`learner_config`).

    steps: environment steps in total.
    start_steps: steps before the first update (default min(1000, steps/10)).
    update_every: env steps per jitted call (one update per env step, in a scan).
    snapshot_every: env steps between evaluated snapshots (default steps/20).
    eval_episodes: episodes per evaluation.
    epsilon: the behaviour policies' final epsilon-greedy rate, reached by a linear decay from 1.
    explore_steps: steps of the linear epsilon decay from 1 (default steps/5).
    seed: seeds the networks, the env and the minibatches.

    ``start_steps`` and ``snapshot_every`` left as ``None`` are derived from ``steps`` when the
    config is built (``dataclasses.replace`` keeps the derived value; pass ``None`` to derive again).
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    steps: int = param(50_000, POSITIVE_INT)
    start_steps: int | None = param(None, OrNone(NON_NEGATIVE_INT))
    update_every: int = param(10, POSITIVE_INT)
    snapshot_every: int | None = param(None, OrNone(POSITIVE_INT))
    eval_episodes: int = param(5, POSITIVE_INT)
    epsilon: float = param(0.1, UNIT)
    explore_steps: int | None = param(None, OrNone(POSITIVE_INT))
    seed: int = param(0, ANY_INT)

    def __post_init__(self) -> None:
        check_config(self)
        if self.start_steps is None:
            object.__setattr__(self, "start_steps", min(1_000, max(self.steps // 10, 1)))
        if self.snapshot_every is None:
            object.__setattr__(self, "snapshot_every", max(self.steps // 20, 1))


def learner_config():
    """Double DQN for the online learner: small network, soft target, Huber loss."""
    from offrl.algos import dqn

    return dqn.Config(hidden_dims=(64, 64), learning_rate=5e-4, batch_size=64, tau=0.01, double_q=True,
                      normalize_observations=False)


def epsilon_greedy_log_probs(q: np.ndarray, actions: np.ndarray, epsilon: float) -> np.ndarray:
    """``log((1 - eps) 1{a = argmax Q} + eps / n)`` for each row of ``q`` ``(B, n)``."""
    n = q.shape[-1]
    greedy = q.argmax(-1)
    return np.log((1.0 - epsilon) * (actions == greedy) + epsilon / n)


@dataclass
class DiscreteBehaviorPolicy:
    """An epsilon-greedy policy over a DQN Q-network loaded from a zoo snapshot."""

    params: Any
    obs_dim: int
    num_actions: int
    hidden_dims: tuple[int, ...]
    epsilon: float
    step: int = 0
    info: dict | None = None

    def __post_init__(self):
        import jax
        import jax.numpy as jnp

        from offrl.algos.discrete_common import DiscreteCritic

        net = DiscreteCritic(self.num_actions, tuple(self.hidden_dims), num_qs=1)
        n, eps = self.num_actions, float(self.epsilon)

        def q_values(params, obs):
            return net.apply(params, jnp.asarray(obs, jnp.float32))[0]

        def sample(params, obs, key):
            q = q_values(params, obs)
            greedy = q.argmax(-1)
            explore_key, uniform_key = jax.random.split(key)
            explore = jax.random.uniform(explore_key, greedy.shape) < eps
            actions = jnp.where(explore, jax.random.randint(uniform_key, greedy.shape, 0, n), greedy)
            log_probs = jnp.log((1.0 - eps) * (actions == greedy) + eps / n)
            return actions, log_probs, greedy

        self._q, self._sample = jax.jit(q_values), jax.jit(sample)
        self._greedy = jax.jit(lambda params, obs: q_values(params, obs).argmax(-1))

    def rollout_policy(self, stochastic: bool = True):
        """An :mod:`offrl.rollout` policy (call it with ``self.params``); the epsilon-greedy one
        reports ``action_log_probs`` and ``greedy_actions`` as extras."""
        if not stochastic:
            return lambda params, carry, obs, key: (np.asarray(self._greedy(params, obs))[:, None], carry)

        def act(params, carry, obs, key):
            actions, log_probs, greedy = (np.asarray(x) for x in self._sample(params, obs, key))
            return actions[:, None], carry, {"action_log_probs": log_probs, "greedy_actions": greedy}

        return act

    def log_prob(self, observations, actions) -> np.ndarray:
        """``log pi_b(a | s)`` recomputed from the parameters."""
        q = np.asarray(self._q(self.params, observations))
        return epsilon_greedy_log_probs(q, np.asarray(actions).reshape(-1), self.epsilon)


def discrete_tier_metadata(metadata: dict, index: dict) -> dict:
    """A tier dataset's metadata for a DQN zoo: ``num_actions`` instead of action bounds."""
    out = {k: v for k, v in metadata.items() if k not in ("action_low", "action_high")}
    eps = index["behavior_epsilon"]
    out.update(num_actions=int(index["num_actions"]),
               algorithm=f"double DQN, epsilon-greedy (epsilon = {eps}) during collection",
               action_log_probs=f"log pi_b(a|s) = log((1 - {eps}) 1{{a = argmax Q(s)}} + {eps} / num_actions); "
                                "the medium-replay tier logs the training-time epsilon",
               action_distribution="epsilon-greedy over the snapshot's Q-network; infos/greedy_actions is its argmax")
    return out


def load_discrete_policy(zoo_dir, index: dict, facts: dict) -> DiscreteBehaviorPolicy:
    import jax
    import jax.numpy as jnp
    from flax import serialization

    from offrl.algos.discrete_common import DiscreteCritic

    hidden = tuple(index["config"]["hidden_dims"])
    obs_dim, n = int(index["obs_dim"]), int(index["num_actions"])
    template = DiscreteCritic(n, hidden, num_qs=1).init(jax.random.PRNGKey(0), jnp.zeros((1, obs_dim), jnp.float32))
    params = serialization.from_bytes(template, (Path(zoo_dir) / facts["file"]).read_bytes())
    return DiscreteBehaviorPolicy(params, obs_dim, n, hidden, float(index["behavior_epsilon"]), int(facts["step"]), facts)


def _learner_fns(dqn_config, num_updates: int, sample_key):
    from functools import partial

    import jax

    from offrl.algos import dqn
    from offrl.algos.common import Batch
    from offrl.replay import add_rows, sample_rows

    q_fn = jax.jit(lambda agent, obs: dqn.q_all(agent, agent.critic.params, obs))

    @partial(jax.jit, donate_argnums=(1,))
    def learn(agent, buffer, rows, do_update):
        buffer = add_rows(buffer, rows)

        def one(agent, _):
            batch = sample_rows(buffer, jax.random.fold_in(sample_key, agent.step), dqn_config.batch_size)
            return dqn.update(agent, Batch.from_rows(batch))

        def run(agent):
            agent, metrics = jax.lax.scan(one, agent, None, length=num_updates)
            return agent, jax.tree_util.tree_map(lambda m: m[-1], metrics)

        agent, metrics = jax.lax.cond(do_update, run, lambda a: (a, _zeros_like_metrics(one, a)), agent)
        return agent, buffer, metrics

    return q_fn, learn


def _zeros_like_metrics(one, agent):
    import jax
    import jax.numpy as jnp

    shapes = jax.eval_shape(lambda a: one(a, None)[1], agent)
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def train_dqn_behavior(env_id: str, out, config: DQNBehaviorConfig = DQNBehaviorConfig(), dqn_config=None,
                       command: str | None = None, progress: bool = True) -> dict:
    """Train double DQN online on ``env_id`` (a ``Discrete`` action space), writing a zoo folder
    at ``out`` with the layout of :mod:`offrl.collect.zoo`; returns its index (zoo.json)."""
    import jax

    from offrl import __version__
    from offrl.algos import dqn
    from offrl.algos.common import config_to_dict
    from offrl.collect.train import _progress, env_facts, evaluate_policy
    from offrl.collect.zoo import ReplayWriter, _write_json, record_snapshot, save_snapshot, snapshot_facts
    from offrl.replay import init_buffer
    from offrl.rollout import OnlineRollout, VectorEnv

    if min(config.steps, config.snapshot_every, config.update_every) <= 0:
        raise ConfigError("--steps, --snapshot-every and --update-every must be positive integers.")
    if not 0.0 <= config.epsilon <= 1.0:
        raise ConfigError(f"epsilon is {config.epsilon}; it must be in [0, 1].")
    dqn_config = dqn_config or learner_config()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env, eval_env = VectorEnv(env_id, 1), VectorEnv(env_id, config.eval_episodes)
    if not env.num_actions:
        raise ConfigError(f"environment '{env_id}' has no Discrete action space; the DQN behaviour learner is for discrete envs.")
    facts = env_facts(env_id, env)
    if len(env.obs_shape) != 1:  # e.g. MinAtar's (10, 10, channels) grids: rows hold them flattened (C order)
        facts["observation_shape"] = list(env.obs_shape)
    obs_dim, n_act = env.obs_dim, env.num_actions
    agent = dqn.create(dqn_config, obs_dim, n_act, jax.random.PRNGKey(config.seed))
    q_fn, learn = _learner_fns(dqn_config, config.update_every, jax.random.PRNGKey(config.seed + 2_000_003))
    row = {"observations": np.zeros(obs_dim, np.float32), "actions": np.zeros((), np.int32),
           "rewards": np.zeros((), np.float32), "next_observations": np.zeros(obs_dim, np.float32),
           "masks": np.zeros((), np.float32)}
    buffer = init_buffer(row, config.steps)
    policy = DiscreteBehaviorPolicy(agent.critic.params, obs_dim, n_act, tuple(dqn_config.hidden_dims), config.epsilon)
    explore = config.explore_steps if config.explore_steps is not None else max(config.steps // 5, 1)

    n = config.steps
    buf = {"observations": np.zeros((n, obs_dim), np.float32), "actions": np.zeros((n, 1), np.float32),
           "rewards": np.zeros(n, np.float32), "next_observations": np.zeros((n, obs_dim), np.float32),
           "terminals": np.zeros(n, bool), "timeouts": np.zeros(n, bool),
           "infos/action_log_probs": np.zeros(n, np.float32), "infos/greedy_actions": np.zeros(n, np.float32)}
    index = {"format": "offrl-zoo-v1", "offrl_version": __version__, **facts, "num_actions": n_act,
             "algorithm": "DQN", "config": config_to_dict(dqn_config), "train_config": asdict(config),
             "behavior_epsilon": config.epsilon, "seed": config.seed, "command": command, "snapshots": [],
             "steps_done": 0, "env_steps_per_s": None,
             "log_prob_units": "log pi_b(a|s) = log((1 - eps) 1{a = argmax Q} + eps / num_actions)"}
    writer = ReplayWriter(out / "replay.hdf5", obs_dim, 1, attrs={"env_id": env_id, "seed": config.seed},
                          info_shapes=DISCRETE_INFO_SHAPES)
    state = {"flushed": 0, "stored": 0, "eval_time": 0.0}
    start = time.perf_counter()
    rng = np.random.default_rng(config.seed + 1_000_003)

    def snapshot(step: int) -> dict:
        t0 = time.perf_counter()
        policy.params = agent.critic.params
        stoch = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=True)
        det = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=False)
        state["eval_time"] += time.perf_counter() - t0
        entry = save_snapshot(out, step, agent.critic.params, snapshot_facts(stoch, det, config.eval_episodes, step))
        lo = state["flushed"]
        writer.append({k: v[lo:step] for k, v in buf.items()})
        state["flushed"] = step
        record_snapshot(out, index, entry, step, start, state["eval_time"])
        return entry

    bar = _progress(progress)
    task = bar.add_task(f"DQN {env_id}", total=n, info="")
    bar.start()
    try:
        snapshot(0)
        rollout = OnlineRollout(env, seed=config.seed)
        for t in range(n):
            eps = max(config.epsilon, 1.0 - (1.0 - config.epsilon) * t / explore)
            q = np.asarray(q_fn(agent, rollout.obs))[0]
            greedy = int(q.argmax())
            action = int(rng.integers(n_act)) if rng.random() < eps else greedy
            transition = rollout.step(np.array([[action]], np.float32))
            for key in ("observations", "next_observations", "actions"):
                buf[key][t] = transition[key][0]
            buf["rewards"][t], buf["terminals"][t], buf["timeouts"][t] = (transition["rewards"][0], transition["terminals"][0],
                                                                          transition["timeouts"][0])
            buf["infos/action_log_probs"][t] = np.log((1.0 - eps) * (action == greedy) + eps / n_act)
            buf["infos/greedy_actions"][t] = greedy
            size = t + 1
            if size % config.update_every == 0:
                lo = state["stored"]
                rows = {"observations": buf["observations"][lo:size], "actions": buf["actions"][lo:size, 0].astype(np.int32),
                        "rewards": buf["rewards"][lo:size], "next_observations": buf["next_observations"][lo:size],
                        "masks": 1.0 - buf["terminals"][lo:size].astype(np.float32)}
                state["stored"] = size
                agent, buffer, _ = learn(agent, buffer, rows, size >= config.start_steps)
            if size % config.snapshot_every == 0 or size == n:
                entry = snapshot(size)
                bar.update(task, info=f"eval return {entry['return_mean']:.1f} (greedy {entry['deterministic_return_mean']:.1f})")
            if size % 200 == 0:
                bar.update(task, completed=size)
        bar.update(task, completed=n)
    finally:
        bar.stop()
        env.close()
        eval_env.close()
    index["wall_time_s"] = time.perf_counter() - start
    index["eval_time_s"] = state["eval_time"]
    _write_json(out / "zoo.json", index)
    return index
