"""Checks shared by every dataset format: canonical form, content digest, safe writing, bounds.

Every offrl writer stores a SHA-256 *content digest* of the canonical dataset next to the
data (an HDF5 root attribute, an NPZ member, a Minari metadata field). The loaders recompute
it from what they decoded and refuse the file when the two differ, so a file corrupted after
it was written either fails to load with a :class:`~offrl.errors.DatasetError` or loads
exactly what was saved; it never loads silently changed data. Files written by other tools
(D4RL, minari) carry no digest and are checked only structurally.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from offrl.data.dataset import REQUIRED_KEYS, Dataset
from offrl.errors import DatasetError

#: name of the digest field in every format offrl writes.
DIGEST_KEY = "offrl_sha256"


class DatasetWarning(UserWarning):
    """Something suspicious but loadable in a dataset (out-of-bound actions, derived fields)."""


def warn(message: str) -> None:
    warnings.warn(message, DatasetWarning, stacklevel=3)


def normalize_metadata(metadata: Mapping[str, Any], source: str = "<arrays>") -> dict:
    """The metadata as plain JSON values (tuples -> lists, numpy scalars -> Python numbers)."""
    try:
        return json.loads(json.dumps(dict(metadata), default=_json_default))
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{source}: metadata is not JSON-serialisable ({exc}); keep metadata values to numbers, strings, lists and dicts.") from None


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"value of type {type(obj).__name__} is not JSON-serialisable")


def canonical(ds: Dataset) -> Dataset:
    """``ds`` with the dtypes every loader produces (float32 arrays, bool flags) and JSON metadata."""
    return Dataset.from_arrays(
        observations=ds.observations, actions=ds.actions, rewards=ds.rewards,
        terminals=ds.terminals, timeouts=ds.timeouts, next_observations=ds.next_observations,
        infos={k: np.ascontiguousarray(v) for k, v in ds.infos.items()},
        metadata=normalize_metadata(ds.metadata, ds.source), source=ds.source)


def content_digest(ds: Dataset) -> str:
    """JSON ``{key: SHA-256}`` over every array (key, dtype, shape, bytes) and the sorted-key metadata JSON."""
    digests = {}
    for key, arr in sorted(ds.arrays().items()):
        arr = np.ascontiguousarray(arr)
        h = hashlib.sha256(f"{key}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
        digests[key] = h.hexdigest()
    digests["metadata"] = hashlib.sha256(json.dumps(normalize_metadata(ds.metadata), sort_keys=True).encode()).hexdigest()
    return json.dumps(digests, sort_keys=True)


def verify_digest(ds: Dataset, stored, source: str) -> None:
    """Refuse ``ds`` when its content differs from the digest stored at writing time, naming the key."""
    if stored is None:
        return
    try:
        expected = json.loads(stored)
        if not isinstance(expected, dict):
            raise ValueError
    except (ValueError, TypeError):
        raise DatasetError(f"{source}: the stored checksum '{DIGEST_KEY}' is damaged, so the file was corrupted or edited afterwards; restore it from a good copy.") from None
    actual = json.loads(content_digest(ds))
    for key in sorted(set(expected) | set(actual)):
        if expected.get(key) != actual.get(key):
            raise DatasetError(f"{source}: key '{key}' does not match the checksum offrl stored when writing the file, so it was corrupted or edited afterwards; restore it from a good copy.")


def require_transitions(ds_len: int, source: str) -> None:
    if ds_len == 0:
        raise DatasetError(f"{source}: the dataset has zero transitions; an offline dataset needs at least one logged step.")


# ---------------------------------------------------------------------- writing safely
def prepare_output(path: Path, ds: Dataset, overwrite: bool) -> None:
    """Refuse to write over an existing file (unless ``overwrite``) or ever over the input file."""
    source = ds.source
    for part in source.split("+"):
        if part.startswith("<"):
            continue
        try:
            same = Path(part).resolve() == path.resolve() or path.resolve() in Path(part).resolve().parents
        except OSError:
            same = False
        if same:
            raise DatasetError(f"{path}: refusing to write over the file this dataset was loaded from; save to a new path.")
    if path.exists() and not overwrite:
        raise DatasetError(f"{path}: already exists; pass overwrite=True (CLI: --overwrite) or choose another path.")
    path.parent.mkdir(parents=True, exist_ok=True)


def replace_atomically(tmp: Path, path: Path) -> None:
    """Move a finished temporary file or folder into place (never leaves a half-written file)."""
    if path.is_dir() and tmp.is_dir():
        old = path.with_name(path.name + ".offrl-old")
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)


def current_umask() -> int:
    """The process's file-mode creation mask (read without changing it where Linux allows)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def honour_umask(path: Path, directory: bool = False) -> None:
    """Give ``path`` (made by ``mkstemp``/``mkdtemp``, which create 0600/0700) the mode a plain
    ``open``/``mkdir`` would: 0666/0777 less the umask, so a teammate can read a shared dataset."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


@contextmanager
def atomic_output_file(path: Path):
    """Yield a temporary path beside ``path``; on success move it into place, always clean up.
    The file gets the mode the umask gives (not ``mkstemp``'s 0600)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    honour_umask(tmp)
    try:
        yield tmp
        replace_atomically(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


# ---------------------------------------------------------------------- action bounds
def action_bounds(ds: Dataset, env_id: str | None = None, from_data: bool = False):
    """The action box ``(low, high)`` of a dataset: the one rule the doctor and the engine share.

    In order of precedence: the metadata's ``action_low``/``action_high``; the action space of
    ``env_id`` (or of the metadata's ``env_id``) when it is a Box of the data's action shape;
    then, with ``from_data`` (the engine must rescale actions somehow), ``[-1, 1]`` when every
    action lies inside it, else the data's per-dimension min and max. ``None`` when unknown.
    """
    md = ds.metadata
    if "action_low" in md and "action_high" in md:
        try:
            low = np.broadcast_to(np.asarray(md["action_low"], dtype=np.float64), ds.actions.shape[1:])
            high = np.broadcast_to(np.asarray(md["action_high"], dtype=np.float64), ds.actions.shape[1:])
            return low, high
        except (ValueError, TypeError):
            raise DatasetError(f"{ds.source}: metadata 'action_low'/'action_high' do not match the action shape {ds.actions.shape[1:]}; fix or remove them.") from None
    env_id = env_id or md.get("env_id")
    if env_id:
        box = _env_action_box(env_id, ds.actions.shape[1:])
        if box is not None:
            return box
    if not from_data:
        return None
    acts = ds.actions.reshape(len(ds), -1)
    if acts.size and acts.min() >= -1.0 and acts.max() <= 1.0:
        return -np.ones(acts.shape[1]), np.ones(acts.shape[1])
    low, high = acts.min(0).astype(np.float64), acts.max(0).astype(np.float64)
    return low, np.where(high > low, high, low + 1.0)


def _env_action_box(env_id: str, shape):
    try:
        import gymnasium as gym

        if env_id not in gym.registry:
            return None
        env = gym.make(env_id)
        space = env.action_space
        env.close()
        if isinstance(space, gym.spaces.Box) and space.shape == tuple(shape):
            return space.low.astype(np.float64), space.high.astype(np.float64)
    except Exception:  # an env that cannot be built here: bounds unknown, not an error
        return None
    return None


def count_out_of_bounds(ds: Dataset, bounds=None) -> tuple[int, int]:
    """``(rows with any action outside the box, first such row or -1)``."""
    bounds = bounds if bounds is not None else action_bounds(ds)
    if bounds is None or len(ds) == 0:
        return 0, -1
    low, high = bounds
    act = ds.actions.reshape(len(ds), -1)
    tol = 1e-6 * np.maximum(1.0, np.abs(np.concatenate([low.reshape(-1), high.reshape(-1)])).max(initial=1.0))
    outside = ((act < low.reshape(-1) - tol) | (act > high.reshape(-1) + tol)).any(axis=1)
    rows = np.flatnonzero(outside)
    return int(len(rows)), int(rows[0]) if len(rows) else -1


def check_action_bounds(ds: Dataset) -> int:
    """Warn (:class:`DatasetWarning`) with the count of rows whose action leaves the action box."""
    count, first = count_out_of_bounds(ds)
    if count:
        warn(f"{ds.source}: {count} of {len(ds)} actions lie outside the action bounds (first at row {first}); clip them or fix 'action_low'/'action_high' in the metadata.")
    return count


def missing_keys(keys, source: str, required=REQUIRED_KEYS) -> None:
    for key in required:
        if key not in keys:
            raise DatasetError(f"{source}: missing key '{key}'; a dataset needs {', '.join(required)}.")


# ---------------------------------------------------------------------- discrete actions
def num_discrete_actions(ds: Dataset, env_id: str | None = None) -> int:
    """The number of actions of a dataset with ``Discrete`` actions, ``0`` for continuous ones.

    A dataset is discrete when its metadata has ``num_actions`` or its env (``env_id``, else the
    metadata's) has a ``Discrete`` action space; the two must agree. Its actions must then be
    integers in ``0 .. num_actions - 1``, one per row (stored as shape ``(N, 1)``).
    Raises :class:`~offrl.errors.DatasetError` naming the first offending row otherwise.
    """
    md = ds.metadata
    declared = md.get("num_actions")
    env_id = env_id or md.get("env_id")
    space = _env_action_space(env_id) if env_id else None
    env_n = int(space.n) if space is not None and hasattr(space, "n") else None
    if declared is None and env_n is None:
        return 0
    if declared is not None:
        try:
            declared = int(declared)
            if declared < 1:
                raise ValueError
        except (TypeError, ValueError):
            raise DatasetError(f"{ds.source}: metadata 'num_actions' is {md.get('num_actions')!r}; it must be a positive integer (the size of the Discrete action space).") from None
        if space is not None and env_n is None:
            raise DatasetError(f"{ds.source}: metadata 'num_actions' is {declared} (discrete actions) but environment '{env_id}' has a continuous {type(space).__name__} action space; pass the right --env or remove 'num_actions'.")
        if env_n is not None and env_n != declared:
            raise DatasetError(f"{ds.source}: the dataset has {declared} discrete actions (metadata 'num_actions') but environment '{env_id}' has {env_n}; pass the env the data was logged in.")
    n = declared if declared is not None else env_n
    check_discrete_actions(ds, n)
    return n


def check_discrete_actions(ds: Dataset, num_actions: int) -> None:
    """Raise :class:`DatasetError` unless every action is one integer in ``0 .. num_actions - 1``."""
    if ds.actions.ndim > 2 or (ds.actions.ndim == 2 and ds.actions.shape[1] != 1):
        raise DatasetError(f"{ds.source}: key 'actions' has shape {ds.actions.shape} but discrete actions are one integer per row; store them as shape (N, 1).")
    acts = ds.actions.reshape(-1)
    bad = np.flatnonzero(~np.isfinite(acts) | (acts != np.round(acts)))
    if len(bad):
        raise DatasetError(f"{ds.source}: key 'actions' row {bad[0]} is {float(acts[bad[0]]):g}, not an integer; discrete actions must be integers in 0..{num_actions - 1}.")
    bad = np.flatnonzero((acts < 0) | (acts > num_actions - 1))
    if len(bad):
        raise DatasetError(f"{ds.source}: key 'actions' row {bad[0]} is {int(acts[bad[0]])}, outside the {num_actions} discrete actions 0..{num_actions - 1}; fix the data or metadata 'num_actions'.")


def _env_action_space(env_id: str):
    """The action space of a registered Gymnasium env, or ``None`` when it cannot be built here."""
    try:
        import gymnasium as gym

        if env_id not in gym.registry:
            return None
        env = gym.make(env_id)
        space = env.action_space
        env.close()
        return space
    except Exception:  # an env that cannot be built here: unknown, not an error
        return None
