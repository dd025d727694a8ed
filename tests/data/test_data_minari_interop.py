"""Both directions with the real ``minari`` package (offline, on local folders)."""

import gymnasium as gym
import numpy as np
import pytest

import offrl.data as data
from data_helpers import assert_same, make_dataset

minari = pytest.importorskip("minari")


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def _collect_with_minari(dataset_id, episodes=3, steps=25):
    env = minari.DataCollector(gym.make("Pendulum-v1", max_episode_steps=steps), record_infos=False)
    rng = np.random.default_rng(0)
    for k in range(episodes):
        env.reset(seed=k)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(rng.uniform(-2, 2, size=(1,)).astype(np.float32))
            done = term or trunc
    with pytest.warns(UserWarning):  # minari nags about author/description
        return env.create_dataset(dataset_id=dataset_id, algorithm_name="uniform-random",
                                  ref_min_score=-1500.0, ref_max_score=-150.0, num_episodes_average_score=0)


def test_minari_written_dataset_loads_in_offrl(minari_root):
    m = _collect_with_minari("test/pendulum-random-v0")
    ds = data.load(minari_root / "test" / "pendulum-random-v0")
    assert len(ds) == m.total_steps == 75 and ds.num_episodes == 3
    for k, ep in enumerate(m.iterate_episodes()):
        s, e = ds.episode_bounds()[0][k], ds.episode_bounds()[1][k]
        np.testing.assert_array_equal(ds.observations[s:e], ep.observations[:-1].astype(np.float32))
        np.testing.assert_array_equal(ds.next_observations[s:e], ep.observations[1:].astype(np.float32))
        np.testing.assert_array_equal(ds.actions[s:e], ep.actions.astype(np.float32))
        np.testing.assert_array_equal(ds.rewards[s:e], ep.rewards.astype(np.float32))
        np.testing.assert_array_equal(ds.terminals[s:e], ep.terminations)
        np.testing.assert_array_equal(ds.timeouts[s:e], ep.truncations)
    assert ds.metadata["env_id"] == "Pendulum-v1"
    assert ds.metadata["action_low"] == [-2.0] and ds.metadata["action_high"] == [2.0]
    assert ds.metadata["ref_min_score"] == -1500.0
    # also reachable by its minari id through the registry
    assert len(data.load("test/pendulum-random-v0")) == 75


def test_offrl_written_dataset_loads_with_minari(minari_root):
    ds = make_dataset(act_dim=1, metadata={"env_id": "Pendulum-v1", "tier": "random", "ref_min_score": -1500.0,
                                           "ref_max_score": -150.0})
    data.save(ds, minari_root / "offrl" / "pend-v0", dataset_id="offrl/pend-v0")
    m = minari.load_dataset("offrl/pend-v0")
    assert m.total_episodes == 3 and m.total_steps == 50
    assert m.spec.dataset_id == "offrl/pend-v0"
    assert m.action_space == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    assert m.env_spec.id == "Pendulum-v1"
    starts, ends = ds.episode_bounds()
    for k, ep in enumerate(m.iterate_episodes()):
        s, e = starts[k], ends[k]
        np.testing.assert_array_equal(ep.observations[:-1], ds.observations[s:e])
        np.testing.assert_array_equal(ep.observations[-1], ds.next_observations[e - 1])
        np.testing.assert_array_equal(ep.actions, ds.actions[s:e])
        np.testing.assert_array_equal(ep.terminations, ds.terminals[s:e])
        np.testing.assert_array_equal(ep.truncations, ds.timeouts[s:e])
        np.testing.assert_array_equal(ep.infos["action_log_probs"], ds.infos["action_log_probs"][s:e])
    assert minari.get_normalized_score(m, np.array([-150.0]))[0] == pytest.approx(1.0)
    assert "offrl/pend-v0" in minari.list_local_datasets()
    env = m.recover_environment()
    assert env.action_space.shape == (1,)
    env.close()


def test_minari_to_offrl_to_minari_keeps_every_step(minari_root):
    m = _collect_with_minari("test/source-v0", episodes=2, steps=10)
    ds = data.load(minari_root / "test" / "source-v0")
    data.save(ds, minari_root / "test" / "copy-v0", dataset_id="test/copy-v0")
    again = minari.load_dataset("test/copy-v0")
    for a, b in zip(m.iterate_episodes(), again.iterate_episodes()):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards.astype(np.float32), b.rewards)
        np.testing.assert_array_equal(a.terminations, b.terminations)
        np.testing.assert_array_equal(a.truncations, b.truncations)
    assert_same(ds, data.load(minari_root / "test" / "copy-v0"))


def test_non_contiguous_episode_cannot_be_saved_as_minari(tmp_path):
    ds = make_dataset()
    nxt = ds.next_observations.copy()
    nxt[4] += 1.0
    with pytest.raises(data.DatasetError, match="row 4's next_observations differ from row 5's"):
        data.save(ds.replace(next_observations=nxt), tmp_path / "bad-v0")
