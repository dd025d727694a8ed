"""Loaders refuse malformed data with one DatasetError naming file, key and first bad row.

Property tests feed random damage (NaNs at random rows, length mismatches, missing keys,
flag clashes, truncated or byte-corrupted files) and require a DatasetError, never another
exception type and never a silent load of changed data.
"""

import json
import tempfile
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import offrl.data as data
from data_helpers import assert_same, make_dataset
from offrl.data import Dataset
from offrl.errors import DatasetError

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE = make_dataset()
BASE_ARRAYS = {k: v for k, v in BASE.arrays().items()}
REQUIRED = ("observations", "actions", "rewards", "terminals", "timeouts")


def _write(kind, path, arrays):
    if kind == "hdf5":
        with h5py.File(path, "w") as f:
            for key, value in arrays.items():
                f.create_dataset(key, data=value)
    else:
        np.savez(path, **arrays)


def _load_expect_error(path, *fragments):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DatasetError) as info:
            data.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return message


kinds = st.sampled_from(["hdf5", "npz"])


@SETTINGS
@given(kind=kinds, key=st.sampled_from(["observations", "actions", "rewards", "next_observations", "infos/action_log_probs"]),
       row=st.integers(0, len(BASE) - 1), value=st.sampled_from([np.nan, np.inf, -np.inf]))
def test_nan_or_inf_at_a_random_row_names_key_and_row(kind, key, row, value):
    arrays = {k: v.copy() for k, v in BASE_ARRAYS.items()}
    arr = arrays[key].reshape(len(BASE), -1)
    arr[row, -1] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"d.{kind}"
        _write(kind, path, arrays)
        _load_expect_error(path, f"'{key}'", f"row {row}")


@SETTINGS
@given(kind=kinds, key=st.sampled_from(sorted(BASE_ARRAYS)), cut=st.integers(1, 10))
def test_length_mismatch_names_the_key(kind, key, cut):
    arrays = {k: v.copy() for k, v in BASE_ARRAYS.items()}
    arrays[key] = arrays[key][:-cut]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"d.{kind}"
        _write(kind, path, arrays)
        message = _load_expect_error(path)
        n = len(BASE)
        if key == "rewards":  # every other key is now the odd one out, measured against the cut rewards
            assert f"has {n} rows but 'rewards' has {n - cut};" in message, message
        else:
            assert f"'{key}' has {n - cut} rows but 'rewards' has {n};" in message, message


@SETTINGS
@given(kind=kinds, key=st.sampled_from(REQUIRED))
def test_missing_key_is_named(kind, key):
    arrays = {k: v for k, v in BASE_ARRAYS.items() if k != key}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"d.{kind}"
        _write(kind, path, arrays)
        _load_expect_error(path, f"missing key '{key}'")


@SETTINGS
@given(kind=kinds, row=st.integers(0, len(BASE) - 1))
def test_terminal_and_timeout_on_the_same_row_is_refused(kind, row):
    arrays = {k: v.copy() for k, v in BASE_ARRAYS.items()}
    arrays["terminals"][row] = True
    arrays["timeouts"][row] = True
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"d.{kind}"
        _write(kind, path, arrays)
        _load_expect_error(path, f"row {row}", "both 'terminals' and 'timeouts'")


@pytest.mark.parametrize("kind", ["hdf5", "npz"])
@pytest.mark.parametrize("key,value,fragment", [
    ("rewards", np.zeros((50, 2), np.float32), "expected (N,)"),
    ("observations", np.zeros(50, np.float32), "expected (N, dim)"),
    ("next_observations", np.zeros((50, 4), np.float32), "'next_observations' has shape"),
    ("terminals", np.full(50, 2.0, np.float32), "row 0"),
    ("actions", np.array([b"x"] * 50), "dtype"),
    ("observations", np.zeros((0, 3), np.float32), "'"),
])
def test_wrong_dtype_or_shape(tmp_path, kind, key, value, fragment):
    arrays = dict(BASE_ARRAYS)
    arrays[key] = value
    path = tmp_path / f"d.{kind}"
    _write(kind, path, arrays)
    _load_expect_error(path, fragment)


@pytest.mark.parametrize("kind", ["hdf5", "npz"])
def test_empty_dataset_is_refused(tmp_path, kind):
    arrays = {k: v[:0] for k, v in BASE_ARRAYS.items()}
    path = tmp_path / f"d.{kind}"
    _write(kind, path, arrays)
    _load_expect_error(path, "zero transitions")


def test_object_arrays_are_never_unpickled(tmp_path):
    arrays = dict(BASE_ARRAYS)
    arrays["actions"] = np.array([{"a": 1}] * 50, dtype=object)
    np.savez(tmp_path / "evil.npz", **arrays)
    _load_expect_error(tmp_path / "evil.npz", "'actions'")


# ---------------------------------------------------------------------- damaged files
@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("written")
    out = {kind: (data.save(BASE, root / f"good.{kind}").read_bytes()) for kind in ("hdf5", "npz")}
    folder = data.save(BASE, root / "good-v0")
    out["minari"] = (folder / "data" / "main_data.hdf5").read_bytes()
    out["minari-metadata"] = (folder / "data" / "metadata.json").read_bytes()
    return out


