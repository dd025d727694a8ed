"""One sweep program: several configurations x seeds trained as ONE vmapped, compiled program.

Member ``m = c * seeds + s`` is configuration ``c``'s seed ``s``: its agent starts from exactly
the state :func:`offrl.engine.train` gives seed ``s`` (same init and minibatch keys), and its
traced hyperparameters (``agent.hparams``, read through
:func:`offrl.algos.common.hyperparameter`) hold configuration ``c``'s values. So every member
reproduces the corresponding single run, while the whole grid runs as one ``lax.scan`` under
one ``vmap``. Each configuration gets its own run folder (``config.json`` with its values,
``metrics.jsonl``, ``checkpoints/`` without the traced values), loadable by
:func:`offrl.engine.load_run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from offrl.engine.chunks import Trainer, create_agents
from offrl.engine.data import prepare_data
from offrl.engine.evaluation import Evaluator, summarise_evaluation
from offrl.engine.run import Run, reference_metadata, run_record
from offrl.engine.training import (LoopHooks, dataset_config, load_dataset, offline_loop, run_config, run_settings,
                                   save_agents, write_run_folder)
from offrl.progress import ProgressBar, rate_text
from offrl.locking import RunLock
from offrl.run_folder import MetricsLog


def member_agents(module, config, info, traced: Mapping[str, Sequence[float]], seed: int, seeds: int):
    """``(agents, data_keys)`` with ``len(values) * seeds`` members: every configuration's seeds
    start as :func:`offrl.engine.create_agents` makes them; ``agents.hparams[name]`` holds each
    member's traced value (float32)."""
    import jax
    import jax.numpy as jnp

    agents, data_keys = create_agents(module, config, info.obs_dim, info.action_dim, seed, seeds)
    count = len(next(iter(traced.values()))) if traced else 1
    if count > 1:
        agents = jax.tree_util.tree_map(lambda x: jnp.concatenate([x] * count), agents)
        data_keys = jnp.concatenate([data_keys] * count)
    if traced:
        agents = agents.replace(hparams={name: jnp.asarray(np.repeat(np.asarray(values, np.float32), seeds))
                                         for name, values in traced.items()})
    return agents, data_keys


def configuration_slice(agents, index: int, seeds: int):
    """Configuration ``index``'s seed-stacked agent, with the traced values dropped (a plain run's agent)."""
    import jax

    part = jax.tree_util.tree_map(lambda x: x[index * seeds:(index + 1) * seeds], agents)
    return part.replace(hparams={}) if hasattr(part, "hparams") else part


def train_program(module, algo: str, data, info, config, points: list[dict], traced: Sequence[str],
                  folders: list[Path | None], settings: dict, *, steps: int, seeds: int, seed: int,
                  eval_every: int, eval_episodes: int, log_every: int, env_id: str | None,
                  progress: bool = False, devices: int | None = None, on_evaluation=None) -> list[Run]:
    """Train ``points`` (configurations differing only in ``traced`` fields) x ``seeds`` as one
    program through :func:`offrl.engine.training.offline_loop`; returns one :class:`Run` per
    configuration, written to ``folders``. ``on_evaluation(step, rows)`` receives each evaluation's
    metric rows (one per member; a Ray Tune trial reports them, and its scheduler may stop the trial there)."""
    config = dataclasses.replace(config, **{name: points[0][name] for name in traced})  # static branches (e.g. alpha None) follow the grid
    values = {name: [p[name] for p in points] for name in traced}
    agents, data_keys = member_agents(module, config, info, values, seed, seeds)
    if devices:
        from offrl.engine.sharding import place

        agents, data_keys, data = place(agents, data_keys, data, devices)
    configs = [dataclasses.replace(config, **{name: p[name] for name in traced}) for p in points]
    with contextlib.ExitStack() as locks:
        for folder in folders:
            if folder is not None:
                locks.enter_context(RunLock(folder))  # one writer per member folder, taken before any is written
        return _train_locked(module, algo, data, info, config, points, traced, folders, settings, configs, agents, data_keys,
                             steps=steps, seeds=seeds, eval_every=eval_every, eval_episodes=eval_episodes,
                             log_every=log_every, env_id=env_id, progress=progress, on_evaluation=on_evaluation)


