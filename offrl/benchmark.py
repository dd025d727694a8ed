"""``offrl benchmark``: every (env, tier, algorithm) cell trained, evaluated and tabulated.

A cell trains one algorithm on one dataset with all seeds vmapped (:func:`offrl.engine.train`)
into ``OUT/cells/<env>-<tier>-<algo>/`` and, when it finishes, writes ``cell.json`` there (the
last and the best evaluation, wall time). Cells are resumable one by one: a finished cell is
never trained or written again; an interrupted one continues from its last checkpoint. The
benchmark's settings live in ``OUT/benchmark.json``; an ``OUT`` holding a benchmark with
different settings is refused, so cells of two benchmarks never mix.

The table (``results.md`` and ``results.csv``) gives each cell's normalized score, mean ± std
over seeds, at the **last** evaluation and at the **best** one (the evaluation step with the
highest mean over seeds; an optimistic number, labelled as such), and each cell's wall time.
``learning_curves.png`` and ``q_vs_return.png`` draw one panel per (env, tier).

``peer="d3rlpy"`` (``--peer d3rlpy``) also trains every cell with d3rlpy: a separate Python
(``--peer-python`` or ``$OFFRL_PEER_PYTHON``, a virtualenv with d3rlpy, h5py and Gymnasium)
runs the driver :mod:`offrl.peers.d3rlpy_driver` on the same file, with the sizes of the
cell's resolved offrl config, the same updates, seeds, evaluation interval and episodes, and
the same reward multiplier. Its result is kept in ``cells/<cell>/peer-d3rlpy.json`` (resumable
like the cells) and the table gains a section beside d3rlpy: both scores and both wall times.

Datasets are looked up by name: ``--dataset-pattern`` (default ``{env}-{tier}-v0``, the names
``offrl collect dataset`` registers; ``pendulum-*-v0`` are bundled).

Example::

    from offrl.benchmark import run_benchmark
    table = run_benchmark(envs=["pendulum"], tiers=["medium", "expert"], algos=["bc", "iql"],
                          seeds=2, steps=2000, eval_every=1000, out="bench")
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from offrl.data.doctor.tier import TIERS
from offrl.errors import ConfigError

#: short names for the D4RL locomotion environments (and Pendulum) -> Gymnasium ids.
ENV_IDS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5", "pendulum": "Pendulum-v1"}
#: ``--budget`` profiles: updates per cell, evaluation interval, episodes per evaluation.
#: ``steps`` is every algorithm's budget unless ``algos`` gives it its own ``steps`` and config
#: settings (``set``, applied under the user's ``--set``). The ``cpu`` budget is sized so that the
#: whole table (Hopper, HalfCheetah and Walker2d x medium, medium-replay, medium-expert x BC, BCQ,
#: CQL, IQL, TD3+BC, AWAC, 3 seeds vmapped) projects to about 6 hours of the 2-core CPU it was
#: measured on: 3-seed update rates on HalfCheetah-shaped data (other jobs paused, 2026-12-02) were
#: BC 432/s, TD3+BC 122/s, IQL 120/s, AWAC (2 x 256 actor) 31/s, CQL at 2 x 128 26/s (2 x 256: 9/s),
#: BCQ at 2 x 128 with a 2 x 256 VAE 99/s, so the updates alone are about 10, 37, 38, 98, 117 and 30
#: minutes for the 9 cells of each, before evaluation. CQL runs without its 40k-step BC warm-up
#: (at 20k updates the warm-up would leave it a BC policy; d3rlpy's CQL has none either) and with
#: CORL's Gym-MuJoCo settings (configs/offline/cql/*: cql_alpha 10, policy lr 3e-5, normalised
#: observations): with the paper's Gym defaults (alpha 5, policy lr 1e-4, raw observations) its
#: actor left the data on Hopper (medium 8.2 vs 65.4 with CORL's hopper-medium settings,
#: benchmarks/results/cql-hopper-diagnostics-2026-12-05). AWAC runs
#: CORL's D4RL batch of 256 (its configs/offline/awac/*: batch 256, 256-wide networks) instead of the
#: paper's 1024: its first cell at 1024 took 68 minutes (HalfCheetah medium, loaded machine), a
#: quarter of the rows per update brings the nine AWAC cells in line with the others. It also runs
#: CORL's advantage weights and inputs (lambda 1/3, exp(A / lambda) clipped at 100 instead of the
#: batch softmax, normalised observations; its 3 x 256 actor stays 2 x 256 here): with the paper's
#: lambda 1 and the batch softmax its critic diverged on two of three hopper-medium seeds (score
#: 6.7 vs 29.4 with CORL's, benchmarks/results/awac-hopper-diagnostics-2026-12-05).
#: The newer algorithms' entries (benchmarks/new_algos_table.sh: the same envs x medium, medium-replay,
#: 3 seeds, 96 cells) are sized by XLA's FLOP count of one update (benchmarks/update_flops.py); each
#: entry's GFLOP per update, updates, projected minutes and the warm-up cuts are listed in
#: benchmarks/results/new-algos-budget-2026-12-03.md (about 8.3 hours for the 96 cells). FQL runs with
#: normalize_q_loss, the authors' advice for tasks outside their paper (their README), and their
#: alpha 10: without it Hopper's Q (about 250) outweighs the distillation term 500 to 1 and the
#: policy left the data (hopper-medium 11.2 vs 77.1; alpha 0.3 / 1 / 3 gave 35.4 / 55.8 / 65.6,
#: benchmarks/results/fql-hopper-diagnostics-2026-12-06).
BUDGETS = {"cpu": {"steps": 30_000, "eval_every": 5_000, "eval_episodes": 10,
                   "algos": {"awac": {"steps": 20_000, "set": {"actor_hidden_dims": "256,256", "batch_size": "256", "lam": "0.3333",
                                                               "normalize_weights": "false", "max_weight": "100",
                                                               "normalize_observations": "true"}},
                             "cql": {"steps": 20_000, "set": {"hidden_dims": "128,128", "bc_warmup_steps": "0", "cql_alpha": "10",
                                                              "actor_lr": "3e-5", "normalize_observations": "true"}},
                             "bcq": {"steps": 20_000, "set": {"hidden_dims": "128,128", "vae_hidden_dims": "256,256"}},
                             # the newer algorithms (benchmarks/new_algos_table.sh; comment above)
                             "crr": {"steps": 30_000},
                             "xql": {"steps": 30_000, "set": {"hidden_dims": "128,128"}},
                             "brac": {"steps": 30_000, "set": {"hidden_dims": "128,128", "warmup_steps": "5000"}},
                             "plas": {"steps": 30_000, "set": {"hidden_dims": "128,128", "vae_hidden_dims": "256,256",
                                                              "warmup_steps": "10000"}},
                             "spot": {"steps": 30_000, "set": {"hidden_dims": "128,128", "vae_hidden_dims": "256,256",
                                                              "warmup_steps": "5000"}},
                             "idql": {"steps": 30_000, "set": {"hidden_dims": "128,128", "actor_hidden_dims": "128,128,128"}},
                             "td3_awr": {"steps": 20_000, "set": {"hidden_dims": "128,128", "batch_size": "512"}},
                             "rebrac": {"steps": 20_000, "set": {"hidden_dims": "128,128"}},
                             "fql": {"steps": 20_000, "set": {"hidden_dims": "128,128", "normalize_q_loss": "true"}},
                             "sac_n": {"steps": 20_000, "set": {"hidden_dims": "128,128"}},
                             "edac": {"steps": 20_000, "set": {"hidden_dims": "128,128"}},
                             "lb_sac": {"steps": 20_000, "set": {"hidden_dims": "128,128", "num_qs": "5", "batch_size": "512",
                                                                "actor_lr": "0.00042", "critic_lr": "0.00042",
                                                                "entropy_alpha_lr": "0.00042"}},
                             "bear": {"steps": 20_000, "set": {"hidden_dims": "128,128", "vae_hidden_dims": "256,256",
                                                              "warmup_steps": "5000"}},
                             "mopo": {"steps": 20_000, "set": {"hidden_dims": "128,128", "rollout_starts": "10000",
                                                              "model_max_epochs": "10"}},
                             "mobile": {"steps": 20_000, "set": {"hidden_dims": "128,128", "rollout_starts": "10000",
                                                                "model_max_epochs": "10", "successor_samples": "3"}},
                             "combo": {"steps": 20_000, "set": {"hidden_dims": "128,128", "rollout_starts": "10000",
                                                               "model_max_epochs": "10", "n_actions": "5"}}}},
           "full": {"steps": 1_000_000, "eval_every": 5_000, "eval_episodes": 10}}
#: settings that define a cell: a folder holding cells made with other values is refused.
CELL_SETTINGS = ("steps", "algo_steps", "seeds", "seed", "eval_every", "eval_episodes", "dataset_pattern", "overrides")
#: the cell settings that are a mapping per algorithm: a request for some algorithms is checked on theirs
PER_ALGO_SETTINGS = ("algo_steps", "overrides")
PEER_PYTHON_ENV = "OFFRL_PEER_PYTHON"


@dataclass(frozen=True)
class BenchmarkSpec:
    envs: tuple[str, ...]
    tiers: tuple[str, ...]
    algos: tuple[str, ...]
    seeds: int = 3
    seed: int = 0
    steps: int = BUDGETS["cpu"]["steps"]
    eval_every: int = BUDGETS["cpu"]["eval_every"]
    eval_episodes: int = BUDGETS["cpu"]["eval_episodes"]
    dataset_pattern: str = "{env}-{tier}-v0"
    overrides: dict = field(default_factory=dict)   # {algo: {field: value}}
    peer: str | None = None            # "d3rlpy": also run each cell with that library
    peer_python: str | None = None     # the Python that runs the peer's driver
    algo_steps: dict = field(default_factory=dict)   # {algo: updates} where the budget gives its own

    def cells(self) -> list[tuple[str, str, str]]:
        return [(e, t, a) for e in self.envs for t in self.tiers for a in self.algos]

    def steps_of(self, algo: str) -> int:
        return int(self.algo_steps.get(algo, self.steps))


# ---------------------------------------------------------------------- checking the request
def _split(value, flag: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in (value.split(",") if isinstance(value, str) else value) if str(x).strip())
    if not items:
        raise ConfigError(f"{flag} is empty; pass a comma-separated list, e.g. {flag} hopper,walker2d.")
    return items


def env_id_of(env: str) -> str:
    """``"hopper"`` -> ``"Hopper-v5"``; a Gymnasium id passes after a registry check."""
    from offrl.envs import check_env_id

    if env.lower() in ENV_IDS:
        return ENV_IDS[env.lower()]
    try:
        check_env_id(env, "--envs:")
    except ConfigError:
        raise ConfigError(f"--envs: unknown environment '{env}'; use {', '.join(ENV_IDS)} or a Gymnasium id such as Hopper-v5.") from None
    return env


def make_spec(envs, tiers, algos, seeds: int = 3, steps: int | None = None, eval_every: int | None = None,
              eval_episodes: int | None = None, budget: str = "cpu", seed: int = 0,
              dataset_pattern: str = "{env}-{tier}-v0", overrides: Mapping | None = None,
              peer: str | None = None, peer_python: str | None = None) -> BenchmarkSpec:
    """Check every name and number of a benchmark request; one :class:`ConfigError` per mistake."""
    from offrl.algos import ALGORITHMS, algorithm_spec, get_algorithm
    from offrl.algos.common import apply_overrides
    from offrl.envs import env_family
    from offrl.settings import RunSettings

    if budget not in BUDGETS:
        raise ConfigError(f"--budget '{budget}' is unknown; choose one of: {', '.join(BUDGETS)}.")
    profile = BUDGETS[budget]
    envs = tuple(env_family(env_id_of(e)) for e in _split(envs, "--envs"))
    tiers = _split(tiers, "--tiers")
    for tier in tiers:
        if tier not in TIERS:
            raise ConfigError(f"--tiers: unknown tier '{tier}'; choose from {', '.join(TIERS)}.")
    algos = _split(algos, "--algos")
    names = []
    for algo in algos:
        try:
            module = get_algorithm(algo)
        except ConfigError:
            raise ConfigError(f"--algos: unknown algorithm '{algo}'; choose from {', '.join(ALGORITHMS)}.") from None
        names.append(algorithm_spec(module).name)
    budget_algos = profile.get("algos", {})
    algo_steps = {} if steps is not None else {a: int(budget_algos[a]["steps"]) for a in names
                                               if "steps" in budget_algos.get(a, {})}
    steps = int(profile["steps"] if steps is None else steps)
    eval_every = int(profile["eval_every"] if eval_every is None else eval_every)
    eval_episodes = int(profile["eval_episodes"] if eval_episodes is None else eval_episodes)
    RunSettings(steps=steps, seeds=seeds, seed=seed, eval_every=eval_every, eval_episodes=eval_episodes)  # the ranges
    if eval_episodes < 1:
        raise ConfigError(f"--eval-episodes is {eval_episodes}; a benchmark cell is scored by its evaluations, so pass at least 1.")
    if min([steps, *algo_steps.values()]) < eval_every:
        steps = min([steps, *algo_steps.values()])
        raise ConfigError(f"--steps {steps} is smaller than the evaluation interval --eval-every {eval_every}, so no cell "
                          f"would be evaluated; raise --steps or lower --eval-every.")
    if "{env}" not in dataset_pattern or "{tier}" not in dataset_pattern:
        raise ConfigError(f"--dataset-pattern '{dataset_pattern}' must contain {{env}} and {{tier}}, e.g. {{env}}-{{tier}}-v0.")
    per_algo: dict[str, dict] = {a: dict(budget_algos[a]["set"]) for a in names if budget_algos.get(a, {}).get("set")}
    for key, value in (overrides or {}).items():
        algo, _, name = str(key).partition(".")
        if not name:
            raise ConfigError(f"--set {key}={value}: write ALGO.FIELD=VALUE, e.g. --set iql.expectile=0.8.")
        algo = algorithm_spec(algo).name
        if algo not in names:
            raise ConfigError(f"--set {key}: '{algo}' is not in --algos ({', '.join(names)}).")
        per_algo.setdefault(algo, {})[name] = value
    for algo, values in per_algo.items():
        apply_overrides(get_algorithm(algo).Config(), values)   # range-checked before anything runs
    peer, peer_python = _check_peer(peer, peer_python, names)
    return BenchmarkSpec(envs, tiers, tuple(names), int(seeds), int(seed), steps, eval_every, eval_episodes,
                         dataset_pattern, per_algo, peer, peer_python, algo_steps)


def _check_peer(peer: str | None, peer_python: str | None, algos) -> tuple[str | None, str | None]:
    """The peer's name and the absolute path of the Python that runs its driver."""
    import os
    import shutil

    from offrl.peers import PEER_ALGOS, PEERS

    if not peer:
        return None, None
    if peer not in PEERS:
        raise ConfigError(f"--peer '{peer}' is unknown; choose one of: {', '.join(PEERS)}.")
    missing = [a for a in algos if a not in PEER_ALGOS[peer]]
    if missing:
        raise ConfigError(f"--peer {peer} cannot run {', '.join(missing)}; its driver knows {', '.join(PEER_ALGOS[peer])}: "
                          f"drop them from --algos or drop --peer.")
    given = peer_python or os.environ.get(PEER_PYTHON_ENV)
    if not given:
        raise ConfigError(f"--peer {peer} needs a Python that has {peer} installed: pass --peer-python PATH "
                          f"(e.g. the bin/python of a virtualenv) or set {PEER_PYTHON_ENV}=PATH.")
    found = shutil.which(given) if os.sep not in given else (given if os.access(given, os.X_OK) and Path(given).is_file() else None)
    if not found:
        source = "--peer-python" if peer_python else PEER_PYTHON_ENV
        raise ConfigError(f"{source} '{given}' is not an executable file; pass the python of a virtualenv with {peer} installed.")
    return peer, str(Path(found).absolute())


