"""Online SAC training of behaviour policies: the loop behind ``offrl collect train-behavior``.

The learner is :mod:`offrl.algos.sac` in the one online loop, :class:`offrl.engine.online.OnlineLearner`
(one jitted action per env step; every ``update_every`` steps one jitted call adds the new rows to
the device replay buffer and runs ``update_every * updates_per_step`` SAC updates in a ``lax.scan``). Every ``snapshot_every`` steps (and at step
0, the randomly initialised actor) the actor is evaluated (:func:`offrl.rollout.run_episodes`),
saved as a msgpack snapshot with its measured returns, and the new transitions are appended to
``replay.hdf5``.

The behaviour during training is the stochastic actor itself from step 0 (the randomly
initialised actor plays the role of SAC's uniform warm-up), so every logged transition has a
well-defined ``log pi_b(a|s)``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from offrl.collect.zoo import BehaviorPolicy, ReplayWriter, record_snapshot, save_snapshot, snapshot_facts, write_json
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


def _packed_act(sac_config, action_low, action_high, act_key):
    """Jitted ``act(actor_params, step, obs)`` of the one-member SAC agent: one packed row
    ``[a_norm, a_env, log_prob_norm, mean_u, std_u]`` (one device->host copy per env step)."""
    import jax
    import jax.numpy as jnp

    from offrl.algos import sac

    low, high = jnp.asarray(action_low, jnp.float32), jnp.asarray(action_high, jnp.float32)
    actor_apply = sac.make_actor(sac_config, len(action_low)).apply

    @jax.jit
    def act(actor_params, step, obs):
        params = jax.tree_util.tree_map(lambda x: x[0], actor_params)
        a, log_probs, mean, std = sac.sample_from_actor(actor_apply, params, obs, jax.random.fold_in(act_key, step))
        env_a = low + (a[0] + 1.0) * (high - low) / 2.0
        return jnp.concatenate([a[0], env_a, log_probs, mean[0], std[0]])

    return act


def train_behavior(env_id: str, out, config: TrainBehaviorConfig = TrainBehaviorConfig(),
                   sac_config=None, command: str | None = None, progress: bool = True) -> dict:
    """Train SAC (:class:`offrl.algos.sac.Config`) on ``env_id`` with
    :class:`offrl.engine.online.OnlineLearner`, writing a zoo folder at ``out``; returns the zoo
    index (zoo.json)."""
    import jax

    from offrl import __version__
    from offrl.algos import sac
    from offrl.algos.common import config_to_dict
    from offrl.engine.chunks import stack, unstack
    from offrl.engine.online import OnlineLearner, transition_row
    from offrl.progress import ProgressBar, rate_text
    from offrl.rollout import VectorEnv

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
    obs_dim, d = facts["obs_dim"], facts["action_dim"]

    agents = stack(sac.create(sac_config, obs_dim, d, jax.random.PRNGKey(config.seed)))
    policy = BehaviorPolicy(unstack(agents).actor.params["params"], obs_dim, d, tuple(sac_config.hidden_dims),
                            np.asarray(facts["action_low"]), np.asarray(facts["action_high"]))
    act = _packed_act(sac_config, policy.action_low, policy.action_high, jax.random.PRNGKey(config.seed + 1_000_003))

    n = config.steps
    history = {"observations": np.zeros((n, obs_dim), np.float32), "actions": np.zeros((n, d), np.float32),
               "rewards": np.zeros(n, np.float32), "next_observations": np.zeros((n, obs_dim), np.float32),
               "terminals": np.zeros(n, bool), "timeouts": np.zeros(n, bool),
               "infos/action_log_probs": np.zeros(n, np.float32), "infos/action_mean": np.zeros((n, d), np.float32),
               "infos/action_std": np.zeros((n, d), np.float32)}
    index = {"format": "offrl-zoo-v1", "offrl_version": __version__, **facts, "algorithm": "SAC",
             "config": config_to_dict(sac_config), "train_config": asdict(config), "seed": config.seed,
             "command": command, "snapshots": [], "steps_done": 0, "env_steps_per_s": None,
             "log_prob_units": "density of the recorded env-unit action: log pi_[-1,1](a_norm) - sum(log((high-low)/2))"}
    writer = ReplayWriter(out / "replay.hdf5", obs_dim, d, attrs={"env_id": env_id, "seed": config.seed})
    state = {"flushed": 0, "eval_time": 0.0, "metrics": {}}
    start = time.perf_counter()
    bar = ProgressBar(progress, total=n, title=f"SAC {env_id}")

    def snapshot(step: int) -> dict:
        t0 = time.perf_counter()
        policy.params = unstack(learner.agents).actor.params["params"]
        stoch = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=True)
        det = evaluate_policy(eval_env, policy, config.eval_episodes, seed=10_000 + config.seed, stochastic=False)
        state["eval_time"] += time.perf_counter() - t0
        metrics = {k: float(v[0]) for k, v in state["metrics"].items()}
        entry = save_snapshot(out, step, policy.params, {**snapshot_facts(stoch, det, config.eval_episodes, step),
                                                         "metrics": metrics})
        part = {k: v[state["flushed"]:step] for k, v in history.items()}
        part["infos/action_log_probs"] = part["infos/action_log_probs"] - policy.log_scale
        writer.append(part)
        state["flushed"] = step
        record_snapshot(out, index, entry, step, start, state["eval_time"])
        rate = step / max(time.perf_counter() - start - state["eval_time"], 1e-9)
        bar.update(step, f"eval return {entry['return_mean']:.1f} (det {entry['deterministic_return_mean']:.1f})"
                         f"  {rate_text(rate, 'env-steps/s')}")
        return entry

    def choose(agents, obs, t):
        packed = np.asarray(act(agents.actor.params, t, obs))
        return packed[None, :d], packed[None, d:2 * d], {"packed": packed}

    def observe(transition, agent_actions, logged, t):
        packed = logged["packed"]
        for key in ("observations", "next_observations", "actions", "rewards", "terminals", "timeouts"):
            history[key][t] = transition[key][0]
        history["infos/action_log_probs"][t] = packed[2 * d]
        history["infos/action_mean"][t], history["infos/action_std"][t] = packed[2 * d + 1:3 * d + 1], packed[3 * d + 1:]
        if (t + 1) % config.snapshot_every == 0 and (t + 1) % config.update_every and t + 1 < n:
            snapshot(t + 1)  # between two updates: the policy that acted

    learner = OnlineLearner(sac, agents, jax.random.PRNGKey(config.seed + 2_000_003)[None], env, choose=choose,
                            observe=observe, example_row=transition_row(obs_dim, (d,)), capacity=capacity,
                            batch_size=sac_config.batch_size, update_every=config.update_every,
                            updates_per_step=config.updates_per_step, start_steps=config.start_steps,
                            config=sac_config, seed=config.seed)
    try:
        snapshot(0)
        while learner.env_step < n:
            state["metrics"] = learner.chunk(min(config.update_every, n - learner.env_step)) or state["metrics"]
            step = learner.env_step
            if step % config.snapshot_every == 0 or step == n:  # after this chunk's updates
                snapshot(step)
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


def references_from_zoo(zoo_dir) -> dict:
    """``{"random": R_random, "expert": R_expert}`` measured in the zoo (stochastic returns)."""
    from offrl.collect.zoo import load_zoo_index

    index = load_zoo_index(zoo_dir)
    snaps = index["snapshots"]
    random_entry = next(s for s in snaps if s["step"] == 0)
    best = max(snaps, key=lambda s: s["return_mean"])
    return {"random": random_entry["return_mean"], "expert": best["return_mean"], "expert_step": best["step"]}


def reference_record(zoo_dir) -> dict:
    """The content of ``zoo/references.json``: the measured references, the env and the rule."""
    from offrl.collect.zoo import load_zoo_index

    refs = references_from_zoo(zoo_dir)
    refs["env_id"] = load_zoo_index(zoo_dir)["env_id"]
    refs["rule"] = ("random = mean stochastic return of the randomly initialised actor (step 0); "
                    "expert = highest mean stochastic return among the snapshots")
    return refs


def write_references(zoo_dir) -> dict:
    """Store the zoo's measured random/expert returns in ``zoo/references.json`` and merge them
    into ``$OFFRL_HOME/references.json`` (read by :func:`offrl.envs.reference_returns`)."""
    from offrl.collect.zoo import load_zoo_index
    from offrl.envs import offrl_home

    index = load_zoo_index(zoo_dir)
    refs = reference_record(zoo_dir)
    write_json(Path(zoo_dir) / "references.json", refs)
    home = offrl_home()
    home.mkdir(parents=True, exist_ok=True)
    path = home / "references.json"
    try:
        table = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        table = {}
    table[index["env_id"]] = [refs["random"], refs["expert"]]
    write_json(path, table)
    return refs
