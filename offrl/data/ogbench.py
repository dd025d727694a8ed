"""OGBench's dataset layout (Park et al. 2025, "OGBench: Benchmarking Offline Goal-Conditioned RL").

An OGBench file ``<env>-<type>-v0.npz`` (and its ``-val.npz``) stores one row per environment
step, the trajectories end to end:

=================  ================  ==========================================================
key                shape, dtype      meaning
=================  ================  ==========================================================
``observations``   (N, ...) float32  ``s_t``, the state before the step (uint8 images: visual-*)
``actions``        (N, k) float32    ``a_t``, in ``[-1, 1]``
``terminals``      (N,) bool         1 on the last stored row of each trajectory
``qpos, qvel``     (N, .) float32    optional: the MuJoCo state of ``s_t``
``button_states``  (N, b) int64      optional (scene, puzzle): the buttons of ``s_t``
=================  ================  ==========================================================

The successor of a trajectory's last row is not stored, so that row is no transition: the
transitions are ``(s_t, a_t, s_{t+1})`` for every row with ``terminals[t] = 0``, and such a
transition is its trajectory's last when ``terminals[t+1] = 1`` (``ogbench.load_dataset``'s
rule; a trajectory of ``L`` rows gives ``L - 1`` transitions). The two in-memory forms of
``ogbench.load_dataset`` load too when saved to a file: the *regular* form has
``next_observations`` and one row per transition, ``terminals`` marking each trajectory's last
transition; the *compact* form has ``valids`` (0 on a trajectory's stored last row) and
successors ``observations[t + 1]`` of the valid rows.

Rewards. The goal-conditioned files hold none (they load with zero rewards and a warning). The
single-task versions ``<env>-<type>-singletask[-task<N>]-v0`` that flow Q-learning (Park et al.
2025) trains on label each transition by its state ``s_t`` against task ``N``'s goal, computed
by ``ogbench.relabel_utils.relabel_dataset`` from ``qpos`` (and ``button_states``)::

    r_t    = #{subgoals satisfied in s_t} - #{subgoals}    # manipulation: each cube within 4 cm of
                                                           # its target, each button, drawer, window
    r_t    = 1[|xy(s_t) - goal| <= tol] - 1                # locomotion (maze, soccer)
    mask_t = 0 when every subgoal holds in s_t, else 1

offrl stores ``mask_t = 0`` as ``terminals`` (the target does not bootstrap: ``y = r_t``),
trajectory ends that are not terminals as ``timeouts``, the file's trajectory ends as
``infos/trajectory_ends`` and ``qpos``/``qvel``/``button_states`` as infos. The metadata's
``env_id`` is the env to evaluate in: ``cube-single-singletask-task1-v0`` for a task,
``cube-single-v0`` otherwise.

Example::

    import offrl.data as data
    ds = data.load("~/.ogbench/data/cube-single-play-v0.npz")            # found by its keys
    ds = data.load("cube-single-play-singletask-task1-v0")   # task 1's rewards; the file is
    # cube-single-play-v0.npz in $OFFRL_HOME/datasets or ~/.ogbench/data (or next to a path)
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from offrl.data.checks import atomic_output_file, check_action_bounds, require_transitions, warn
from offrl.data.dataset import Dataset
from offrl.errors import DatasetError

#: the members every OGBench file holds.
DATA_KEYS = ("observations", "actions", "terminals")
#: optional per-row simulator state (``add_info=True`` in ogbench).
INFO_KEYS = ("qpos", "qvel", "button_states")
#: where ``ogbench.download_datasets`` puts the files.
OGBENCH_DIR = "~/.ogbench/data"
#: ``np.savez_compressed`` dtypes of OGBench's own data-generation scripts.
_FILE_DTYPES = {"terminals": bool, "button_states": np.int64}


class OGBenchName(NamedTuple):
    """A dataset name split as ``ogbench.make_env_and_datasets`` splits it.

    ``cube-single-play-singletask-task1-v0`` -> file ``cube-single-play-v0``, goal-conditioned env
    ``cube-single-v0``, ``task=1``; ``task=0`` is the env's default task (``...-singletask-v0``),
    ``None`` no task. ``val``: the ``-val`` split.
    """

    file: str
    env_id: str
    task: int | None
    val: bool

    @property
    def task_env_id(self) -> str:
        """The env to evaluate in: the single-task env when a task is set, else the goal-conditioned one."""
        return self.env_id if self.task is None else singletask_env_id(self.env_id, self.task)


def singletask_env_id(env_id: str, task: int) -> str:
    """``("cube-single-v0", 2)`` -> ``"cube-single-singletask-task2-v0"``; task 0 -> ``...-singletask-v0``."""
    head, version = env_id.rsplit("-", 1)
    return f"{head}-singletask{'' if task == 0 else f'-task{task}'}-{version}"


def split_name(name: str) -> OGBenchName | None:
    """Parse an OGBench dataset name (no folder, ``.npz`` optional); ``None`` when it is not one."""
    from offrl.envs import OGBENCH_FAMILIES

    stem = name[:-4] if name.endswith(".npz") else name
    val = stem.endswith("-val")
    stem = stem[:-4] if val else stem
    parts = stem.split("-")
    if len(parts) < 3 or not re.fullmatch(r"v\d+", parts[-1]):
        return None
    family = parts[1] if parts[0] == "visual" and len(parts) > 3 else parts[0]
    if family not in OGBENCH_FAMILIES:
        return None
    if "singletask" not in parts:
        return OGBenchName(stem, "-".join(parts[:-2] + parts[-1:]), None, val)
    pos = parts.index("singletask")
    rest = parts[pos + 1:-1]
    if rest == []:
        task = 0
    elif len(rest) == 1 and re.fullmatch(r"task[1-9]\d*", rest[0]):
        task = int(rest[0][4:])
    else:
        return None
    if pos < 2:
        return None
    return OGBenchName("-".join(parts[:pos] + parts[-1:]), "-".join(parts[:pos - 1] + parts[-1:]), task, val)


def has_ogbench_keys(path) -> bool:
    """True for an ``.npz`` holding ``observations, actions, terminals``, no ``timeouts``, and
    either no ``rewards`` (OGBench's files on disk) or OGBench's ``masks`` / ``valids`` beside them
    (a saved ``load_dataset`` result). offrl's own NPZ files hold ``rewards`` and ``timeouts``, so
    one that lost its ``timeouts`` is still read, and refused, as an offrl file."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = {n[:-4] if n.endswith(".npy") else n for n in archive.namelist()}
    except (OSError, zipfile.BadZipFile):
        return False
    return (all(k in names for k in DATA_KEYS) and "timeouts" not in names
            and ("rewards" not in names or "masks" in names or "valids" in names))


def find(name_or_path) -> tuple[Path, OGBenchName | None] | None:
    """The OGBench file behind a path or name, with its parsed name; ``None`` when it is not one.

    An existing ``.npz`` with OGBench's keys is one. A single-task name whose own file does not
    exist is looked up as its goal-conditioned file next to it (a path) or, for a bare name, in
    ``offrl_home()/datasets`` then ``~/.ogbench/data``; a bare goal-conditioned name likewise.
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    parsed = split_name(path.name)
    if path.is_file():
        return (path, parsed) if path.suffix.lower() == ".npz" and has_ogbench_keys(path) else None
    if parsed is None:
        return None
    bare = os.sep not in text and not text.endswith(".npz")
    if bare:
        from offrl.data.registry import cache_dir

        folders = [cache_dir(), Path(OGBENCH_DIR).expanduser()]
    else:
        folders = [path.parent]
    file = parsed.file + ("-val" if parsed.val else "") + ".npz"
    for folder in folders:
        if (folder / file).is_file() and has_ogbench_keys(folder / file):
            return folder / file, parsed
    if parsed.task is not None:
        where = " or ".join(str(f) for f in folders)
        raise DatasetError(f"{text}: the OGBench file {file} is not in {where}; download it with "
                           f"ogbench.download_datasets(['{parsed.file}']) or make one with "
                           f"`offrl collect oracle --env {parsed.env_id}`.")
    return None


# ---------------------------------------------------------------------- reading
def load_ogbench(path, task: int | None = None, env_id: str | None = None, check_bounds: bool = True,
                 name: OGBenchName | None = None) -> Dataset:
    """Read an OGBench ``.npz`` (raw, regular or compact form) into a :class:`Dataset`.

    ``task`` (``None``: from the file's name, ``...-singletask-task<N>-v0``) labels rewards and
    terminals by that task (needs the ``ogbench`` package); ``env_id`` overrides the
    goal-conditioned env parsed from the name (``cube-single-v0``). A damaged or inconsistent
    file raises :class:`DatasetError` naming the file and key. ``name``: the parsed dataset name
    when it is not the file's own (a single-task name found by :func:`find`).
    """
    path = Path(path).expanduser()
    source = str(path)
    parsed = name or split_name(path.name)
    if task is None and parsed is not None:
        task = parsed.task
    base_env = env_id or (parsed.env_id if parsed is not None else None)
    if base_env is not None and "singletask" in base_env.split("-"):
        task_env, base_env = base_env, None
    else:
        task_env = singletask_env_id(base_env, task) if (task is not None and base_env) else None
    if task is not None and task_env is None:
        raise DatasetError(f"{source}: task {task} needs the OGBench env, but the file name is not an OGBench "
                           f"dataset name; pass env_id= (e.g. 'cube-single-v0').")
    raw = _read_members(path, source)
    arrays, ends, infos, form = _transitions(raw, source)
    n = len(arrays["observations"])
    if task_env is not None:
        rewards, masks = task_rewards(task_env, infos, source)
        how = f"OGBench single-task labels of {task_env} (ogbench.relabel_utils.relabel_dataset): r = #satisfied - #subgoals"
    elif "rewards" in arrays:
        rewards = arrays.pop("rewards")
        masks = arrays.pop("masks", np.ones(n, np.float32))
        how = "stored in the file ('rewards', 'masks')"
    else:
        rewards, masks = np.zeros(n, np.float32), np.ones(n, np.float32)
        how = "none: OGBench's goal-conditioned files hold no rewards (zeros here)"
        warn(f"{source}: an OGBench goal-conditioned file holds no rewards, so they are zero; load "
             f"'<env>-<type>-singletask-task<N>-v0' (or pass task=N) for a task's rewards.")
    arrays.pop("masks", None)
    terminals = masks == 0
    metadata = {"format": "ogbench", "ogbench_form": form, "rewards": how,
                "next_observations": "observations[t+1] within each trajectory (ogbench.load_dataset)"}
    env_for_eval = task_env or base_env
    if env_for_eval:
        metadata["env_id"] = env_for_eval
        act_dim = int(np.prod(arrays["actions"].shape[1:]))
        metadata["action_low"], metadata["action_high"] = [-1.0] * act_dim, [1.0] * act_dim
    if parsed is not None:
        metadata["ogbench_dataset"] = parsed.file + ("-val" if parsed.val else "")
    if task is not None:
        metadata["task"] = int(task)
    infos["trajectory_ends"] = ends
    ds = Dataset.from_arrays(observations=arrays["observations"], actions=arrays["actions"], rewards=rewards,
                             terminals=terminals, timeouts=ends & ~terminals,
                             next_observations=arrays["next_observations"], infos=infos,
                             metadata=metadata, source=source)
    require_transitions(len(ds), source)
    if check_bounds:
        check_action_bounds(ds)
    return ds


def _read_members(path: Path, source: str) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise DatasetError(f"{source}: file not found; pass the path to an OGBench .npz file.")
    key = "<archive>"
    out = {}
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = set(archive.files)
            for key in DATA_KEYS:
                if key not in names:
                    raise DatasetError(f"{source}: missing key '{key}'; an OGBench file holds "
                                       f"{', '.join(DATA_KEYS)} (and optionally {', '.join(INFO_KEYS)}).")
            for key in (*DATA_KEYS, *INFO_KEYS, "next_observations", "valids", "rewards", "masks"):
                if key in names:
                    out[key] = archive[key]
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{source}: key '{key}' cannot be read, the archive is probably truncated or corrupt "
                           f"({str(exc).strip()[:120] or type(exc).__name__}); download or generate it again.") from None
    n = len(out["observations"]) if out["observations"].ndim else 0
    for key, arr in out.items():
        if arr.dtype.kind not in "fiub":
            raise DatasetError(f"{source}: key '{key}' has dtype {arr.dtype}, expected numbers.")
        if arr.ndim == 0 or arr.shape[0] != n:
            rows = arr.shape[0] if arr.ndim else "no"
            raise DatasetError(f"{source}: key '{key}' has {rows} rows but 'observations' has {n}; "
                               f"every key needs one row per step.")
        if arr.dtype.kind == "f":
            finite = np.isfinite(arr).reshape(n, -1).all(axis=1)
            if not finite.all():
                raise DatasetError(f"{source}: key '{key}' has a NaN or inf value at row {int(np.flatnonzero(~finite)[0])}; "
                                   f"the file is damaged, download or generate it again.")
    for key, ndim in (("observations", 2), ("actions", 2)):
        if out[key].ndim < ndim:
            raise DatasetError(f"{source}: key '{key}' has shape {out[key].shape}; expected (N, dim).")
    for key in ("terminals", "valids", "rewards", "masks"):
        if key in out and out[key].ndim != 1:
            raise DatasetError(f"{source}: key '{key}' has shape {out[key].shape}; expected (N,), one value per row.")
    for key in ("terminals", "valids", "masks"):
        if key in out:
            bad = np.flatnonzero((out[key] != 0) & (out[key] != 1))
            if len(bad):
                raise DatasetError(f"{source}: key '{key}' must hold only 0/1, but row {bad[0]} is {out[key][bad[0]]!r}.")
            out[key] = out[key].astype(bool) if key != "masks" else out[key].astype(np.float32)
    if n == 0:
        raise DatasetError(f"{source}: key 'observations' has no rows; the file holds no steps.")
    return out


def _transitions(raw: dict, source: str):
    """``(arrays, trajectory_ends, infos, form)`` with one row per transition."""
    obs, term = raw["observations"], raw["terminals"]
    n = len(obs)
    if "next_observations" in raw:
        form = "regular"
        if raw["next_observations"].shape != obs.shape:
            raise DatasetError(f"{source}: key 'next_observations' has shape {raw['next_observations'].shape} but "
                               f"'observations' has {obs.shape}; both must hold one state per row.")
        rows, nxt, ends = np.arange(n), raw["next_observations"], term
    else:
        if "valids" in raw:
            form = "compact"
            if raw["valids"][-1]:
                raise DatasetError(f"{source}: key 'valids' is 1 on the last row, which has no successor; the file is "
                                   f"truncated, or 'valids' must be 0 on each trajectory's last stored row.")
            rows = np.flatnonzero(raw["valids"])
            ends = term[rows]
        else:
            form = "raw"
            if not term[-1]:
                raise DatasetError(f"{source}: key 'terminals' is 0 on the last row ({n - 1}), so its trajectory has no "
                                   f"end; the file is truncated, download or generate it again.")
            rows = np.flatnonzero(~term)
            ends = term[rows + 1]
        nxt = obs[rows + 1]
    arrays = {"observations": obs[rows], "actions": raw["actions"][rows], "next_observations": nxt[rows] if form == "regular" else nxt}
    arrays.update({k: raw[k][rows] for k in ("rewards", "masks") if k in raw})
    infos = {k: raw[k][rows] for k in INFO_KEYS if k in raw}
    return arrays, np.asarray(ends, bool), infos, form


def task_rewards(task_env: str, infos: dict, source: str) -> tuple[np.ndarray, np.ndarray]:
    """``(rewards, masks)`` of ``task_env`` for per-transition ``qpos`` (and ``button_states``),
    by OGBench's own ``relabel_dataset``."""
    from offrl.envs import make_env

    words = task_env.split("-")
    needs = ("qpos", "button_states") if "scene" in words else ("button_states",) if "puzzle" in words else ("qpos",)
    for key in needs:
        if key not in infos:
            raise DatasetError(f"{source}: missing key '{key}', which the rewards of {task_env} are computed from; "
                               f"use the full OGBench file, or load it without a task.")
    try:
        from ogbench.relabel_utils import relabel_dataset
    except ImportError:
        raise DatasetError(f"{source}: the rewards of {task_env} need the ogbench package; install it with "
                           f"pip install 'offrl[ogbench]'.") from None
    env = make_env(task_env)
    try:
        labelled = {k: infos[k] for k in needs}
        relabel_dataset(task_env, env, labelled)
    finally:
        env.close()
    return labelled["rewards"].astype(np.float32), labelled["masks"].astype(np.float32)


# ---------------------------------------------------------------------- writing
def save_ogbench(arrays: dict, path, overwrite: bool = False) -> Path:
    """Write step rows in OGBench's file layout (``np.savez_compressed``, OGBench's dtypes).

    ``arrays``: ``observations``, ``actions``, ``terminals`` (1 on each trajectory's last
    stored row) and optionally ``qpos``, ``qvel``, ``button_states``; nothing else is written.
    """
    path = Path(path).expanduser()
    if path.exists() and not overwrite:
        raise DatasetError(f"{path}: already exists; pass overwrite=True (--overwrite) or choose another path.")
    unknown = sorted(set(arrays) - set(DATA_KEYS) - set(INFO_KEYS))
    if unknown:
        raise DatasetError(f"{path}: key '{unknown[0]}' is not part of OGBench's layout ({', '.join(DATA_KEYS + INFO_KEYS)}).")
    members = {k: np.asarray(v, dtype=_FILE_DTYPES.get(k, np.float32)) for k, v in arrays.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output_file(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, **members)
    return path
