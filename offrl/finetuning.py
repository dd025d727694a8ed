"""Offline -> online fine-tuning: continue an offline run with environment interaction.

Conservatism that protects an offline learner (a seatbelt) can hold it back once it may act
(handcuffs). :func:`finetune` continues a run of any algorithm whose spec is fine-tunable (CQL,
Cal-QL, IQL, AWAC, TD3+BC, TD3, ReBRAC, SPOT, SAC-N, EDAC, LB-SAC) online, with the field's
remedies as composable options:

* **replay mixing** (``mix_ratio``): each minibatch has exactly ``round(B * mix_ratio)`` offline
  rows and the rest from the online buffer (0: online data only, the naive continuation);
* **alpha decay** (``alpha_decay``, CQL / Cal-QL): ``alpha_t = alpha_0 exp(-lambda t)`` over online steps;
* **Cal-QL** (run trained with ``--algo cal_ql``): the penalty's policy values are bounded below by
  Monte-Carlo returns, of the data offline and of each online episode once it ends;
* **annealed BC** (``bc_anneal_steps``, TD3+BC): the BC weight falls linearly to 0 (TD3+BC -> TD3).

The environment -> replay -> scanned-update loop is :class:`offrl.engine.online.OnlineLearner`,
with the algorithm's ``explore`` as its action rule; its minibatches draw the offline rows with the
spec's sampler and fill the algorithm's extra arrays online (ReBRAC's next actions by the learner's
successor rule, Cal-QL's Monte-Carlo returns by ``online_extras``).
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
from typing import Any, ClassVar

import numpy as np

from offrl.config import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, UNIT, check_config, param
from offrl.errors import ConfigError, OffrlError
from offrl.locking import RunLock
from offrl.run_folder import atomic_write


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The online phase (the flags of ``offrl finetune`` are generated from these fields).

    steps: online environment steps per seed.
    mix_ratio: share of offline rows in each minibatch, in [0, 1] (0.5, the Cal-QL/RLPD choice; 0 = online data
      only, the naive continuation).
    utd: gradient updates per environment step (update-to-data ratio).
    update_every: env steps between two jitted update calls (each runs update_every * utd updates).
    start_steps: online env steps collected before the first update (the buffer must not be empty when
      mix_ratio < 1).
    alpha_decay: CQL/Cal-QL: lambda of alpha_0 * exp(-lambda t) over online steps (0: constant).
    bc_anneal_steps: TD3+BC: the BC weight falls linearly to 0 over these online steps (0: kept).
    eval_every: env steps between deterministic evaluations.
    eval_episodes: evaluation episodes per seed (0 = none).
    checkpoint_every: env steps between checkpoints (a multiple of update_every), where all envs restart.
    log_every: env steps between metrics rows (a multiple of update_every).
    lr_warmup_steps: env steps of the online learning-rate warm-up (>= 0). Every optimiser keeps
        its offline state (Adam moments, step counts, schedule). Where the online phase drops a
        learning-rate schedule (IQL's cosine decay of the actor's rate, which has reached 0), the
        rate of online update k is eta_off + (eta - eta_off) min(1, k / (lr_warmup_steps * utd)):
        it starts where the offline schedule stopped (eta_off) and reaches the configured rate eta
        linearly (0: eta at once). :func:`offrl.engine.online.carry_over` implements the rule.
    """

    COMMAND_FLAGS: ClassVar[bool] = True
    MULTIPLE_OF: ClassVar[tuple] = (("checkpoint_every", "update_every"), ("log_every", "update_every"))

    steps: int = param(100_000, POSITIVE_INT)
    mix_ratio: float = param(0.5, UNIT)
    utd: int = param(1, POSITIVE_INT)
    update_every: int = param(50, POSITIVE_INT)
    start_steps: int = param(1000, NON_NEGATIVE_INT)
    alpha_decay: float = param(0.0, NON_NEGATIVE)
    bc_anneal_steps: int = param(0, NON_NEGATIVE_INT, flag="--bc-anneal")
    eval_every: int = param(5000, POSITIVE_INT)
    eval_episodes: int = param(5, NON_NEGATIVE_INT)
    checkpoint_every: int = param(10_000, POSITIVE_INT)
    log_every: int = param(1000, POSITIVE_INT)
    lr_warmup_steps: int = param(5000, NON_NEGATIVE_INT)

    def __post_init__(self) -> None:
        check_config(self)

    def check(self) -> None:
        """Raise :class:`ConfigError` for a field outside its range (also done when the config is built)."""
        check_config(self)


