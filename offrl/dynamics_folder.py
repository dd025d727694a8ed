"""A dynamics ensemble fitted on its own, in a folder: train (resumable), load, report.

Layout of ``DIR`` (``offrl model train DATA --out DIR``)::

    config.json                 {"dataset", "seed", "settings", "obs_dim", "action_dim", "rows", "env_id", "finished"}
    checkpoints/latest.json     offrl.checkpoint's verified checkpoints of the fit's state (FitState)
    report.json, plots/disagreement.png    written by ``offrl model report DIR``

The fit runs ``epochs_per_checkpoint`` epochs per compiled call (:func:`offrl.dynamics.fit_epochs`)
and checkpoints after each, so a killed fit resumes where its last checkpoint left it; the state
holds the split, the normalisers, the optimiser and the key, so a resumed fit is the uninterrupted one.

The report scores the elites on the held-out rows, in the data's units::

    rmse_d      = sqrt(mean_rows (mean_e m_e(x)_d - y_d)^2)                   per output dimension d
    error(x)    = || (mean_e m_e(x) - y) / sigma_y ||_2                          the real error of a row
    spread(x)   = || std_e m_e(x) / sigma_y ||_2                                 the elites' disagreement
    corr        = Pearson and Spearman correlation of spread and error over the rows

A model whose disagreement tracks its error can be trusted where its members agree (the premise
of MOPO's penalty); a correlation near 0 says the disagreement is no guide.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offrl import dynamics as dyn
from offrl.algos.ranges import ANY_REAL, REWARD_SCALING, param
from offrl.errors import ConfigError


@dataclass(frozen=True)
class ModelFitConfig(dyn.DynamicsSettings):
    """The dynamics ensemble's fields and the data options of the rows it is fitted on."""

    reward_scaling: str = param("none", REWARD_SCALING)  #: "none", "returns" or a number, as in offrl train
    reward_bias: float = param(0.0, ANY_REAL)  #: added to rewards after scaling


def _prepare(dataset, config):
    from offrl import data as offrl_data
    from offrl.engine import prepare_data

    ds = offrl_data.load(dataset) if isinstance(dataset, (str, Path)) else dataset
    arrays, info = prepare_data(ds, config, ds.metadata.get("env_id"))
    if info.discrete:
        raise ConfigError(f"{dataset}: the dynamics model needs continuous actions; this dataset's are discrete.")
    return ds, arrays, info


def _resolved(config, info):
    if config.termination == "auto":
        config = dataclasses.replace(config, termination=dyn.termination_for_env(info.env_id))
    return config


def _start(config, arrays, info, seed):
    import jax

    dyn.holdout_size(config, int(arrays["rewards"].shape[0]))
    model = dyn.init_dynamics(config, info.obs_dim, info.action_dim, jax.random.PRNGKey(seed))
    return model, dyn.fit_begin(model, arrays, jax.random.PRNGKey(seed + 1))


def check_same_data(stored: dict, state_from_data, state_from_checkpoint, source) -> None:
    """Refuse a model folder used with another dataset: other shapes, or other normalisers."""
    for key in ("obs_dim", "action_dim", "rows"):
        if stored[key] != state_from_data[key]:
            raise ConfigError(f"the model in {source} was fitted on data with {key} {stored[key]}; this dataset has "
                              f"{state_from_data[key]}: fit a model on it with `offrl model train DATA --out NEW_DIR`.")
    for name in ("input_mean", "input_std", "target_mean", "target_std"):
        a = np.asarray(getattr(state_from_checkpoint, name))
        b = np.asarray(getattr(state_from_data["state"], name))
        if not np.allclose(a, b, rtol=1e-4, atol=1e-5):
            raise ConfigError(f"the model in {source} was fitted on other data: its normaliser '{name}' differs from "
                              f"this dataset's; fit a model on it with `offrl model train DATA --out NEW_DIR`.")


def train_model(dataset, out, config: ModelFitConfig | None = None, seed: int = 0, resume: bool = False,
                epochs_per_checkpoint: int = 10, stop_after: int | None = None, progress=print) -> dict:
    """Fit the ensemble on ``dataset`` into ``out`` (see the module docstring); ``resume`` continues its
    checkpointed fit. ``stop_after`` ends after that many epochs in all (a killed fit, for tests).
    Returns the folder's config.json contents."""
    import jax

    from offrl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from offrl.run_folder import atomic_write

    folder = Path(out)
    if resume:
        if not (folder / "config.json").exists():
            raise ConfigError(f"--resume needs a model folder with config.json, but {folder} has none; drop --resume.")
        record = json.loads((folder / "config.json").read_text())
        config = ModelFitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["settings"].items()})
        seed = record["seed"]
    else:
        if (folder / "config.json").exists():
            raise ConfigError(f"{folder} already holds a model; pass --resume to continue it or choose another --out.")
        config = config or ModelFitConfig()
    if epochs_per_checkpoint < 1:
        raise ConfigError(f"--epochs-per-checkpoint is {epochs_per_checkpoint}; it must be at least 1.")
    _, arrays, info = _prepare(dataset, config)
    config = _resolved(config, info)
    model, state = _start(config, arrays, info, seed)
    here = {"obs_dim": info.obs_dim, "action_dim": info.action_dim, "rows": int(arrays["rewards"].shape[0]),
            "state": state}
    if resume:
        check_same_data(record, here, state, folder)
        entry = latest_checkpoint(folder / "checkpoints")
        if entry is not None:
            state = load_checkpoint(entry["path"], {"state": state})["state"]
            check_same_data(record, here, state, folder)
    else:
        record = {"dataset": str(dataset), "seed": seed, "settings": dataclasses.asdict(config),
                  "obs_dim": info.obs_dim, "action_dim": info.action_dim, "rows": here["rows"],
                  "env_id": info.env_id, "finished": False}
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / "config.json", json.dumps(record, indent=2))
    chunk = jax.jit(dyn.fit_epochs, static_argnums=3)
    while not bool(dyn.fit_finished(config, state)):
        n = epochs_per_checkpoint if stop_after is None else min(epochs_per_checkpoint, stop_after - int(state.count))
        if n <= 0:
            return record
        state = chunk(model, state, arrays, n)
        save_checkpoint(folder / "checkpoints", {"state": state}, int(state.count))
        best = np.asarray(state.best)
        progress(f"epoch {int(state.count)}: held-out MSE (normalised) of the best members {np.sort(best)[:config.num_elites].mean():.5f}")
    record["finished"] = True
    atomic_write(folder / "config.json", json.dumps(record, indent=2))
    return record


