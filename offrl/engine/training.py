"""Training: :func:`train` runs an algorithm on a dataset, chunk by chunk, into a run folder.

Per chunk, Python calls the compiled ``lax.scan`` once for all seeds (:mod:`offrl.engine.chunks`),
checks the chunk's metrics are finite, logs one row per seed, evaluates every ``eval_every``
steps (:mod:`offrl.engine.evaluation`) and checkpoints. A killed run resumes from its latest
checkpoint with the metrics log truncated to it, and ends bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from offrl.engine.chunks import Trainer, create_agents
from offrl.engine.data import prepare_data
from offrl.engine.evaluation import Evaluator, summarise_evaluation
from offrl.engine.run import Run, reference_metadata, references, run_record
from offrl.errors import ConfigError, DivergenceError
from offrl.run_folder import MetricsLog, first_non_finite, truncate_metrics


def _load_dataset(dataset):
    from offrl.data import Dataset

    if isinstance(dataset, Dataset):
        return dataset
    try:
        from offrl.data import load
    except ImportError:
        raise ConfigError(f"cannot load dataset {dataset!r}: offrl.data.load is not available in this build; pass a Dataset object.") from None
    return load(str(dataset))


def _describe_dataset(dataset, source) -> str:
    """The name or path the user gave, or the Dataset's own ``source``."""
    return str(source) if not hasattr(source, "observations") else getattr(dataset, "source", "<arrays>")


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
    import jax

    from offrl.algos import get_algorithm
    from offrl.algos.common import apply_overrides, config_from_dict

    from offrl.envs import check_env_id

    check_env_id(env)
    module = get_algorithm(algo)
    algo = module.__name__.split(".")[-1]
    folder = Path(out) if out is not None else None
    for name, value in (("steps", steps), ("seeds", seeds), ("eval_every", eval_every), ("log_every", log_every)):
        if int(value) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} is {value}; it must be a positive integer.")
    previous = None
    if resume:
        if folder is None or not (folder / "config.json").exists():
            raise ConfigError(f"--resume needs an existing run folder with config.json, but {folder} has none; drop --resume to start a new run.")
        previous = json.loads((folder / "config.json").read_text())
        if previous["algo"] != algo:
            raise ConfigError(f"--resume: {folder} was trained with --algo {previous['algo']}, not {algo}.")
        config = config_from_dict(module.Config, previous["config"])
        config = apply_overrides(config, config_overrides) if config_overrides else config
    else:
        config = apply_overrides(module.Config(), config_overrides)
        if hasattr(config, "schedule_steps") and config.schedule_steps is None:
            config = dataclasses.replace(config, schedule_steps=int(steps))
    if devices is not None:
        from offrl.engine.sharding import check_devices, resolve_devices

        devices = resolve_devices(devices, seeds, config.batch_size)
        check_devices(devices, seeds, config.batch_size)
    ds = _load_dataset(dataset)
    env_id = env or (previous["settings"].get("env") if previous else None) or ds.metadata.get("env_id")
    if previous is None and hasattr(module, "config_for_dataset"):  # e.g. DT's default target return, TT's bins
        from offrl.engine.data import data_info

        config = module.config_for_dataset(config, ds, data_info(ds, config, env_id))
    data, info = prepare_data(ds, config, env_id, module)
    settings = dict(dataset=_describe_dataset(ds, dataset), env=env_id, steps=int(steps), seeds=int(seeds),
                              seed=int(seed), eval_every=int(eval_every), eval_episodes=int(eval_episodes),
                              log_every=int(log_every), transitions=len(ds),
                              references=references(env_id, ds.metadata),
                              keep_checkpoints=bool(keep_checkpoints or (previous or {}).get("settings", {}).get("keep_checkpoints")))
    if previous:
        for key in ("seeds", "seed"):
            if previous["settings"][key] != settings[key]:
                raise ConfigError(f"--resume: {folder} was trained with --{key} {previous['settings'][key]}; pass the same value.")
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "checkpoints").mkdir(exist_ok=True)
        (folder / "plots").mkdir(exist_ok=True)
        if not resume and (folder / "checkpoints" / "latest.json").exists():
            raise ConfigError(f"run folder {folder} already holds a run; pass --resume to continue it or choose another --out.")
        (folder / "config.json").write_text(json.dumps(run_record(algo, config, settings, info), indent=2))

    log = MetricsLog(folder, rows=[], tensorboard=tensorboard, wandb=wandb,
                     run_config=run_record(algo, config, settings, info))
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
        (folder / "metrics.jsonl").write_text("")
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
    trainer = Trainer(module, config.batch_size, seeds, batch_sharding)
    run = Run(folder, algo, config, settings, info, agents, log.rows)
    step = int(np.asarray(agents.step).reshape(-1)[0])
    end = int(steps) if stop_at is None else min(int(steps), int(stop_at))
    last_eval: str = ""
    bar = _Progress(progress, total=int(steps), start=step, title=f"{algo} x{seeds}")
    try:
        while step < end:
            boundary = min(_next_multiple(step, log_every), _next_multiple(step, eval_every), end)
            n = boundary - step
            t0 = time.perf_counter()
            new_agents, metrics = trainer.run(agents, data_keys, data, n)
            metrics = jax.device_get(metrics)
            elapsed = time.perf_counter() - t0
            _check_finite(metrics, step, folder)
            agents, step = new_agents, boundary
            chunk_rows = [{"step": step, "seed": s, "time": time.time(), "steps_per_s": n / max(elapsed, 1e-9),
                           **{k: float(np.mean(v[s])) for k, v in sorted(metrics.items())}} for s in range(seeds)]
            if evaluator is not None and (step % eval_every == 0 or step == int(steps)):
                per_seed = summarise_evaluation(evaluator(agents))
                for row, ev in zip(chunk_rows, per_seed):
                    row.update(ev)
                last_eval = _eval_text(per_seed)
            log.add(chunk_rows)
            if folder is not None and (step % eval_every == 0 or step == end):
                _save(folder, agents, data_keys, step, keep=0 if settings["keep_checkpoints"] else 1)
                log.write_csv()
            bar.update(step, n / max(elapsed, 1e-9), last_eval)
    finally:
        bar.close()
        log.close()
        if evaluator is not None:
            evaluator.close()
    run.agent = agents
    run.metrics = log.rows
    if folder is not None and run.evaluations():
        from offrl.plotting import plot_runs

        plot_runs([run], folder / "plots")
    return run


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def _save(folder: Path, agents, data_keys, step: int, keep: int = 1) -> None:
    from offrl.checkpoint import save_checkpoint

    save_checkpoint(folder / "checkpoints", {"agent": agents, "data_keys": data_keys}, step, keep=keep)


