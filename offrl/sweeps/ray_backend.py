"""``offrl sweep --backend ray``: each Ray Tune trial is one configuration's vmapped group of seeds.

The search space comes from the same ``--grid`` syntax: with ``--search grid`` (default) every
grid point is a trial (``tune.grid_search``); with ``--search random`` or ``optuna`` each field
becomes ``tune.choice(values)``, or a range ``FIELD=LOW:HIGH`` (uniform) / ``FIELD=LOW:HIGH:log``
(log-uniform), sampled ``--num-samples`` times. ``--scheduler asha`` stops poor trials early on
the evaluation score (reported after every evaluation). Without ``--address`` Ray starts on this
machine; ``--address HOST:PORT`` (or ``auto``) joins a running cluster (``ray start --head``),
and run folders are written on the worker that ran the trial (use a shared file system).

Example::

    offrl sweep --algo iql --dataset D --grid expectile=0.6:0.95 --grid awr_inverse_temperature=1,3,10 \\
        --backend ray --search random --num-samples 20 --scheduler asha --out sweeps/iql
"""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path
from typing import Any, Mapping, Sequence

from offrl.errors import ConfigError

CONNECT_TIMEOUT_S = 5.0


def split_ranges(items: Sequence[str]) -> tuple[list[str], dict[str, tuple[float, float, bool]]]:
    """``(value_items, ranges)``: items ``FIELD=LOW:HIGH[:log]`` become ranges ``{field: (low, high, log)}``."""
    values, ranges = [], {}
    for item in items:
        name, _, text = item.partition("=")
        parts = text.split(":")
        if len(parts) in (2, 3) and "," not in text:
            try:
                low, high = float(parts[0]), float(parts[1])
            except ValueError:
                raise ConfigError(f"--grid {item!r}: a range is LOW:HIGH or LOW:HIGH:log with numbers; e.g. --grid expectile=0.6:0.95.") from None
            log = len(parts) == 3 and parts[2].strip() == "log"
            if len(parts) == 3 and not log or not low < high or (log and low <= 0):
                raise ConfigError(f"--grid {item!r}: a range needs LOW < HIGH (and LOW > 0 with :log); e.g. --grid actor_lr=1e-4:1e-3:log.")
            ranges[name.strip().replace("-", "_")] = (low, high, log)
        else:
            values.append(item)
    return values, ranges


def connect(address: str | None, num_cpus: int | None = None) -> None:
    """Start Ray on this machine (``address=None``) or join a cluster; an unreachable
    ``HOST:PORT`` raises :class:`ConfigError` after ``CONNECT_TIMEOUT_S`` seconds, not a hang."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray Tune; pip install 'offrl[sweep]' (or 'ray[tune]').") from None
    if ray.is_initialized():
        return
    import offrl

    root = str(Path(offrl.__file__).resolve().parents[1])
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}}
    if address and address != "auto":
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--address {address!r} is not HOST:PORT (e.g. HEAD:6379) or 'auto'.")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise ConfigError(f"--address {address}: no Ray head answered within {CONNECT_TIMEOUT_S:.0f} s ({exc.strerror or exc}); "
                              "start one there with `ray start --head`, or drop --address to run Ray on this machine.") from None
    try:
        if address:
            import logging

            with _quiet_stderr():  # the GCS client's C++ retry warnings while it tries to connect
                ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.ERROR)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)
    except (ConnectionError, RuntimeError, TimeoutError) as exc:
        raise ConfigError(f"--address {address}: could not join a Ray cluster ({str(exc).splitlines()[0]}); "
                          "start one with `ray start --head`, or drop --address to run Ray on this machine.") from None


class _quiet_stderr:
    """File descriptor 2 sent to /dev/null for the duration (C++ logging bypasses Python's)."""

    def __enter__(self):
        import sys

        sys.stderr.flush()
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)


def search_space(grid: Mapping[str, list], ranges: Mapping[str, tuple], search: str) -> dict:
    from ray import tune

    if search == "grid":
        if ranges:
            raise ConfigError(f"--grid {next(iter(ranges))}=LOW:HIGH is a range; ranges need --search random or optuna.")
        return {k: tune.grid_search(list(v)) for k, v in grid.items()}
    space = {k: tune.choice(list(v)) for k, v in grid.items()}
    for name, (low, high, log) in ranges.items():
        space[name] = tune.loguniform(low, high) if log else tune.uniform(low, high)
    return space


