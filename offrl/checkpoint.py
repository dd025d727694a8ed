"""Safe checkpoints: msgpack for the agent pytree's arrays, JSON for everything else, and a
SHA-256 checksum written with every checkpoint and checked before it is read.

Layout inside a run folder::

    checkpoints/latest.json               {"step": 5000, "file": "step_5000.msgpack", "sha256": ..., "bytes": ...}
    checkpoints/step_5000.msgpack         flax.serialization msgpack of {"agent": ..., "data_keys": ...}
    checkpoints/step_5000.msgpack.sha256  "<hex digest>  step_5000.msgpack" (``sha256sum -c`` reads it)

Nothing is pickled and nothing executes on load: restoring needs a *target* pytree of the
same structure (built by the algorithm's ``create``), whose leaves are replaced by the stored
arrays, each checked for the target's shape and dtype. Every file is written to ``NAME.tmp``
and renamed (the checksum first, then the checkpoint, then ``latest.json``), so a killed run
or a full disk leaves the last good checkpoint intact and, at the next save, no ``.tmp``.

Integrity rules:

* a checkpoint whose bytes do not hash to its recorded digest, that does not decode, or whose
  arrays do not fit the target is refused with one :class:`~offrl.errors.CheckpointError`
  sentence naming the file;
* :func:`latest_checkpoint` returns the newest checkpoint that verifies: when ``latest.json``'s
  is damaged (or ``latest.json`` itself is), it falls back to the newest intact ``step_*`` file
  with a :class:`CheckpointWarning` saying so, and refuses when none is intact;
* a checkpoint written before checksums existed (no ``.sha256`` file and no digest in
  ``latest.json``) still loads, with a :class:`CheckpointWarning` that it is unverified; its
  decoding and shapes are checked as above. The next save of that run writes checksums.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from flax import serialization

from offrl.errors import CheckpointError, OffrlError
from offrl.run_folder import atomic_write, disk_errors

LATEST = "latest.json"
CHECKSUM_SUFFIX = ".sha256"
_CHECKSUM_LINE = re.compile(r"([0-9a-f]{64})  (\S+)\n?")


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped for a damaged one, or loaded without a checksum to verify."""


def _warn(message: str) -> None:
    warnings.warn(message, CheckpointWarning, stacklevel=3)


def _step_of(path: Path) -> int | None:
    if not path.name.startswith("step_") or not path.name.endswith(".msgpack"):
        return None
    tail = path.name[len("step_"):-len(".msgpack")]
    return int(tail) if tail.isdigit() else None


def clean_stale_temporaries(folder: str | Path) -> list[Path]:
    """Remove what a killed save leaves in a checkpoint folder: ``*.tmp`` files (a partial
    checkpoint, checksum or ``latest.json``) and checksum files whose checkpoint never arrived.
    Returns the removed paths. Called by :func:`save_checkpoint`; only safe while no other
    process writes the folder (the run-folder lock, :mod:`offrl.locking`)."""
    folder = Path(folder)
    removed = []
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        orphan = path.name.endswith(".msgpack" + CHECKSUM_SUFFIX) and not path.with_name(path.name[:-len(CHECKSUM_SUFFIX)]).exists()
        if path.is_file() and (path.name.endswith(".tmp") or orphan):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def save_checkpoint(folder: str | Path, state: Any, step: int, meta: dict | None = None, keep: int = 1) -> Path:
    """Write ``state`` (any pytree of arrays) as ``step_<step>.msgpack`` with its SHA-256 in
    ``step_<step>.msgpack.sha256`` and point ``latest.json`` at it.

    Older checkpoints beyond the ``keep`` most recent are removed (``keep=0``: none are). A full
    disk or a read-only folder raises one :class:`~offrl.errors.RunFolderError` sentence and
    leaves the previous checkpoint and ``latest.json`` as they were.
    """
    folder = Path(folder)
    with disk_errors(folder):
        folder.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(folder)
    name = f"step_{int(step)}.msgpack"
    data = serialization.msgpack_serialize(serialization.to_state_dict(_to_numpy(state)))
    digest = hashlib.sha256(data).hexdigest()
    sidecar = folder / (name + CHECKSUM_SUFFIX)
    atomic_write(sidecar, f"{digest}  {name}\n", where=folder)
    try:
        atomic_write(folder / name, data, where=folder)
    except BaseException:
        if not (folder / name).exists():
            sidecar.unlink(missing_ok=True)
        raise
    info = {"step": int(step), "file": name, "sha256": digest, "bytes": len(data), **(meta or {})}
    atomic_write(folder / LATEST, json.dumps(info, indent=2), where=folder)
    old = sorted((p for p in folder.glob("step_*.msgpack") if _step_of(p) is not None), key=_step_of)
    for path in old[:-keep] if keep > 0 else []:
        if path.name != name:
            path.unlink(missing_ok=True)
            path.with_name(path.name + CHECKSUM_SUFFIX).unlink(missing_ok=True)
    return folder / name


