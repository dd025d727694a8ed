"""offrl train --devices: the seed axis (several seeds) or the batch axis (one seed) sharded over a
Mesh of 4 (forced host) CPU devices."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, "tests/engine")
    import jax, numpy as np
    from pendulum_data import make_pendulum_dataset
    from offrl.engine import train
    from offrl.errors import ConfigError
    assert len(jax.devices()) == 4, jax.devices()
    ds = make_pendulum_dataset(episodes=2, noise=1.0, seed=1)
    kw = dict(steps=10, seeds=4, eval_every=10, eval_episodes=0, log_every=5, progress=False,
              config_overrides={"hidden_dims": "16,16", "batch_size": "16"})
    one = train("iql", ds, **kw)
    four = train("iql", ds, devices=4, **kw)
    leaves = jax.tree_util.tree_leaves(four.agent.actor.params)
    assert len(leaves[0].sharding.device_set) == 4, leaves[0].sharding
    for a, b in zip(jax.tree_util.tree_leaves(one.agent), jax.tree_util.tree_leaves(four.agent)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # one seed: the batch axis split over the 4 devices (data parallel), agent replicated
    kw1 = {**kw, "seeds": 1}
    single = train("iql", ds, **kw1)
    split = train("iql", ds, devices=4, **kw1)
    auto = train("iql", ds, devices="auto", **kw1)
    leaf = jax.tree_util.tree_leaves(split.agent.actor.params)[0]
    assert len(leaf.sharding.device_set) == 4 and leaf.sharding.is_fully_replicated, leaf.sharding
    rows = lambda run: [(r["step"], r["critic_loss"], r["actor_loss"]) for r in run.metrics]
    np.testing.assert_allclose(np.array(rows(single)), np.array(rows(split)), rtol=1e-5, atol=1e-6)
    for a, b, c in zip(*(jax.tree_util.tree_leaves(r.agent) for r in (single, split, auto))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(b), np.asarray(c), rtol=0, atol=0)
    assert not np.allclose(np.asarray(jax.tree_util.tree_leaves(single.agent.actor.params)[0]),
                           np.asarray(jax.tree_util.tree_leaves(train("iql", ds, **{**kw1, "steps": 5}).agent.actor.params)[0]))
    # the chunk really partitions the batch: its compiled HLO holds a cross-device reduction
    from offrl.algos import get_algorithm
    from offrl.engine.chunks import make_chunk_fn, create_agents
    from offrl.engine.data import prepare_data
    from offrl.engine.sharding import batch_sharding, place_replicated
    from offrl.algos.common import apply_overrides
    module = get_algorithm("iql")
    config = apply_overrides(module.Config(), kw["config_overrides"])
    data, info = prepare_data(ds, config, None, module)
    agents, keys = create_agents(module, config, info.obs_dim, info.action_dim, 0, 1)
    agents, keys, data = place_replicated(agents, keys, data, 4)
    fn = make_chunk_fn(module, 2, 16, False, batch_sharding(4))
    hlo = fn.lower(jax.tree_util.tree_map(lambda x: x[0], agents), keys[0], data).compile().as_text()
    assert "all-reduce" in hlo, "no all-reduce in the batch-sharded chunk"
    for devices, seeds, words in ((8, 4, "only 4 cpu device(s)"), (4, 3, "does not divide"),
                                  (8, 1, "only 4 cpu device(s)"), (3, 1, "does not divide batch_size 16")):
        try:
            train("iql", ds, **{**kw, "seeds": seeds, "devices": devices})
        except ConfigError as exc:
            assert words in str(exc), str(exc)
        else:
            raise AssertionError("no error")
    print("OK")
""")


@pytest.mark.slow  # 70 s in a 4-device subprocess; CI keeps the one-line refusal below
def test_devices_shard_seeds_and_match_one_device():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


def test_cli_more_devices_than_exist_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "offrl", "train", "--dataset", "x.npz", "--devices", "64",
                           "--out", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--devices 64" in lines[0], proc.stderr
    assert not (tmp_path / "r").exists()