def _trial(space_point: dict, *, algo, dataset, base_overrides, settings_kw, out, unique_folders):
    """One Ray Tune trial: a configuration x seeds as one vmapped program, reporting every evaluation."""
    import numpy as np
    from ray import tune

    from offrl.sweeps.grid import folder_name
    from offrl.sweeps.program import train_configuration

    point = {k: (tuple(v) if isinstance(v, list) else v) for k, v in space_point.items()}
    name = folder_name(point) + ("" if unique_folders is False else f"_{tune.get_context().get_trial_id()}")
    folder = Path(out) / name if out else None

    def report(step, rows):
        scores = [r["eval/normalized_score"] if math.isfinite(r["eval/normalized_score"]) else r["eval/return"] for r in rows]
        tune.report({"score": float(np.mean(scores)), "score_std": float(np.std(scores)), "scores": scores, "step": step,
                     "folder": name})

    run = train_configuration(algo, dataset, point, base_overrides, folder, on_evaluation=report, **settings_kw)
    if not run.evaluations():
        tune.report({"score": float("nan"), "score_std": float("nan"), "scores": [], "step": run.step, "folder": name})


def ray_sweep(algo: str, dataset: Any, items: Sequence[str], *, search: str = "grid", scheduler: str | None = None,
              num_samples: int = 1, address: str | None = None, num_cpus: int | None = None, cpus_per_trial: float = 1.0,
              out: str | Path | None = None, config_overrides: Mapping | None = None, echo=print, **settings_kw):
    """Run the sweep as Ray Tune trials; returns a :class:`offrl.sweeps.report.SweepResult`."""
    import time

    from offrl.algos import algorithm_spec, get_algorithm
    from offrl.engine.training import describe_dataset
    from offrl.sweeps.grid import parse_grid
    from offrl.sweeps.report import ConfigurationResult, SweepResult

    if search not in ("grid", "random", "optuna"):
        raise ConfigError(f"--search {search!r} is not one of grid, random, optuna.")
    if scheduler not in (None, "asha", "fifo"):
        raise ConfigError(f"--scheduler {scheduler!r} is not one of asha, fifo.")
    module = get_algorithm(algo)
    algo = algorithm_spec(module).name
    value_items, ranges = split_ranges(items)
    grid = parse_grid(module.Config, value_items, config_overrides)
    for name, (low, high, _) in ranges.items():  # the field exists and both ends are valid values of it
        parse_grid(module.Config, [f"{name}={low!r},{high!r}"], config_overrides)
    if not grid and not ranges:
        raise ConfigError("offrl sweep needs at least one --grid FIELD=V1,V2,... (or FIELD=LOW:HIGH with --search random).")
    searcher = None
    if search == "optuna":
        try:
            import optuna  # noqa: F401
            from ray.tune.search.optuna import OptunaSearch
        except ImportError:
            raise ConfigError("--search optuna needs optuna; pip install 'offrl[sweep]' (or optuna).") from None
        searcher = OptunaSearch(seed=int(settings_kw.get("seed", 0)))  # TPE; metric and mode come from TuneConfig
    folder = Path(out).resolve() if out is not None else None
    if folder is not None and (folder / "sweep.json").exists():
        raise ConfigError(f"sweep folder {folder} already holds a sweep (sweep.json); choose another --out.")
    connect(address, num_cpus)
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    steps, eval_every = int(settings_kw["steps"]), int(settings_kw["eval_every"])
    asha = None
    if scheduler == "asha":
        asha = ASHAScheduler(time_attr="step", max_t=steps, grace_period=min(eval_every, steps), reduction_factor=2)
    trainable = tune.with_resources(
        tune.with_parameters(_trial, algo=algo, dataset=dataset, base_overrides=dict(config_overrides or {}),
                             settings_kw=settings_kw, out=str(folder) if folder else None, unique_folders=search != "grid"),
        {"cpu": cpus_per_trial})
    storage = (folder / "ray") if folder else Path.cwd() / "ray_results"
    tuner = tune.Tuner(trainable, param_space=search_space(grid, ranges, search),
                       tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=asha, search_alg=searcher,
                                                   num_samples=1 if search == "grid" else int(num_samples)),
                       run_config=tune.RunConfig(storage_path=str(storage), name=algo, verbose=0))
    echo(f"offrl sweep: Ray Tune, search {search}, scheduler {scheduler or 'fifo'}; each trial one configuration x "
         f"{settings_kw['seeds']} seeds in one vmapped program.")
    t0 = time.perf_counter()
    results = tuner.fit()
    rows = []
    for res in results:
        if res.error is not None:
            raise ConfigError(f"a Ray trial failed: {str(res.error).splitlines()[-1]}")
        point = {k: (tuple(v) if isinstance(v, list) else v) for k, v in res.config.items()}
        name = res.metrics.get("folder")
        rows.append(ConfigurationResult(point, list(res.metrics.get("scores", [])), folder / name if folder and name else None))
    fields = list(grid) + [k for k in ranges if k not in grid]
    shown = {k: grid.get(k, ["range"]) for k in fields}
    result = SweepResult(algo, describe_dataset(dataset, dataset),
                         shown, (), len(rows), rows, time.perf_counter() - t0, folder)
    if folder is not None:
        result.write(folder)
    return result
