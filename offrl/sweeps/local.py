"""``offrl sweep``: a hyperparameter grid x seeds, each program one vmapped compiled run.

Example::

    result = offrl.sweeps("iql", "pendulum-medium-v0",
                         grid={"expectile": [0.6, 0.7, 0.8, 0.9], "awr_inverse_temperature": [1, 3, 10]},
                         seeds=3, steps=100_000, out="sweeps/iql")
    result.best          # the configuration with the highest mean final score
"""

from __future__ import annotations

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
    algorithm's ``SPEC.traced_fields`` are traced (one program), others split programs
    (``traced`` restricts/validates the traced set). ``backend="ray"`` runs each configuration
    as a Ray Tune trial instead (:mod:`offrl.sweeps.ray_backend`: ``address``, ``search``,
    ``scheduler``, ``num_samples``)."""
    import dataclasses

    from offrl.algos import algorithm_spec, get_algorithm
    from offrl.engine.data import prepare_data
    from offrl.engine.training import check_run_counts, dataset_config, load_dataset, run_config, run_settings
    from offrl.sweeps.program import train_program

    module = get_algorithm(algo)
    algo = algorithm_spec(module).name
    check_run_counts(steps=steps, seeds=seeds, eval_every=eval_every, log_every=log_every)
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
    base = run_config(module, config_overrides, steps)
    ds = load_dataset(dataset)
    env_id = env or ds.metadata.get("env_id")
    settings = run_settings(ds, dataset, env_id, steps=steps, seeds=seeds, seed=seed, eval_every=eval_every,
                            eval_episodes=eval_episodes, log_every=log_every)
    echo(f"offrl sweep: {plan.describe()}")
    results = []
    t0 = time.perf_counter()
    for program in plan.programs:
        config = dataset_config(module, dataclasses.replace(base, **program.static), ds, env_id)
        data, info = prepare_data(ds, config, env_id, module)
        folders = [folder / folder_name(p) if folder is not None else None for p in program.members]
        runs = train_program(module, algo, data, info, config, program.members, plan.traced, folders, settings,
                             steps=int(steps), seeds=int(seeds), seed=int(seed), eval_every=int(eval_every),
                             eval_episodes=int(eval_episodes), log_every=int(log_every), env_id=env_id,
                             devices=devices, progress=progress)
        results.extend(configuration_result(point, run) for point, run in zip(program.members, runs))
    result = SweepResult(algo, settings["dataset"], {k: list(v) for k, v in parsed.items()}, plan.traced,
                         len(plan.programs), results, time.perf_counter() - t0, folder)
    if folder is not None:
        result.write(folder)
    return result


def _text(value) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, (tuple, list)) else str(value)