def _spec_record(spec: BenchmarkSpec) -> dict:
    record = asdict(spec)
    record.pop("peer_python")
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in record.items()}


def _claim_folder(out: Path, spec: BenchmarkSpec) -> None:
    """Create ``out`` or check that it holds this benchmark's cells (same cell settings)."""
    path = out / "benchmark.json"
    if path.exists():
        previous = json.loads(path.read_text())
        now = _spec_record(spec)
        for key in CELL_SETTINGS:
            # folders written before per-algorithm budgets existed ran every algorithm for `steps`
            was = previous.get(key, {}) if key == "algo_steps" else previous.get(key)
            is_now = now[key]
            if key in PER_ALGO_SETTINGS:    # {algo: ...}: compare the algorithms both runs name; a new one adds a row
                both = set(spec.algos) & set(previous.get("algos", ()))
                was = {a: v for a, v in (was or {}).items() if a in both}
                is_now = {a: v for a, v in is_now.items() if a in both}
            if was != is_now:
                flag = "--set" if key == "overrides" else f"--{key.replace('_', '-')}"
                if key == "algo_steps":
                    flag = "--budget's per-algorithm steps"
                raise ConfigError(f"{out} holds a benchmark made with {flag} {was!r}, not {is_now!r}; "
                                  f"its finished cells are kept: pass the same settings to resume it, or choose another --out.")
        record = {**previous, **{k: sorted(set(previous[k]) | set(now[k])) for k in ("envs", "tiers", "algos")},
                  **{k: {**(previous.get(k) or {}), **now[k]} for k in PER_ALGO_SETTINGS}}
        record["peer"] = spec.peer or previous.get("peer")
    else:
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"--out {out} exists and is not a benchmark folder (no benchmark.json); choose another --out.")
        record = _spec_record(spec)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))


