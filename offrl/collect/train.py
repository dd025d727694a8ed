"""Online SAC training of behaviour policies: the loop behind ``offrl collect train-behavior``.

Each env step acts with one jitted call (:func:`offrl.collect.sac.make_act_fns`); every
``update_every`` steps the learner runs ``update_every * updates_per_step`` SAC updates in
one jitted ``lax.scan`` (:func:`offrl.collect.sac.update_many`), on minibatches gathered
from the in-memory replay buffer. Every ``snapshot_every`` steps (and at step 0, the randomly
initialised actor) the actor is evaluated, saved as a msgpack snapshot with its measured
returns, and the new transitions are appended to ``replay.hdf5``.

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

import numpy as np

from offrl.collect.zoo import BehaviorPolicy, ReplayWriter, save_snapshot, _write_json
from offrl.errors import ConfigError


@dataclass(frozen=True)
class TrainBehaviorConfig:
    """The loop around SAC.

    steps: environment steps in total.
    start_steps: steps before the first update (data collected by the initial random actor);
        Haarnoja et al. use 10k for MuJoCo, shorter tasks need less.
    update_every: env steps between two jitted update calls (each runs
        ``update_every * updates_per_step`` updates in one scan).
    updates_per_step: gradient updates per env step (1 in the paper).
    snapshot_every: env steps between snapshots (each is evaluated and saved).
    eval_episodes: episodes per evaluation (stochastic and deterministic each).
    seed: seeds the networks, the env and the minibatch sampling.
    """

    steps: int = 300_000
    start_steps: int = 10_000
    update_every: int = 50
    updates_per_step: int = 1
    snapshot_every: int = 10_000
    eval_episodes: int = 5
    seed: int = 0


def evaluate_policy(env, policy: BehaviorPolicy, episodes: int, seed: int, stochastic: bool) -> np.ndarray:
    """Undiscounted returns of ``episodes`` full episodes (resets seeded ``seed, seed+1, ...``)."""
    import jax

    key = jax.random.PRNGKey(seed)
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        total, done, t = 0.0, False, 0
        while not done:
            o = np.asarray(obs, np.float32)[None]
            if stochastic:
                action = policy.sample(jax.random.fold_in(key, ep * 100_000 + t), o)[0][0]
            else:
                action = policy.deterministic(o)[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
            t += 1
        returns.append(total)
    return np.asarray(returns)


def env_facts(env_id: str, env) -> dict:
    import gymnasium

    facts = {"env_id": env_id, "env_version": env_id.rsplit("-v", 1)[-1] if "-v" in env_id else None,
             "gymnasium_version": gymnasium.__version__,
             "max_episode_steps": env.spec.max_episode_steps if env.spec else None,
             "obs_dim": int(np.prod(env.observation_space.shape)),
             "action_dim": int(np.prod(env.action_space.shape)),
             "action_low": np.asarray(env.action_space.low, np.float64).tolist(),
             "action_high": np.asarray(env.action_space.high, np.float64).tolist()}
    try:
        import mujoco

        facts["mujoco_version"] = mujoco.__version__
    except ImportError:  # pragma: no cover
        pass
    return facts


def train_behavior(env_id: str, out, config: TrainBehaviorConfig = TrainBehaviorConfig(),
                   sac_config=None, command: str | None = None, progress: bool = True) -> dict:
    """Train SAC on ``env_id``, writing a zoo folder at ``out``; returns the zoo index (zoo.json)."""
    import jax
    import jax.numpy as jnp

    from offrl import __version__
    from offrl.collect import sac
    from offrl.envs import make_env

    if config.steps <= 0 or config.snapshot_every <= 0 or config.update_every <= 0:
        raise ConfigError("--steps, --snapshot-every and --update-every must be positive integers.")
    sac_config = sac_config or sac.SACConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env, eval_env = make_env(env_id), make_env(env_id)
    facts = env_facts(env_id, env)
    obs_dim, action_dim = facts["obs_dim"], facts["action_dim"]
    if len(env.observation_space.shape) != 1:
        raise ConfigError(f"environment '{env_id}' has observations of shape {env.observation_space.shape}; offrl collect needs flat vector observations.")

    key = jax.random.PRNGKey(config.seed)
    agent = sac.create(sac_config, obs_dim, action_dim, key)
    policy = BehaviorPolicy(agent.actor.params, obs_dim, action_dim, tuple(sac_config.hidden_dims),
                            np.asarray(facts["action_low"]), np.asarray(facts["action_high"]))
    act_key = jax.random.PRNGKey(config.seed + 1_000_003)

    @jax.jit
    def act(params, step, obs):
        mean, log_std = policy.actor_def.apply({"params": params}, obs)
        from offrl.nets import tanh_gaussian_sample

        a, logp = tanh_gaussian_sample(jax.random.fold_in(act_key, step), mean, log_std)
        return a[0], logp[0], mean[0], jnp.exp(log_std[0])

    n = config.steps
    buf_obs = np.zeros((n, obs_dim), np.float32)
    buf_next = np.zeros((n, obs_dim), np.float32)
    buf_act_norm = np.zeros((n, action_dim), np.float32)
    buf_rew = np.zeros(n, np.float32)
    buf_term = np.zeros(n, bool)
    buf_tout = np.zeros(n, bool)
    buf_logp = np.zeros(n, np.float32)
    buf_mean = np.zeros((n, action_dim), np.float32)
    buf_std = np.zeros((n, action_dim), np.float32)

    index = {"format": "offrl-zoo-v1", "offrl_version": __version__, **facts, "algorithm": "SAC",
             "config": {**asdict(sac_config), "hidden_dims": list(sac_config.hidden_dims)},
             "train_config": asdict(config), "seed": config.seed, "command": command,
             "snapshots": [], "steps_done": 0, "env_steps_per_s": None,
             "log_prob_units": "density of the recorded env-unit action: log pi_[-1,1](a_norm) - sum(log((high-low)/2))"}
    writer = ReplayWriter(out / "replay.hdf5", obs_dim, action_dim, attrs={"env_id": env_id, "seed": config.seed})
    flushed = 0
    sample_rng = np.random.default_rng(config.seed)
    start = time.perf_counter()
    eval_time = 0.0
    metrics: dict = {}

    def snapshot(step: int) -> dict:
        nonlocal flushed, eval_time
        t0 = time.perf_counter()
        policy.params = agent.actor.params
        stoch = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=True)
        det = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=False)
        eval_time += time.perf_counter() - t0
        entry = save_snapshot(out, step, agent.actor.params, {
            "return_mean": float(stoch.mean()), "return_std": float(stoch.std()), "returns": stoch.tolist(),
            "deterministic_return_mean": float(det.mean()), "deterministic_returns": det.tolist(),
            "eval_episodes": config.eval_episodes, "replay_rows": step,
            "metrics": {k: float(v) for k, v in metrics.items()}})
        writer.append({"observations": buf_obs[flushed:step], "actions": policy.to_env(buf_act_norm[flushed:step]).astype(np.float32),
                       "rewards": buf_rew[flushed:step], "next_observations": buf_next[flushed:step],
                       "terminals": buf_term[flushed:step], "timeouts": buf_tout[flushed:step],
                       "infos/action_log_probs": buf_logp[flushed:step] - policy.log_scale,
                       "infos/action_mean": buf_mean[flushed:step], "infos/action_std": buf_std[flushed:step]})
        flushed = step
        index["snapshots"].append(entry)
        index["steps_done"] = step
        elapsed = time.perf_counter() - start
        index["env_steps_per_s"] = step / max(elapsed - eval_time, 1e-9) if step else None
        index["wall_time_s"] = elapsed
        _write_json(out / "zoo.json", index)
        return entry

    bar = _progress(progress)
    task = bar.add_task(f"SAC {env_id}", total=n, info="")
    bar.start()
    try:
        snapshot(0)
        bar.update(task, info=f"step 0 return {index['snapshots'][-1]['return_mean']:.1f}")
        obs, _ = env.reset(seed=config.seed)
        ep_return, last_returns = 0.0, []
        for t in range(n):
            a, logp, mean, std = act(agent.actor.params, t, jnp.asarray(obs, jnp.float32)[None])
            a = np.asarray(a)
            next_obs, reward, terminated, truncated, _ = env.step(policy.to_env(a))
            buf_obs[t], buf_next[t], buf_act_norm[t] = obs, next_obs, a
            buf_rew[t], buf_term[t], buf_tout[t] = reward, terminated, truncated and not terminated
            buf_logp[t], buf_mean[t], buf_std[t] = logp, mean, std
            ep_return += float(reward)
            obs = next_obs
            if terminated or truncated:
                last_returns = (last_returns + [ep_return])[-10:]
                ep_return = 0.0
                obs, _ = env.reset()
            size = t + 1
            if size >= config.start_steps and size % config.update_every == 0:
                k = config.update_every * config.updates_per_step
                idx = sample_rng.integers(0, size, size=(k, sac_config.batch_size))
                batch = sac.Batch(buf_obs[idx], buf_act_norm[idx], buf_rew[idx], buf_next[idx],
                                  1.0 - buf_term[idx].astype(np.float32))
                agent, metrics = sac.update_many(agent, batch)
            if size % config.snapshot_every == 0 or size == n:
                entry = snapshot(size)
                rate = size / max(time.perf_counter() - start - eval_time, 1e-9)
                bar.update(task, info=f"eval return {entry['return_mean']:.1f} (det {entry['deterministic_return_mean']:.1f}) | {rate:.0f} env-steps/s")
            if size % 200 == 0:
                bar.update(task, completed=size)
        bar.update(task, completed=n)
    finally:
        bar.stop()
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