def load_model(folder, dataset=None):
    """``(Dynamics, arrays, FitState, record)`` of a model folder, on ``dataset`` (default: the one it was fitted on)."""
    from offrl.checkpoint import latest_checkpoint, load_checkpoint

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise ConfigError(f"{folder} is not a model folder (no config.json); make one with `offrl model train DATA --out {folder}`.")
    record = json.loads((folder / "config.json").read_text())
    config = ModelFitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["settings"].items()})
    _, arrays, info = _prepare(dataset if dataset is not None else record["dataset"], config)
    here = {"obs_dim": info.obs_dim, "action_dim": info.action_dim, "rows": int(arrays["rewards"].shape[0])}
    for key in ("obs_dim", "action_dim", "rows"):  # before the split, which needs the row count
        if record[key] != here[key]:
            check_same_data(record, here, None, folder)
    model, state = _start(config, arrays, info, record["seed"])
    entry = latest_checkpoint(folder / "checkpoints")
    if entry is None:
        raise ConfigError(f"{folder} has no checkpoint yet; run `offrl model train ... --out {folder} --resume`.")
    stored = load_checkpoint(entry["path"], {"state": state})["state"]
    check_same_data(record, {**here, "state": state}, stored, folder)
    model, _ = dyn.fit_end(model, stored, arrays)
    return model, arrays, stored, record


def model_report(model, arrays, state) -> dict:
    """The held-out scores of the module docstring: per-dimension RMSE, error vs disagreement correlation."""
    from scipy import stats

    idx = np.asarray(state.hold_idx)
    obs, act = arrays["observations"][idx], arrays["actions"][idx]
    mean, _, _ = dyn.predict(model, obs, act)
    elite = np.asarray(mean)[np.asarray(model.elites)]
    inputs, targets, _ = dyn.model_arrays(arrays)
    y = np.asarray(targets)[idx]
    scale = np.asarray(model.target_std)
    centre = elite.mean(0)
    rmse = np.sqrt(np.mean((centre - y) ** 2, axis=0))
    error = np.linalg.norm((centre - y) / scale, axis=-1)
    spread = np.linalg.norm(elite.std(0) / scale, axis=-1)
    pearson = float(np.corrcoef(spread, error)[0, 1]) if spread.std() > 0 and error.std() > 0 else float("nan")
    spearman = float(stats.spearmanr(spread, error).statistic) if spread.std() > 0 else float("nan")
    names = [f"ds[{i}]" for i in range(model.obs_dim)] + ["reward"]
    return {"heldout_rows": int(idx.size), "epochs": int(state.count), "elites": np.asarray(model.elites).tolist(),
            "rmse": dict(zip(names, rmse.astype(float).tolist())),
            "target_std": dict(zip(names, scale.astype(float).tolist())),
            "disagreement_error_pearson": pearson, "disagreement_error_spearman": spearman,
            "mean_error": float(error.mean()), "mean_disagreement": float(spread.mean()),
            "_points": (spread, error)}


def write_report(folder, report: dict) -> tuple[Path, Path]:
    """``report.json`` and ``plots/disagreement.png`` (disagreement vs real error, log-log scatter)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from offrl.run_folder import atomic_write

    folder = Path(folder)
    spread, error = report["_points"]
    atomic_write(folder / "report.json", json.dumps({k: v for k, v in report.items() if k != "_points"}, indent=2))
    (folder / "plots").mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(np.maximum(spread, 1e-8), np.maximum(error, 1e-8), s=6, alpha=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("elites' disagreement ||std_e m_e / sigma_y||")
    ax.set_ylabel("real error ||(mean_e m_e - y) / sigma_y||")
    ax.set_title(f"held-out rows: Spearman {report['disagreement_error_spearman']:.2f}")
    fig.tight_layout()
    plot = folder / "plots" / "disagreement.png"
    fig.savefig(plot, dpi=100)
    plt.close(fig)
    return folder / "report.json", plot
