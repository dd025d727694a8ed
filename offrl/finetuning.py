"""Offline -> online fine-tuning: continue an offline run with environment interaction.

Conservatism that protects an offline learner (a seatbelt) can hold it back once it may act
(handcuffs). :func:`finetune` continues a run of CQL, Cal-QL, IQL, AWAC or TD3+BC online, with
the field's remedies as composable options:

* **replay mixing** (``mix_ratio``): each minibatch has exactly ``round(B * mix_ratio)`` offline
  rows and the rest from the online buffer (0: online data only, the naive continuation);
* **alpha decay** (``alpha_decay``, CQL / Cal-QL): ``alpha_t = alpha_0 exp(-lambda t)`` over online steps;
* **Cal-QL** (run trained with ``--algo cal_ql``): the penalty's policy values are bounded below by
  Monte-Carlo returns, of the data offline and of each online episode once it ends;
* **annealed BC** (``bc_anneal_steps``, TD3+BC): the BC weight falls linearly to 0 (TD3+BC -> TD3).

One loop, per ``update_every`` env steps::

    for t in range(update_every):                 # Python: one jitted call for every seed's policy
        a = explore(agent, s, key_t)               # the algorithm's exploration policy
        s', r, ... = rollout.step(a)               # offrl.rollout: one env per seed
    buffer = add_rows(buffer, transitions)         # jitted, device-resident replay (offrl.replay)
    agent  = scan(update_every * utd updates on sample_mixed(offline, buffer))

Seeds are vmapped (one env and one online buffer per seed; the offline data is shared). Every
``checkpoint_every`` env steps all envs start new episodes from seeds derived from the step, and
the agents, data keys and buffers are saved: a killed run resumed with ``resume=True`` ends with
the same parameters as the uninterrupted one on CPU.

The run folder logs evaluations across the offline/online boundary (offline rows copied from the
source run with ``phase: offline``), the Q-vs-return monitor online, the training episodes'
returns, the cumulative regret ``mean_k (1 - score_k / 100)`` over online evaluations (scores in
D4RL-normalized units) and the unlearning dip: the lowest evaluation return within the first 10%
of online steps minus the offline run's final return.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from offrl.errors import ConfigError, OffrlError

FINETUNABLE = ("cql", "cal_ql", "iql", "awac", "td3_bc", "td3")


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The online phase.

    steps: environment steps per seed (>= 1).
    mix_ratio: share of offline rows in each minibatch, in [0, 1] (0.5, the Cal-QL/RLPD choice).
    utd: gradient updates per environment step (update-to-data ratio, >= 1).
    update_every: env steps between two jitted update calls (each runs update_every * utd updates).
    start_steps: env steps collected before the first update (>= 0; the buffer must not be empty
        when mix_ratio < 1).
    alpha_decay: lambda of CQL's alpha_0 exp(-lambda t) (0: constant), >= 0.
    bc_anneal_steps: TD3+BC's BC weight falls linearly to 0 over these online steps (0: kept), >= 0.
    eval_every / eval_episodes: deterministic evaluations (env steps, episodes per seed).
    checkpoint_every: env steps between checkpoints (a multiple of update_every); envs restart there.
    log_every: env steps between metrics rows (a multiple of update_every).
    """

    steps: int = 100_000
    mix_ratio: float = 0.5
    utd: int = 1
    update_every: int = 50
    start_steps: int = 1000
    alpha_decay: float = 0.0
    bc_anneal_steps: int = 0
    eval_every: int = 5000
    eval_episodes: int = 5
    checkpoint_every: int = 10_000
    log_every: int = 1000

    def check(self) -> None:
        def need(ok, flag, value, what):
            if not ok:
                raise ConfigError(f"--{flag} is {value}; it must be {what}.")

        need(self.steps >= 1, "steps", self.steps, "a positive number of environment steps")
        need(0.0 <= self.mix_ratio <= 1.0, "mix-ratio", self.mix_ratio, "in [0, 1] (the share of offline rows per batch)")
        need(self.utd >= 1, "utd", self.utd, "an integer >= 1")
        need(self.update_every >= 1, "update-every", self.update_every, "an integer >= 1")
        need(self.start_steps >= 0, "start-steps", self.start_steps, "an integer >= 0")
        need(self.alpha_decay >= 0.0, "alpha-decay", self.alpha_decay, ">= 0")
        need(self.bc_anneal_steps >= 0, "bc-anneal", self.bc_anneal_steps, ">= 0")
        need(self.eval_every >= 1, "eval-every", self.eval_every, ">= 1")
        need(self.eval_episodes >= 0, "eval-episodes", self.eval_episodes, ">= 0")
        for flag, value in (("checkpoint-every", self.checkpoint_every), ("log-every", self.log_every)):
            need(value >= 1 and value % self.update_every == 0, flag, value,
                 f"a positive multiple of --update-every ({self.update_every})")