def _read_latest(folder: Path) -> tuple[dict | None, str | None]:
    """``(record, problem)``: ``latest.json``'s record, or ``None`` and why it is unusable."""
    path = folder / LATEST
    if not path.exists():
        return None, None
    try:
        info = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        return None, f"{path} is damaged (not valid JSON)"
    if not isinstance(info, dict) or not isinstance(info.get("file"), str) or not isinstance(info.get("step"), int) \
            or "/" in info["file"] or "\\" in info["file"]:
        return None, f"{path} is damaged (it does not name a step_*.msgpack file and its step)"
    return info, None


def _expected_digest(path: Path) -> str | None:
    """The recorded SHA-256 of checkpoint ``path`` (from its ``.sha256`` file, else from
    ``latest.json`` when that names it), ``None`` for a checkpoint written before checksums."""
    sidecar = path.with_name(path.name + CHECKSUM_SUFFIX)
    recorded = None
    if sidecar.exists():
        try:
            match = _CHECKSUM_LINE.fullmatch(sidecar.read_bytes().decode("ascii"))
        except UnicodeDecodeError:
            match = None
        if match is None or match.group(2) != path.name:
            raise CheckpointError(f"checksum file {sidecar} is damaged, so checkpoint {path} cannot be verified; "
                                  "resume from another checkpoint or delete both files.")
        recorded = match.group(1)
    latest, _ = _read_latest(path.parent)
    if latest is not None and latest["file"] == path.name and isinstance(latest.get("sha256"), str):
        if recorded is not None and recorded != latest["sha256"]:
            raise CheckpointError(f"{sidecar} and {path.parent / LATEST} record different checksums for {path}; "
                                  "one of them is damaged, so the checkpoint cannot be trusted.")
        recorded = latest["sha256"]
    return recorded


