"""A packed zoo builds the same tiers as the zoo it was packed from, and refuses what it dropped."""

import json

import numpy as np
import pytest

from offrl.collect.pack import pack_zoo
from offrl.collect.tiers import TIERS, build_tier_dataset, select_snapshots
from offrl.collect.zoo import load_policy, load_zoo_index
from offrl.errors import ConfigError


@pytest.fixture(scope="module")
def packed(pendulum_zoo, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed") / "pendulum"
    pack_zoo(pendulum_zoo, out)
    return out


def test_pack_keeps_the_tier_snapshots_and_the_replay_prefix(pendulum_zoo, packed):
    full, index = load_zoo_index(pendulum_zoo), load_zoo_index(packed)
    chosen = select_snapshots(full)
    kept = sorted({chosen[k]["step"] for k in ("random", "medium", "expert")})
    assert index["packed"]["kept_steps"] == kept
    assert sorted(int(p.name[5:12]) for p in (packed / "snapshots").glob("*.msgpack")) == kept
    assert len(kept) < len(full["snapshots"])
    assert index["snapshots"] == full["snapshots"]           # the medium rule sees every snapshot's returns
    import h5py

    with h5py.File(packed / "replay.hdf5") as f:
        assert len(f["rewards"]) == chosen["medium"]["step"] == index["packed"]["replay_rows"]
        assert f["observations"].compression == "gzip"
    assert json.loads((packed / "references.json").read_text())["env_id"] == "Pendulum-v1"


@pytest.mark.parametrize("tier", TIERS)
def test_packed_zoo_builds_the_same_tier(pendulum_zoo, packed, tier):
    a = build_tier_dataset(pendulum_zoo, tier, size=240, seed=3, env_id="Pendulum-v1", num_envs=2)
    b = build_tier_dataset(packed, tier, size=240, seed=3, env_id="Pendulum-v1", num_envs=2)
    for key in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=f"{tier} {key}")
    np.testing.assert_array_equal(a.infos["action_log_probs"], b.infos["action_log_probs"])
    assert a.metadata["policies"] == b.metadata["policies"]


def test_packed_zoo_refuses_a_dropped_snapshot_and_a_second_pack(pendulum_zoo, packed, tmp_path):
    index = load_zoo_index(packed)
    dropped = next(s["step"] for s in index["snapshots"] if s["step"] not in index["packed"]["kept_steps"])
    with pytest.raises(ConfigError, match="is packed and keeps only"):
        load_policy(packed, dropped)
    with pytest.raises(ConfigError, match="already packed"):
        pack_zoo(packed, tmp_path / "again")
    with pytest.raises(ConfigError, match="exists; choose a new folder"):
        pack_zoo(pendulum_zoo, packed)


def test_pack_refuses_a_damaged_zoo(pendulum_zoo, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(pendulum_zoo, broken)
    chosen = select_snapshots(load_zoo_index(broken))
    (broken / "snapshots" / f"step_{chosen['expert']['step']:07d}.msgpack").unlink()
    with pytest.raises(ConfigError, match="missing; the zoo is damaged"):
        pack_zoo(broken, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_pack(pendulum_zoo, tmp_path, capsys):
    from offrl.cli import main

    assert main(["collect", "pack", "--zoo", str(pendulum_zoo), "--out", str(tmp_path / "p")]) == 0
    assert "packed Pendulum-v1 zoo" in capsys.readouterr().out
    assert main(["collect", "pack", "--zoo", str(pendulum_zoo), "--out", str(tmp_path / "p")]) == 2