def _check_source(folder: Path) -> dict:
    """The source run's ``config.json`` (read once), refused unless it is a finished offline run of a
    fine-tunable algorithm."""
    from offrl.algos import algorithm_names

    if not (folder / "config.json").exists():
        raise ConfigError(f"{folder} is not an offrl run folder (no config.json); pass the --out folder of `offrl train`.")
    record = json.loads((folder / "config.json").read_text())
    if "algo" not in record or "data" not in record:
        raise ConfigError(f"{folder}/config.json is not an offrl training record; pass the --out folder of `offrl train`.")
    if record.get("phase") == "online":
        raise ConfigError(f"{folder} is already a fine-tuning run; pass the offline run it came from, or --resume it.")
    finetunable = algorithm_names(finetunable=True)
    if record["algo"] not in finetunable:
        raise ConfigError(f"{folder} was trained with {record['algo']}; offrl finetune continues {', '.join(finetunable)}.")
    return record


def _online_config(module, config, offline_step: int, ft: FinetuneConfig):
    from offrl.algos import algorithm_spec

    spec = algorithm_spec(module)
    if spec.online_config is not None:
        config = spec.online_config(config)
    changes: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(config)}
    if ft.alpha_decay:
        if "cql_alpha_decay" not in fields:
            raise ConfigError(f"--alpha-decay applies to CQL and Cal-QL runs, not {algorithm_spec(module).name}.")
        changes.update(cql_alpha_decay=ft.alpha_decay, decay_start_step=offline_step)
    if ft.bc_anneal_steps:
        if "bc_anneal_steps" not in fields or getattr(config, "alpha", None) is None:
            raise ConfigError("--bc-anneal applies to TD3+BC runs (the BC term's weight).")
        changes.update(bc_anneal_steps=ft.bc_anneal_steps * ft.utd, anneal_start_step=offline_step)
    if "cosine_actor_lr" in fields and config.cosine_actor_lr:
        changes["cosine_actor_lr"] = False  # the decayed schedule is followed by carry_over's warm-up
    return dataclasses.replace(config, **changes)


def _open_env(source: Path, env: str | None, info, settings: dict):
    from offrl.rollout import VectorEnv

    env_id = env or info.env_id or settings.get("env")
    if not env_id:
        raise ConfigError(f"{source} has no environment id (its dataset names none); pass --env ENV (a Gymnasium id such as Hopper-v5).")
    vec = VectorEnv(env_id, int(settings["seeds"]))
    if (vec.obs_dim, vec.action_dim) != (info.obs_dim, info.action_dim):
        vec.close()
        raise ConfigError(f"--env {env_id} has observations of size {vec.obs_dim} and actions of size {vec.action_dim}; "
                          f"the run {source} was trained on {info.obs_dim} and {info.action_dim}; pass the env of its dataset.")
    return env_id, vec


def _restore_offline(source: Path, module, config, info, settings: dict):
    """The offline run's seed-stacked agents from its latest checkpoint, restored into the shape of
    its own config's agents (traced with ``jax.eval_shape``: nothing is built or initialised)."""
    import jax

    from offrl.checkpoint import latest_checkpoint, load_checkpoint
    from offrl.engine.chunks import create_agents

    latest = latest_checkpoint(source / "checkpoints")
    if latest is None:
        raise OffrlError(f"{source} has no checkpoint yet (checkpoints/latest.json is missing); train it longer or --resume it.")
    template = jax.eval_shape(lambda: create_agents(module, config, info.obs_dim, info.action_dim,
                                                    int(settings["seed"]), int(settings["seeds"]))[0])
    return load_checkpoint(latest["path"], {"agent": template})["agent"]