def _check_source(folder: Path) -> dict:
    if not (folder / "config.json").exists():
        raise ConfigError(f"{folder} is not an offrl run folder (no config.json); pass the --out folder of `offrl train`.")
    record = json.loads((folder / "config.json").read_text())
    if "algo" not in record or "data" not in record:
        raise ConfigError(f"{folder}/config.json is not an offrl training record; pass the --out folder of `offrl train`.")
    if record.get("phase") == "online":
        raise ConfigError(f"{folder} is already a fine-tuning run; pass the offline run it came from, or --resume it.")
    if record["algo"] not in FINETUNABLE:
        raise ConfigError(f"{folder} was trained with {record['algo']}; offrl finetune continues {', '.join(FINETUNABLE)}.")
    return record


def _online_config(module, config, offline_step: int, ft: FinetuneConfig):
    changes: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(config)}
    if ft.alpha_decay:
        if "cql_alpha_decay" not in fields:
            raise ConfigError(f"--alpha-decay applies to CQL and Cal-QL runs, not {module.__name__.split('.')[-1]}.")
        changes.update(cql_alpha_decay=ft.alpha_decay, decay_start_step=offline_step)
    if ft.bc_anneal_steps:
        if "bc_anneal_steps" not in fields or getattr(config, "alpha", None) is None:
            raise ConfigError("--bc-anneal applies to TD3+BC runs (the BC term's weight).")
        changes.update(bc_anneal_steps=ft.bc_anneal_steps * ft.utd, anneal_start_step=offline_step)
    if "cosine_actor_lr" in fields and config.cosine_actor_lr:
        changes["cosine_actor_lr"] = False  # IQL's actor lr decayed to 0 over the offline steps
    return dataclasses.replace(config, **changes)


def _transplant(fresh, trained):
    """``fresh``'s structure with ``trained``'s parameters: every TrainState keeps the trained
    params and, when the optimiser's structure is unchanged, its optimiser state."""
    import jax
    from flax.training.train_state import TrainState

    changes = {}
    for name in fresh.__dataclass_fields__:
        new, old = getattr(fresh, name), getattr(trained, name)
        if name == "config":
            continue
        if isinstance(new, TrainState):
            same = jax.tree_util.tree_structure(new.opt_state) == jax.tree_util.tree_structure(old.opt_state)
            changes[name] = new.replace(params=old.params, step=old.step, opt_state=old.opt_state if same else new.opt_state)
        else:
            changes[name] = old
    return fresh.replace(**changes)


