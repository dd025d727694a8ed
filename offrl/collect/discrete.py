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

from offrl.collect.zoo import (DiscreteBehaviorPolicy, ReplayWriter, record_snapshot, save_snapshot, snapshot_facts,
                              write_json)
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


def train_dqn_behavior(env_id: str, out, config: DQNBehaviorConfig = DQNBehaviorConfig(), dqn_config=None,
                       command: str | None = None, progress: bool = True) -> dict:
    """Train double DQN online on ``env_id`` (a ``Discrete`` action space) with
    :class:`offrl.engine.online.OnlineLearner`, writing a zoo folder at ``out`` with the layout of
    :mod:`offrl.collect.zoo`; returns its index (zoo.json)."""
    import jax

    from offrl import __version__
    from offrl.algos import dqn
    from offrl.algos.common import config_to_dict
    from offrl.collect.train import env_facts, evaluate_policy
    from offrl.engine.chunks import stack, unstack
    from offrl.engine.online import OnlineLearner, transition_row
    from offrl.progress import ProgressBar
    from offrl.rollout import VectorEnv

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
    agents = stack(dqn.create(dqn_config, obs_dim, n_act, jax.random.PRNGKey(config.seed)))
    q_fn = jax.jit(lambda agents, obs: dqn.q_all(unstack(agents), unstack(agents).critic.params, obs))
    policy = DiscreteBehaviorPolicy(unstack(agents).critic.params, obs_dim, n_act, tuple(dqn_config.hidden_dims), config.epsilon)
    explore = config.explore_steps if config.explore_steps is not None else max(config.steps // 5, 1)

    n = config.steps
    history = {"observations": np.zeros((n, obs_dim), np.float32), "actions": np.zeros((n, 1), np.float32),
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
    state = {"flushed": 0, "eval_time": 0.0}
    start = time.perf_counter()
    rng = np.random.default_rng(config.seed + 1_000_003)
    bar = ProgressBar(progress, total=n, title=f"DQN {env_id}")

    def snapshot(step: int) -> dict:
        t0 = time.perf_counter()
        policy.params = unstack(learner.agents).critic.params
        stoch = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=True)
        det = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=False)
        state["eval_time"] += time.perf_counter() - t0
        entry = save_snapshot(out, step, policy.params, snapshot_facts(stoch, det, config.eval_episodes, step))
        writer.append({k: v[state["flushed"]:step] for k, v in history.items()})
        state["flushed"] = step
        record_snapshot(out, index, entry, step, start, state["eval_time"])
        return entry

    def choose(agents, obs, t):
        """Epsilon-greedy, epsilon decayed linearly from 1 to ``config.epsilon`` over ``explore`` steps."""
        eps = max(config.epsilon, 1.0 - (1.0 - config.epsilon) * t / explore)
        greedy = int(np.asarray(q_fn(agents, obs))[0].argmax())
        action = int(rng.integers(n_act)) if rng.random() < eps else greedy
        return np.array([action], np.int32), np.array([[action]], np.float32), {"eps": eps, "greedy": greedy}

    def observe(transition, agent_actions, logged, t):
        for key in ("observations", "next_observations", "actions", "rewards", "terminals", "timeouts"):
            history[key][t] = transition[key][0]
        history["infos/action_log_probs"][t] = np.log((1.0 - logged["eps"]) * (agent_actions[0] == logged["greedy"])
                                                      + logged["eps"] / n_act)
        history["infos/greedy_actions"][t] = logged["greedy"]
        if (t + 1) % config.snapshot_every == 0 and (t + 1) % config.update_every and t + 1 < n:
            show(snapshot(t + 1), t + 1)  # between two updates: the policy that acted

    def show(entry, step):
        bar.update(step, f"eval return {entry['return_mean']:.1f} (greedy {entry['deterministic_return_mean']:.1f})")

    learner = OnlineLearner(dqn, agents, jax.random.PRNGKey(config.seed + 2_000_003)[None], env, choose=choose,
                            observe=observe, example_row=transition_row(obs_dim, (), np.int32), capacity=n,
                            batch_size=dqn_config.batch_size, update_every=config.update_every,
                            start_steps=config.start_steps, config=dqn_config, seed=config.seed)
    try:
        snapshot(0)
        while learner.env_step < n:
            learner.chunk(min(config.update_every, n - learner.env_step))
            step = learner.env_step
            if step % config.snapshot_every == 0 or step == n:  # after this chunk's updates
                show(snapshot(step), step)
            else:
                bar.update(step)
    finally:
        bar.close()
        env.close()
        eval_env.close()
    index["wall_time_s"] = time.perf_counter() - start
    index["eval_time_s"] = state["eval_time"]
    write_json(out / "zoo.json", index)
    return index
