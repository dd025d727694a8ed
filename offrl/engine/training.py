"""Training: the one offline loop (:func:`offline_loop`) and :func:`train`, which runs it into a run folder.

Per chunk, Python calls the compiled ``lax.scan`` once for all members (:mod:`offrl.engine.chunks`),
checks the chunk's metrics are finite (:func:`check_finite`), and hands one row per member to the
loop's hooks (:class:`LoopHooks`): evaluation every ``eval_every`` steps, logging, checkpoints,
progress. :func:`train` runs one configuration x seeds; :mod:`offrl.sweeps` runs several
configurations x seeds as one program through the same loop. A killed run resumes from its latest
checkpoint with the metrics log truncated to it, and ends bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from offrl.engine.chunks import Trainer, create_agents
from offrl.engine.data import prepare_data
from offrl.engine.evaluation import Evaluator, summarise_evaluation
from offrl.engine.run import Run, reference_metadata, references, run_record
from offrl.errors import ConfigError, DivergenceError
from offrl.locking import RunLock
from offrl.progress import ProgressBar, rate_text
from offrl.run_folder import MetricsLog, atomic_write, first_non_finite, truncate_metrics


# ---------------------------------------------------------------------- what a run starts from
def load_dataset(dataset):
    """``dataset`` as an :class:`offrl.data.Dataset` (a registry name or file path is loaded)."""
    from offrl.data import Dataset, load

    return dataset if isinstance(dataset, Dataset) else load(str(dataset))


def describe_dataset(dataset, source) -> str:
    """The name or path the user gave, or the Dataset's own ``source``."""
    return str(source) if not hasattr(source, "observations") else getattr(dataset, "source", "<arrays>")


def check_run_counts(**counts: int) -> None:
    """Each of ``steps``, ``seeds``, ``eval_every``, ``log_every``... must be a positive integer."""
    for name, value in counts.items():
        if int(value) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} is {value}; it must be a positive integer.")


def with_schedule_steps(config, steps: int):
    """``config`` with a ``schedule_steps`` field left at ``None`` set to ``steps`` (the length of the
    run's learning-rate schedules); configs without the field are returned unchanged."""
    names = {f.name for f in dataclasses.fields(config)}
    if "schedule_steps" in names and config.schedule_steps is None:
        return dataclasses.replace(config, schedule_steps=int(steps))
    return config


def run_config(module, overrides: Mapping[str, Any] | None, steps: int, *more: Mapping[str, Any]):
    """A new run's config: ``module.Config()`` with ``overrides`` (then each of ``more``) applied and
    its schedules set to ``steps`` (:func:`with_schedule_steps`)."""
    from offrl.algos.common import apply_overrides

    config = apply_overrides(module.Config(), overrides)
    for extra in more:
        config = apply_overrides(config, dict(extra))
    return with_schedule_steps(config, steps)


def dataset_config(module, config, dataset, env_id: str | None):
    """The spec's ``config_for_dataset`` hook applied once, when a run starts (e.g. DT's target return)."""
    from offrl.algos import algorithm_spec
    from offrl.engine.data import data_info

    hook = algorithm_spec(module).config_for_dataset
    return config if hook is None else hook(config, dataset, data_info(dataset, config, env_id))


def run_settings(dataset, source, env_id: str | None, *, steps: int, seeds: int, seed: int, eval_every: int,
                 eval_episodes: int, log_every: int, keep_checkpoints: bool = False) -> dict:
    """The ``settings`` of a run's ``config.json``: what it trained on and how."""
    return dict(dataset=describe_dataset(dataset, source), env=env_id, steps=int(steps), seeds=int(seeds),
                seed=int(seed), eval_every=int(eval_every), eval_episodes=int(eval_episodes),
                log_every=int(log_every), transitions=len(dataset), references=references(env_id, dataset.metadata),
                keep_checkpoints=bool(keep_checkpoints))


def write_run_folder(folder: Path, record: dict) -> None:
    """``config.json``, an empty ``metrics.jsonl``, ``checkpoints/`` and ``plots/``."""
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    (folder / "plots").mkdir(exist_ok=True)
    atomic_write(folder / "config.json", json.dumps(record, indent=2))
    atomic_write(folder / "metrics.jsonl", "")