def _datasets(spec: BenchmarkSpec) -> dict[tuple[str, str], str]:
    """The dataset name of every (env, tier), checked to exist before anything trains."""
    from offrl.data import resolve
    from offrl.errors import OffrlError

    names = {}
    for env in spec.envs:
        for tier in spec.tiers:
            name = spec.dataset_pattern.format(env=env, tier=tier)
            try:
                resolve(name)
            except OffrlError:
                raise ConfigError(f"no dataset '{name}' for env {env}, tier {tier}; make it with `offrl collect dataset "
                                  f"--env {ENV_IDS.get(env, env)} --tier {tier} --zoo ZOO` or pass --dataset-pattern.") from None
            names[env, tier] = name
    return names


# ---------------------------------------------------------------------- running cells
def cell_name(env: str, tier: str, algo: str) -> str:
    return f"{env}-{tier}-{algo}"


def summarise_cell(run) -> dict:
    """Last and best evaluation of a finished run: normalized score (raw return when unknown)."""
    from offrl.plotting import metric_by_step

    key = "eval/normalized_score"
    steps, mean, std = metric_by_step(run.metrics, key)
    if not len(steps):
        key = "eval/return"
        steps, mean, std = metric_by_step(run.metrics, key)
    if not len(steps):
        return {"metric": key, "last_step": None}
    best = int(np.argmax(mean))
    return {"metric": key, "last_step": int(steps[-1]), "last_mean": float(mean[-1]), "last_std": float(std[-1]),
            "best_step": int(steps[best]), "best_mean": float(mean[best]), "best_std": float(std[best])}


