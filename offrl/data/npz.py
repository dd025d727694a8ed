"""Plain NumPy ``.npz`` archives for quick interchange.

Members: the D4RL keys (``observations``, ``actions``, ``rewards``, ``terminals``,
``timeouts``, optional ``next_observations``), ``infos/<name>`` and ``metadata.json``
(a uint8 array holding UTF-8 JSON ``{"metadata": {...}, "offrl_sha256": "..."}``).
Loading uses ``np.load(allow_pickle=False)``: object arrays are refused, nothing is executed.

Example::

    from offrl.data.npz import load_npz, save_npz
    save_npz(ds, "walk.npz")
    ds2 = load_npz("walk.npz")
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from offrl.data.checks import (DIGEST_KEY, canonical, check_action_bounds, content_digest,
                               missing_keys, prepare_output, atomic_output_file,
                               require_transitions, verify_digest, warn)
from offrl.data.dataset import Dataset
from offrl.errors import DatasetError

METADATA_MEMBER = "metadata.json"
FLAT_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")


def load_npz(path, check_bounds: bool = True) -> Dataset:
    """Read an ``.npz`` archive written by :func:`save_npz` (or by hand with the same keys)."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise DatasetError(f"{source}: file not found; pass the path to an existing .npz file.")
    key = "<archive>"
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = set(archive.files)
            missing_keys(names, source, FLAT_KEYS)
            arrays, infos = {}, {}
            for key in sorted(names):
                if key == METADATA_MEMBER:
                    continue
                arr = archive[key]
                if arr.dtype.kind not in "fiub":
                    raise DatasetError(f"{source}: key '{key}' has dtype {arr.dtype}, expected numbers; store it as a numeric array.")
                if key.startswith("infos/"):
                    infos[key[len("infos/"):]] = arr
                elif key in (*FLAT_KEYS, "next_observations"):
                    arrays[key] = arr
            header = {}
            if METADATA_MEMBER in names:
                key = METADATA_MEMBER
                raw = archive[METADATA_MEMBER]
                try:
                    header = json.loads(raw.astype(np.uint8).tobytes().decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    raise DatasetError(f"{source}: key '{METADATA_MEMBER}' is not valid UTF-8 JSON; the file is corrupt or was edited, re-create it.") from None
                if not isinstance(header, dict) or not isinstance(header.get("metadata", {}), dict):
                    raise DatasetError(f"{source}: key '{METADATA_MEMBER}' must hold a JSON object with a 'metadata' object; re-create the file.")
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{source}: key '{key}' cannot be read, the archive is probably truncated or corrupt ({_short(exc)}); re-create it.") from None
    derive = "next_observations" not in arrays
    ds = Dataset.from_arrays(**arrays, infos=infos, metadata=header.get("metadata", {}), source=source)
    require_transitions(len(ds), source)
    verify_digest(ds, header.get(DIGEST_KEY), source)
    if derive:
        warn(f"{source}: no 'next_observations' key, so they were derived within episodes as D4RL's qlearning_dataset does ({len(arrays['rewards']) - len(ds)} timeout steps dropped).")
    if check_bounds:
        check_action_bounds(ds)
    return ds


def save_npz(ds: Dataset, path, overwrite: bool = False, compress: bool = False) -> Path:
    """Write ``ds`` as an ``.npz`` archive (zip members carry CRC-32 checks, plus offrl's digest).

    ``compress=True`` deflates the members: smaller files, much slower for float data.
    """
    path = Path(path)
    prepare_output(path, ds, overwrite)
    ds = canonical(ds)
    require_transitions(len(ds), str(path))
    header = {"metadata": ds.metadata, DIGEST_KEY: content_digest(ds), "offrl_format": "npz"}
    members = dict(ds.arrays())
    members[METADATA_MEMBER] = np.frombuffer(json.dumps(header, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    with atomic_output_file(path) as tmp, open(tmp, "wb") as fh:
        (np.savez_compressed if compress else np.savez)(fh, **members)
    return path


def _short(exc: Exception) -> str:
    if isinstance(exc, zipfile.BadZipFile):
        return "bad zip archive"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]
