"""200 damaged checkpoints (like tests/data's dataset fuzz), half in a folder that also keeps an
intact earlier checkpoint (so resume can fall back) and half with the latest one only: every one is refused in one
sentence naming a file of the run, or loads exactly the state that was saved. Never a msgpack
traceback, never a silently different agent.

The damage, drawn from a fixed seed so the tallies are reproducible:

* ``flip``: 1-8 bytes of the .msgpack set to random values (checksum left as written);
* ``truncate``: the .msgpack cut at a random length, 0 included;
* ``drop_key``/``rename_key``/``reshape``: the state re-serialised with a key removed or renamed,
  or a leaf given another shape, *with a matching checksum* (a file another version or config
  wrote: only the structure check can catch it), and the same without a new checksum;
* ``checksum``: the .sha256 file's bytes flipped or cut;
* ``latest``: latest.json's bytes flipped or cut (a valid earlier checkpoint exists);
* ``legacy``: no checksum at all (written before checksums), truncated or with a key removed.
  Flipped bytes in such a file cannot be detected and are not part of the fuzz.
"""

import collections
import hashlib
import json
import shutil
import warnings

import numpy as np
from conftest import tiny_state, trees_equal
from flax import serialization

from offrl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from offrl.errors import CheckpointError

PLAN = [("flip", 50), ("truncate", 36), ("drop_key", 18), ("rename_key", 10), ("reshape", 12),
        ("drop_key_no_checksum", 14), ("checksum", 20), ("latest", 20), ("legacy", 20)]


def _paths(tree, prefix=()):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))


def _edit(state: dict, rng, how: str) -> dict:
    state = serialization.msgpack_restore(serialization.msgpack_serialize(state))
    paths = list(_paths(state))
    path = paths[rng.integers(len(paths))]
    parent = state
    for k in path[:-1]:
        parent = parent[k]
    if how == "rename_key":
        parent[path[-1] + "_x"] = parent.pop(path[-1])
    elif how == "reshape":
        leaves = [p for p in paths if isinstance(_get(state, p), np.ndarray)]
        leaf = leaves[rng.integers(len(leaves))]
        holder = _get(state, leaf[:-1])
        holder[leaf[-1]] = np.zeros(np.asarray(holder[leaf[-1]]).size + 1, holder[leaf[-1]].dtype)
    else:
        del parent[path[-1]]
    return state


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _damage(folder, kind: str, rng) -> None:
    ckpt = folder / "step_20.msgpack"
    sidecar = folder / "step_20.msgpack.sha256"
    raw = bytearray(ckpt.read_bytes())
    if kind == "flip":
        for _ in range(rng.integers(1, 9)):
            raw[rng.integers(len(raw))] = rng.integers(256)
        ckpt.write_bytes(bytes(raw))
    elif kind == "truncate":
        ckpt.write_bytes(bytes(raw[: rng.integers(len(raw))]))
    elif kind in ("drop_key", "rename_key", "reshape", "drop_key_no_checksum"):
        state = serialization.msgpack_restore(bytes(raw))
        data = serialization.msgpack_serialize(_edit(state, rng, kind.replace("_no_checksum", "")))
        ckpt.write_bytes(data)
        if kind != "drop_key_no_checksum":
            digest = hashlib.sha256(data).hexdigest()
            sidecar.write_text(f"{digest}  step_20.msgpack\n")
            record = json.loads((folder / "latest.json").read_text())
            (folder / "latest.json").write_text(json.dumps({**record, "sha256": digest}))
    elif kind in ("checksum", "latest"):
        target = sidecar if kind == "checksum" else folder / "latest.json"
        text = bytearray(target.read_bytes())
        if rng.random() < 0.5:
            target.write_bytes(bytes(text[: rng.integers(len(text))]))
        else:
            for _ in range(rng.integers(1, 4)):
                text[rng.integers(len(text))] = rng.integers(256)
            target.write_bytes(bytes(text))
    elif kind == "legacy":
        sidecar.unlink()
        record = json.loads((folder / "latest.json").read_text())
        record.pop("sha256")
        (folder / "latest.json").write_text(json.dumps(record))
        if rng.random() < 0.5:
            ckpt.write_bytes(bytes(raw[: rng.integers(len(raw))]))
        else:
            ckpt.write_bytes(serialization.msgpack_serialize(_edit(serialization.msgpack_restore(bytes(raw)), rng, "drop_key")))


def test_two_hundred_damaged_checkpoints_are_refused_in_one_line_or_load_identical(tmp_path):
    rng = np.random.default_rng(2024)
    # even cases: steps 10 and 20 kept (--keep-checkpoints); odd cases: step 20 only (the default)
    pristine = [tmp_path / "pristine_two", tmp_path / "pristine_one"]
    save_checkpoint(pristine[0], tiny_state(10), 10, keep=0)
    save_checkpoint(pristine[0], tiny_state(20), 20, keep=0)
    save_checkpoint(pristine[1], tiny_state(20), 20)
    saved = {10: tiny_state(10), 20: tiny_state(20)}
    tallies = collections.Counter()
    for kind, count in PLAN:
        for i in range(count):
            folder = tmp_path / f"{kind}_{i}"
            shutil.copytree(pristine[i % 2], folder)
            _damage(folder, kind, rng)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    record = latest_checkpoint(folder)
                    loaded = load_checkpoint(record["path"], tiny_state(99))
            except CheckpointError as exc:
                text = str(exc)
                assert "\n" not in text and str(folder) in text, (kind, i, text)
                tallies[kind, "refused"] += 1
                continue
            assert trees_equal(loaded, saved[record["step"]]), (kind, i, record)
            tallies[kind, "fallback to step 10" if record["step"] == 10 else "loaded identical"] += 1
            shutil.rmtree(folder)
    assert sum(tallies.values()) == 200
    print("\ncheckpoint fuzz tallies:", dict(sorted(tallies.items())))
    # the damage that the checksum or the structure check must catch was never loaded as step 20
    for kind in ("truncate", "drop_key", "rename_key", "reshape", "drop_key_no_checksum"):
        assert tallies[kind, "loaded identical"] == 0, kind
    assert tallies["flip", "refused"] + tallies["flip", "fallback to step 10"] >= 45
    assert tallies["flip", "refused"] >= 20 and tallies["flip", "fallback to step 10"] >= 20  # a byte may be set to itself
