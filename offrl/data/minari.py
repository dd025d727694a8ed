"""Minari dataset folders (the on-disk format of the ``minari`` package, version 0.5).

Layout: ``<folder>/data/metadata.json`` and ``<folder>/data/main_data.hdf5`` with one group
``episode_<i>`` per episode holding ``observations`` (T+1 rows: the reset observation, then
one per step), ``actions``, ``rewards``, ``terminations``, ``truncations`` (T rows) and an
optional ``infos`` group. ``metadata.json`` holds ``dataset_id`` (``[namespace/]name-vN``),
``minari_version``, ``data_format`` ("hdf5"), ``total_episodes``, ``total_steps``, the
spaces serialised as minari does (a JSON string such as
``{"type": "Box", "dtype": "float32", "shape": [3], "low": [...], "high": [...]}``), the
Gymnasium ``env_spec`` JSON when the env is registered, and optional
``ref_min_score``/``ref_max_score``.

Mapping to offrl: within an episode ``s'_t = observations[t+1]``; ``terminations`` are
offrl terminals and ``truncations`` timeouts. A step that is both terminated and truncated
(legal in Gymnasium) is a terminal (the MDP ended; no bootstrap) and triggers a warning; an
episode that ends with neither flag (collection stopped) ends with a timeout. Infos with
T+1 rows (minari's DataCollector stores the reset info first) keep rows 1..T, the info
returned by each step. offrl's own metadata travels in ``metadata.json["offrl_metadata"]``.

Example::

    from offrl.data.minari import load_minari, save_minari
    save_minari(ds, "~/.minari/datasets/offrl/pendulum-random-v0", dataset_id="offrl/pendulum-random-v0")
    ds2 = load_minari("~/.minari/datasets/offrl/pendulum-random-v0")
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from offrl.data.checks import (DIGEST_KEY, canonical, check_action_bounds, content_digest, honour_umask,
                               prepare_output, replace_atomically, require_transitions,
                               verify_digest, warn)
from offrl.data.dataset import Dataset
from offrl.errors import DatasetError

MAIN_FILE = "main_data.hdf5"
METADATA_FILE = "metadata.json"
#: the minari release whose on-disk format offrl writes (it must be in minari's supported list).
MINARI_FORMAT_VERSION = "0.5.4"
_DATASET_ID_RE = re.compile(r"^(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+$")


def data_dir(path) -> Path:
    """``<folder>/data`` for a Minari dataset folder (or ``path`` itself if it is the data folder)."""
    path = Path(path).expanduser()
    if (path / METADATA_FILE).exists() or (path / MAIN_FILE).exists():
        return path
    return path / "data"


def is_minari_folder(path) -> bool:
    path = Path(path).expanduser()
    return path.is_dir() and ((data_dir(path) / METADATA_FILE).exists() or (data_dir(path) / MAIN_FILE).exists())


def load_minari(path, check_bounds: bool = True) -> Dataset:
    """Read a Minari dataset folder into a :class:`Dataset` (Box observation/action spaces)."""
    import h5py

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise DatasetError(f"{folder}: folder not found; pass a Minari dataset folder containing data/metadata.json.")
    ddir = data_dir(folder)
    meta_path = ddir / METADATA_FILE
    main_path = ddir / MAIN_FILE
    if not meta_path.exists():
        raise DatasetError(f"{folder}: not a Minari dataset, there is no data/{METADATA_FILE}; point to the folder minari created (it contains data/metadata.json and data/{MAIN_FILE}).")
    try:
        meta = json.loads(meta_path.read_text())
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        raise DatasetError(f"{meta_path}: not valid JSON ({str(exc)[:120]}); restore the file or re-create the dataset.") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"{meta_path}: expected a JSON object; restore the file or re-create the dataset.")
    fmt = meta.get("data_format", "hdf5")
    if fmt != "hdf5":
        raise DatasetError(f"{meta_path}: data_format is '{fmt}', offrl reads only minari's 'hdf5' format; convert it with minari first.")
    if not main_path.exists():
        raise DatasetError(f"{folder}: missing data/{MAIN_FILE}; the Minari dataset is incomplete, re-create it.")
    source = str(main_path)
    action_space = _parse_space(meta.get("action_space"), "action_space", meta_path)
    try:
        f = h5py.File(main_path, "r")
    except Exception as exc:
        raise DatasetError(f"{source}: not a readable HDF5 file, probably truncated or corrupt ({_short(exc)}); re-create the dataset.") from None
    key = "<root>"
    episodes = []
    try:
        with f:
            names = [n for n in f.keys() if re.fullmatch(r"episode_\d+", n)]
            names.sort(key=lambda n: int(n.split("_")[1]))
            expected = meta.get("total_episodes")
            if isinstance(expected, int) and expected != len(names):
                raise DatasetError(f"{meta_path}: total_episodes is {expected} but {MAIN_FILE} holds {len(names)} episode groups; the dataset is incomplete, re-create it.")
            for name in names:
                key = name
                episodes.append(_read_episode(f[name], name, source))
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{source}: key '{key}' cannot be read, the file is probably truncated or corrupt ({_short(exc)}); re-create the dataset.") from None
    if not episodes:
        raise DatasetError(f"{source}: the Minari dataset holds no episodes; an offline dataset needs at least one logged step.")
    ds = _assemble(episodes, meta, action_space, source)
    _warn_missing_metadata(meta, meta_path)
    require_transitions(len(ds), source)
    verify_digest(ds, meta.get(DIGEST_KEY), source)
    if check_bounds:
        check_action_bounds(ds)
    return ds


def save_minari(ds: Dataset, path, dataset_id: str | None = None, overwrite: bool = False) -> Path:
    """Write ``ds`` as a Minari dataset folder that ``minari.load_dataset`` can open.

    ``dataset_id`` defaults to the folder name (``-v0`` appended if it has no version). For
    ``minari.load_dataset(dataset_id)`` to find it, the folder must be
    ``$MINARI_DATASETS_PATH/<dataset_id>``. Every episode must be contiguous
    (``next_observations[t] == observations[t+1]`` inside it), because Minari stores one
    observation sequence per episode.
    """
    import h5py

    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise DatasetError(f"{folder}: exists and is not a folder; a Minari dataset is a folder, choose another path.")
    if folder.exists() and any(folder.iterdir()) and not is_minari_folder(folder):
        raise DatasetError(f"{folder}: exists and is not a Minari dataset folder; choose an empty or new folder.")
    prepare_output(folder, ds, overwrite or (folder.exists() and not any(folder.iterdir())))
    ds = canonical(ds)
    require_transitions(len(ds), str(folder))
    if dataset_id is None:
        dataset_id = folder.name if re.search(r"-v\d+$", folder.name) else f"{folder.name}-v0"
    if not _DATASET_ID_RE.fullmatch(dataset_id):
        raise DatasetError(f"{folder}: dataset_id '{dataset_id}' is not a Minari id; use '[namespace/]name-v<N>', e.g. 'offrl/pendulum-random-v0'.")
    starts, ends = ds.episode_bounds()
    jumps = np.flatnonzero(np.any((ds.next_observations[:-1] != ds.observations[1:]).reshape(len(ds) - 1, -1), axis=1)) if len(ds) > 1 else np.zeros(0, int)
    inside = jumps[~np.isin(jumps + 1, starts)]
    if len(inside):
        raise DatasetError(f"{folder}: row {inside[0]}'s next_observations differ from row {inside[0] + 1}'s observations inside one episode, which Minari cannot store; mark row {inside[0]} as a timeout or save as .hdf5 instead.")

    obs_space, act_space = _spaces_for(ds)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    honour_umask(tmp, directory=True)  # mkdtemp makes it 0700
    try:
        (tmp / "data").mkdir()
        with h5py.File(tmp / "data" / MAIN_FILE, "w", track_order=True) as f:
            for k, (s, e) in enumerate(zip(starts, ends)):
                g = f.create_group(f"episode_{k}")
                g.attrs["id"] = k
                g.attrs["total_steps"] = int(e - s)
                obs = np.concatenate([ds.observations[s:e], ds.next_observations[e - 1:e]])
                g.create_dataset("observations", data=obs, chunks=True, maxshape=(None, *obs.shape[1:]))
                g.create_dataset("actions", data=ds.actions[s:e], chunks=True, maxshape=(None, *ds.actions.shape[1:]))
                g.create_dataset("rewards", data=ds.rewards[s:e], chunks=True, maxshape=(None,))
                g.create_dataset("terminations", data=ds.terminals[s:e], chunks=True, maxshape=(None,))
                g.create_dataset("truncations", data=ds.timeouts[s:e], chunks=True, maxshape=(None,))
                infos = g.create_group("infos")
                for name, arr in ds.infos.items():
                    infos.create_dataset(name, data=arr[s:e], chunks=True, maxshape=(None, *arr.shape[1:]))
        meta = {
            "total_episodes": int(len(starts)),
            "total_steps": int(len(ds)),
            "data_format": "hdf5",
            "jpeg_encoding": False,
            "observation_space": json.dumps(obs_space),
            "action_space": json.dumps(act_space),
            "dataset_id": dataset_id,
            "minari_version": MINARI_FORMAT_VERSION,
            "algorithm_name": str(ds.metadata.get("generator", ds.metadata.get("algorithm", "offrl"))),
            "offrl_metadata": ds.metadata,
            DIGEST_KEY: content_digest(ds),
        }
        env_spec = _env_spec_json(ds.metadata.get("env_id"))
        if env_spec is not None:
            meta["env_spec"] = env_spec
        md = ds.metadata
        if "ref_min_score" in md and "ref_max_score" in md:
            meta["ref_min_score"], meta["ref_max_score"] = float(md["ref_min_score"]), float(md["ref_max_score"])
        meta["dataset_size"] = round(sum(p.stat().st_size for p in (tmp / "data").iterdir()) / 1e6, 1)
        (tmp / "data" / METADATA_FILE).write_text(json.dumps(meta))
        folder.parent.mkdir(parents=True, exist_ok=True)
        if folder.exists() and not any(folder.iterdir()):
            folder.rmdir()
        replace_atomically(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


# ---------------------------------------------------------------------- reading helpers
def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def _parse_space(raw, name: str, meta_path: Path):
    if raw is None:
        return None
    try:
        space = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise DatasetError(f"{meta_path}: '{name}' is not valid JSON; restore the file.") from None
    if not isinstance(space, dict) or "type" not in space:
        raise DatasetError(f"{meta_path}: '{name}' is not a serialised space; restore the file.")
    if space["type"] != "Box":
        raise DatasetError(f"{meta_path}: {name} is a {space['type']} space; offrl handles continuous Box spaces only, flatten it first (e.g. gymnasium's FlattenObservation).")
    return space


def _read_episode(group, name: str, source: str) -> dict:
    import h5py

    out = {}
    for key in ("observations", "actions", "rewards", "terminations", "truncations"):
        if key not in group:
            raise DatasetError(f"{source}: missing key '{name}/{key}'; every Minari episode needs observations, actions, rewards, terminations and truncations.")
        obj = group[key]
        if not isinstance(obj, h5py.Dataset):
            raise DatasetError(f"{source}: key '{name}/{key}' is a group (a Dict or Tuple space); offrl handles flat Box spaces only, flatten it first.")
        if obj.dtype.kind not in "fiub":
            raise DatasetError(f"{source}: key '{name}/{key}' has dtype {obj.dtype}, expected numbers (JPEG-encoded or text spaces are not supported).")
        out[key] = obj[()]
    t = len(out["actions"])
    if t == 0:
        raise DatasetError(f"{source}: episode '{name}' has zero steps; drop it from the dataset.")
    if out["observations"].ndim == 0 or len(out["observations"]) != t + 1:
        raise DatasetError(f"{source}: key '{name}/observations' has {len(np.atleast_1d(out['observations']))} rows but '{name}/actions' has {t}; Minari episodes need T+1 observations for T steps.")
    for key in ("rewards", "terminations", "truncations"):
        if out[key].ndim != 1 or len(out[key]) != t:
            raise DatasetError(f"{source}: key '{name}/{key}' has shape {out[key].shape} but '{name}/actions' has {t} rows; expected ({t},).")
    infos = {}
    if "infos" in group and isinstance(group["infos"], h5py.Group):
        for key, obj in _walk(group["infos"]):
            if obj.dtype.kind not in "fiub" or obj.ndim == 0:
                continue  # strings and scalars cannot become per-transition arrays
            arr = obj[()]
            if len(arr) == t + 1:
                arr = arr[1:]
            if len(arr) == t:
                infos[key] = arr
    out["infos"] = infos
    return out


def _walk(group, prefix=""):
    import h5py

    for name in group:
        obj = group[name]
        if isinstance(obj, h5py.Group):
            yield from _walk(obj, f"{prefix}{name}/")
        else:
            yield f"{prefix}{name}", obj


def _assemble(episodes: list[dict], meta: dict, action_space: dict | None, source: str) -> Dataset:
    n_both = 0
    terms, touts = [], []
    for ep in episodes:
        term = _flag(ep["terminations"], "terminations", source)
        tout = _flag(ep["truncations"], "truncations", source)
        both = term & tout
        n_both += int(both.sum())
        tout = tout & ~term
        if not (term[-1] or tout[-1]):
            tout = tout.copy()
            tout[-1] = True
        terms.append(term)
        touts.append(tout)
    common = set.intersection(*(set(ep["infos"]) for ep in episodes))
    infos = {}
    for k in sorted(common):
        try:
            infos[k] = np.concatenate([ep["infos"][k] for ep in episodes])
        except ValueError:
            continue  # per-episode shapes differ: not a per-transition array
    if "offrl_metadata" in meta and isinstance(meta["offrl_metadata"], dict):
        metadata = dict(meta["offrl_metadata"])
    else:
        metadata = _metadata_from_minari(meta, action_space)
    if n_both:
        warn(f"{source}: {n_both} steps are both terminated and truncated; offrl treats them as terminals (the MDP ended, no bootstrap), as Gymnasium defines.")
    try:
        return Dataset.from_arrays(
            observations=np.concatenate([ep["observations"][:-1] for ep in episodes]),
            actions=np.concatenate([ep["actions"] for ep in episodes]),
            rewards=np.concatenate([ep["rewards"] for ep in episodes]),
            terminals=np.concatenate(terms), timeouts=np.concatenate(touts),
            next_observations=np.concatenate([ep["observations"][1:] for ep in episodes]),
            infos=infos, metadata=metadata, source=source)
    except ValueError as exc:  # episodes with different observation shapes
        raise DatasetError(f"{source}: episodes have different observation or action shapes ({_short(exc)}); every episode must use the same spaces.") from None


def _flag(arr: np.ndarray, key: str, source: str) -> np.ndarray:
    if arr.dtype != bool:
        bad = np.flatnonzero((arr != 0) & (arr != 1))
        if len(bad):
            raise DatasetError(f"{source}: key '{key}' must hold only 0/1, but step {bad[0]} holds {arr[bad[0]]!r}.")
    return arr.astype(bool)


def _warn_missing_metadata(meta: dict, meta_path: Path) -> None:
    """One :class:`~offrl.data.checks.DatasetWarning` listing what a foreign ``metadata.json``
    (e.g. ``{}``) lacks of the env, the spaces and the reference returns."""
    if isinstance(meta.get("offrl_metadata"), dict):
        return
    missing = []
    spec = meta.get("env_spec")
    try:
        has_env = isinstance(spec, str) and bool(json.loads(spec).get("id"))
    except (ValueError, AttributeError):
        has_env = False
    if not has_env:
        missing.append("the env (env_spec)")
    missing += [f"the {key}" for key in ("observation_space", "action_space") if not meta.get(key)]
    if meta.get("ref_min_score") is None or meta.get("ref_max_score") is None:
        missing.append("the reference returns (ref_min_score, ref_max_score)")
    if missing:
        warn(f"{meta_path} has no {', '.join(missing)}: offrl cannot check the data against an env, bound the actions "
             "by the space or normalise scores; pass --env where a command takes it, or re-create the dataset with minari.")


def _metadata_from_minari(meta: dict, action_space: dict | None) -> dict:
    out = {"minari_dataset_id": meta.get("dataset_id"), "generator": "minari " + str(meta.get("minari_version", "?"))}
    spec = meta.get("env_spec")
    if isinstance(spec, str):
        try:
            out["env_id"] = json.loads(spec).get("id")
        except (ValueError, AttributeError):
            pass
    for key in ("ref_min_score", "ref_max_score", "algorithm_name", "description"):
        if meta.get(key) is not None:
            out[key] = meta[key]
    if action_space is not None:
        out["action_low"] = action_space.get("low")
        out["action_high"] = action_space.get("high")
    return {k: v for k, v in out.items() if v is not None}


# ---------------------------------------------------------------------- writing helpers
def _box(low, high, shape, dtype="float32") -> dict:
    low = np.broadcast_to(np.asarray(low, dtype=np.float64), shape)
    high = np.broadcast_to(np.asarray(high, dtype=np.float64), shape)
    return {"type": "Box", "dtype": dtype, "shape": list(shape), "low": low.tolist(), "high": high.tolist()}


def _spaces_for(ds: Dataset) -> tuple[dict, dict]:
    """Observation and action Box spaces as minari serialises them (unbounded observations)."""
    from offrl.data.checks import action_bounds

    obs_shape = ds.observations.shape[1:]
    obs_space = _box(-np.inf, np.inf, obs_shape)
    bounds = action_bounds(ds)
    if bounds is None:
        act_space = _box(-np.inf, np.inf, ds.actions.shape[1:])
    else:
        act_space = _box(bounds[0], bounds[1], ds.actions.shape[1:])
    env_id = ds.metadata.get("env_id")
    if env_id:
        try:
            import gymnasium as gym

            if env_id in gym.registry:
                env = gym.make(env_id)
                space = env.observation_space
                env.close()
                if isinstance(space, gym.spaces.Box) and space.shape == obs_shape:
                    obs_space = _box(space.low, space.high, obs_shape)
        except Exception:
            pass
    return obs_space, act_space


def _env_spec_json(env_id) -> str | None:
    if not env_id:
        return None
    try:
        import gymnasium as gym

        if env_id not in gym.registry:
            return None
        return gym.spec(env_id).to_json()
    except Exception:
        return None


__all__ = ["load_minari", "save_minari", "is_minari_folder", "data_dir", "MINARI_FORMAT_VERSION"]
