"""OGBench's .npz layout through offrl.data.load: hand-made files with known trajectory ends."""

import zipfile

import numpy as np
import pytest

import offrl.data as data
from offrl.data.checks import DatasetWarning
from offrl.data.ogbench import load_ogbench, split_name
from offrl.errors import DatasetError

# Two trajectories of 3 and 4 stored rows: rows 2 and 6 are their last, with no stored successor.
TERMINALS = np.array([0, 0, 1, 0, 0, 0, 1], bool)


def write_raw(path, **overrides):
    obs = np.arange(14, dtype=np.float32).reshape(7, 2)
    arrays = {"observations": obs, "actions": (np.arange(7, dtype=np.float32) / 10).reshape(7, 1),
              "terminals": TERMINALS.copy(), "qpos": np.arange(21, dtype=np.float32).reshape(7, 3),
              "qvel": np.zeros((7, 3), np.float32)}
    arrays.update(overrides)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez_compressed(path, **arrays)
    return path


def test_raw_file_loads_to_the_transitions_within_each_trajectory(tmp_path):
    path = write_raw(tmp_path / "cube-single-play-v0.npz")
    with pytest.warns(DatasetWarning, match="no rewards"):
        ds = data.load(path)
    # rows 0,1 -> 1,2 (trajectory 1); rows 3,4,5 -> 4,5,6 (trajectory 2); rows 2 and 6 dropped.
    assert ds.observations[:, 0].tolist() == [0, 2, 6, 8, 10]
    assert ds.next_observations[:, 0].tolist() == [2, 4, 8, 10, 12]
    np.testing.assert_allclose(ds.actions[:, 0], [0.0, 0.1, 0.3, 0.4, 0.5])
    assert ds.infos["trajectory_ends"].tolist() == [False, True, False, False, True]
    assert ds.timeouts.tolist() == [False, True, False, False, True]
    assert not ds.terminals.any() and not ds.rewards.any()
    assert ds.infos["qpos"][:, 0].tolist() == [0, 3, 9, 12, 15]      # the state of s_t, not s_{t+1}
    assert ds.num_episodes == 2 and ds.episode_lengths().tolist() == [2, 3]
    assert ds.metadata["env_id"] == "cube-single-v0" and ds.metadata["format"] == "ogbench"


def test_regular_and_compact_forms_load_the_same_transitions(tmp_path):
    obs = np.arange(14, dtype=np.float32).reshape(7, 2)
    act = (np.arange(7, dtype=np.float32) / 10).reshape(7, 1)
    keep = ~TERMINALS
    # ogbench.load_dataset(compact_dataset=False): one row per transition, terminals = trajectory's last.
    np.savez(tmp_path / "regular.npz", observations=obs[keep], actions=act[keep],
             next_observations=obs[np.flatnonzero(keep) + 1], terminals=np.array([0, 1, 0, 0, 1], bool),
             rewards=np.array([-1, 0, -1, -1, -1], np.float32), masks=np.array([1, 0, 1, 1, 1], np.float32))
    # compact_dataset=True: valids 0 on each trajectory's stored last row, terminals on both last rows.
    np.savez(tmp_path / "compact.npz", observations=obs, actions=act, valids=(~TERMINALS).astype(np.float32),
             terminals=np.array([0, 1, 1, 0, 0, 1, 1], np.float32))
    regular = data.load(tmp_path / "regular.npz")
    with pytest.warns(DatasetWarning):
        compact = data.load(tmp_path / "compact.npz", format="ogbench")
    for ds in (regular, compact):
        assert ds.observations[:, 0].tolist() == [0, 2, 6, 8, 10]
        assert ds.next_observations[:, 0].tolist() == [2, 4, 8, 10, 12]
        assert ds.infos["trajectory_ends"].tolist() == [False, True, False, False, True]
    # mask 0 -> terminal (no bootstrap); the other trajectory end is a timeout.
    assert regular.terminals.tolist() == [False, True, False, False, False]
    assert regular.timeouts.tolist() == [False, False, False, False, True]
    assert regular.rewards.tolist() == [-1, 0, -1, -1, -1]


def test_offrl_npz_files_are_not_taken_for_ogbench(tmp_path, small_dataset):
    data.save(small_dataset, tmp_path / "mine.npz")
    ds = data.load(tmp_path / "mine.npz")
    assert "format" not in ds.metadata and len(ds) == len(small_dataset)


@pytest.mark.parametrize("override, key, message", [
    ({"terminals": None}, "terminals", "missing key"),
    ({"actions": np.zeros((6, 1), np.float32)}, "actions", "6 rows but 'observations' has 7"),
    ({"qpos": np.where(np.arange(21).reshape(7, 3) == 10, np.nan, 0).astype(np.float32)}, "qpos", "NaN or inf value at row 3"),
    ({"terminals": np.array([0, 0, 1, 0, 0, 0, 0], bool)}, "terminals", "last row"),
    ({"terminals": np.array([0, 0, 2, 0, 0, 0, 1])}, "terminals", "only 0/1"),
])
def test_a_damaged_file_is_refused_naming_file_and_key(tmp_path, override, key, message):
    path = write_raw(tmp_path / "cube-single-play-v0.npz", **override)
    with pytest.raises(DatasetError, match=message) as err:
        load_ogbench(path)
    text = str(err.value)
    assert str(path) in text and f"'{key}'" in text and "\n" not in text
    assert err.value.exit_code == 2


