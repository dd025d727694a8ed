"""Dataset edges: a Minari folder whose metadata.json is ``{}`` warns what is missing; a file
too small to judge gets no tier; files written by offrl.data.save honour the umask."""

import json
import os
import stat

import numpy as np
import pytest

from offrl import data
from offrl.data.checks import DatasetWarning
from offrl.data.doctor import inspect_dataset
from offrl.data.doctor.tier import MIN_EPISODES_TO_JUDGE


def _dataset(episodes: int, length: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = episodes * length
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    timeouts = np.zeros(n, bool)
    timeouts[length - 1::length] = True
    return data.Dataset.from_arrays(observations=obs, actions=rng.uniform(-1, 1, size=(n, 1)).astype(np.float32),
                                    rewards=rng.normal(size=n).astype(np.float32), terminals=np.zeros(n, bool),
                                    timeouts=timeouts, next_observations=obs + 0.01,
                                    metadata={"ref_min_score": -10.0, "ref_max_score": 10.0, "env_id": "Pendulum-v1"})


def test_minari_metadata_of_braces_warns_env_spaces_and_references_are_missing(tmp_path):
    folder = tmp_path / "ds-v0"
    ds = _dataset(3)
    data.save(ds.replace(next_observations=np.concatenate([ds.observations[1:], ds.observations[-1:]])), folder)
    (folder / "data" / "metadata.json").write_text("{}")
    with pytest.warns(DatasetWarning, match=r"metadata.json has no the env \(env_spec\), the observation_space, the "
                                            r"action_space, the reference returns \(ref_min_score, ref_max_score\)"):
        loaded = data.load(folder)
    assert "env_id" not in loaded.metadata


def test_offrl_written_minari_folder_does_not_warn(tmp_path):
    import warnings

    ds = _dataset(3)
    folder = tmp_path / "ds-v0"
    contiguous = ds.replace(next_observations=np.concatenate([ds.observations[1:], ds.observations[-1:]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data.save(contiguous, folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data.load(folder)
    assert not [w for w in caught if "has no the env" in str(w.message)]


@pytest.mark.parametrize("episodes", [1, MIN_EPISODES_TO_JUDGE - 1])
def test_a_file_below_the_minimum_is_too_small_to_judge(episodes):
    report = inspect_dataset(_dataset(episodes))
    tier = report["tier"]
    assert tier["estimate"] is None and tier["kind"] == "too small to judge" and tier["too_small"]
    assert tier["reasons"][0].startswith(f"too small to judge: {episodes} episode(s), fewer than the {MIN_EPISODES_TO_JUDGE}")
    assert "too small to judge" in report["recommendation"]["reasons"][0]


def test_one_transition_is_too_small_to_judge():
    report = inspect_dataset(_dataset(1, length=1))
    assert report["tier"]["estimate"] is None and report["tier"]["kind"] == "too small to judge"


def test_at_the_minimum_a_tier_is_estimated():
    assert inspect_dataset(_dataset(MIN_EPISODES_TO_JUDGE))["tier"]["kind"] != "too small to judge"


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.parametrize("suffix", [".npz", ".hdf5"])
def test_saved_files_get_the_umasks_mode(tmp_path, umask_022, suffix):
    path = tmp_path / f"d{suffix}"
    data.save(_dataset(2), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    os.umask(0o077)
    private = tmp_path / f"p{suffix}"
    data.save(_dataset(2), private)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_saved_minari_folder_gets_the_umasks_mode(tmp_path, umask_022):
    ds = _dataset(2)
    folder = tmp_path / "ds-v0"
    data.save(ds.replace(next_observations=np.concatenate([ds.observations[1:], ds.observations[-1:]])), folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert stat.S_IMODE((folder / "data" / "main_data.hdf5").stat().st_mode) == 0o644
    json.loads((folder / "data" / "metadata.json").read_text())