def _damaged_path(tmp, kind, raw, written):
    """Write ``raw`` where the loader of ``kind`` reads it; return the path to load."""
    if kind == "minari":
        (Path(tmp) / "c-v0" / "data").mkdir(parents=True)
        (Path(tmp) / "c-v0" / "data" / "metadata.json").write_bytes(written["minari-metadata"])
        (Path(tmp) / "c-v0" / "data" / "main_data.hdf5").write_bytes(raw)
        return Path(tmp) / "c-v0"
    path = Path(tmp) / f"c.{kind}"
    path.write_bytes(raw)
    return path


all_kinds = st.sampled_from(["hdf5", "npz", "minari"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=all_kinds, cut=st.floats(0.0, 0.999))
def test_truncated_files_fail_cleanly(written, kind, cut):
    raw = written[kind]
    with tempfile.TemporaryDirectory() as tmp:
        path = _damaged_path(tmp, kind, raw[: int(cut * len(raw))], written)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(DatasetError) as info:
                data.load(path)
        assert str(path) in str(info.value) and "\n" not in str(info.value)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=all_kinds, edits=st.lists(st.tuples(st.floats(0.0, 0.9999), st.integers(0, 255)), min_size=1, max_size=8))
def test_corrupted_bytes_either_fail_cleanly_or_load_the_original(written, kind, edits):
    raw = bytearray(written[kind])
    for where, byte in edits:
        raw[int(where * len(raw))] = byte
    with tempfile.TemporaryDirectory() as tmp:
        path = _damaged_path(tmp, kind, bytes(raw), written)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loaded = data.load(path)
        except DatasetError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            return
        assert_same(BASE, loaded)  # the damage hit bytes that do not matter: never a silently changed load


def test_not_an_hdf5_file(tmp_path):
    path = tmp_path / "text.hdf5"
    path.write_text("observations,actions\n1,2\n")
    _load_expect_error(path, "not a readable HDF5 file")


# ---------------------------------------------------------------------- Minari folders
def test_minari_folder_without_metadata(tmp_path):
    (tmp_path / "ds-v0" / "data").mkdir(parents=True)
    (tmp_path / "ds-v0" / "data" / "main_data.hdf5").write_bytes(b"")
    with pytest.raises(DatasetError, match="no data/metadata.json"):
        data.load(tmp_path / "ds-v0", format="minari")


def _minari_copy(tmp_path):
    folder = data.save(BASE, tmp_path / "m-v0")
    return folder, folder / "data" / "main_data.hdf5"


def test_minari_zero_length_episode(tmp_path):
    folder, main = _minari_copy(tmp_path)
    with h5py.File(main, "a") as f:
        g = f["episode_1"]
        for key in ("actions", "rewards", "terminations", "truncations"):
            del g[key]
        obs = g["observations"][:1]
        del g["observations"]
        g["observations"] = obs
        g["actions"] = np.zeros((0, 2), np.float32)
        g["rewards"] = np.zeros(0, np.float32)
        g["terminations"] = np.zeros(0, bool)
        g["truncations"] = np.zeros(0, bool)
    with pytest.raises(DatasetError, match="episode 'episode_1' has zero steps"):
        data.load(folder)


def test_minari_observation_rows_must_be_steps_plus_one(tmp_path):
    folder, main = _minari_copy(tmp_path)
    with h5py.File(main, "a") as f:
        obs = f["episode_2/observations"][:-1]
        del f["episode_2/observations"]
        f["episode_2/observations"] = obs
    with pytest.raises(DatasetError, match="'episode_2/observations' has 15 rows but 'episode_2/actions' has 15"):
        data.load(folder)


def test_minari_edited_after_writing_is_detected(tmp_path):
    folder, main = _minari_copy(tmp_path)
    with h5py.File(main, "a") as f:
        f["episode_0/rewards"][3] = 99.0
    with pytest.raises(DatasetError, match="key 'rewards' does not match the checksum"):
        data.load(folder)


def test_minari_total_episodes_mismatch(tmp_path):
    folder, _ = _minari_copy(tmp_path)
    meta_path = folder / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["total_episodes"] = 5
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="total_episodes is 5 but main_data.hdf5 holds 3"):
        data.load(folder)


def test_minari_both_flags_become_a_terminal_with_a_warning(tmp_path):
    folder, main = _minari_copy(tmp_path)
    meta_path = folder / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    del meta["offrl_sha256"]
    meta_path.write_text(json.dumps(meta))
    with h5py.File(main, "a") as f:
        f["episode_0/terminations"][-1] = True  # the last step already has truncations=True
    with pytest.warns(data.DatasetWarning, match="1 steps are both terminated and truncated"):
        ds = data.load(folder)
    assert ds.terminals[19] and not ds.timeouts[19]


def test_from_arrays_refuses_ragged_and_text():
    with pytest.raises(DatasetError, match="'observations'"):
        Dataset.from_arrays([[1, 2], [3]], np.zeros((2, 1)), np.zeros(2), np.zeros(2))
    with pytest.raises(DatasetError, match="'rewards' has dtype"):
        Dataset.from_arrays(np.zeros((2, 1)), np.zeros((2, 1)), np.array(["a", "b"]), np.zeros(2))


def test_minari_main_file_passed_directly_gets_a_hint(tmp_path):
    folder, main = _minari_copy(tmp_path)
    with pytest.raises(DatasetError, match="pass its dataset folder"):
        data.load(main)
