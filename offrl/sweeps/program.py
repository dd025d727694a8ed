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

import dataclasses
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from offrl.engine.chunks import Trainer, create_agents
from offrl.engine.evaluation import Evaluator, summarise_evaluation
from offrl.engine.run import Run, reference_metadata, run_record
from offrl.errors import DivergenceError
from offrl.run_folder import MetricsLog, first_non_finite


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
                  progress=None, devices: int | None = None, on_evaluation=None) -> list[Run]:
    """Train ``points`` (configurations differing only in ``traced`` fields) x ``seeds`` as one
    program; returns one :class:`Run` per configuration, written to ``folders``.
    ``on_evaluation(step, rows)`` receives each evaluation's metric rows (one per member; a
    Ray Tune trial reports them, and its scheduler may stop the trial there)."""
    import jax

    count = len(points)
    members = count * seeds
    config = dataclasses.replace(config, **{name: points[0][name] for name in traced})  # static branches (e.g. alpha None) follow the grid
    values = {name: [p[name] for p in points] for name in traced}
    agents, data_keys = member_agents(module, config, info, values, seed, seeds)
    if devices:
        from offrl.engine.sharding import place

        agents, data_keys, data = place(agents, data_keys, data, devices)
    configs = [dataclasses.replace(config, **{name: p[name] for name in traced}) for p in points]
    logs = []
    for cfg, folder in zip(configs, folders):
        record = run_record(algo, cfg, settings, info)
        if folder is not None:
            import json

            (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
            (folder / "plots").mkdir(exist_ok=True)
            (folder / "config.json").write_text(json.dumps(record, indent=2))
            (folder / "metrics.jsonl").write_text("")
        logs.append(MetricsLog(folder, rows=[]))
    evaluator = None
    if env_id and eval_episodes > 0:
        evaluator = Evaluator(module, agents, info, env_id, eval_episodes, members,
                              getattr(config, "discount", 0.99), metadata=reference_metadata(settings))
    trainer = Trainer(module, config.batch_size, members)
    step = 0
    try:
        while step < steps:
            boundary = min((step // log_every + 1) * log_every, (step // eval_every + 1) * eval_every, steps)
            n = boundary - step
            t0 = time.perf_counter()
            agents, metrics = trainer.run(agents, data_keys, data, n)
            metrics = jax.device_get(metrics)
            elapsed = time.perf_counter() - t0
            _check_finite(metrics, step, points, seeds)
            step = boundary
            rows = [{"step": step, "seed": m % seeds, "time": time.time(), "steps_per_s": n / max(elapsed, 1e-9),
                     **{k: float(np.mean(v[m])) for k, v in sorted(metrics.items())}} for m in range(members)]
            evaluated = evaluator is not None and (step % eval_every == 0 or step == steps)
            if evaluated:
                for row, ev in zip(rows, summarise_evaluation(evaluator(agents))):
                    row.update(ev)
            for c, log in enumerate(logs):
                log.add(rows[c * seeds:(c + 1) * seeds])
            if step % eval_every == 0 or step == steps:
                _save_all(folders, agents, data_keys, step, seeds)
            if evaluated and on_evaluation is not None:
                on_evaluation(step, rows)
            if progress is not None:
                progress(n, members, elapsed)
    finally:
        for log in logs:
            log.close()
        if evaluator is not None:
            evaluator.close()
    runs = []
    for c, (cfg, folder, log) in enumerate(zip(configs, folders, logs)):
        run = Run(folder, algo, cfg, settings, info, configuration_slice(agents, c, seeds), log.rows)
        if folder is not None and run.evaluations():
            from offrl.plotting import plot_runs

            plot_runs([run], folder / "plots")
        runs.append(run)
    return runs


def _save_all(folders, agents, data_keys, step: int, seeds: int) -> None:
    from offrl.checkpoint import save_checkpoint

    for c, folder in enumerate(folders):
        if folder is not None:
            save_checkpoint(folder / "checkpoints",
                            {"agent": configuration_slice(agents, c, seeds), "data_keys": data_keys[c * seeds:(c + 1) * seeds]},
                            step)


def _check_finite(metrics: dict, step: int, points: list[dict], seeds: int) -> None:
    bad = first_non_finite(metrics)
    if bad is None:
        return
    name, index, value = bad
    member, offset = index if len(index) == 2 else (0, index[-1])
    point = ", ".join(f"{k}={v}" for k, v in points[member // seeds].items())
    raise DivergenceError(f"sweep diverged: '{name}' became {value} at step {step + offset + 1} in configuration "
                          f"({point or 'base'}), seed {member % seeds}; narrow the grid or lower the learning rates.")
