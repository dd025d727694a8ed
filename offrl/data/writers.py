"""Writing a dataset in one of offrl's formats (the dispatch behind :func:`offrl.data.save`).

Kept apart from :mod:`offrl.data` so that the registry, which saves datasets into the cache,
needs nothing from the package's front module.
"""

from __future__ import annotations

import re
from pathlib import Path

from offrl.data.dataset import Dataset
from offrl.errors import DatasetError

FORMATS = ("hdf5", "npz", "minari")


def format_of(path) -> str:
    """``"hdf5"`` for ``.hdf5``/``.h5``, ``"npz"`` for ``.npz``, ``"minari"`` for a folder (or no suffix)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".hdf5", ".h5"):
        return "hdf5"
    if suffix == ".npz":
        return "npz"
    if path.is_dir() or suffix == "" or re.search(r"-v\d+$", path.name):
        return "minari"
    raise DatasetError(f"{path}: unknown dataset format '{suffix}'; use .hdf5/.h5 (D4RL), .npz, or a folder (Minari), or pass format=.")


def save(dataset: Dataset, path, format: str | None = None, overwrite: bool = False, **kwargs) -> Path:
    """Write ``dataset`` to ``path``; the format comes from the suffix unless ``format`` is given.

    Never overwrites an existing file unless ``overwrite=True``, and never the file the
    dataset was loaded from. Files are written to a temporary name and moved into place.
    Extra keyword arguments go to the writer (``dataset_id=`` for Minari, ``compress=`` for NPZ and HDF5).
    """
    if not isinstance(dataset, Dataset):
        raise DatasetError(f"save() needs an offrl.data.Dataset, got {type(dataset).__name__}; build one with Dataset.from_arrays(...).")
    path = Path(path).expanduser()
    fmt = format or format_of(path)
    if fmt == "hdf5":
        from offrl.data.d4rl import save_d4rl

        return save_d4rl(dataset, path, overwrite=overwrite, **kwargs)
    if fmt == "npz":
        from offrl.data.npz import save_npz

        return save_npz(dataset, path, overwrite=overwrite, **kwargs)
    if fmt == "minari":
        from offrl.data.minari import save_minari

        return save_minari(dataset, path, overwrite=overwrite, **kwargs)
    raise DatasetError(f"unknown format '{fmt}'; choose one of {', '.join(FORMATS)}.")