def finetune(run: str | Path, steps: int | None = None, env: str | None = None, out: str | Path | None = None,
             config: FinetuneConfig | None = None, resume: bool = False, progress: bool = True,
             stop_at: int | None = None, dataset=None, **options):
    """Fine-tune the offline run in ``run`` online for ``steps`` env steps per seed.

    ``options`` are :class:`FinetuneConfig` fields (``mix_ratio``, ``utd``, ``alpha_decay``, ...).
    ``dataset`` (a name, path or :class:`offrl.data.Dataset`) replaces the run's own dataset,
    e.g. for a run trained from in-memory arrays.
    ``out`` defaults to ``<run>-finetune``; the source run folder is never written. Returns the
    fine-tuning :class:`offrl.engine.Run`.

    Example::

        ft = offrl.finetune("runs/cql", steps=50_000, mix_ratio=0.5, alpha_decay=1e-4)
        ft.summary()
    """
    import jax
    import jax.numpy as jnp

    from offrl.algos import algorithm_spec, get_algorithm
    from offrl.algos.common import Batch, config_from_dict, config_to_dict
    from offrl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from offrl.engine.chunks import create_agents, vmap_over_seeds
    from offrl.engine.data import DataInfo, prepare_data
    from offrl.engine.evaluation import Evaluator, summarise_evaluation
    from offrl.engine.run import Run, load_run, reference_metadata
    from offrl.engine.training import _check_finite, _load_dataset, _Progress
    from offrl.replay import add_rows, init_buffer, sample_mixed
    from offrl.rollout import OnlineRollout, VectorEnv
    from offrl.run_folder import MetricsLog, read_metrics, truncate_metrics

    from offrl.envs import check_env_id

    ft = dataclasses.replace(config or FinetuneConfig(), **({"steps": int(steps)} if steps is not None else {}), **options)
    ft.check()
    check_env_id(env)
    source = Path(run)
    folder = Path(out) if out is not None else source.with_name(source.name + "-finetune")
    if folder.resolve() == source.resolve():
        raise ConfigError(f"--out {folder} is the offline run itself; fine-tuning writes a new folder.")
    record = _check_source(source)
    module = get_algorithm(record["algo"])
    offline_config = config_from_dict(module.Config, record["config"])
    info = DataInfo(**record["data"])
    settings = dict(record["settings"])
    env_id = env or info.env_id or settings.get("env")
    if not env_id:
        raise ConfigError(f"{source} has no environment id (its dataset names none); pass --env ENV (a Gymnasium id such as Hopper-v5).")
    vec = VectorEnv(env_id, int(settings["seeds"]))
    if (vec.obs_dim, vec.action_dim) != (info.obs_dim, info.action_dim):
        vec.close()
        raise ConfigError(f"--env {env_id} has observations of size {vec.obs_dim} and actions of size {vec.action_dim}; "
                          f"the run {source} was trained on {info.obs_dim} and {info.action_dim}; pass the env of its dataset.")
    seeds, seed = int(settings["seeds"]), int(settings["seed"])

    offline = load_run(source)
    offline_step = offline.step
    online_config = _online_config(module, offline_config, offline_step, ft)
    if dataset is None and str(settings.get("dataset", "<")).startswith("<"):
        raise ConfigError(f"{source} was trained on in-memory arrays ({settings.get('dataset')}); pass the dataset (dataset=...) to fine-tune it.")
    ds = _load_dataset(dataset if dataset is not None else settings["dataset"])
    offline_data, _ = prepare_data(ds, online_config, env_id, module)
    example = {k: np.asarray(v[0]) for k, v in offline_data.items()}
    if "mc_returns" in example:
        example["mc_returns"] = np.float32(-np.inf)

    fresh, _ = create_agents(module, online_config, info.obs_dim, info.action_dim, seed, seeds)
    agents = _transplant(fresh, offline.agent)
    _, data_keys = create_agents(module, online_config, info.obs_dim, info.action_dim, seed, seeds)
    data_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1_000_003))(data_keys)
    explore_keys = jax.vmap(lambda k: jax.random.fold_in(k, 2_000_003))(data_keys)
    buffers = jax.vmap(lambda _: init_buffer(example, ft.steps))(jnp.arange(seeds))

    settings_ft = {**settings, "env": env_id, "source_run": str(source), "offline_steps": offline_step,
                   **{f"finetune_{k}": v for k, v in dataclasses.asdict(ft).items()}}
    run_record = {"algo": record["algo"], "phase": "online", "config": config_to_dict(online_config),
                  "settings": settings_ft, "data": record["data"], "offrl_version": record.get("offrl_version")}
    env_step, rows = 0, []
    if resume:
        if not (folder / "config.json").exists():
            raise ConfigError(f"--resume needs the fine-tuning folder {folder} with config.json; drop --resume to start.")
        latest = latest_checkpoint(folder / "checkpoints")
        if latest is not None:
            state = load_checkpoint(latest["path"], {"agent": agents, "data_keys": data_keys, "buffers": buffers})
            agents = jax.tree_util.tree_map(jnp.asarray, state["agent"])
            data_keys, buffers = jnp.asarray(state["data_keys"]), jax.tree_util.tree_map(jnp.asarray, state["buffers"])
            env_step = int(latest["env_step"])
        rows = truncate_metrics(folder / "metrics.jsonl", offline_step + env_step)
    else:
        if (folder / "checkpoints" / "latest.json").exists():
            raise ConfigError(f"{folder} already holds a fine-tuning run; pass --resume to continue it or choose another --out.")
        (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
        (folder / "plots").mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(run_record, indent=2))
        rows = [{**r, "phase": "offline"} for r in read_metrics(source / "metrics.jsonl") if "eval/return" in r]
        (folder / "metrics.jsonl").write_text("")
    log = MetricsLog(folder, rows=[])
    if not resume:
        log.add(rows)
    else:
        log.rows = rows

    # ------------------------------------------------------------------ compiled pieces
    batch_size = online_config.batch_size
    sample_mixed_fn = lambda off, buf, key: Batch.from_rows(sample_mixed(off, buf, key, batch_size, ft.mix_ratio))  # noqa: E731

    def learn(agent, data_key, buffer, new_rows, offline, num_updates):
        buffer = add_rows(buffer, new_rows)

        def body(agent, _):
            return module.update(agent, sample_mixed_fn(offline, buffer, jax.random.fold_in(data_key, agent.step)))

        agent, metrics = jax.lax.scan(body, agent, None, length=num_updates)
        return agent, (buffer, jax.tree_util.tree_map(jnp.mean, metrics))

    def store(agent, data_key, buffer, new_rows, offline, num_updates):
        return agent, (add_rows(buffer, new_rows), {})

    learn_all = jax.jit(vmap_over_seeds(lambda a, k, b, r, off: learn(a, k, b, r, off, ft.update_every * ft.utd)))
    store_all = jax.jit(vmap_over_seeds(lambda a, k, b, r, off: store(a, k, b, r, off, 0)))
    explore_all = jax.jit(jax.vmap(lambda agent, obs, key, t: module.explore(agent, obs[None], jax.random.fold_in(key, t))[0],
                                   in_axes=(0, 0, 0, None)))
    episode_extras = algorithm_spec(module).online_extras

    rollout = OnlineRollout(vec, seed=seed * 7919 + 17)
    evaluator = Evaluator(module, agents, info, env_id, ft.eval_episodes, seeds, getattr(online_config, "discount", 0.99),
                          metadata=reference_metadata(settings)) if ft.eval_episodes > 0 else None
    obs_mean, obs_std = np.asarray(info.obs_mean, np.float32), np.asarray(info.obs_std, np.float32)
    normalize = bool(getattr(online_config, "normalize_observations", False))
    to_agent_obs = (lambda o: (o - obs_mean) / obs_std) if normalize else (lambda o: o)  # noqa: E731

    def restart(step: int):
        rollout.reset_all([seed * 1_000_003 + step * 31 + i for i in range(seeds)])

    pending: list[list[tuple[int, float]]] = [[] for _ in range(seeds)]  # (buffer row, scaled reward) of open episodes
    closed: list[tuple[int, list, bool]] = []                              # finished, waiting for their buffer rows

    def patch_closed(buffers):
        """Write each finished episode's ``episode_extras`` (Cal-QL: its MC returns) over its rows."""
        for i, rows_rewards, terminal in closed:
            idx = np.array([p[0] for p in rows_rewards])
            extra = episode_extras(np.array([p[1] for p in rows_rewards]), terminal, online_config)
            for key, values in extra.items():
                buffers = buffers.replace(data={**buffers.data, key: buffers.data[key].at[i, idx].set(values)})
        closed.clear()
        return buffers

    bar = _Progress(progress, total=ft.steps, start=env_step, title=f"finetune {record['algo']} x{seeds}")
    restart(env_step)
    episode_returns: list[list[float]] = [[] for _ in range(seeds)]
    chunk_metrics: list[dict] = []
    last_eval = ""
    end = ft.steps if stop_at is None else min(ft.steps, int(stop_at))
    t_start = time.perf_counter()
    try:
        while env_step < end:
            host_rows = {k: [] for k in example}
            for t in range(ft.update_every):
                obs = rollout.obs
                actions = np.asarray(explore_all(agents, to_agent_obs(obs), explore_keys, env_step + t))
                step_out = rollout.step(info.to_env_action(actions))
                host_rows["observations"].append(to_agent_obs(step_out["observations"]))
                host_rows["actions"].append(actions)
                host_rows["rewards"].append(info.scale_rewards(step_out["rewards"]))
                host_rows["next_observations"].append(to_agent_obs(step_out["next_observations"]))
                host_rows["masks"].append(1.0 - np.asarray(step_out["terminals"], np.float32))
                if "mc_returns" in host_rows:
                    host_rows["mc_returns"].append(np.full(seeds, -np.inf, np.float32))
                for i, ret, _ in rollout.finished:
                    episode_returns[i].append(ret)
                rollout.finished.clear()
                if episode_extras is not None:
                    row_index = (int(np.asarray(buffers.ptr).reshape(-1)[0]) + t) % ft.steps
                    scaled = info.scale_rewards(step_out["rewards"])
                    done = np.asarray(step_out["terminals"]) | np.asarray(step_out["timeouts"])
                    for i in range(seeds):
                        pending[i].append((row_index, float(scaled[i])))
                        if done[i]:
                            closed.append((i, pending[i], bool(step_out["terminals"][i])))
                            pending[i] = []
            new_rows = {k: jnp.asarray(np.stack(v, axis=1)) for k, v in host_rows.items()}
            size_after = int(np.asarray(buffers.size).reshape(-1)[0]) + ft.update_every
            fn = learn_all if size_after >= ft.start_steps else store_all
            agents, (buffers, metrics) = fn(agents, (data_keys, buffers, new_rows), (offline_data,))
            env_step += ft.update_every
            if closed:
                buffers = patch_closed(buffers)
            if metrics:
                metrics = jax.device_get(metrics)
                _check_finite({k: np.asarray(v)[:, None] for k, v in metrics.items()}, offline_step + env_step, folder)
                chunk_metrics.append(metrics)
            at_checkpoint = env_step % ft.checkpoint_every == 0 or env_step == end
            if env_step % ft.log_every == 0 or env_step % ft.eval_every == 0 or at_checkpoint:
                step_rows = []
                for s in range(seeds):
                    row = {"step": offline_step + env_step, "seed": s, "phase": "online", "env_step": env_step,
                           "time": time.time(), "env_steps_per_s": env_step / max(time.perf_counter() - t_start, 1e-9)}
                    if chunk_metrics:
                        row.update({k: float(np.mean([np.asarray(m[k])[s] for m in chunk_metrics])) for k in chunk_metrics[0]})
                    if episode_returns[s]:
                        row["train/episode_return"] = float(np.mean(episode_returns[s]))
                    step_rows.append(row)
                chunk_metrics, episode_returns = [], [[] for _ in range(seeds)]
                if evaluator is not None and (env_step % ft.eval_every == 0 or env_step == ft.steps):
                    per_seed = summarise_evaluation(evaluator(agents))
                    for row, ev in zip(step_rows, per_seed):
                        row.update(ev)
                    from offrl.engine.training import _eval_text

                    last_eval = _eval_text(per_seed)
                log.add(step_rows)
            if at_checkpoint:
                restart(env_step)
                if episode_extras is not None:  # the restart cuts every open episode (a timeout)
                    closed.extend((i, pending[i], False) for i in range(seeds) if pending[i])
                    pending = [[] for _ in range(seeds)]
                    buffers = patch_closed(buffers)
                save_checkpoint(folder / "checkpoints", {"agent": agents, "data_keys": data_keys, "buffers": buffers},
                                offline_step + env_step, meta={"env_step": env_step})
                log.write_csv()
            bar.update(env_step, env_step / max(time.perf_counter() - t_start, 1e-9), last_eval)
    finally:
        bar.close()
        log.close()
        vec.close()
        if evaluator is not None:
            evaluator.close()
    result = Run(folder, record["algo"], online_config, settings_ft, info, agents, log.rows)
    summary = online_summary(result.metrics, offline_step)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    from offrl.plotting import plot_finetune

    plot_finetune(result, folder / "plots", offline_step)
    return result