def _offline_data(source: Path, dataset, settings: dict, config, env_id: str, module):
    from offrl.engine.data import prepare_data
    from offrl.engine.training import load_dataset

    if dataset is None and str(settings.get("dataset", "<")).startswith("<"):
        raise ConfigError(f"{source} was trained on in-memory arrays ({settings.get('dataset')}); pass the dataset (dataset=...) to fine-tune it.")
    data, _ = prepare_data(load_dataset(dataset if dataset is not None else settings["dataset"]), config, env_id, module)
    return data


def finetune(run: str | Path, steps: int | None = None, env: str | None = None, out: str | Path | None = None,
             config: FinetuneConfig | None = None, resume: bool = False, progress: bool = True,
             stop_at: int | None = None, dataset=None, **options):
    """Fine-tune the offline run in ``run`` online for ``steps`` env steps per seed.

    ``options`` are :class:`FinetuneConfig` fields (``mix_ratio``, ``utd``, ``alpha_decay``, ...).
    ``dataset`` (a name, path or :class:`offrl.data.Dataset`) replaces the run's own dataset,
    e.g. for a run trained from in-memory arrays.
    ``out`` defaults to ``<run>-finetune``; the source run folder is never written. Returns the
    fine-tuning :class:`offrl.engine.Run`. The optimisers continue from the offline run's state;
    a learning-rate schedule that the online phase drops is followed by a linear warm-up over
    ``lr_warmup_steps`` env steps from its last value (:func:`offrl.engine.online.carry_over`).

    Example::

        ft = offrl.finetune("runs/cql", steps=50_000, mix_ratio=0.5, alpha_decay=1e-4)
        ft.summary()
    """
    import jax

    from offrl.algos import get_algorithm
    from offrl.algos.common import config_from_dict, config_to_dict
    from offrl.engine.chunks import create_agents
    from offrl.engine.data import DataInfo
    from offrl.engine.online import OnlineLearner, carry_over, spec_explore
    from offrl.engine.run import Run
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
    offline_config, info, settings = config_from_dict(module.Config, record["config"]), DataInfo(**record["data"]), dict(record["settings"])
    seeds, seed = int(settings["seeds"]), int(settings["seed"])
    env_id, vec = _open_env(source, env, info, settings)
    try:
        offline_agents = _restore_offline(source, module, offline_config, info, settings)
        offline_step = int(np.asarray(offline_agents.step).reshape(-1)[0])
        online_config = _online_config(module, offline_config, offline_step, ft)
        offline_data = _offline_data(source, dataset, settings, online_config, env_id, module)
    except BaseException:
        vec.close()
        raise
    fresh, data_keys = create_agents(module, online_config, info.obs_dim, info.action_dim, seed, seeds)
    agents = carry_over(fresh, offline_agents, ft.lr_warmup_steps * ft.utd)
    data_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1_000_003))(data_keys)
    explore_keys = jax.vmap(lambda k: jax.random.fold_in(k, 2_000_003))(data_keys)
    normalize = bool(getattr(online_config, "normalize_observations", False))
    obs_mean, obs_std = np.asarray(info.obs_mean, np.float32), np.asarray(info.obs_std, np.float32)
    to_agent_obs = (lambda o: (o - obs_mean) / obs_std) if normalize else (lambda o: o)  # noqa: E731
    learner = OnlineLearner(
        module, agents, data_keys, vec, choose=spec_explore(module, explore_keys, to_agent_obs, info.to_env_action),
        example_row={k: np.asarray(v[0]) for k, v in offline_data.items()}, capacity=ft.steps,
        batch_size=online_config.batch_size, update_every=ft.update_every, updates_per_step=ft.utd,
        start_steps=ft.start_steps, mix_ratio=ft.mix_ratio, offline=offline_data, config=online_config,
        seed=seed * 7919 + 17, to_agent_obs=to_agent_obs, scale_rewards=info.scale_rewards, step_offset=offline_step,
        folder=folder)
    settings_ft = {**settings, "env": env_id, "source_run": str(source), "offline_steps": offline_step,
                   **{f"finetune_{k}": v for k, v in dataclasses.asdict(ft).items()}}
    online_record = {"algo": record["algo"], "phase": "online", "config": config_to_dict(online_config),
                     "offline_config": config_to_dict(offline_config),
                     "settings": settings_ft, "data": record["data"], "offrl_version": record.get("offrl_version")}
    try:
        with RunLock(folder):
            log = _online_log(folder, source, learner, online_record, offline_step, resume)
            _online_phase(learner, log, folder, ft, module, info, env_id, settings, seed, offline_step, stop_at, progress,
                          title=f"finetune {record['algo']} x{seeds}")
            result = Run(folder, record["algo"], online_config, settings_ft, info, learner.agents, log.rows)
            atomic_write(folder / "summary.json", json.dumps(online_summary(result.metrics, offline_step), indent=2))
    finally:
        vec.close()
    from offrl.plotting import plot_finetune

    plot_finetune(result, folder / "plots", offline_step)
    return result