def run_cell(spec: BenchmarkSpec, env: str, tier: str, algo: str, dataset: str, out: Path, progress: bool = False) -> dict:
    """Train (or resume) one cell and write its ``cell.json``; a finished cell is read, not rerun."""
    from offrl.engine import train

    folder = out / "cells" / cell_name(env, tier, algo)
    done = folder / "cell.json"
    if done.exists():
        return json.loads(done.read_text())
    resume = (folder / "config.json").exists()
    previous_wall = 0.0
    if (folder / "wall.json").exists():
        previous_wall = float(json.loads((folder / "wall.json").read_text())["seconds"])
    t0 = time.perf_counter()
    try:
        run = train(algo, dataset, steps=spec.steps_of(algo), seeds=spec.seeds, seed=spec.seed, eval_every=spec.eval_every,
                    eval_episodes=spec.eval_episodes, out=folder, env=ENV_IDS.get(env), resume=resume,
                    log_every=min(1000, spec.eval_every), config_overrides=spec.overrides.get(algo), progress=progress)
    finally:
        if folder.exists():
            (folder / "wall.json").write_text(json.dumps({"seconds": previous_wall + time.perf_counter() - t0}))
    wall = previous_wall + time.perf_counter() - t0
    steps = spec.steps_of(algo)
    cell = {"env": env, "tier": tier, "algo": algo, "dataset": dataset, "seeds": spec.seeds, "steps": steps,
            "settings": dict(spec.overrides.get(algo, {})),
            **summarise_cell(run), "wall_s": wall, "updates_per_s": spec.seeds * steps / max(wall, 1e-9)}
    done.write_text(json.dumps(cell, indent=2))
    return cell


