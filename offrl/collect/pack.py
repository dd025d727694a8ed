"""A packed zoo: the part of a behaviour-policy zoo that its D4RL-style tiers are built from.

A trained MuJoCo zoo is tens of megabytes (30 actor snapshots and the whole replay history) and
takes the better part of an hour of a small CPU to train. Its five tiers need much less: the
random, medium and expert snapshots and the replay history up to the medium snapshot
(:mod:`offrl.collect.tiers`). ``offrl collect pack --zoo ZOO --out DIR`` writes exactly that::

    DIR/
      zoo.json             the full index (every snapshot's measured returns, so the medium rule
                           picks the same snapshot) plus ``packed``: the steps kept and the replay rows
      references.json      the zoo's measured random / expert returns
      snapshots/           the random, medium and expert snapshots (msgpack + json), unchanged
      replay.hdf5          the first ``medium step`` transitions, byte-shuffle + gzip compressed

``offrl collect dataset --zoo DIR`` on the packed zoo gives the same tier arrays as on the full
one (tested), so a packed zoo can be kept under version control and the tiers rebuilt on a fresh
machine in minutes instead of retraining. The pack is written under a temporary name and renamed
when complete; an existing ``--out`` is never overwritten.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from offrl.errors import ConfigError

#: the tiers' snapshots (:func:`offrl.collect.tiers.select_snapshots`) a packed zoo keeps.
KEPT = ("random", "medium", "expert")


def pack_zoo(zoo, out) -> dict:
    """Write the packed copy of the zoo folder ``zoo`` to ``out``; returns the packed index."""
    import h5py

    from offrl.collect.tiers import select_snapshots
    from offrl.collect.train import reference_record
    from offrl.collect.zoo import REPLAY_INFO_KEYS, REPLAY_KEYS, load_zoo_index, snapshot_name, write_json

    zoo, out = Path(zoo), Path(out)
    index = load_zoo_index(zoo)
    if index.get("packed"):
        raise ConfigError(f"zoo '{zoo}' is already packed (it keeps steps {index['packed']['kept_steps']}); copy the folder instead.")
    if index.get("algorithm") == "DQN":
        raise ConfigError(f"zoo '{zoo}' is a DQN zoo; offrl collect pack packs SAC zoos (continuous actions) only.")
    if out.exists():
        raise ConfigError(f"--out {out} exists; choose a new folder (a pack never overwrites).")
    chosen = select_snapshots(index)
    steps = sorted({int(chosen[k]["step"]) for k in KEPT})
    rows = int(chosen["medium"]["step"])
    replay = zoo / "replay.hdf5"
    if not replay.exists():
        raise ConfigError(f"zoo '{zoo}' has no replay.hdf5; its medium-replay tier cannot be packed.")

    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "snapshots").mkdir(parents=True)
    for step in steps:
        for suffix in (".json", ".msgpack"):
            name = snapshot_name(step) + suffix
            if not (zoo / "snapshots" / name).exists():
                raise ConfigError(f"zoo '{zoo}' lists a snapshot at step {step} but snapshots/{name} is missing; the zoo is damaged.")
            shutil.copyfile(zoo / "snapshots" / name, tmp / "snapshots" / name)
    with h5py.File(replay, "r") as src, h5py.File(tmp / "replay.hdf5", "w") as dst:
        have = len(src["rewards"])
        if have < rows:
            raise ConfigError(f"zoo '{zoo}' replay.hdf5 holds {have} rows but its medium snapshot is at step {rows}; the zoo is damaged.")
        keys = list(REPLAY_KEYS) + [f"infos/{k}" for k in (src["infos"].keys() if "infos" in src else REPLAY_INFO_KEYS)]
        for key in keys:
            data = np.asarray(src[key][:rows])
            chunks = (min(4096, max(rows, 1)), *data.shape[1:])
            dst.create_dataset(key, data=data, chunks=chunks, compression="gzip", compression_opts=6, shuffle=True)
        for k, v in src.attrs.items():
            dst.attrs[k] = v
    packed = dict(index)
    packed["packed"] = {"from": str(zoo.name), "kept_steps": steps, "replay_rows": rows,
                        "kept": {k: int(chosen[k]["step"]) for k in KEPT},
                        "note": "the random, medium and expert snapshots and the replay up to the medium snapshot: "
                                "what offrl collect dataset needs for every tier"}
    write_json(tmp / "zoo.json", packed)
    write_json(tmp / "references.json", reference_record(zoo))
    tmp.rename(out)
    return packed


def packed_steps(index: dict) -> list[int] | None:
    """The snapshot steps a packed zoo keeps, or ``None`` for a full zoo."""
    packed = index.get("packed")
    return list(packed["kept_steps"]) if packed else None


def bytes_of(folder) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def summary(index: dict, folder) -> str:
    kept = index["packed"]["kept"]
    return (f"packed {index['env_id']} zoo: snapshots random {kept['random']}, medium {kept['medium']}, expert {kept['expert']}; "
            f"replay rows {index['packed']['replay_rows']}; {bytes_of(folder) / 1e6:.1f} MB in {folder}")