def read_run_record(folder: Path) -> dict:
    """``folder/config.json`` as written by :func:`train`, refused in one line when it is not valid JSON
    or lacks ``algo``, ``config`` or ``settings``."""
    path = folder / "config.json"
    try:
        record = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError(f"{path} is not valid JSON{where}; restore it from a copy, or start a new run with another --out.") from None
    missing = [key for key in ("algo", "config", "settings") if not isinstance(record, dict) or key not in record]
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(repr(k) for k in missing)}; it was not written by offrl train "
                          "(restore it, or start a new run with another --out).")
    return record


def resumed_config(module, record: dict, folder: Path, overrides: Mapping[str, Any] | None, steps: int):
    """The run's stored config, unchanged: **a resume keeps the run's config**.

    ``--set`` on a resume may only repeat stored values; one that would change a field is refused
    in one line naming ``config.json`` and the field, before anything in the folder is touched.
    ``--steps`` may shorten a run or, for an algorithm without a learning-rate schedule
    (no ``schedule_steps`` field), extend it; a run whose schedule ends at ``schedule_steps`` is not
    extended past it, because its learning rates would differ from a fresh run of that length.
    """
    import re

    from offrl.algos.common import apply_overrides, config_from_dict

    path = folder / "config.json"
    try:
        config = config_from_dict(module.Config, record["config"])
    except (ConfigError, TypeError) as exc:
        reason = re.sub(r"\s*\(e\.g\. --set [^)]*\)|;? ?(pass|set) e\.g\. --set \S+", "", str(exc)).rstrip(". ")
        raise ConfigError(f"{path} does not hold a valid config: {reason}; fix the file or start a new run with another --out.") from None
    if overrides:
        changed = apply_overrides(config, overrides)
        for f in dataclasses.fields(config):
            old, new = getattr(config, f.name), getattr(changed, f.name)
            if old != new:
                raise ConfigError(f"--resume keeps the run's config, but --set {f.name}={_text(new)} would change "
                                  f"{path}'s {f.name} ({_text(old)}); drop it from --set, or start a new run with another --out.")
    previous = int(record["settings"].get("steps", steps))
    schedule = getattr(config, "schedule_steps", None) if "schedule_steps" in {f.name for f in dataclasses.fields(config)} else None
    if schedule is not None and int(steps) > int(schedule):
        raise ConfigError(f"--resume --steps {steps}: {path} has schedule_steps {schedule} (its learning-rate schedule ends "
                          f"there), so the resumed run would differ from a fresh {steps}-step run; resume with --steps "
                          f"{previous}, or start a new run with --steps {steps}.")
    return config