def run_benchmark(envs, tiers, algos, seeds: int = 3, steps: int | None = None, eval_every: int | None = None,
                  eval_episodes: int | None = None, budget: str = "cpu", out="bench", seed: int = 0,
                  dataset_pattern: str = "{env}-{tier}-v0", overrides: Mapping | None = None,
                  progress: bool = True, log=print, peer: str | None = None, peer_python: str | None = None) -> list[dict]:
    """Run every cell not finished yet (and its peer run, with ``peer``), then write the table and
    the figures; returns the cells."""
    spec = make_spec(envs, tiers, algos, seeds, steps, eval_every, eval_episodes, budget, seed, dataset_pattern, overrides,
                     peer, peer_python)
    datasets = _datasets(spec)
    out = Path(out)
    _claim_folder(out, spec)
    cells = []
    todo = spec.cells()
    for i, (env, tier, algo) in enumerate(todo, 1):
        finished = (out / "cells" / cell_name(env, tier, algo) / "cell.json").exists()
        log(f"[{i}/{len(todo)}] {cell_name(env, tier, algo)}" + (" (finished earlier, kept)" if finished else ""))
        cell = run_cell(spec, env, tier, algo, datasets[env, tier], out, progress=progress)
        if spec.peer:
            peer = run_peer_cell(spec, env, tier, algo, datasets[env, tier], out, log=log)
            cell = {**cell, **peer_columns(spec.peer, peer)}
        cells.append(cell)
    # the table and figures are the folder's: every finished cell in it, including those of earlier
    # runs that named other envs or algorithms (a partial resume must not shrink the table)
    write_table(folder_cells(out, cells), out)
    write_figures(folder_spec(out, spec), out)
    return cells


