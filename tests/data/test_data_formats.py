"""Round trips through every format, overwrite protection, and D4RL next_observations derivation."""

import json
import warnings

import h5py
import numpy as np
import pytest

import offrl.data as data
from data_helpers import assert_same, make_dataset
from offrl.data import Dataset, DatasetWarning
from offrl.errors import DatasetError


@pytest.mark.parametrize("name", ["d.hdf5", "d.h5", "d.npz", "folder-v0"])
def test_round_trip_is_exact(tmp_path, small_dataset, name):
    path = data.save(small_dataset, tmp_path / name)
    loaded = data.load(path)
    assert_same(small_dataset, loaded)
    assert loaded.num_episodes == 3
    np.testing.assert_array_equal(loaded.episode_lengths(), [20, 15, 15])
    # terminals and timeouts survive separately: episode 1 ends by terminal, the others by timeout
    starts, ends = loaded.episode_bounds()
    assert loaded.terminals[ends - 1].tolist() == [False, True, False]
    assert loaded.timeouts[ends - 1].tolist() == [True, False, True]


def test_compressed_hdf5_round_trips_exactly_and_is_gzip_filtered(tmp_path):
    ds = data.load("pendulum-medium-v0")  # bundled, 10,000 rows
    plain = data.save(ds, tmp_path / "plain.hdf5")
    packed = data.save(ds, tmp_path / "packed.hdf5", compress=True)
    assert_same(ds, data.load(packed))
    with h5py.File(packed, "r") as f:
        assert f["observations"].compression == "gzip" and f["observations"].shuffle
    with h5py.File(plain, "r") as f:
        assert f["observations"].compression is None
    assert packed.stat().st_size < plain.stat().st_size


def test_round_trip_through_all_formats_in_a_chain(tmp_path, small_dataset):
    a = data.load(data.save(small_dataset, tmp_path / "a.hdf5"))
    b = data.load(data.save(a, tmp_path / "b.npz"))
    c = data.load(data.save(b, tmp_path / "c-v1"))
    d = data.load(data.save(c, tmp_path / "d.hdf5"))
    assert_same(small_dataset, d)


def test_float64_input_is_stored_as_float32_and_reloads_identically(tmp_path):
    ds = make_dataset()
    wide = Dataset(ds.observations.astype(np.float64), ds.actions, ds.rewards.astype(np.float64),
                   ds.terminals, ds.timeouts, ds.next_observations.astype(np.float64), {}, {"env_id": "x"})
    loaded = data.load(data.save(wide, tmp_path / "w.hdf5"))
    assert loaded.observations.dtype == np.float32
    np.testing.assert_array_equal(loaded.observations, ds.observations)


def test_save_never_overwrites_without_permission(tmp_path, small_dataset):
    path = data.save(small_dataset, tmp_path / "d.hdf5")
    before = path.read_bytes()
    with pytest.raises(DatasetError, match="already exists"):
        data.save(make_dataset(seed=1), path)
    assert path.read_bytes() == before
    data.save(make_dataset(seed=1), path, overwrite=True)
    assert_same(make_dataset(seed=1), data.load(path))


@pytest.mark.parametrize("name", ["in.hdf5", "in.npz", "in-v0"])
def test_save_never_writes_over_its_input(tmp_path, small_dataset, name):
    path = data.save(small_dataset, tmp_path / name)
    loaded = data.load(path)
    with pytest.raises(DatasetError, match="loaded from"):
        data.save(loaded, path, overwrite=True)
    assert_same(small_dataset, data.load(path))


def test_save_refuses_to_replace_a_folder_that_is_not_a_dataset(tmp_path, small_dataset):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(DatasetError, match="not a Minari dataset folder"):
        data.save(small_dataset, tmp_path / "notes", overwrite=True)
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"


def test_hdf5_layout_is_d4rl(tmp_path, small_dataset):
    path = data.save(small_dataset, tmp_path / "d.hdf5")
    with h5py.File(path, "r") as f:
        for key in ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations"):
            assert key in f
        assert f["terminals"].dtype == bool and f["rewards"].shape == (50,)
        assert f["infos/action_log_probs"].shape == (50,)
        assert f["metadata/env_id"][()].decode() == "Pendulum-v1"
        assert f["metadata/seed"][()] == 7
        assert json.loads(f["metadata/policy"][()]) == {"hidden": [64, 64], "name": "sac"}


def _write_raw_hdf5(path, arrays, metadata=None):
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)
        for key, value in (metadata or {}).items():
            f.create_dataset(f"metadata/{key}", data=value)


