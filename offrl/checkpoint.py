"""Safe checkpoints: msgpack for the agent pytree's arrays, JSON for everything else.

Layout inside a run folder::

    checkpoints/latest.json      {"step": 5000, "file": "step_5000.msgpack", ...}
    checkpoints/step_5000.msgpack  flax.serialization msgpack of {"agent": ..., "data_keys": ...}

Nothing is pickled and nothing executes on load: restoring needs a *target* pytree of the
same structure (built by the algorithm's ``create``), whose leaves are replaced by the stored
arrays. Writes go to a temporary file first and are renamed, so a killed run always leaves the
last good checkpoint intact.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from flax import serialization

from offrl.errors import OffrlError

LATEST = "latest.json"


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save_checkpoint(folder: str | Path, state: Any, step: int, meta: dict | None = None, keep: int = 1) -> Path:
    """Write ``state`` (any pytree of arrays) as ``step_<step>.msgpack`` and point ``latest.json`` at it.

    Older checkpoints beyond the ``keep`` most recent are removed (``keep=0``: none are).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"step_{int(step)}.msgpack"
    _atomic_write(folder / name, serialization.msgpack_serialize(serialization.to_state_dict(_to_numpy(state))))
    info = {"step": int(step), "file": name, **(meta or {})}
    _atomic_write(folder / LATEST, json.dumps(info, indent=2).encode())
    old = sorted(folder.glob("step_*.msgpack"), key=lambda p: int(p.stem.split("_")[1]))
    for path in old[:-keep] if keep > 0 else []:
        if path.name != name:
            path.unlink(missing_ok=True)
    return folder / name


def latest_checkpoint(folder: str | Path) -> dict | None:
    """The ``latest.json`` record (with ``path`` added), or ``None`` when there is none."""
    folder = Path(folder)
    path = folder / LATEST
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text())
    except ValueError:
        raise OffrlError(f"{path} is not valid JSON; delete it to start the run afresh.") from None
    info["path"] = str(folder / info["file"])
    return info


def checkpoint_steps(folder: str | Path) -> list[int]:
    """The steps of the ``step_<step>.msgpack`` files kept in ``folder``, ascending."""
    steps = []
    for path in Path(folder).glob("step_*.msgpack"):
        tail = path.stem.split("_", 1)[1]
        if tail.isdigit():
            steps.append(int(tail))
    return sorted(steps)


def checkpoint_at(folder: str | Path, step: int) -> Path:
    """The checkpoint file of step ``step`` in ``folder``; a one-line error lists the kept steps."""
    path = Path(folder) / f"step_{int(step)}.msgpack"
    if not path.exists():
        kept = checkpoint_steps(folder)
        listing = ", ".join(map(str, kept)) if kept else "none"
        raise OffrlError(f"{folder} has no checkpoint at step {step}; the kept steps are: {listing} "
                         "(train with --keep-checkpoints to keep every evaluation step).")
    return path


def load_checkpoint(path: str | Path, target: Any) -> Any:
    """Restore the pytree stored at ``path`` into the structure of ``target``."""
    path = Path(path)
    if not path.exists():
        raise OffrlError(f"checkpoint file {path} does not exist; the run folder is incomplete.")
    raw = serialization.msgpack_restore(path.read_bytes())
    if isinstance(target, dict) and isinstance(raw, dict):  # e.g. a fine-tuning checkpoint also holds its buffers
        raw = {k: v for k, v in raw.items() if k in target}
    raw = _fill_empty_fields(serialization.to_state_dict(target), raw)
    try:
        return serialization.from_state_dict(target, raw)
    except (ValueError, KeyError) as exc:
        raise OffrlError(f"checkpoint {path} does not match this algorithm/config ({exc}); resume with the run's own config.json.") from None


def _fill_empty_fields(target_state, raw):
    """Restore as empty the fields that ``target`` holds empty but ``raw`` lacks: fields added to a
    pytree with an empty default after the checkpoint was written (an agent's ``hparams``)."""
    if not isinstance(target_state, dict) or not isinstance(raw, dict):
        return raw
    out = dict(raw)
    for key, value in target_state.items():
        if key not in out and isinstance(value, dict) and not value:
            out[key] = {}
        elif key in out:
            out[key] = _fill_empty_fields(value, out[key])
    return out


def _to_numpy(tree):
    import jax

    return jax.tree_util.tree_map(lambda x: np.asarray(x) if hasattr(x, "shape") else x, tree)


def export_numpy_policy(run, folder: str | Path, seed: int = 0) -> Path:
    """Write seed ``seed``'s deterministic policy of ``run`` (an :class:`offrl.engine.Run`) as
    plain arrays (:mod:`offrl.policy`), through the algorithm's spec
    (:mod:`offrl.algos.contract`): its ``export_arrays(agent)`` hook when it has one (a network
    other than an MLP, e.g. DT's transformer: :mod:`offrl.policy_dt`), else its
    ``policy_layers(agent)``, else the ``MLP_0`` + ``Dense_0`` path of ``agent.actor.params``.
    A spec with ``exportable=False`` is refused in one line, before anything is written."""
    import jax

    from offrl.algos import algorithm_names, algorithm_spec
    from offrl.algos.common import mlp_policy_layers
    from offrl.errors import ConfigError
    from offrl.policy import save_numpy_policy, save_policy_arrays

    spec = algorithm_spec(run.module)
    if not spec.exportable:
        raise ConfigError(f"offrl export does not support {run.algo}: its policy is not a network that NumPy arrays can "
                          f"hold (exportable: {', '.join(algorithm_names(exportable=True))}); evaluate it with `offrl evaluate`.")
    seeds = int(np.asarray(run.agent.step).shape[0])
    if not 0 <= seed < seeds:
        raise OffrlError(f"--seed {seed} is out of range; this run trained seeds 0..{seeds - 1}.")
    agent = jax.tree_util.tree_map(lambda x: np.asarray(x[seed]), run.agent)
    info = run.info
    meta = {"algo": run.algo, "env_id": info.env_id, "obs_dim": info.obs_dim, "action_dim": info.action_dim,
            "seed": seed, "step": int(np.asarray(agent.step)), "run": str(run.path) if run.path else None}
    if spec.export_arrays is not None:
        arrays, extra = spec.export_arrays(agent)
        return save_policy_arrays(folder, arrays, info.obs_mean, info.obs_std, info.action_low, info.action_high,
                                  {**meta, **extra})
    if spec.policy_layers is not None:
        layers = spec.policy_layers(agent)
    else:
        try:
            layers = mlp_policy_layers(agent.actor.params)
        except (AttributeError, KeyError, TypeError):
            raise OffrlError(f"algorithm '{run.algo}' has no plain MLP actor at agent.actor to export; give its SPEC a "
                             "policy_layers hook or declare exportable=False (offrl/algos/contract.py).") from None
    if info.discrete:
        meta.update(output_activation="argmax", num_actions=info.num_actions)
    return save_numpy_policy(folder, layers, info.obs_mean, info.obs_std, info.action_low, info.action_high, meta)
