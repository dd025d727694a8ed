"""The D4RL HDF5 layout: one flat array per key, one row per transition.

Keys: ``observations, actions, rewards, terminals, timeouts`` (required),
``next_observations`` (optional: derived within episodes by D4RL's ``qlearning_dataset``
rule when missing, with a :class:`~offrl.data.checks.DatasetWarning` and a metadata note),
``infos/*`` (per-transition extras, e.g. ``infos/action_log_probs``) and ``metadata/*``
(one scalar dataset per key; lists and dicts as JSON strings flagged with the attribute
``json=1``; nested keys ``a/b`` become subgroups). offrl adds the root attribute
``offrl_sha256`` (content digest, see :mod:`offrl.data.checks`) and writes array chunks
with Fletcher-32 checksums.

Example::

    from offrl.data.d4rl import load_d4rl, save_d4rl
    ds = load_d4rl("hopper-medium-v2.hdf5")
    save_d4rl(ds, "copy.hdf5")
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from offrl.data.checks import (DIGEST_KEY, canonical, content_digest, missing_keys, prepare_output,
                               atomic_output_file, require_transitions, verify_digest, warn)
from offrl.data.dataset import Dataset
from offrl.errors import DatasetError

FLAT_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")
_CHUNK_BYTES = 1 << 20


def load_d4rl(path, check_bounds: bool = True) -> Dataset:
    """Read a D4RL-layout HDF5 file into a :class:`Dataset`, refusing malformed files."""
    import h5py

    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise DatasetError(f"{source}: file not found; pass the path to an existing .hdf5 file.")
    try:
        f = h5py.File(path, "r")
    except Exception as exc:
        raise DatasetError(f"{source}: not a readable HDF5 file, probably truncated or corrupt ({_short(exc)}); re-download or re-create it.") from None
    key = "<root>"
    try:
        with f:
            if "observations" not in f and any(k.startswith("episode_") for k in f.keys()):
                raise DatasetError(f"{source}: this is a Minari main_data.hdf5 (one group per episode), not a D4RL file; pass its dataset folder (the one holding data/) instead.")
            missing_keys(f.keys(), source, FLAT_KEYS)
            arrays = {}
            for key in (*FLAT_KEYS, "next_observations"):
                if key in f:
                    arrays[key] = _read_array(f, key, source)
            infos = {}
            if "infos" in f:
                key = "infos"
                for name, obj in _walk(f["infos"]):
                    key = f"infos/{name}"
                    infos[name] = _read_array(f, key, source)
            key = "metadata"
            metadata = _read_metadata(f["metadata"], source) if "metadata" in f else {}
            key = "<root attributes>"
            stored = f.attrs.get(DIGEST_KEY)
            stored = stored.decode() if isinstance(stored, bytes) else (str(stored) if stored is not None else None)
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{source}: key '{key}' cannot be read, the file is probably truncated or corrupt ({_short(exc)}); re-download or re-create it.") from None

    for key, arr in arrays.items():
        if key not in ("terminals", "timeouts") and arr.dtype.kind not in "fiub":
            raise DatasetError(f"{source}: key '{key}' has dtype {arr.dtype}, expected numbers; store it as float32.")
    derive = "next_observations" not in arrays
    ds = Dataset.from_arrays(**arrays, infos=infos, metadata=metadata, source=source)
    require_transitions(len(ds), source)
    verify_digest(ds, stored, source)
    if derive:
        n_dropped = len(arrays["rewards"]) - len(ds)
        warn(f"{source}: no 'next_observations' key, so they were derived within episodes as D4RL's qlearning_dataset does ({n_dropped} timeout steps without a logged successor dropped).")
    if check_bounds:
        from offrl.data.checks import check_action_bounds

        check_action_bounds(ds)
    return ds


def save_d4rl(ds: Dataset, path, overwrite: bool = False, compress: bool = False) -> Path:
    """Write ``ds`` in the D4RL layout (plus ``next_observations``, ``infos/*``, ``metadata/*``).

    ``compress=True`` stores every array with HDF5's byte-shuffle + gzip (level 4) filters:
    any HDF5 reader (h5py, D4RL's loader) decompresses them transparently.
    """
    import h5py

    path = Path(path)
    prepare_output(path, ds, overwrite)
    ds = canonical(ds)
    require_transitions(len(ds), str(path))
    with atomic_output_file(path) as tmp:
        with h5py.File(tmp, "w", libver="latest") as f:
            for key, arr in ds.arrays().items():
                _write_array(f, key, arr, compress)
            group = f.create_group("metadata")
            for key, value in ds.metadata.items():
                _write_metadata_value(group, key, value, str(path))
            f.attrs[DIGEST_KEY] = _fixed_bytes(content_digest(ds))
            f.attrs["offrl_format"] = _fixed_bytes("d4rl-hdf5")
    return path


# ---------------------------------------------------------------------- helpers
def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def _walk(group, prefix=""):
    """Yield ``(relative_name, dataset)`` for every dataset below ``group``."""
    import h5py

    for name in group:
        obj = group[name]
        full = f"{prefix}{name}"
        if isinstance(obj, h5py.Group):
            yield from _walk(obj, full + "/")
        else:
            yield full, obj


def _read_array(f, key: str, source: str) -> np.ndarray:
    import h5py

    obj = f[key]
    if not isinstance(obj, h5py.Dataset):
        raise DatasetError(f"{source}: key '{key}' is a group, expected an array with one row per transition.")
    if obj.dtype.kind not in "fiub":
        raise DatasetError(f"{source}: key '{key}' has dtype {obj.dtype}, expected numbers; store it as a numeric array.")
    return obj[()]


def _write_array(f, key: str, arr: np.ndarray, compress: bool = False) -> None:
    row_bytes = max(1, arr[:1].nbytes)
    rows = int(max(1, min(len(arr), _CHUNK_BYTES // row_bytes)))
    filters = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if compress else {}
    f.create_dataset(key, data=arr, chunks=(rows, *arr.shape[1:]), fletcher32=True, **filters)


def _fixed_bytes(text: str) -> np.bytes_:
    """UTF-8 as a fixed-length byte string: stored in the dataset itself, not HDF5's global heap
    (whose variable-length strings carry no checksum; corrupting them can hang libhdf5)."""
    return np.bytes_(text.encode("utf-8") or b" ")


def _write_metadata_value(group, key: str, value, source: str) -> None:
    if isinstance(value, (dict, list)) or value is None or (isinstance(value, str) and (not value or "\x00" in value or value != value.strip(" "))):
        ds = group.create_dataset(key, data=_fixed_bytes(json.dumps(value, sort_keys=True)))
        ds.attrs["json"] = 1
    elif isinstance(value, bool):
        group.create_dataset(key, data=np.bool_(value))
    elif isinstance(value, int):
        group.create_dataset(key, data=np.int64(value))
    elif isinstance(value, float):
        group.create_dataset(key, data=np.float64(value))
    elif isinstance(value, str):
        group.create_dataset(key, data=_fixed_bytes(value))
    else:  # normalize_metadata has turned everything into JSON types already
        raise DatasetError(f"{source}: metadata key '{key}' has type {type(value).__name__}; use numbers, strings, lists or dicts.")


def _read_metadata(group, source: str) -> dict:
    """Scalars and strings as Python values, JSON-flagged strings decoded; large arrays skipped."""
    out = {}
    skipped = []
    for name, obj in _walk(group):
        value = obj[()]
        if int(obj.attrs.get("json", 0)):
            text = value.decode() if isinstance(value, bytes) else str(value)
            try:
                out[name] = json.loads(text)
            except ValueError:
                raise DatasetError(f"{source}: key 'metadata/{name}' is flagged as JSON but does not parse; fix or remove it.") from None
        elif isinstance(value, bytes):
            out[name] = value.decode("utf-8", errors="replace")
        elif isinstance(value, np.ndarray):
            if value.size <= 256 and value.dtype.kind in "fiub":
                out[name] = value.tolist()
            elif value.size <= 256 and value.dtype.kind in "SO":
                out[name] = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in value.reshape(-1)]
            else:
                skipped.append(name)
        elif isinstance(value, np.generic):
            out[name] = value.item()
        else:
            out[name] = value
    if skipped:
        out["metadata_skipped"] = f"{len(skipped)} large metadata arrays not loaded (e.g. {skipped[0]})"
    return out