def _check_finite(metrics: dict, step: int, folder: Path | None) -> None:
    """Raise :class:`DivergenceError` naming the first non-finite metric, its step and seed."""
    bad = first_non_finite(metrics)
    if bad is None:
        return
    name, index, value = bad
    seed_idx, offset = (index if len(index) == 2 else (0, index[-1]))
    where = ""
    if folder is not None:
        from offrl.checkpoint import latest_checkpoint

        latest = latest_checkpoint(folder / "checkpoints")
        where = f" The last good checkpoint (step {latest['step']}) is kept in {folder / 'checkpoints'}." if latest else " No checkpoint was saved before it."
    raise DivergenceError(
        f"training diverged: '{name}' became {value} at step {step + offset + 1} (seed {seed_idx});"
        f" lower the learning rates or normalise observations/rewards.{where}")


def _eval_text(per_seed: list[dict]) -> str:
    score = np.array([r["eval/normalized_score"] for r in per_seed])
    ret = np.array([r["eval/return"] for r in per_seed])
    if np.all(np.isfinite(score)):
        return f"score {score.mean():.1f}±{score.std():.1f}"
    return f"return {ret.mean():.1f}±{ret.std():.1f}"


class _Progress:
    """A rich progress bar with steps/s, ETA and the last evaluation (no-op when disabled)."""

    def __init__(self, enabled: bool, total: int, start: int, title: str):
        self.progress = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} steps/s"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("{task.fields[last_eval]}"), transient=False)
        self.progress.start()
        self.task = self.progress.add_task(title, total=total, completed=start, rate="-", last_eval="")

    def update(self, step: int, rate: float, last_eval: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, rate=f"{rate:,.0f}", last_eval=last_eval)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