def check_batch_size(config, rows: int, obs_dim: int, action_dim: int) -> None:
    """Refuse, in one line, a ``batch_size`` whose minibatch cannot fit in this machine's memory
    (estimated as ``4 bytes x batch x (2 obs_dim + action_dim + 4 + 16 x the widest layer)``, against
    half the physical memory); warn when it exceeds the dataset (rows are drawn with replacement)."""
    import os
    import warnings

    from offrl.data.checks import DatasetWarning

    batch = int(config.batch_size)
    widths = [w for name in ("hidden_dims", "critic_hidden_dims", "actor_hidden_dims")
              for w in (getattr(config, name, None) or ())]
    need = 4 * batch * (2 * obs_dim + action_dim + 4 + 16 * max(widths or [256]))
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platforms without sysconf
        total = None
    if total and need > total / 2:
        raise ConfigError(f"batch_size {batch} needs about {need / 1e9:,.0f} GB per minibatch, more than half of this "
                          f"machine's {total / 1e9:.0f} GB; pass e.g. --set batch_size={min(256, rows)}.")
    if batch > rows:
        warnings.warn(f"batch_size {batch} is larger than the dataset ({rows} transitions); minibatches are drawn "
                      "with replacement, so rows repeat within a batch.", DatasetWarning, stacklevel=3)


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` when it holds nothing but its lock file (and empty subfolders)."""
    from offrl.locking import LOCK_NAME

    files = [p for p in folder.rglob("*") if p.is_file() and p.name != LOCK_NAME]
    if files:
        return
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _shape(dataset, env_id: str | None) -> tuple[int, int, int]:
    """``(obs_dim, action_dim, num_actions)`` of a dataset as the engine sees it (see :class:`DataInfo`)."""
    from offrl.engine.data import data_info

    info = data_info(dataset, None, env_id)
    return info.obs_dim, info.action_dim, info.num_actions


def _text(value) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


# ---------------------------------------------------------------------- the loop
def check_finite(metrics: Mapping[str, Any], step: int, *, member: Callable[[int], str] = lambda m: f"seed {m}",
                 advice: str = "lower the learning rates or normalise observations/rewards.",
                 folder: Path | None = None, what: str = "training") -> None:
    """Raise :class:`DivergenceError` naming the first non-finite metric, its step and its member.

    ``metrics[name]`` has shape ``(members, updates)``; the chunk started after ``step``. With a
    ``folder``, the message says which checkpoint is the last good one.
    """
    bad = first_non_finite(metrics)
    if bad is None:
        return
    name, index, value = bad
    index_member, offset = index if len(index) == 2 else (0, index[-1])
    where = ""
    if folder is not None:
        from offrl.checkpoint import latest_intact_checkpoint

        latest = latest_intact_checkpoint(folder / "checkpoints")
        where = f" The last good checkpoint (step {latest['step']}) is kept in {folder / 'checkpoints'}." if latest else " No checkpoint was saved before it."
    raise DivergenceError(f"{what} diverged: '{name}' became {value} at step {step + offset + 1} ({member(index_member)});"
                          f" {advice}{where}")


@dataclasses.dataclass
class LoopHooks:
    """What :func:`offline_loop` does beside the updates; every hook is optional.

    evaluate(agents) -> one row of evaluation metrics per member, at every ``eval_every`` step and the last.
    log(rows): one metrics row per member, after every chunk.
    checkpoint(agents, data_keys, step): at every ``eval_every`` step and where the loop stops.
    after_evaluation(step, rows): after an evaluation's rows were logged and checkpointed (Ray Tune reports here).
    progress(step, updates, seconds, rows): after every chunk of ``updates`` updates per member.
    member(m) -> how a divergence message names member ``m``; advice: the message's remedy.
    folder: the run folder whose last good checkpoint a divergence message names.
    """

    evaluate: Callable | None = None
    log: Callable | None = None
    checkpoint: Callable | None = None
    after_evaluation: Callable | None = None
    progress: Callable | None = None
    member: Callable[[int], str] = lambda m: f"seed {m}"
    advice: str = "lower the learning rates or normalise observations/rewards."
    folder: Path | None = None


def offline_loop(trainer: Trainer, agents, data_keys, data, *, step: int, end: int, steps: int, eval_every: int,
                 log_every: int, seeds: int, hooks: LoopHooks):
    """Train from ``step`` to ``end`` (``<= steps``) in chunks that stop at every multiple of
    ``log_every`` and ``eval_every``; returns the agents. Member ``m``'s rows carry ``seed = m % seeds``
    (a sweep's members are configurations x seeds)."""
    import jax

    while step < end:
        boundary = min(_next_multiple(step, log_every), _next_multiple(step, eval_every), end)
        n = boundary - step
        t0 = time.perf_counter()
        new_agents, metrics = trainer.run(agents, data_keys, data, n)
        metrics = jax.device_get(metrics)
        elapsed = time.perf_counter() - t0
        check_finite(metrics, step, member=hooks.member, advice=hooks.advice, folder=hooks.folder)
        agents, step = new_agents, boundary
        members = int(np.asarray(agents.step).shape[0])
        rows = [{"step": step, "seed": m % seeds, "time": time.time(), "steps_per_s": n / max(elapsed, 1e-9),
                 **{k: float(np.mean(v[m])) for k, v in sorted(metrics.items())}} for m in range(members)]
        evaluated = hooks.evaluate is not None and (step % eval_every == 0 or step == steps)
        if evaluated:
            for row, ev in zip(rows, hooks.evaluate(agents)):
                row.update(ev)
        if hooks.log is not None:
            hooks.log(rows)
        if hooks.checkpoint is not None and (step % eval_every == 0 or step == end):
            hooks.checkpoint(agents, data_keys, step)
        if evaluated and hooks.after_evaluation is not None:
            hooks.after_evaluation(step, rows)
        if hooks.progress is not None:
            hooks.progress(step, n, elapsed, rows)
    return agents


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def evaluation_text(rows: list[dict]) -> str:
    """``score 41.2±3.0`` over the rows' evaluations (raw returns without reference returns); ``""`` without."""
    rows = [r for r in rows if "eval/return" in r]
    if not rows:
        return ""
    score = np.array([r["eval/normalized_score"] for r in rows], float)
    ret = np.array([r["eval/return"] for r in rows], float)
    if np.all(np.isfinite(score)):
        return f"score {score.mean():.1f}±{score.std():.1f}"
    return f"return {ret.mean():.1f}±{ret.std():.1f}"


def save_agents(folder: Path, agents, data_keys, step: int, keep: int = 1) -> None:
    from offrl.checkpoint import save_checkpoint

    save_checkpoint(folder / "checkpoints", {"agent": agents, "data_keys": data_keys}, step, keep=keep)


# ---------------------------------------------------------------------- train
def train(
    algo: str = "iql",
    dataset: Any = None,
    steps: int = 100_000,
    seeds: int = 1,
    seed: int = 0,
    eval_every: int = 10_000,
    eval_episodes: int = 10,
    out: str | Path | None = None,
    config_overrides: Mapping[str, Any] | None = None,
    env: str | None = None,
    resume: bool = False,
    log_every: int = 1000,
    tensorboard: bool = False,
    wandb: bool = False,
    progress: bool = True,
    stop_at: int | None = None,
    keep_checkpoints: bool = False,
    devices: int | str | None = None,
) -> Run:
    """Train ``algo`` on ``dataset`` for ``steps`` updates with ``seeds`` vmapped seeds.

    ``dataset`` is a registry name, a file path or an :class:`offrl.data.Dataset`. ``env``
    (default: the dataset's ``metadata['env_id']``) is the Gymnasium id used for evaluation;
    without one, no evaluation runs. ``out`` is the run folder (``config.json``,
    ``metrics.jsonl``, ``metrics.csv``, ``checkpoints/``, ``plots/``); ``resume=True``
    continues from ``out``'s latest checkpoint. ``stop_at`` ends the run early at that step
    (after checkpointing), as a killed run would; used to test resumption. ``keep_checkpoints``
    keeps every evaluation step's checkpoint (``load_run(out, step=...)``) instead of the latest only.
    ``devices`` (an int or ``"auto"``) shards the seeds over that many devices, or with one seed
    each minibatch's batch axis (:mod:`offrl.engine.sharding`; data replicated).

    Example::

        run = offrl.train("iql", "pendulum-medium-v0", steps=50_000, seeds=3, out="runs/iql")
        run.final_scores        # normalized score of each seed at the last evaluation
    """
    from offrl.algos import algorithm_spec, get_algorithm
    from offrl.envs import check_env_id

    check_env_id(env)
    module = get_algorithm(algo)
    algo = algorithm_spec(module).name
    folder = Path(out) if out is not None else None
    check_run_counts(steps=steps, seeds=seeds, eval_every=eval_every, log_every=log_every)
    if resume and (folder is None or not (folder / "config.json").exists()):
        raise ConfigError(f"--resume needs an existing run folder with config.json, but {folder} has none; drop --resume to start a new run.")
    created = folder is not None and not folder.exists()
    try:
        with RunLock(folder) if folder is not None else contextlib.nullcontext():
            return _train_locked(module, algo, folder, dataset=dataset, steps=steps, seeds=seeds, seed=seed,
                                 eval_every=eval_every, eval_episodes=eval_episodes, config_overrides=config_overrides, env=env, resume=resume,
                                 log_every=log_every, tensorboard=tensorboard, wandb=wandb, progress=progress, stop_at=stop_at,
                                 keep_checkpoints=keep_checkpoints, devices=devices)
    except BaseException:
        if created:  # a run refused before it started leaves no folder behind
            _remove_if_empty(folder)
        raise


def _train_locked(module, algo: str, folder: Path | None, *, dataset, steps, seeds, seed, eval_every, eval_episodes,
                  config_overrides, env, resume, log_every, tensorboard, wandb, progress, stop_at, keep_checkpoints,
                  devices) -> Run:
    """The body of :func:`train`, run while the run folder's lock is held."""
    import jax

    from offrl.envs import check_data_fits_env

    previous = None
    if resume:
        previous = read_run_record(folder)
        if previous["algo"] != algo:
            raise ConfigError(f"--resume: {folder} was trained with --algo {previous['algo']}, not {algo}.")
        config = resumed_config(module, previous, folder, config_overrides, steps)
    else:
        config = run_config(module, config_overrides, steps)
    if devices is not None:
        from offrl.engine.sharding import check_devices, resolve_devices

        devices = resolve_devices(devices, seeds, config.batch_size)
        check_devices(devices, seeds, config.batch_size)
    ds = load_dataset(dataset)
    env_id = env or (previous["settings"].get("env") if previous else None) or ds.metadata.get("env_id")
    if previous is None:
        config = dataset_config(module, config, ds, env_id)
    check_data_fits_env(env_id, *_shape(ds, env_id), source=describe_dataset(ds, dataset))
    check_batch_size(config, len(ds), *_shape(ds, env_id)[:2])
    data, info = prepare_data(ds, config, env_id, module)
    settings = run_settings(ds, dataset, env_id, steps=steps, seeds=seeds, seed=seed, eval_every=eval_every,
                            eval_episodes=eval_episodes, log_every=log_every,
                            keep_checkpoints=keep_checkpoints or (previous or {}).get("settings", {}).get("keep_checkpoints", False))
    if previous:
        for key in ("seeds", "seed"):
            if previous["settings"][key] != settings[key]:
                raise ConfigError(f"--resume: {folder} was trained with --{key} {previous['settings'][key]}; pass the same value.")
    record = run_record(algo, config, settings, info)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        if not resume and (folder / "checkpoints" / "latest.json").exists():
            raise ConfigError(f"run folder {folder} already holds a run; pass --resume to continue it or choose another --out.")
        (folder / "checkpoints").mkdir(exist_ok=True)
        (folder / "plots").mkdir(exist_ok=True)
        atomic_write(folder / "config.json", json.dumps(record, indent=2))

    log = MetricsLog(folder, rows=[], tensorboard=tensorboard, wandb=wandb, run_config=record)
    agents, data_keys = create_agents(module, config, info.obs_dim, info.action_dim, seed, seeds)
    rows: list[dict] = []
    if resume:
        from offrl.checkpoint import latest_checkpoint, load_checkpoint

        latest = latest_checkpoint(folder / "checkpoints")
        if latest is not None:
            state = load_checkpoint(latest["path"], {"agent": agents, "data_keys": data_keys})
            agents = jax.tree_util.tree_map(jax.numpy.asarray, state["agent"])
            data_keys = jax.numpy.asarray(state["data_keys"])
        rows = truncate_metrics(folder / "metrics.jsonl", latest["step"] if latest is not None else 0)
    elif folder is not None:
        atomic_write(folder / "metrics.jsonl", "")
    batch_sharding = None
    if devices is not None and int(seeds) > 1:
        from offrl.engine.sharding import place

        agents, data_keys, data = place(agents, data_keys, data, devices)
    elif devices is not None:
        from offrl.engine.sharding import batch_sharding as split_batch, place_replicated

        agents, data_keys, data = place_replicated(agents, data_keys, data, devices)
        batch_sharding = split_batch(devices)

    log.rows = rows
    evaluator = None
    if env_id and eval_episodes > 0:
        evaluator = Evaluator(module, agents, info, env_id, eval_episodes, seeds,
                              getattr(config, "discount", 0.99), metadata=reference_metadata(settings))
    step = int(np.asarray(agents.step).reshape(-1)[0])
    end = int(steps) if stop_at is None else min(int(steps), int(stop_at))
    bar = ProgressBar(progress, total=int(steps), start=step, title=f"{algo} x{seeds}")
    last_eval = [""]

    def checkpoint(agents, data_keys, step):
        if folder is not None:
            save_agents(folder, agents, data_keys, step, keep=0 if settings["keep_checkpoints"] else 1)
            log.write_csv()

    def show(step, n, elapsed, rows):
        last_eval[0] = evaluation_text(rows) or last_eval[0]
        bar.update(step, f"{rate_text(n / max(elapsed, 1e-9))}  {last_eval[0]}")

    hooks = LoopHooks(evaluate=(lambda a: summarise_evaluation(evaluator(a))) if evaluator is not None else None,
                      log=log.add, checkpoint=checkpoint, progress=show, folder=folder)
    try:
        agents = offline_loop(Trainer(module, config.batch_size, seeds, batch_sharding), agents, data_keys, data,
                              step=step, end=end, steps=int(steps), eval_every=int(eval_every), log_every=int(log_every),
                              seeds=int(seeds), hooks=hooks)
    finally:
        bar.close()
        log.close()
        if evaluator is not None:
            evaluator.close()
    run = Run(folder, algo, config, settings, info, agents, log.rows)
    if folder is not None and run.evaluations():
        from offrl.plotting import plot_runs

        plot_runs([run], folder / "plots")
    return run
