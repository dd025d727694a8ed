"""offrl train --devices: the seed axis sharded over a Mesh of 4 (forced host) CPU devices."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
    for devices, seeds, words in ((8, 4, "only 4 cpu device(s)"), (4, 3, "does not divide")):
        try:
            train("iql", ds, **{**kw, "seeds": seeds, "devices": devices})
        except ConfigError as exc:
            assert words in str(exc), str(exc)
        else:
            raise AssertionError("no error")
    print("OK")
""")


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