def folder_spec(out: Path, spec: BenchmarkSpec) -> BenchmarkSpec:
    """``spec`` widened to every env, tier and algorithm of ``out/benchmark.json`` (which
    :func:`_claim_folder` keeps as the union of every run's)."""
    record = json.loads((Path(out) / "benchmark.json").read_text())
    return replace(spec, **{k: tuple(record[k]) for k in ("envs", "tiers", "algos")})


def folder_cells(out: Path, current: Sequence[dict] = ()) -> list[dict]:
    """Every finished cell of a benchmark folder (its ``cell.json``), in the order of ``benchmark.json``'s
    envs, tiers and algorithms, with the peer columns of a finished ``peer-<name>.json`` beside it; the
    cells of ``current`` (this run's, with a failed peer's empty columns) are taken as they are."""
    from offrl.peers import PEERS

    out = Path(out)
    now = {(c["env"], c["tier"], c["algo"]): c for c in current}
    record = json.loads((out / "benchmark.json").read_text())
    cells = []
    for key in ((e, t, a) for e in record["envs"] for t in record["tiers"] for a in record["algos"]):
        path = out / "cells" / cell_name(*key) / "cell.json"
        if key in now:
            cells.append(now[key])
        elif path.exists():
            cell = json.loads(path.read_text())
            for peer in PEERS:
                if (path.parent / f"peer-{peer}.json").exists():
                    cell = {**cell, **peer_columns(peer, json.loads((path.parent / f"peer-{peer}.json").read_text()))}
            cells.append(cell)
    return cells