def online_summary(rows: list[dict], offline_step: int) -> dict:
    """Offline final return, online final return, the unlearning dip and the cumulative regret.

    ``dip`` = min evaluation return within the first 10% of online steps (per seed, then averaged)
    minus the offline final return; ``regret`` = mean over online evaluations of
    ``1 - normalized_score / 100`` (``None`` without reference returns).
    """
    evals = [r for r in rows if "eval/return" in r]
    offline = [r for r in evals if r.get("phase") == "offline" or r["step"] <= offline_step]
    online = [r for r in evals if r.get("phase") == "online" and r["step"] > offline_step]
    out: dict[str, Any] = {"offline_steps": offline_step}
    if not offline or not online:
        return out
    seeds = sorted({r["seed"] for r in online})
    last_off = {r["seed"]: r for r in offline}
    last_on = {r["seed"]: r for r in online}
    online_steps = max(r["step"] for r in online) - offline_step
    early = [r for r in online if r["step"] - offline_step <= max(0.1 * online_steps, 1)]
    dips = []
    for s in seeds:
        early_s = [r["eval/return"] for r in early if r["seed"] == s] or [last_on[s]["eval/return"]]
        dips.append(min(early_s) - last_off[s]["eval/return"])
    scores = np.array([r.get("eval/normalized_score", np.nan) for r in online], float)
    out.update({
        "offline_return": float(np.mean([last_off[s]["eval/return"] for s in seeds])),
        "online_return": float(np.mean([last_on[s]["eval/return"] for s in seeds])),
        "online_return_std": float(np.std([last_on[s]["eval/return"] for s in seeds])),
        "offline_score": float(np.mean([last_off[s].get("eval/normalized_score", np.nan) for s in seeds])),
        "online_score": float(np.mean([last_on[s].get("eval/normalized_score", np.nan) for s in seeds])),
        "unlearning_dip": float(np.mean(dips)),
        "cumulative_regret": float(np.mean(1.0 - scores / 100.0)) if np.isfinite(scores).all() else None,
        "online_steps": int(online_steps),
    })
    return out