def _online_log(folder: Path, source: Path, learner, record: dict, offline_step: int, resume: bool):
    """The fine-tuning folder's metrics log: a new folder with the source run's offline evaluations
    (``phase: offline``), or, with ``resume``, the learner restored from the latest checkpoint."""
    import jax
    import jax.numpy as jnp

    from offrl.checkpoint import latest_checkpoint, load_checkpoint
    from offrl.run_folder import MetricsLog, read_metrics, truncate_metrics

    log = MetricsLog(folder, rows=[])
    if resume:
        if not (folder / "config.json").exists():
            raise ConfigError(f"--resume needs the fine-tuning folder {folder} with config.json; drop --resume to start.")
        latest = latest_checkpoint(folder / "checkpoints")
        if latest is not None:
            state = load_checkpoint(latest["path"], {"agent": learner.agents, "data_keys": learner.data_keys,
                                                     "buffers": learner.buffers})
            learner.agents = jax.tree_util.tree_map(jnp.asarray, state["agent"])
            learner.data_keys = jnp.asarray(state["data_keys"])
            learner.buffers = jax.tree_util.tree_map(jnp.asarray, state["buffers"])
            learner.env_step = int(latest["env_step"])
        log.rows = truncate_metrics(folder / "metrics.jsonl", offline_step + learner.env_step)
        return log
    if (folder / "checkpoints" / "latest.json").exists():
        raise ConfigError(f"{folder} already holds a fine-tuning run; pass --resume to continue it or choose another --out.")
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    (folder / "plots").mkdir(exist_ok=True)
    atomic_write(folder / "config.json", json.dumps(record, indent=2))
    atomic_write(folder / "metrics.jsonl", "")
    log.add([{**r, "phase": "offline"} for r in read_metrics(source / "metrics.jsonl") if "eval/return" in r])
    return log


