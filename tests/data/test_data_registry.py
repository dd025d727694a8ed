"""Dataset names: bundled folder, then the cache, then paths and local Minari ids."""

import numpy as np
import pytest

import offrl.data as data
from data_helpers import assert_same, make_dataset
from offrl.data import registry
from offrl.envs import offrl_home
from offrl.errors import DatasetError


@pytest.fixture
def bundled(tmp_path, monkeypatch):
    folder = tmp_path / "bundled"
    folder.mkdir()
    monkeypatch.setattr(registry, "BUNDLED_DIR", folder)
    return folder


def test_register_then_load_by_name(bundled):
    ds = make_dataset()
    path = data.register(ds, "pendulum-random-v0")
    assert path == offrl_home() / "datasets" / "pendulum-random-v0.hdf5"
    assert_same(ds, data.load("pendulum-random-v0"))
    assert data.list_datasets() == {"pendulum-random-v0": str(path)}
    with pytest.raises(DatasetError, match="already exists"):
        data.register(ds, "pendulum-random-v0")


def test_bundled_dataset_wins_over_the_cache(bundled):
    data.save(make_dataset(seed=1), bundled / "hopper-medium-v0.hdf5")
    with pytest.raises(DatasetError, match="bundled"):
        data.register(make_dataset(seed=2), "hopper-medium-v0")
    (offrl_home() / "datasets").mkdir(parents=True)
    data.save(make_dataset(seed=2), offrl_home() / "datasets" / "hopper-medium-v0.hdf5")
    assert_same(make_dataset(seed=1), data.load("hopper-medium-v0"))


def test_cache_holds_npz_and_minari_folders(bundled):
    data.register(make_dataset(seed=3), "a-v0", format="npz")
    data.register(make_dataset(seed=4), "b-v0", format="minari")
    assert sorted(data.list_datasets()) == ["a-v0", "b-v0"]
    np.testing.assert_array_equal(data.load("b-v0").rewards, make_dataset(seed=4).rewards)


def test_unknown_name_lists_what_exists_and_how_to_make_one(bundled):
    data.register(make_dataset(), "walker-expert-v0")
    with pytest.raises(DatasetError) as info:
        data.load("hopper-medium-v0")
    message = str(info.value)
    assert "unknown dataset 'hopper-medium-v0'" in message
    assert "walker-expert-v0" in message
    assert "offrl collect dataset --env" in message


def test_missing_path_says_not_found(tmp_path, bundled):
    with pytest.raises(DatasetError, match="not found"):
        data.load(tmp_path / "nope.hdf5")


def test_bad_name_is_refused(bundled):
    with pytest.raises(DatasetError, match="must be letters"):
        data.register(make_dataset(), "../escape")
