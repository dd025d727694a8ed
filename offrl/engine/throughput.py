"""Training throughput: updates per second of an algorithm on given arrays, through the same
data preparation (the spec's ``config_for_dataset`` and ``extra_arrays`` hooks), sampler and
compiled chunks as :func:`offrl.engine.train` (no evaluation, no logging)."""

from __future__ import annotations

import time
from typing import Mapping

import numpy as np

from offrl.engine.chunks import Trainer, create_agents
from offrl.engine.data import data_info, prepare_data
from offrl.engine.training import run_config


def measure_throughput(algo: str, observations, actions, rewards, next_observations, terminals=None,
                       num_updates: int = 1000, seeds: int = 1, config_overrides: Mapping | None = None,
                       repeats: int = 3, details: bool = False):
    """Training updates per second of ``algo`` on the given arrays.

    Compiles one scanned chunk of ``num_updates`` updates, then times ``repeats`` chunks and
    returns the best ``seeds * num_updates / seconds`` (wall clock). Actions are assumed to be
    in ``[-1, 1]``. ``details=True`` returns ``{"steps_per_s", "cpu_s_per_1000_steps",
    "compile_s"}``; the process CPU time is a useful second number on a shared machine, where
    wall-clock rates fall with other people's load.
    """
    import jax

    from offrl.algos import algorithm_spec, get_algorithm
    from offrl.data import Dataset

    module = get_algorithm(algo)
    config = run_config(module, config_overrides, 1_000_000)
    n = len(rewards)
    dataset = Dataset.from_arrays(np.asarray(observations, np.float32).reshape(n, -1),
                                  np.asarray(actions, np.float32).reshape(n, -1), np.asarray(rewards, np.float32).reshape(n),
                                  np.zeros(n, bool) if terminals is None else np.asarray(terminals, bool).reshape(n),
                                  next_observations=np.asarray(next_observations, np.float32).reshape(n, -1))
    spec = algorithm_spec(module)
    if spec.config_for_dataset is not None:  # as train does: e.g. TT's fitted bin edges
        config = spec.config_for_dataset(config, dataset, data_info(dataset, config))
    data, info = prepare_data(dataset, config, None, module)
    agents, data_keys = create_agents(module, config, info.obs_dim, info.action_dim, 0, seeds)
    trainer = Trainer(module, config.batch_size, seeds)
    t0 = time.perf_counter()
    agents, metrics = trainer.run(agents, data_keys, data, num_updates)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - t0
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        agents, metrics = trainer.run(agents, data_keys, data, num_updates)
        jax.block_until_ready((agents, metrics))
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    rate = seeds * num_updates / best
    if details:
        return {"steps_per_s": rate, "cpu_s_per_1000_steps": 1000 * best_cpu / (seeds * num_updates), "compile_s": compile_s}
    return rate