def _online_phase(learner, log, folder: Path, ft: FinetuneConfig, module, info, env_id: str, settings: dict, seed: int,
                  offline_step: int, stop_at: int | None, progress: bool, title: str) -> None:
    """Run ``learner`` to ``ft.steps`` (or ``stop_at``): a metrics row per seed every ``log_every`` env
    steps, evaluations every ``eval_every``, and every ``checkpoint_every`` env steps all envs restart
    from seeds derived from the step and the agents, data keys and buffers are saved."""
    from offrl.checkpoint import save_checkpoint
    from offrl.engine.evaluation import Evaluator, summarise_evaluation
    from offrl.engine.run import reference_metadata
    from offrl.engine.training import evaluation_text
    from offrl.progress import ProgressBar, rate_text

    seeds = learner.members
    evaluator = Evaluator(module, learner.agents, info, env_id, ft.eval_episodes, seeds,
                          getattr(learner.config, "discount", 0.99), metadata=reference_metadata(settings)) if ft.eval_episodes > 0 else None

    def restart(step: int):
        learner.restart([seed * 1_000_003 + step * 31 + i for i in range(seeds)])

    bar = ProgressBar(progress, total=ft.steps, start=learner.env_step, title=title)
    restart(learner.env_step)
    chunk_metrics: list[dict] = []
    last_eval = ""
    end = ft.steps if stop_at is None else min(ft.steps, int(stop_at))
    t_start, start_step = time.perf_counter(), learner.env_step
    try:
        while learner.env_step < end:
            metrics = learner.chunk()
            env_step = learner.env_step
            if metrics:
                chunk_metrics.append(metrics)
            at_checkpoint = env_step % ft.checkpoint_every == 0 or env_step == end
            rate = (env_step - start_step) / max(time.perf_counter() - t_start, 1e-9)
            if env_step % ft.log_every == 0 or env_step % ft.eval_every == 0 or at_checkpoint:
                returns = learner.take_episode_returns()
                step_rows = []
                for s in range(seeds):
                    row = {"step": offline_step + env_step, "seed": s, "phase": "online", "env_step": env_step,
                           "time": time.time(), "env_steps_per_s": rate}
                    if chunk_metrics:
                        row.update({k: float(np.mean([m[k][s] for m in chunk_metrics])) for k in chunk_metrics[0]})
                    if returns[s]:
                        row["train/episode_return"] = float(np.mean(returns[s]))
                    step_rows.append(row)
                chunk_metrics = []
                if evaluator is not None and (env_step % ft.eval_every == 0 or env_step == ft.steps):
                    for row, ev in zip(step_rows, summarise_evaluation(evaluator(learner.agents))):
                        row.update(ev)
                    last_eval = evaluation_text(step_rows)
                log.add(step_rows)
            if at_checkpoint:
                restart(env_step)
                save_checkpoint(folder / "checkpoints", {"agent": learner.agents, "data_keys": learner.data_keys,
                                                         "buffers": learner.buffers},
                                offline_step + env_step, meta={"env_step": env_step})
                log.write_csv()
            bar.update(env_step, f"{rate_text(rate, 'env-steps/s')}  {last_eval}")
    finally:
        bar.close()
        log.close()
        if evaluator is not None:
            evaluator.close()


def _evaluations(rows: list[dict], offline_step: int) -> tuple[list[dict], list[dict]]:
    evals = [r for r in rows if "eval/return" in r]
    offline = [r for r in evals if r.get("phase") == "offline" or r["step"] <= offline_step]
    online = [r for r in evals if r.get("phase") == "online" and r["step"] > offline_step]
    return offline, online


def per_seed_outcomes(rows: list[dict], offline_step: int) -> dict[str, list[float]]:
    """Each seed's unlearning dip and cumulative regret, as :func:`online_summary` defines them
    (its ``unlearning_dip`` is the mean of these dips); empty lists without online evaluations."""
    offline, online = _evaluations(rows, offline_step)
    if not offline or not online:
        return {"dip": [], "regret": []}
    last_off = {r["seed"]: r for r in offline}
    horizon = max(r["step"] for r in online) - offline_step
    dips, regrets = [], []
    for s in sorted({r["seed"] for r in online}):
        mine = [r for r in online if r["seed"] == s]
        early = [r["eval/return"] for r in mine if r["step"] - offline_step <= max(0.1 * horizon, 1)] or [mine[-1]["eval/return"]]
        dips.append(float(min(early) - last_off[s]["eval/return"]))
        scores = np.array([r.get("eval/normalized_score", np.nan) for r in mine], float)
        regrets.append(float(np.mean(1.0 - scores / 100.0)))
    return {"dip": dips, "regret": regrets}


def online_summary(rows: list[dict], offline_step: int) -> dict:
    """Offline final return, online final return, the unlearning dip and the cumulative regret.

    ``dip`` = min evaluation return within the first 10% of online steps (per seed, then averaged)
    minus the offline final return; ``regret`` = mean over online evaluations of
    ``1 - normalized_score / 100`` (``None`` without reference returns).
    """
    offline, online = _evaluations(rows, offline_step)
    out: dict[str, Any] = {"offline_steps": offline_step}
    if not offline or not online:
        return out
    seeds = sorted({r["seed"] for r in online})
    last_off = {r["seed"]: r for r in offline}
    last_on = {r["seed"]: r for r in online}
    online_steps = max(r["step"] for r in online) - offline_step
    dips = per_seed_outcomes(rows, offline_step)["dip"]
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