def test_a_truncated_archive_is_refused(tmp_path):
    path = write_raw(tmp_path / "cube-single-play-v0.npz")
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    assert not zipfile.is_zipfile(path)
    with pytest.raises(DatasetError, match="cannot be read") as err:
        data.load(path, format="ogbench")
    assert str(path) in str(err.value)


def test_dataset_names_split_as_ogbench_splits_them():
    assert split_name("cube-single-play-singletask-task1-v0") == ("cube-single-play-v0", "cube-single-v0", 1, False)
    assert split_name("scene-play-singletask-v0.npz") == ("scene-play-v0", "scene-v0", 0, False)
    assert split_name("antmaze-large-navigate-v0-val").env_id == "antmaze-large-v0"
    assert split_name("puzzle-3x3-noisy-singletask-task4-v0").task_env_id == "puzzle-3x3-singletask-task4-v0"
    assert split_name("hopper-medium-v2") is None and split_name("cube-single-play-singletask-taskx-v0") is None


def test_a_missing_singletask_file_names_where_it_looked(tmp_path):
    with pytest.raises(DatasetError, match="cube-single-play-v0.npz is not in") as err:
        data.load(tmp_path / "cube-single-play-singletask-task1-v0.npz")
    assert "offrl collect oracle" in str(err.value)


# ---------------------------------------------------------------------- single-task rewards (ogbench)
def test_singletask_rewards_count_the_unsolved_subgoals(tmp_path):
    """cube-single task 1: reward 0 and a terminal where the cube sits at the target (within 4 cm), else -1."""
    pytest.importorskip("ogbench", reason="single-task rewards need the ogbench package (pip install 'offrl[ogbench]')")
    from offrl.envs import make_env

    env = make_env("cube-single-singletask-task1-v0")
    env.reset(seed=0)
    target = env.unwrapped._data.mocap_pos[0].copy()
    env.close()
    qpos = np.zeros((7, 21), np.float32)
    qpos[:, 14:17] = target + np.array([0.1, 0.0, 0.0])        # 10 cm away: unsolved
    qpos[[1, 4], 14:17] = target + np.array([0.0, 0.03, 0.0])  # 3 cm away: solved in s_1 and s_4
    obs = np.arange(7 * 28, dtype=np.float32).reshape(7, 28)
    write_raw(tmp_path / "cube-single-play-v0.npz", observations=obs, qpos=qpos, qvel=np.zeros((7, 20), np.float32),
              actions=np.zeros((7, 5), np.float32))
    ds = data.load(tmp_path / "cube-single-play-singletask-task1-v0.npz")
    # transitions are rows 0, 1, 3, 4, 5: solved at rows 1 and 4.
    assert ds.rewards.tolist() == [-1, 0, -1, 0, -1]
    assert ds.terminals.tolist() == [False, True, False, True, False]
    assert ds.timeouts.tolist() == [False, False, False, False, True]   # row 1 ends trajectory 1 as a terminal
    assert ds.metadata["env_id"] == "cube-single-singletask-task1-v0" and ds.metadata["task"] == 1


def test_puzzle_rewards_are_minus_the_buttons_off_target(tmp_path):
    pytest.importorskip("ogbench", reason="single-task rewards need the ogbench package (pip install 'offrl[ogbench]')")
    from offrl.envs import make_env

    env = make_env("puzzle-3x3-singletask-task1-v0")
    env.reset(seed=0)
    goal = env.unwrapped._target_button_states.copy()
    env.close()
    flips = [0, 2, 0, 9, 1, 3, 0]          # buttons off target in each stored row
    states = np.stack([np.where(np.arange(9) < k, 1 - goal, goal) for k in flips]).astype(np.int64)
    write_raw(tmp_path / "puzzle-3x3-play-v0.npz", button_states=states, actions=np.zeros((7, 5), np.float32))
    ds = load_ogbench(tmp_path / "puzzle-3x3-play-v0.npz", task=1)
    assert ds.rewards.tolist() == [0, -2, -9, -1, -3]      # rows 0, 1, 3, 4, 5
    assert ds.terminals.tolist() == [True, False, False, False, False]


def test_a_task_without_qpos_is_refused(tmp_path):
    pytest.importorskip("ogbench", reason="single-task rewards need the ogbench package")
    path = write_raw(tmp_path / "cube-single-play-v0.npz", qpos=None)
    with pytest.raises(DatasetError, match="missing key 'qpos'"):
        load_ogbench(path, task=2)