def read_verified(path: str | Path) -> bytes:
    """The bytes of checkpoint ``path`` after checking them against the recorded SHA-256 (a
    :class:`CheckpointWarning` when the checkpoint has none: written before checksums)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist; the run folder is incomplete.")
    expected = _expected_digest(path)
    data = path.read_bytes()
    if expected is None:
        _warn(f"checkpoint {path} has no checksum (written before checkpoints were checksummed); loading it unverified.")
    elif hashlib.sha256(data).hexdigest() != expected:
        raise CheckpointError(f"checkpoint {path} is damaged: its {len(data)} bytes do not match the SHA-256 recorded "
                              "when it was written; resume from an earlier checkpoint or retrain.")
    return data


def verify_checkpoint(path: str | Path) -> None:
    """Refuse (:class:`~offrl.errors.CheckpointError`, one sentence naming the file) a checkpoint
    whose bytes do not match its recorded checksum or that does not decode as msgpack."""
    path = Path(path)
    _decode(path, read_verified(path))


def _decode(path: Path, data: bytes) -> Any:
    try:
        return serialization.msgpack_restore(data)
    except Exception:  # msgpack raises a zoo of types on arbitrary bytes; every one means "unreadable"
        raise CheckpointError(f"checkpoint {path} is unreadable ({len(data)} bytes, not a complete msgpack file: "
                              "truncated or damaged); resume from an earlier checkpoint or retrain.") from None


def latest_checkpoint(folder: str | Path) -> dict | None:
    """The record of the newest checkpoint in ``folder`` that verifies (``latest.json``'s, with
    ``path`` added), or ``None`` when the folder holds no checkpoint at all.

    When ``latest.json``'s checkpoint (or ``latest.json`` itself) is damaged or missing, the
    newest intact ``step_*.msgpack`` is returned instead, with a :class:`CheckpointWarning`
    naming what was skipped; when none verifies, one :class:`~offrl.errors.CheckpointError`
    sentence. So "the last good checkpoint" is always one whose checksum matched.
    """
    folder = Path(folder)
    latest, problem = _read_latest(folder)
    problems = [problem] if problem else []
    candidates = []
    if latest is not None:
        candidates.append((folder / latest["file"], latest))
    steps = sorted((p for p in folder.glob("step_*.msgpack") if _step_of(p) is not None), key=_step_of, reverse=True)
    candidates += [(p, None) for p in steps if latest is None or p.name != latest["file"]]
    if not candidates and not problems:
        return None
    for path, record in candidates:
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            problems.append(str(exc).split(";")[0])
            continue
        if record is None:
            record = {"step": _step_of(path), "file": path.name}
            if latest is None and not problem:
                problems.append(f"{folder / LATEST} is missing")
        if problems:
            _warn(f"{'; '.join(problems)}; falling back to the newest intact checkpoint, {path.name} (step {record['step']}).")
        return {**record, "path": str(path)}
    raise CheckpointError(f"no intact checkpoint in {folder}: {'; '.join(problems)}; delete {folder} and train afresh"
                          " (or restore the files from a backup).")


def latest_intact_checkpoint(folder: str | Path) -> dict | None:
    """The newest checkpoint in ``folder`` that verifies, as :func:`latest_checkpoint`, but
    ``None`` (with a :class:`CheckpointWarning` saying why) instead of an error when none is
    intact: for messages about "the last good checkpoint" that must not fail themselves."""
    try:
        return latest_checkpoint(folder)
    except CheckpointError as exc:
        _warn(str(exc))
        return None


def checkpoint_steps(folder: str | Path) -> list[int]:
    """The steps of the ``step_<step>.msgpack`` files kept in ``folder``, ascending."""
    return sorted(s for s in (_step_of(p) for p in Path(folder).glob("step_*.msgpack")) if s is not None)


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
    """Restore the pytree stored at ``path`` into the structure of ``target``, after checking its
    checksum, its decoding, and every array's shape and dtype against ``target``'s."""
    path = Path(path)
    raw = _decode(path, read_verified(path))
    if isinstance(target, dict) and isinstance(raw, dict):  # e.g. a fine-tuning checkpoint also holds its buffers
        raw = {k: v for k, v in raw.items() if k in target}
    target_state = serialization.to_state_dict(target)
    raw = _fill_empty_fields(target_state, raw)
    mismatch = _first_mismatch(target_state, raw)
    if mismatch is not None:
        raise CheckpointError(f"checkpoint {path} does not match this algorithm/config ({mismatch}); "
                              "resume with the run's own config.json.")
    try:
        return serialization.from_state_dict(target, raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} does not match this algorithm/config ({exc}); resume with the run's own config.json.") from None


def _first_mismatch(expected, stored, where: str = "") -> str | None:
    """Where ``stored`` (a restored state dict) differs from ``expected`` in keys, shapes or dtypes."""
    if isinstance(expected, dict):
        if not isinstance(stored, dict):
            return f"'{where or '/'}' is {type(stored).__name__}, not a mapping"
        missing = [k for k in expected if k not in stored]
        if missing:
            return f"'{where}/{missing[0]}' is missing"
        for key, value in expected.items():
            found = _first_mismatch(value, stored[key], f"{where}/{key}")
            if found is not None:
                return found
        return None
    if hasattr(expected, "shape") and hasattr(expected, "dtype"):
        if not isinstance(stored, np.ndarray):
            return f"'{where}' is {type(stored).__name__}, not an array"
        try:
            dtype = np.dtype(expected.dtype)
        except TypeError:  # e.g. a typed PRNG key: only its shape is checked
            dtype = stored.dtype
        if tuple(stored.shape) != tuple(expected.shape) or stored.dtype != dtype:
            return f"'{where}' is {stored.dtype}{list(stored.shape)} where {dtype}{list(expected.shape)} is expected"
        return None
    if isinstance(expected, (int, float, bool, str)) and not isinstance(stored, (int, float, bool, str, np.generic, np.ndarray)):
        return f"'{where}' is {type(stored).__name__}, not a {type(expected).__name__}"
    return None


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
