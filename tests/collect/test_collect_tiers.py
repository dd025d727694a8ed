"""Tiers from a tiny Pendulum zoo: sizes, metadata, log-probs vs the producing snapshot, names, formats."""

import numpy as np
import pytest

from offrl.collect.tiers import TIERS, build_tier_dataset, dataset_name, save_tier_dataset, select_snapshots
from offrl.collect.zoo import load_policy, load_zoo_index, read_replay
from offrl.errors import ConfigError


def test_snapshot_selection_rule():
    index = {"snapshots": [{"step": 0, "return_mean": -1200.0}, {"step": 1, "return_mean": -1000.0},
                           {"step": 2, "return_mean": -700.0}, {"step": 3, "return_mean": -150.0},
                           {"step": 4, "return_mean": -200.0}]}
    chosen = select_snapshots(index)
    # target = -1200 + (-150 + 1200) / 3 = -850: -1000 and -700 are both 150 away; ties go to the earlier step
    assert chosen["expert"]["step"] == 3 and chosen["random"]["step"] == 0
    assert np.isclose(chosen["medium_target_return"], -850.0)
    assert chosen["medium"]["step"] == 1
    assert dataset_name("Hopper-v5", "medium-replay") == "hopper-medium-replay-v0"


@pytest.mark.parametrize("tier", TIERS)
def test_tier_builds_with_sizes_metadata_and_matching_log_probs(pendulum_zoo, tier):
    size = 330
    ds = build_tier_dataset(pendulum_zoo, tier, size=size, seed=1, env_id="Pendulum-v1", num_envs=3)
    meta = ds.metadata
    index = load_zoo_index(pendulum_zoo)
    chosen = select_snapshots(index)
    if tier == "medium-replay":
        # whole episodes of the replay before the medium snapshot, as many as fit in `size` rows
        replay = read_replay(pendulum_zoo, stop=chosen["medium"]["step"])
        ends = np.flatnonzero(replay["terminals"] | replay["timeouts"]) + 1
        ends = ends if len(ends) and ends[-1] == len(replay["rewards"]) else np.append(ends, len(replay["rewards"]))
        replay_episodes = np.split(replay["rewards"], ends[:-1])
        assert len(replay["rewards"]) == chosen["medium"]["step"] > size
        assert size - max(map(len, replay_episodes)) < len(ds) <= size
        for episode in np.split(ds.rewards, ds.episode_bounds()[1][:-1]):
            assert any(np.array_equal(episode, r) for r in replay_episodes)
        assert meta["replay_stop_step"] == chosen["medium"]["step"]
    else:
        assert len(ds) == size
    assert meta["tier"] == tier and meta["env_id"] == "Pendulum-v1" and meta["env_version"] == "1"
    assert meta["name"] == f"pendulum-{tier}-v0" and meta["seed"] == 1 and meta["size"] == len(ds)
    assert meta["action_low"] == [-2.0] and meta["action_high"] == [2.0]
    assert meta["ref_min_score"] == index["snapshots"][0]["return_mean"]
    assert meta["ref_max_score"] == chosen["expert"]["return_mean"]
    assert meta["offrl_version"] and np.isfinite(meta["policy_return"])
    assert set(ds.infos) == {"action_log_probs", "action_mean", "action_std"}
    assert not ds.terminals.any()  # Pendulum never terminates
    assert ds.timeouts[-1]  # the last partial episode ends with a timeout
    assert np.all(ds.episode_lengths() <= 200)
    # log-probs recomputed from the snapshot that produced each part
    start = 0
    for part in meta["policies"]:
        rows = slice(start, start + part["rows"]) if tier != "medium-replay" else slice(0, len(ds))
        start += part["rows"]
        if tier == "medium-replay":
            continue
        policy = load_policy(pendulum_zoo, part["snapshot_step"])
        obs, act = ds.observations[rows], ds.actions[rows]
        recomputed = policy.log_prob(obs, act)
        unsaturated = np.abs(policy.to_normalized(act)).max(axis=1) < 0.999
        assert unsaturated.mean() > 0.5
        np.testing.assert_allclose(recomputed[unsaturated], ds.infos["action_log_probs"][rows][unsaturated], atol=5e-3)
        mean, log_std = policy.actor_def.apply({"params": policy.params}, obs)
        np.testing.assert_allclose(np.asarray(mean), ds.infos["action_mean"][rows], atol=1e-5)
        np.testing.assert_allclose(np.exp(np.asarray(log_std)), ds.infos["action_std"][rows], rtol=1e-5)
    if tier == "medium-expert":
        assert [p["part"] for p in meta["policies"]] == ["medium", "expert"]
        assert [p["rows"] for p in meta["policies"]] == [165, 165]


def test_medium_replay_log_probs_match_snapshot_zero_for_warmup_rows(pendulum_zoo):
    ds = build_tier_dataset(pendulum_zoo, "medium-replay", size=10_000, seed=0)
    n = min(100, len(ds))  # steps before start_steps come from the untouched initial actor
    policy = load_policy(pendulum_zoo, 0)
    np.testing.assert_allclose(policy.log_prob(ds.observations[:n], ds.actions[:n]), ds.infos["action_log_probs"][:n], atol=5e-3)


