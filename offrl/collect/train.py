"""Online SAC training of behaviour policies: the loop behind ``offrl collect train-behavior``.

The learner is :mod:`offrl.algos.sac`; the environment is stepped by
:class:`offrl.rollout.OnlineRollout`, with one jitted action per env step. Transitions go to a
replay buffer on the device (:mod:`offrl.replay`): every ``update_every`` steps one jitted call
adds the new rows and runs ``update_every * updates_per_step`` SAC updates in a ``lax.scan``,
sampling each minibatch inside the compiled code. Every ``snapshot_every`` steps (and at step
0, the randomly initialised actor) the actor is evaluated (:func:`offrl.rollout.run_episodes`),
saved as a msgpack snapshot with its measured returns, and the new transitions are appended to
``replay.hdf5``.

The behaviour during training is the stochastic actor itself from step 0 (the randomly
initialised actor plays the role of SAC's uniform warm-up), so every logged transition has a
well-defined ``log pi_b(a|s)``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from offrl.collect.zoo import BehaviorPolicy, ReplayWriter, _write_json, record_snapshot, save_snapshot, snapshot_facts
from offrl.config import ANY_INT, NON_NEGATIVE_INT, POSITIVE_INT, OrNone, check_config, param
from offrl.errors import ConfigError


@dataclass(frozen=True)
class TrainBehaviorConfig:
    """The loop around SAC (the flags of ``offrl collect train-behavior`` on a continuous env).

    steps: environment steps in total.
    start_steps: steps before the first update, data collected by the initial random actor (default
      min(10000, steps/10); Haarnoja et al. use 10k for MuJoCo, shorter tasks need less).
    update_every: env steps between two jitted update calls (each runs update_every * updates_per_step updates
      in one scan).
    updates_per_step: gradient updates per env step (1 in the paper).
    snapshot_every: env steps between snapshots, each evaluated and saved (default steps/30).
    eval_episodes: episodes per evaluation (stochastic and deterministic each).
    seed: seeds the networks, the env and the minibatch sampling.
    replay_capacity: rows kept in the device replay buffer, the oldest overwritten (default: every step;
      the paper's 1M covers its runs).

    ``start_steps`` and ``snapshot_every`` left as ``None`` are derived from ``steps`` when the
    config is built (``dataclasses.replace`` keeps the derived value; pass ``None`` to derive again).
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    steps: int = param(300_000, POSITIVE_INT)
    start_steps: int | None = param(None, OrNone(NON_NEGATIVE_INT))
    update_every: int = param(50, POSITIVE_INT)
    updates_per_step: int = param(1, POSITIVE_INT)
    snapshot_every: int | None = param(None, OrNone(POSITIVE_INT))
    eval_episodes: int = param(5, POSITIVE_INT)
    seed: int = param(0, ANY_INT)
    replay_capacity: int | None = param(None, OrNone(POSITIVE_INT))

    def __post_init__(self) -> None:
        check_config(self)
        if self.start_steps is None:
            object.__setattr__(self, "start_steps", min(10_000, max(self.steps // 10, 1)))
        if self.snapshot_every is None:
            object.__setattr__(self, "snapshot_every", max(self.steps // 30, 1))


def evaluate_policy(env, policy: BehaviorPolicy, episodes: int, seed: int, stochastic: bool) -> np.ndarray:
    """Undiscounted returns of ``episodes`` full episodes run side by side in ``env`` (an
    :class:`offrl.rollout.VectorEnv` of ``episodes`` envs), resets seeded ``seed, seed+1, ...``."""
    import jax

    from offrl.rollout import run_episodes

    if env.num_envs != episodes:
        raise ValueError(f"evaluate_policy needs a VectorEnv of {episodes} envs, got {env.num_envs}")
    out = run_episodes(env, policy.rollout_policy(stochastic), policy.params, [seed + ep for ep in range(episodes)],
                       jax.random.PRNGKey(seed))
    return out["return"]


def env_facts(env_id: str, env) -> dict:
    """Facts about ``env`` (an :class:`offrl.rollout.VectorEnv`) recorded in zoo.json."""
    import gymnasium

    first = env.envs[0]
    facts = {"env_id": env_id, "env_version": env_id.rsplit("-v", 1)[-1] if "-v" in env_id else None,
             "gymnasium_version": gymnasium.__version__,
             "max_episode_steps": env.max_episode_steps,
             "obs_dim": env.obs_dim, "action_dim": env.action_dim,
             "action_low": np.asarray(env.action_low, np.float64).tolist(),
             "action_high": np.asarray(env.action_high, np.float64).tolist()}
    try:
        import mujoco

        facts["mujoco_version"] = mujoco.__version__
    except ImportError:  # pragma: no cover
        pass
    return facts


def _learner_fns(sac_config, config: TrainBehaviorConfig, action_low, action_high, act_key, sample_key):
    """Jitted ``act``, ``store`` (add rows) and ``learn`` (add rows, then a scan of SAC updates
    on minibatches sampled from the device buffer)."""
    from functools import partial

    import jax
    import jax.numpy as jnp

    from offrl.algos import sac
    from offrl.algos.common import Batch
    from offrl.replay import add_rows, sample_rows

    low, high = jnp.asarray(action_low, jnp.float32), jnp.asarray(action_high, jnp.float32)

    actor_apply = sac.make_actor(sac_config, len(action_low)).apply

    @jax.jit
    def act(actor_params, step, obs):
        """One packed row ``[a_norm, a_env, log_prob_norm, mean_u, std_u]`` (one device->host copy)."""
        a, log_probs, mean, std = sac.sample_from_actor(actor_apply, actor_params, obs, jax.random.fold_in(act_key, step))
        env_a = low + (a[0] + 1.0) * (high - low) / 2.0
        return jnp.concatenate([a[0], env_a, log_probs, mean[0], std[0]])

    @partial(jax.jit, donate_argnums=(0,))
    def store(buffer, rows):
        return add_rows(buffer, rows)

    num_updates = config.update_every * config.updates_per_step

    @partial(jax.jit, donate_argnums=(1,))
    def learn(agent, buffer, rows):
        buffer = add_rows(buffer, rows)

        def one(agent, _):
            batch = sample_rows(buffer, jax.random.fold_in(sample_key, agent.step), sac_config.batch_size)
            return sac.update(agent, Batch.from_rows(batch))

        agent, metrics = jax.lax.scan(one, agent, None, length=num_updates)
        return agent, buffer, jax.tree_util.tree_map(lambda m: m[-1], metrics)

    return act, store, learn


def train_behavior(env_id: str, out, config: TrainBehaviorConfig = TrainBehaviorConfig(),
                   sac_config=None, command: str | None = None, progress: bool = True) -> dict:
    """Train SAC (:class:`offrl.algos.sac.Config`) on ``env_id``, writing a zoo folder at ``out``;
    returns the zoo index (zoo.json)."""
    import jax

    from offrl import __version__
    from offrl.algos import sac
    from offrl.algos.common import config_to_dict
    from offrl.replay import init_buffer
    from offrl.rollout import OnlineRollout, VectorEnv

    if config.steps <= 0 or config.snapshot_every <= 0 or config.update_every <= 0:
        raise ConfigError("--steps, --snapshot-every and --update-every must be positive integers.")
    capacity = config.replay_capacity or config.steps
    if capacity < config.update_every:
        raise ConfigError(f"replay_capacity {capacity} is smaller than --update-every {config.update_every}; keep at least one chunk of steps.")
    sac_config = sac_config or sac.Config()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env, eval_env = VectorEnv(env_id, 1), VectorEnv(env_id, config.eval_episodes)
    if len(env.obs_shape) != 1:
        raise ConfigError(f"environment '{env_id}' has observations of shape {env.obs_shape}; offrl collect needs flat vector observations.")
    facts = env_facts(env_id, env)
    obs_dim, action_dim = facts["obs_dim"], facts["action_dim"]

    agent = sac.create(sac_config, obs_dim, action_dim, jax.random.PRNGKey(config.seed))
    policy = BehaviorPolicy(agent.actor.params["params"], obs_dim, action_dim, tuple(sac_config.hidden_dims),
                            np.asarray(facts["action_low"]), np.asarray(facts["action_high"]))
    act, store, learn = _learner_fns(sac_config, config, policy.action_low, policy.action_high,
                                     jax.random.PRNGKey(config.seed + 1_000_003),
                                     jax.random.PRNGKey(config.seed + 2_000_003))
    row = {"observations": np.zeros(obs_dim, np.float32), "actions": np.zeros(action_dim, np.float32),
           "rewards": np.zeros((), np.float32), "next_observations": np.zeros(obs_dim, np.float32),
           "masks": np.zeros((), np.float32)}
    buffer = init_buffer(row, capacity)

    n, d = config.steps, action_dim
    buf_obs = np.zeros((n, obs_dim), np.float32)
    buf_next = np.zeros((n, obs_dim), np.float32)
    buf_act_norm = np.zeros((n, d), np.float32)
    buf_act_env = np.zeros((n, d), np.float32)
    buf_rew = np.zeros(n, np.float32)
    buf_term = np.zeros(n, bool)
    buf_tout = np.zeros(n, bool)
    buf_logp = np.zeros(n, np.float32)
    buf_mean = np.zeros((n, d), np.float32)
    buf_std = np.zeros((n, d), np.float32)

    index = {"format": "offrl-zoo-v1", "offrl_version": __version__, **facts, "algorithm": "SAC",
             "config": config_to_dict(sac_config), "train_config": asdict(config), "seed": config.seed,
             "command": command, "snapshots": [], "steps_done": 0, "env_steps_per_s": None,
             "log_prob_units": "density of the recorded env-unit action: log pi_[-1,1](a_norm) - sum(log((high-low)/2))"}
    writer = ReplayWriter(out / "replay.hdf5", obs_dim, action_dim, attrs={"env_id": env_id, "seed": config.seed})
    flushed = 0
    stored = 0
    start = time.perf_counter()
    eval_time = 0.0
    metrics: dict = {}

    def snapshot(step: int) -> dict:
        nonlocal flushed, eval_time
        t0 = time.perf_counter()
        policy.params = agent.actor.params["params"]
        stoch = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=True)
        det = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=False)
        eval_time += time.perf_counter() - t0
        entry = save_snapshot(out, step, policy.params, {**snapshot_facts(stoch, det, config.eval_episodes, step),
                                                         "metrics": {k: float(v) for k, v in metrics.items()}})
        writer.append({"observations": buf_obs[flushed:step], "actions": buf_act_env[flushed:step],
                       "rewards": buf_rew[flushed:step], "next_observations": buf_next[flushed:step],
                       "terminals": buf_term[flushed:step], "timeouts": buf_tout[flushed:step],
                       "infos/action_log_probs": buf_logp[flushed:step] - policy.log_scale,
                       "infos/action_mean": buf_mean[flushed:step], "infos/action_std": buf_std[flushed:step]})
        flushed = step
        record_snapshot(out, index, entry, step, start, eval_time)
        return entry

    bar = _progress(progress)
    task = bar.add_task(f"SAC {env_id}", total=n, info="")
    bar.start()
    try:
        snapshot(0)
        bar.update(task, info=f"step 0 return {index['snapshots'][-1]['return_mean']:.1f}")
        rollout = OnlineRollout(env, seed=config.seed)
        for t in range(n):
            packed = np.asarray(act(agent.actor.params, t, rollout.obs))
            transition = rollout.step(packed[None, d:2 * d])
            buf_obs[t], buf_next[t] = transition["observations"][0], transition["next_observations"][0]
            buf_act_norm[t], buf_act_env[t] = packed[:d], transition["actions"][0]
            buf_rew[t], buf_term[t], buf_tout[t] = transition["rewards"][0], transition["terminals"][0], transition["timeouts"][0]
            buf_logp[t], buf_mean[t], buf_std[t] = packed[2 * d], packed[2 * d + 1:3 * d + 1], packed[3 * d + 1:]
            size = t + 1
            if size % config.update_every == 0:
                rows = {"observations": buf_obs[stored:size], "actions": buf_act_norm[stored:size],
                        "rewards": buf_rew[stored:size], "next_observations": buf_next[stored:size],
                        "masks": 1.0 - buf_term[stored:size].astype(np.float32)}
                stored = size
                if size >= config.start_steps:
                    agent, buffer, metrics = learn(agent, buffer, rows)
                else:
                    buffer = store(buffer, rows)
            if size % config.snapshot_every == 0 or size == n:
                entry = snapshot(size)
                rate = size / max(time.perf_counter() - start - eval_time, 1e-9)
                bar.update(task, info=f"eval return {entry['return_mean']:.1f} (det {entry['deterministic_return_mean']:.1f}) | {rate:.0f} env-steps/s")
            if size % 200 == 0:
                bar.update(task, completed=size)
        bar.update(task, completed=n)
    finally:
        bar.stop()
        env.close()
        eval_env.close()
    index["wall_time_s"] = time.perf_counter() - start
    index["eval_time_s"] = eval_time
    _write_json(out / "zoo.json", index)
    return index


def _progress(enabled: bool):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(file=sys.stderr, quiet=not enabled)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console)


def references_from_zoo(zoo_dir) -> dict:
    """``{"random": R_random, "expert": R_expert}`` measured in the zoo (stochastic returns)."""
    from offrl.collect.zoo import load_zoo_index

    index = load_zoo_index(zoo_dir)
    snaps = index["snapshots"]
    random_entry = next(s for s in snaps if s["step"] == 0)
    best = max(snaps, key=lambda s: s["return_mean"])
    return {"random": random_entry["return_mean"], "expert": best["return_mean"], "expert_step": best["step"]}


def dump_json(data) -> str:
    return json.dumps(data, indent=2)


def write_references(zoo_dir) -> dict:
    """Store the zoo's measured random/expert returns in ``zoo/references.json`` and merge them
    into ``$OFFRL_HOME/references.json`` (read by :func:`offrl.envs.reference_returns`)."""
    from offrl.collect.zoo import load_zoo_index
    from offrl.envs import offrl_home

    index = load_zoo_index(zoo_dir)
    refs = references_from_zoo(zoo_dir)
    refs["env_id"] = index["env_id"]
    refs["rule"] = ("random = mean stochastic return of the randomly initialised actor (step 0); "
                    "expert = highest mean stochastic return among the snapshots")
    _write_json(Path(zoo_dir) / "references.json", refs)
    home = offrl_home()
    home.mkdir(parents=True, exist_ok=True)
    path = home / "references.json"
    try:
        table = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        table = {}
    table[index["env_id"]] = [refs["random"], refs["expert"]]
    _write_json(path, table)
    return refs