def test_d4rl_file_without_next_observations_derives_them_and_says_so(tmp_path):
    # two episodes: rows 0-2 end by timeout at row 2, rows 3-5 end by terminal at row 5
    obs = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)
    arrays = dict(observations=obs, actions=np.zeros((6, 1), np.float32), rewards=np.arange(6, dtype=np.float32),
                  terminals=np.array([0, 0, 0, 0, 0, 1], bool), timeouts=np.array([0, 0, 1, 0, 0, 0], bool))
    _write_raw_hdf5(tmp_path / "old.hdf5", arrays, {"algorithm": "SAC", "iteration": 3})
    with pytest.warns(DatasetWarning, match="derived within episodes.*1 timeout steps"):
        ds = data.load(tmp_path / "old.hdf5")
    # the timeout row 2 has no logged successor and is dropped (D4RL's qlearning_dataset rule)
    np.testing.assert_array_equal(ds.rewards, [0, 1, 3, 4, 5])
    np.testing.assert_array_equal(ds.next_observations[:2], obs[1:3])
    np.testing.assert_array_equal(ds.next_observations[2:4], obs[4:6])
    assert ds.timeouts.tolist() == [False, True, False, False, False]   # row 1 now closes episode 0
    assert ds.terminals.tolist() == [False, False, False, False, True]
    assert "qlearning_dataset" in ds.metadata["next_observations"]
    assert ds.metadata["algorithm"] == "SAC" and ds.metadata["iteration"] == 3


def test_npz_written_by_hand_loads(tmp_path):
    ds = make_dataset()
    np.savez(tmp_path / "mine.npz", observations=ds.observations, actions=ds.actions, rewards=ds.rewards,
             terminals=ds.terminals.astype(np.float32), timeouts=ds.timeouts, next_observations=ds.next_observations)
    loaded = data.load(tmp_path / "mine.npz")
    np.testing.assert_array_equal(loaded.terminals, ds.terminals)


def test_out_of_bounds_actions_warn_with_the_count(tmp_path):
    ds = make_dataset(action_scale=1.0)
    act = ds.actions.copy()
    act[[3, 7, 9], 0] = 1.5
    path = data.save(ds.replace(actions=act), tmp_path / "oob.npz")
    with pytest.warns(DatasetWarning, match=r"3 of 50 actions lie outside the action bounds \(first at row 3\)"):
        data.load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data.load(path, check_bounds=False)


def test_out_of_bounds_uses_env_action_space_when_metadata_has_no_bounds(tmp_path):
    ds = make_dataset(act_dim=1, metadata={"env_id": "Pendulum-v1"})  # Pendulum actions lie in [-2, 2]
    act = ds.actions.copy()
    act[5, 0] = 2.5
    path = data.save(ds.replace(actions=act), tmp_path / "oob.hdf5")
    with pytest.warns(DatasetWarning, match="1 of 50 actions"):
        data.load(path)


def test_format_from_suffix_and_unknown_suffix(tmp_path, small_dataset):
    assert data.format_of("a.h5") == "hdf5" and data.format_of("a.npz") == "npz" and data.format_of(tmp_path) == "minari"
    with pytest.raises(DatasetError, match="unknown dataset format '.csv'"):
        data.save(small_dataset, tmp_path / "a.csv")


def test_derived_next_observations_with_one_step_episodes_and_an_open_last_row():
    # rows: A, B(timeout), C(timeout: a one-step episode), D, E(no flag: logging stopped)
    obs = np.arange(5, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    ds = Dataset.from_arrays(obs, np.zeros((5, 1)), np.arange(5), np.zeros(5, bool),
                             timeouts=np.array([0, 1, 1, 0, 0], bool))
    # B, C and E have no logged successor and are dropped; A and D now close their episodes
    np.testing.assert_array_equal(ds.rewards, [0, 3])
    np.testing.assert_array_equal(ds.next_observations[:, 0], [1, 4])
    assert ds.timeouts.tolist() == [True, True] and not ds.terminals.any()


@pytest.mark.parametrize("name", ["m.hdf5", "m.npz", "m-v0"])
def test_awkward_metadata_values_round_trip(tmp_path, name):
    md = {"none": None, "rows": [{"x": 1.5, "y": None}], "numpy": np.float64(2.5), "empty": "", "spaced": " sp ",
          "flag": True, "nul": "x\x00", "count": 3, "nested/key": "v"}
    loaded = data.load(data.save(make_dataset(metadata=md), tmp_path / name))
    assert loaded.metadata == {**md, "numpy": 2.5}