def peer_request(spec: BenchmarkSpec, env: str, tier: str, algo: str, dataset: str, out: Path) -> dict:
    """What the peer's driver needs: the file, the env, offrl's resolved config and reward
    multiplier for this cell (read from the finished cell's ``config.json``), the schedule and
    the reference returns."""
    from offrl.data import load, resolve
    from offrl.envs import reference_returns

    record = json.loads((out / "cells" / cell_name(env, tier, algo) / "config.json").read_text())
    ds = load(dataset)
    env_id = ENV_IDS.get(env) or ds.metadata.get("env_id")
    refs = reference_returns(env_id, dict(ds.metadata))
    if refs is None:
        raise ConfigError(f"--peer {spec.peer}: no reference returns for {env_id}, so the two scores cannot be compared; "
                          f"add ref_min_score/ref_max_score to the dataset's metadata.")
    path = Path(resolve(dataset)).absolute()
    if path.is_relative_to(Path.cwd()):          # the driver runs in this directory: keep the record free of it
        path = path.relative_to(Path.cwd())
    return {"algo": algo, "config": record["config"], "reward_multiplier": float(record["data"].get("reward_scale", 1.0)),
            "dataset_path": str(path), "env_id": env_id, "steps": spec.steps_of(algo),
            "seeds": spec.seeds, "seed": spec.seed, "eval_every": spec.eval_every, "eval_episodes": spec.eval_episodes,
            "references": [float(refs[0]), float(refs[1])]}


def run_peer_cell(spec: BenchmarkSpec, env: str, tier: str, algo: str, dataset: str, out: Path, log=print) -> dict | None:
    """Run the peer's driver on one finished cell; its JSON is kept in ``peer-<peer>.json``.

    A failed peer run is logged in one line (its output in ``peer-<peer>.log``), returns
    ``None`` and is retried when the benchmark is run again.
    """
    import subprocess

    from offrl.peers import driver_path

    folder = out / "cells" / cell_name(env, tier, algo)
    done = folder / f"peer-{spec.peer}.json"
    if done.exists():
        return json.loads(done.read_text())
    request = peer_request(spec, env, tier, algo, dataset, out)
    (folder / f"peer-{spec.peer}-request.json").write_text(json.dumps(request, indent=2))
    log(f"    {spec.peer}: {cell_name(env, tier, algo)} with {spec.peer_python}")
    proc = subprocess.run([spec.peer_python, str(driver_path(spec.peer)), str(folder / f"peer-{spec.peer}-request.json")],
                          capture_output=True, text=True)
    (folder / f"peer-{spec.peer}.log").write_text(proc.stdout + proc.stderr)
    result = None
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                pass
            break
    if proc.returncode != 0 or not isinstance(result, dict) or "last_mean" not in result:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        log(f"    {spec.peer} failed on {cell_name(env, tier, algo)} (exit {proc.returncode}): {last}; "
            f"see {folder / f'peer-{spec.peer}.log'}; rerun the benchmark to retry it")
        return None
    result = {"peer": spec.peer, **result}
    done.write_text(json.dumps(result, indent=2))
    return result


def peer_columns(peer: str, result: dict | None) -> dict:
    """A peer's result as the ``peer_*`` columns of a cell row (``None`` values when it failed)."""
    keys = ("last_mean", "last_std", "best_mean", "best_std", "wall_s")
    return {"peer": peer, **{f"peer_{k}": (None if result is None else result.get(k)) for k in keys},
            "peer_unmatched": "; ".join(result.get("unmatched", [])) if result else None}


# ---------------------------------------------------------------------- the table and figures
def _fmt(mean, std) -> str:
    return "-" if mean is None or not math.isfinite(mean) else f"{mean:.1f} ± {std:.1f}"