def _train_locked(module, algo, data, info, config, points, traced, folders, settings, configs, agents, data_keys, *,
                  steps, seeds, eval_every, eval_episodes, log_every, env_id, progress, on_evaluation) -> list[Run]:
    """The body of :func:`train_program`, run while every member folder's lock is held."""
    count = len(points)
    members = count * seeds
    logs = []
    for cfg, folder in zip(configs, folders):
        if folder is not None:
            write_run_folder(folder, run_record(algo, cfg, settings, info))
        logs.append(MetricsLog(folder, rows=[]))
    evaluator = None
    if env_id and eval_episodes > 0:
        evaluator = Evaluator(module, agents, info, env_id, eval_episodes, members,
                              getattr(config, "discount", 0.99), metadata=reference_metadata(settings))

    def log(rows):
        for c, config_log in enumerate(logs):
            config_log.add(rows[c * seeds:(c + 1) * seeds])

    def checkpoint(agents, data_keys, step):
        for c, folder in enumerate(folders):
            if folder is not None:
                save_agents(folder, configuration_slice(agents, c, seeds), data_keys[c * seeds:(c + 1) * seeds], step)

    def member(m):
        point = ", ".join(f"{k}={v}" for k, v in points[m // seeds].items())
        return f"configuration ({point or 'base'}), seed {m % seeds}"

    bar = ProgressBar(progress, total=steps, title=f"{algo} {count} configs x {seeds} seeds")
    hooks = LoopHooks(evaluate=(lambda a: summarise_evaluation(evaluator(a))) if evaluator is not None else None,
                      log=log, checkpoint=checkpoint, after_evaluation=on_evaluation, member=member,
                      advice="narrow the grid or lower the learning rates.",
                      progress=lambda step, n, elapsed, rows: bar.update(step, rate_text(members * n / max(elapsed, 1e-9))))
    try:
        agents = offline_loop(Trainer(module, config.batch_size, members), agents, data_keys, data, step=0, end=steps,
                              steps=steps, eval_every=eval_every, log_every=log_every, seeds=seeds, hooks=hooks)
    finally:
        bar.close()
        for config_log in logs:
            config_log.close()
        if evaluator is not None:
            evaluator.close()
    runs = []
    for c, (cfg, folder, config_log) in enumerate(zip(configs, folders, logs)):
        run = Run(folder, algo, cfg, settings, info, configuration_slice(agents, c, seeds), config_log.rows)
        if folder is not None and run.evaluations():
            from offrl.plotting import plot_runs

            plot_runs([run], folder / "plots")
        runs.append(run)
    return runs


def train_configuration(algo: str, dataset: Any, point: Mapping[str, Any], config_overrides: Mapping | None,
                        folder: Path | None, *, steps: int, seeds: int, seed: int, eval_every: int, eval_episodes: int,
                        log_every: int, env: str | None = None, on_evaluation=None) -> Run:
    """One configuration (``config_overrides`` then ``point``) x ``seeds`` as one vmapped
    program into ``folder`` (a Ray trial's body); returns its :class:`offrl.engine.Run`."""
    from offrl.algos import get_algorithm

    module = get_algorithm(algo)
    ds = load_dataset(dataset)
    env_id = env or ds.metadata.get("env_id")
    config = dataset_config(module, run_config(module, config_overrides, steps, point), ds, env_id)
    settings = run_settings(ds, dataset, env_id, steps=steps, seeds=seeds, seed=seed, eval_every=eval_every,
                            eval_episodes=eval_episodes, log_every=log_every)
    data, info = prepare_data(ds, config, env_id, module)
    return train_program(module, algo, data, info, config, [dict(point)], (), [folder], settings, steps=int(steps),
                         seeds=int(seeds), seed=int(seed), eval_every=int(eval_every), eval_episodes=int(eval_episodes),
                         log_every=int(log_every), env_id=env_id, on_evaluation=on_evaluation)[0]
