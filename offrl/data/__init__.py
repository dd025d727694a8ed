"""Offline datasets: the container, file formats, the name registry and the doctor.

Formats (each reads what it writes, exactly):

=============  ====================================  ==============================
format         on disk                               module
=============  ====================================  ==============================
``"hdf5"``     D4RL layout, ``*.hdf5`` / ``*.h5``    :mod:`offrl.data.d4rl`
``"npz"``      NumPy archive, ``*.npz``              :mod:`offrl.data.npz`
``"minari"``   Minari folder ``<id>/data/...``       :mod:`offrl.data.minari`
``"ogbench"``  OGBench ``*.npz`` (read only; found    :mod:`offrl.data.ogbench`
               by its keys or its dataset name)
=============  ====================================  ==============================

Example::

    import offrl.data as data
    ds = data.load("hopper-medium-v0")          # a registered name, or any path
    data.save(ds, "hopper.npz")                  # format from the suffix
    data.register(ds, "my-hopper-v0")           # into offrl_home()/datasets
"""

from __future__ import annotations


from offrl.data.checks import DatasetWarning
from offrl.data.dataset import Dataset, validate_arrays
from offrl.data.registry import list_datasets, register, resolve
from offrl.data.writers import FORMATS, format_of, save
from offrl.errors import DatasetError

def load(name_or_path, format: str | None = None, check_bounds: bool = True) -> Dataset:
    """Load a dataset by registered name or path (D4RL ``.hdf5``, ``.npz``, a Minari folder, or an
    OGBench ``.npz`` or dataset name such as ``cube-single-play-singletask-task1-v0``).

    Malformed data raises :class:`~offrl.errors.DatasetError` with one sentence naming the
    file, key and first bad row; actions outside the action bounds (metadata
    ``action_low``/``action_high`` or the env's space) give a :class:`DatasetWarning` with
    the count.
    """
    from offrl.data.ogbench import find as find_ogbench

    found = find_ogbench(name_or_path) if format in (None, "ogbench", "npz") else None
    if found is not None or format == "ogbench":
        from offrl.data.ogbench import load_ogbench

        if found is None:
            return load_ogbench(resolve(name_or_path), check_bounds=check_bounds)
        return load_ogbench(found[0], name=found[1], check_bounds=check_bounds)
    path = resolve(name_or_path)
    fmt = format or format_of(path)
    if fmt == "hdf5":
        from offrl.data.d4rl import load_d4rl

        return load_d4rl(path, check_bounds=check_bounds)
    if fmt == "npz":
        from offrl.data.npz import load_npz

        return load_npz(path, check_bounds=check_bounds)
    if fmt == "minari":
        from offrl.data.minari import load_minari

        return load_minari(path, check_bounds=check_bounds)
    raise DatasetError(f"unknown format '{fmt}'; choose one of {', '.join(FORMATS)}.")


def inspect_dataset(dataset, **kwargs) -> dict:
    """The dataset doctor's report (see :func:`offrl.data.doctor.inspect_dataset`)."""
    from offrl.data.doctor import inspect_dataset as _inspect

    return _inspect(dataset, **kwargs)


__all__ = [
    "Dataset", "DatasetError", "DatasetWarning", "validate_arrays", "load", "save", "register",
    "list_datasets", "resolve", "format_of", "inspect_dataset", "FORMATS",
]
