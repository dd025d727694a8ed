"""Named datasets: ``load("hopper-medium-v0")`` finds the file behind a name.

A name resolves, in order, to
1. a path to an existing ``.hdf5``/``.h5``/``.npz`` file or Minari folder;
2. a dataset bundled with offrl: ``offrl/datasets/<name>.hdf5`` (or a Minari folder ``<name>/``);
3. the cache: ``offrl_home()/datasets/<name>.hdf5`` / ``<name>.npz`` / Minari folder ``<name>/``;
4. a local Minari dataset id: ``$MINARI_DATASETS_PATH/<name>/data`` (default ``~/.minari/datasets``).

:func:`register` saves a dataset into the cache under a name; :func:`list_datasets` lists
what every location holds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from offrl.errors import DatasetError

#: datasets shipped with the package (monkeypatch in tests).
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "datasets"
FILE_SUFFIXES = (".hdf5", ".h5", ".npz")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def cache_dir() -> Path:
    """``offrl_home()/datasets``: where :func:`register` and ``offrl collect`` put datasets."""
    from offrl.envs import offrl_home

    return offrl_home() / "datasets"


def minari_root() -> Path:
    return Path(os.environ.get("MINARI_DATASETS_PATH", Path.home() / ".minari" / "datasets")).expanduser()


def _in_folder(folder: Path, name: str) -> Path | None:
    from offrl.data.minari import is_minari_folder

    for suffix in FILE_SUFFIXES:
        candidate = folder / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    if is_minari_folder(folder / name):
        return folder / name
    return None


def resolve(name_or_path) -> Path:
    """The file or folder behind a dataset name or path; a clear error listing names when missing."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        return path
    has_suffix = path.suffix.lower() in FILE_SUFFIXES
    if _NAME_RE.fullmatch(text) and not has_suffix:
        for folder in (BUNDLED_DIR, cache_dir()):
            found = _in_folder(folder, text)
            if found is not None:
                return found
    if re.search(r"-v\d+$", text) and (minari_root() / text / "data").is_dir():
        return minari_root() / text
    if has_suffix or os.sep in text:
        raise DatasetError(f"{text}: not found; pass an existing .hdf5/.npz file or Minari folder, or the name of a registered dataset.")
    names = sorted(list_datasets())
    listed = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "") if names else "none yet"
    raise DatasetError(f"unknown dataset '{text}' (available: {listed}); make one with `offrl collect dataset --env Hopper-v5 --tier medium`, register your own with offrl.data.register(ds, name), or pass a path to a .hdf5/.npz file or Minari folder.")


def list_datasets() -> dict[str, str]:
    """``{name: path}`` for every bundled and cached dataset (bundled first; the cache does not shadow it)."""
    from offrl.data.minari import is_minari_folder

    out: dict[str, str] = {}
    for folder in (BUNDLED_DIR, cache_dir()):
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_file() and entry.suffix.lower() in FILE_SUFFIXES:
                out.setdefault(entry.stem, str(entry))
            elif entry.is_dir() and is_minari_folder(entry):
                out.setdefault(entry.name, str(entry))
    return out


def register(dataset, name: str, overwrite: bool = False, format: str = "hdf5") -> Path:
    """Save ``dataset`` into the cache as ``<name>.hdf5`` (or ``.npz`` / a Minari folder) so ``load(name)`` finds it."""
    from offrl.data.writers import save

    if not _NAME_RE.fullmatch(name):
        raise DatasetError(f"dataset name '{name}' must be letters, digits, '-', '_' or '.', e.g. 'pendulum-medium-v0'.")
    if (BUNDLED_DIR / f"{name}.hdf5").exists() or (BUNDLED_DIR / name).is_dir():
        raise DatasetError(f"dataset name '{name}' is taken by a dataset bundled with offrl; choose another name.")
    target = cache_dir() / (name if format == "minari" else f"{name}.{format}")
    return save(dataset, target, format=format, overwrite=overwrite)
