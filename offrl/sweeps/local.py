"""``offrl sweep``: a hyperparameter grid x seeds, each program one vmapped compiled run.

Example::

    result = offrl.sweeps("iql", "pendulum-medium-v0",
                         grid={"expectile": [0.6, 0.7, 0.8, 0.9], "awr_inverse_temperature": [1, 3, 10]},
                         seeds=3, steps=100_000, out="sweeps/iql")
    result.best          # the configuration with the highest mean final score
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from offrl.errors import ConfigError
from offrl.sweeps.grid import folder_name, parse_grid, plan_programs
from offrl.sweeps.report import SweepResult, configuration_result


def sweep(algo: str = "iql", dataset: Any = None, grid: Mapping[str, Sequence] | Sequence[str] = (), seeds: int = 3,
          steps: int = 100_000, seed: int = 0, eval_every: int = 10_000, eval_episodes: int = 10,
          out: str | Path | None = None, config_overrides: Mapping[str, Any] | None = None, env: str | None = None,
          traced: Sequence[str] | None = None, log_every: int = 1000, devices: int | None = None,
          progress: bool = True, echo=print, backend: str = "local", address: str | None = None,
          search: str = "grid", scheduler: str | None = None, num_samples: int = 1,
          ray_cpus: int | None = None) -> SweepResult:
    """Train every configuration of ``grid`` with ``seeds`` seeds; write one run folder per
    configuration under ``out`` plus ``sweep.json``/``sweep.csv`` (and ``heatmap.png`` for a
    2-D grid). ``grid`` is ``{field: values}`` or ``["field=v1,v2", ...]``; fields in the
    algorithm's ``Config.TRACEABLE`` are traced (one program), others split programs
    (``traced`` restricts/validates the traced set). ``backend="ray"`` runs each configuration
    as a Ray Tune trial instead (:mod:`offrl.sweeps.ray_backend`: ``address``, ``search``,
    ``scheduler``, ``num_samples``)."""
    import dataclasses

    from offrl.algos import get_algorithm
    from offrl.algos.common import apply_overrides
    from offrl.engine.data import prepare_data
    from offrl.engine.run import references
    from offrl.engine.training import _describe_dataset, _load_dataset

    module = get_algorithm(algo)
    algo = module.__name__.split(".")[-1]
    for name, value in (("steps", steps), ("seeds", seeds), ("eval_every", eval_every), ("log_every", log_every)):
        if int(value) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} is {value}; it must be a positive integer.")
    items = list(grid) if not isinstance(grid, Mapping) else [f"{k}={';'.join(_text(v) for v in vs)}" for k, vs in grid.items()]
    if backend == "ray":
        from offrl.sweeps.ray_backend import ray_sweep

        return ray_sweep(algo, dataset, items, search=search, scheduler=scheduler, num_samples=num_samples,
                         address=address, num_cpus=ray_cpus, out=out, config_overrides=config_overrides, echo=echo,
                         steps=int(steps), seeds=int(seeds), seed=int(seed), eval_every=int(eval_every),
                         eval_episodes=int(eval_episodes), log_every=int(log_every), env=env)
    if backend != "local":
        raise ConfigError(f"--backend {backend!r} is not one of local, ray.")
    parsed = parse_grid(module.Config, items, config_overrides)
    if not parsed:
        raise ConfigError("offrl sweep needs at least one --grid FIELD=V1,V2,...; e.g. --grid expectile=0.7,0.9.")
    plan = plan_programs(module.Config, parsed, traced)
    if devices is not None:
        from offrl.engine.sharding import check_divisible, seed_mesh

        seed_mesh(devices)
        for program in plan.programs:
            check_divisible(len(program.members) * int(seeds), devices)
    folder = Path(out) if out is not None else None
    if folder is not None and (folder / "sweep.json").exists():
        raise ConfigError(f"sweep folder {folder} already holds a sweep (sweep.json); choose another --out.")
    base = apply_overrides(module.Config(), config_overrides)
    if hasattr(base, "schedule_steps") and base.schedule_steps is None:
        base = dataclasses.replace(base, schedule_steps=int(steps))
    ds = _load_dataset(dataset)
    env_id = env or ds.metadata.get("env_id")
    settings = dict(dataset=_describe_dataset(ds, dataset), env=env_id, steps=int(steps), seeds=int(seeds),
                    seed=int(seed), eval_every=int(eval_every), eval_episodes=int(eval_episodes),
                    log_every=int(log_every), transitions=len(ds), references=references(env_id, ds.metadata))
    echo(f"offrl sweep: {plan.describe()}")
    results = []
    t0 = time.perf_counter()
    for program in plan.programs:
        config = dataclasses.replace(base, **program.static)
        data, info = prepare_data(ds, config, env_id, module)
        folders = [folder / folder_name(p) if folder is not None else None for p in program.members]
        runs = _backend_program(module, algo, data, info, config, program.members, plan.traced, folders, settings,
                                steps=int(steps), seeds=int(seeds), seed=int(seed), eval_every=int(eval_every),
                                eval_episodes=int(eval_episodes), log_every=int(log_every), env_id=env_id,
                                devices=devices, progress=progress)
        results.extend(configuration_result(point, run) for point, run in zip(program.members, runs))
    result = SweepResult(algo, settings["dataset"], {k: list(v) for k, v in parsed.items()}, plan.traced,
                         len(plan.programs), results, time.perf_counter() - t0, folder)
    if folder is not None:
        result.write(folder)
    return result


def train_configuration(algo: str, dataset: Any, point: Mapping[str, Any], config_overrides: Mapping | None,
                        folder: Path | None, *, steps: int, seeds: int, seed: int, eval_every: int, eval_episodes: int,
                        log_every: int, env: str | None = None, on_evaluation=None):
    """One configuration (``config_overrides`` then ``point``) x ``seeds`` as one vmapped
    program into ``folder`` (a Ray trial's body); returns its :class:`offrl.engine.Run`."""
    import dataclasses

    from offrl.algos import get_algorithm
    from offrl.algos.common import apply_overrides
    from offrl.engine.data import prepare_data
    from offrl.engine.run import references
    from offrl.engine.training import _describe_dataset, _load_dataset
    from offrl.sweeps.program import train_program

    module = get_algorithm(algo)
    config = apply_overrides(apply_overrides(module.Config(), config_overrides), dict(point))
    if hasattr(config, "schedule_steps") and config.schedule_steps is None:
        config = dataclasses.replace(config, schedule_steps=int(steps))
    ds = _load_dataset(dataset)
    env_id = env or ds.metadata.get("env_id")
    settings = dict(dataset=_describe_dataset(ds, dataset), env=env_id, steps=int(steps), seeds=int(seeds),
                    seed=int(seed), eval_every=int(eval_every), eval_episodes=int(eval_episodes),
                    log_every=int(log_every), transitions=len(ds), references=references(env_id, ds.metadata))
    data, info = prepare_data(ds, config, env_id, module)
    return train_program(module, algo, data, info, config, [dict(point)], (), [folder], settings, steps=int(steps),
                         seeds=int(seeds), seed=int(seed), eval_every=int(eval_every), eval_episodes=int(eval_episodes),
                         log_every=int(log_every), env_id=env_id, on_evaluation=on_evaluation)[0]


def _backend_program(module, algo, data, info, config, points, traced, folders, settings, *, progress, **kw):
    from offrl.sweeps.program import train_program

    bar = _Bar(progress, kw["steps"], f"{algo} {len(points)} configs x {kw['seeds']} seeds")
    try:
        return train_program(module, algo, data, info, config, points, traced, folders, settings,
                             progress=bar.advance, **kw)
    finally:
        bar.close()


def _text(value) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, (tuple, list)) else str(value)


class _Bar:
    def __init__(self, enabled: bool, total: int, title: str):
        from offrl.engine.training import _Progress

        self.progress, self.step = _Progress(enabled, total=total, start=0, title=title), 0

    def advance(self, n: int, members: int, elapsed: float) -> None:
        self.step += n
        self.progress.update(self.step, members * n / max(elapsed, 1e-9), "")

    def close(self) -> None:
        self.progress.close()