def test_generated_dataset_loads_by_name_and_round_trips_formats(pendulum_zoo, tmp_path):
    import offrl.data as data

    from offrl.collect.tiers import free_dataset_name

    name = free_dataset_name("pendulum-medium-v0")  # the bundled dataset keeps its name
    assert name == "pendulum-medium-local-v0" and free_dataset_name("hopper-medium-replay-v0") == "hopper-medium-replay-v0"
    ds = build_tier_dataset(pendulum_zoo, "medium", size=250, seed=2, name=name)
    assert ds.metadata["name"] == name
    where = save_tier_dataset(ds, out=tmp_path / "pendulum-medium.hdf5", name=name)
    assert name in where["registered"]
    by_name = data.load(name)
    for loaded in (by_name, data.load(tmp_path / "pendulum-medium.hdf5")):
        for key, arr in ds.arrays().items():
            np.testing.assert_array_equal(loaded.arrays()[key], arr, err_msg=key)
        assert loaded.metadata["tier"] == "medium" and loaded.metadata["policies"] == ds.metadata["policies"]
    minari_path = data.save(by_name, tmp_path / "minari" / "pendulum-medium-v0", format="minari")
    back = data.load(minari_path)
    for key in ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations"):
        np.testing.assert_allclose(back.arrays()[key], ds.arrays()[key], err_msg=key)
    np.testing.assert_allclose(back.infos["action_log_probs"], ds.infos["action_log_probs"])
    back_d4rl = data.load(data.save(back, tmp_path / "again.hdf5"))
    np.testing.assert_allclose(back_d4rl.rewards, ds.rewards)


def test_references_are_stored_with_the_zoo_and_in_offrl_home(pendulum_zoo):
    import json

    from offrl.envs import normalized_score, offrl_home

    ds = build_tier_dataset(pendulum_zoo, "random", size=50, seed=0)  # writes $OFFRL_HOME/references.json
    index = load_zoo_index(pendulum_zoo)
    lo, hi = index["snapshots"][0]["return_mean"], select_snapshots(index)["expert"]["return_mean"]
    assert json.loads((offrl_home() / "references.json").read_text())["Pendulum-v1"] == [lo, hi]
    assert json.loads((pendulum_zoo / "references.json").read_text())["random"] == lo
    assert float(normalized_score("Pendulum-v1", hi, ds.metadata)) == pytest.approx(100.0)
    assert float(normalized_score("Pendulum-v1", lo, ds.metadata)) == pytest.approx(0.0)


def test_wrong_env_and_tier_are_one_sentence_errors(pendulum_zoo, tmp_path):
    with pytest.raises(ConfigError, match="trained on Pendulum-v1"):
        build_tier_dataset(pendulum_zoo, "medium", size=10, env_id="Hopper-v5")
    with pytest.raises(ConfigError, match="unknown tier 'mediocre'"):
        build_tier_dataset(pendulum_zoo, "mediocre", size=10)
    with pytest.raises(ConfigError, match="no zoo.json"):
        build_tier_dataset(tmp_path, "medium", size=10)


def test_reproducible_policy_is_the_actor_in_float64(pendulum_zoo):
    """The host-independent sampler (float64, NumPy's own loops) computes the jitted actor's
    mean and std, and its log-probs are the density of the actions it returns."""
    import jax

    index = load_zoo_index(pendulum_zoo)
    policy = load_policy(pendulum_zoo, select_snapshots(index)["medium"]["step"])
    obs = np.random.default_rng(0).normal(size=(16, policy.obs_dim))
    act = policy.reproducible_rollout_policy(seed=5)
    actions, _, extras = act(policy.params, None, obs, None)
    mean, log_std = policy.actor_def.apply({"params": policy.params}, jax.numpy.asarray(obs, jax.numpy.float32))
    np.testing.assert_allclose(extras["action_mean"], np.asarray(mean), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(extras["action_std"], np.exp(np.asarray(log_std)), rtol=1e-5)
    np.testing.assert_allclose(extras["action_log_probs"], policy.log_prob(obs, actions.astype(np.float32)), rtol=1e-3, atol=1e-3)
    assert np.all((actions >= policy.action_low) & (actions <= policy.action_high))
    again, _, _ = policy.reproducible_rollout_policy(seed=5)(policy.params, None, obs, None)
    other, _, _ = policy.reproducible_rollout_policy(seed=6)(policy.params, None, obs, None)
    assert np.array_equal(actions, again) and not np.allclose(actions, other)


def test_tier_is_the_same_whatever_code_the_processor_is_given(pendulum_zoo, tmp_path):
    """A host with other vector instructions builds the same tier, bit for bit: emulated here by a
    subprocess whose XLA may use nothing beyond SSE4.2 and whose NumPy may not use AVX/AVX2/FMA.
    With the jitted actor (``rollout_policy``) the two builds differ."""
    import os
    import subprocess
    import sys

    script = ("import sys, numpy as np\nfrom offrl.collect.tiers import build_tier_dataset\n"
              "ds = build_tier_dataset(sys.argv[1], 'medium', size=300, seed=3, env_id='Pendulum-v1', num_envs=2)\n"
              "np.savez(sys.argv[2], observations=ds.observations, actions=ds.actions, "
              "log_probs=ds.infos['action_log_probs'])\n")
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2", "NPY_DISABLE_CPU_FEATURES": "AVX2 FMA3 F16C AVX",
           "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", script, str(pendulum_zoo), str(tmp_path / "other.npz")], env=env, check=True,
                   capture_output=True)
    other = np.load(tmp_path / "other.npz")
    ds = build_tier_dataset(pendulum_zoo, "medium", size=300, seed=3, env_id="Pendulum-v1", num_envs=2)
    assert np.array_equal(other["observations"], ds.observations)
    assert np.array_equal(other["actions"], ds.actions)
    assert np.array_equal(other["log_probs"], ds.infos["action_log_probs"])