def results_markdown(cells: Sequence[dict]) -> str:
    """Rows ``env-tier``, one column per algorithm, as in the D4RL tables of the IQL/CQL papers."""
    algos = list(dict.fromkeys(c["algo"] for c in cells))
    rows = list(dict.fromkeys(f"{c['env']}-{c['tier']}" for c in cells))
    by = {(f"{c['env']}-{c['tier']}", c["algo"]): c for c in cells}
    metric = "normalized score" if all(c.get("metric") == "eval/normalized_score" for c in cells) else "normalized score (raw return where references are unknown)"
    steps = sorted({c["steps"] for c in cells})
    seeds = sorted({c["seeds"] for c in cells})
    if len(steps) == 1:
        after = f"after {steps[0]:,} updates"
    else:
        per = {a: sorted({c["steps"] for c in cells if c["algo"] == a}) for a in algos}
        after = "after " + ", ".join(f"{'/'.join(f'{s:,}' for s in v)} updates ({a.upper()})" for a, v in per.items())
    lines = [f"# offrl benchmark", "",
             f"{metric.capitalize()}, mean ± std over {', '.join(map(str, seeds))} seeds, {after}.", ""]
    settings = {a: next((c.get("settings") for c in cells if c["algo"] == a and c.get("settings")), None) for a in algos}
    if any(settings.values()):
        lines += ["Settings other than each algorithm's defaults: " + "; ".join(
            f"{a.upper()} " + ", ".join(f"{k}={v}" for k, v in sorted(v.items())) for a, v in settings.items() if v) + ".", ""]
    for title, prefix in (("Last evaluation", "last"), ("Best evaluation (the step with the highest mean; optimistic)", "best")):
        lines += [f"## {title}", "", "| dataset | " + " | ".join(a.upper() for a in algos) + " |",
                  "|---|" + "---|" * len(algos)]
        for row in rows:
            cells_ = [by.get((row, a)) for a in algos]
            lines.append(f"| {row} | " + " | ".join("-" if c is None else _fmt(c.get(f"{prefix}_mean"), c.get(f"{prefix}_std")) for c in cells_) + " |")
        lines.append("")
    lines += ["## Wall time per cell (seconds, all seeds together, including evaluation)", "",
              "| dataset | " + " | ".join(a.upper() for a in algos) + " |", "|---|" + "---|" * len(algos)]
    for row in rows:
        lines.append(f"| {row} | " + " | ".join("-" if by.get((row, a)) is None else f"{by[row, a]['wall_s']:.0f}" for a in algos) + " |")
    peers = sorted({c["peer"] for c in cells if c.get("peer")})
    for peer in peers:
        lines += ["", f"## Beside {peer} (same file, updates, seeds and evaluation episodes; normalized score, last evaluation)", "",
                  f"| cell | offrl | {peer} | offrl best | {peer} best | offrl wall s | {peer} wall s |", "|---|---|---|---|---|---|---|"]
        notes = {}
        for c in cells:
            if c.get("peer") != peer:
                continue
            failed = c.get("peer_last_mean") is None
            theirs = "failed" if failed else _fmt(c["peer_last_mean"], c["peer_last_std"])
            theirs_best = "failed" if failed else _fmt(c["peer_best_mean"], c["peer_best_std"])
            theirs_wall = "-" if failed else f"{c['peer_wall_s']:.0f}"
            lines.append(f"| {cell_name(c['env'], c['tier'], c['algo'])} | {_fmt(c.get('last_mean'), c.get('last_std'))} | {theirs} | "
                         f"{_fmt(c.get('best_mean'), c.get('best_std'))} | {theirs_best} | {c['wall_s']:.0f} | {theirs_wall} |")
            if c.get("peer_unmatched"):
                notes.setdefault(c["algo"], c["peer_unmatched"])
        for algo, note in notes.items():
            lines.append(f"\n{algo.upper()}: offrl settings {peer} has no counterpart for: {note}.")
    lines += ["", "![learning curves](learning_curves.png)", "", "![Q vs return](q_vs_return.png)"]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("env", "tier", "algo", "dataset", "seeds", "steps", "metric", "last_step", "last_mean", "last_std",
               "best_step", "best_mean", "best_std", "wall_s", "updates_per_s", "peer", "peer_last_mean", "peer_last_std",
               "peer_best_mean", "peer_best_std", "peer_wall_s", "peer_unmatched")


def write_table(cells: Sequence[dict], out: Path) -> dict[str, Path]:
    out = Path(out)
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for cell in cells:
            writer.writerow(cell)
    (out / "results.md").write_text(results_markdown(cells))
    return {"csv": out / "results.csv", "markdown": out / "results.md"}


def write_figures(spec: BenchmarkSpec, out: Path) -> list[Path]:
    """``learning_curves.png`` and ``q_vs_return.png``: one panel per (env, tier), one line per algorithm."""
    from offrl.engine import load_run
    from offrl.plotting import plot_panels

    panels = {}
    for env in spec.envs:
        for tier in spec.tiers:
            runs = []
            for algo in spec.algos:
                folder = Path(out) / "cells" / cell_name(env, tier, algo)
                if (folder / "cell.json").exists():
                    runs.append(load_run(folder, with_agent=False))
            panels[f"{env}-{tier}"] = runs
    return plot_panels(panels, out)
