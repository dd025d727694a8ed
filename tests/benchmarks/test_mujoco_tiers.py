"""``benchmarks/mujoco_tiers.py``: the tier digest sees every array and nothing else, and the
committed packed zoos are readable and name the tiers their digests were recorded for."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from benchmark_script import load

ROOT = Path(__file__).resolve().parents[2]


def _module():
    return load("benchmarks/mujoco_tiers.py", "mujoco_tiers")


def _dataset(n=20):
    from offrl.data.dataset import Dataset

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    timeouts = np.zeros(n, bool)
    timeouts[-1] = True
    return Dataset(obs, rng.normal(size=(n, 2)).astype(np.float32), rng.normal(size=n).astype(np.float32),
                   np.zeros(n, bool), timeouts, obs + 1, {"action_log_probs": np.zeros(n, np.float32)}, {"name": "x"}, "test")


def test_digest_changes_with_any_array_value_but_not_metadata():
    mod = _module()
    ds = _dataset()
    base = mod.digest(ds)
    assert base == mod.digest(_dataset())
    assert mod.digest(ds.replace(metadata={"name": "other"})) == base
    rewards = ds.rewards.copy()
    rewards[7] += 1e-3
    assert mod.digest(ds.replace(rewards=rewards)) != base
    lp = ds.infos["action_log_probs"].copy()
    lp[0] = 1.0
    assert mod.digest(ds.replace(infos={"action_log_probs": lp})) != base


def test_unknown_env_exits_2(capsys):
    assert _module().main(["--envs", "ant"]) == 2
    assert "unknown" in capsys.readouterr().err


def test_committed_packed_zoos_keep_their_tier_snapshots():
    for zoo in sorted((ROOT / "benchmarks" / "data" / "mujoco").glob("*/zoo.json")):
        index = json.loads(zoo.read_text())
        kept = index["packed"]["kept_steps"]
        for step in kept:
            assert (zoo.parent / "snapshots" / f"step_{step:07d}.msgpack").exists()
        record = json.loads((zoo.parent / "tiers.json").read_text())
        assert {k.split(":")[0] for k in record} >= {"medium", "medium-replay", "medium-expert"}
