"""offrl sweep --backend ray: trials on a local Ray of 2 workers, ranges, unreachable address."""

import json
import subprocess
import sys
import time

import pytest

TINY = {"hidden_dims": "16,16", "batch_size": "16"}
from offrl.errors import ConfigError
from offrl.sweeps.ray_backend import split_ranges

ray = pytest.importorskip("ray")


def test_split_ranges():
    values, ranges = split_ranges(["expectile=0.6:0.9", "actor_lr=1e-4:1e-3:log", "tau=0.005,0.01"])
    assert values == ["tau=0.005,0.01"]
    assert ranges == {"expectile": (0.6, 0.9, False), "actor_lr": (1e-4, 1e-3, True)}
    for bad in ("expectile=0.9:0.6", "expectile=a:b", "actor_lr=0:1:log"):
        with pytest.raises(ConfigError, match="--grid"):
            split_ranges([bad])


@pytest.mark.parametrize("address, words", [
    ("127.0.0.1:9", "no Ray head answered within 5 s"),          # nothing listens on loopback: refused
])
def test_unreachable_address_is_one_line_not_a_hang(tmp_path, address, words):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "offrl", "sweep", "--dataset", "x.npz", "--grid", "expectile=0.6,0.9",
                           "--backend", "ray", "--address", address, "--out", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--address {address}:" in lines[0] and words in lines[0], proc.stderr
    assert time.monotonic() - t0 < 60


@pytest.mark.slow  # about 2-3 minutes on the shared 2-core machine (Ray start-up, JAX in each worker)
def test_ray_trials_on_two_local_workers(pendulum_tiny, tmp_path):
    """2 configurations x 2 seeds as 2 Ray trials (each a vmapped group), ASHA on the score."""
    from offrl.engine import load_run
    from offrl.sweeps import sweep

    try:
        result = sweep("iql", pendulum_tiny, grid={"expectile": [0.6, 0.9]}, seeds=2, steps=4, eval_every=2, eval_episodes=1,
                       log_every=2, out=tmp_path / "s", config_overrides=TINY, progress=False, echo=lambda *_: None,
                       backend="ray", scheduler="asha", ray_cpus=2)
    finally:
        ray.shutdown()
    assert sorted(r.point["expectile"] for r in result.results) == [0.6, 0.9]
    for r in result.results:
        assert len(r.scores) == 2 and all(s == s for s in r.scores)  # two seeds, evaluated
        run = load_run(r.folder)
        assert run.config.expectile == r.point["expectile"] and run.step in (2, 4)
    record = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert len(record["results"]) == 2 and record["best"] is not None


def test_range_ends_are_checked_before_ray_starts(pendulum_tiny):
    from offrl.sweeps import sweep

    for item, words in (("expectile=0.5:1.5", "--grid expectile: value '1.5'"), ("expectiles=0.5:0.9", "--grid expectiles")):
        with pytest.raises(ConfigError, match=words):
            sweep("iql", pendulum_tiny, grid=[item], backend="ray", search="random", progress=False, echo=lambda *_: None)
    assert not ray.is_initialized()


@pytest.mark.slow  # Ray start-up and JAX in each worker: about 1-2 minutes on the shared 2-core machine
def test_optuna_search_on_two_local_workers(pendulum_tiny, tmp_path):
    """3 trials drawn by Optuna's TPE from a range and a choice, on a local Ray of 2 CPUs."""
    pytest.importorskip("optuna")
    from offrl.engine import load_run
    from offrl.sweeps import sweep

    try:
        result = sweep("iql", pendulum_tiny, grid=["expectile=0.6:0.9", "awr_inverse_temperature=1,3"], seeds=2, steps=4,
                       eval_every=2, eval_episodes=1, log_every=2, out=tmp_path / "s", config_overrides=TINY,
                       progress=False, echo=lambda *_: None, backend="ray", search="optuna", num_samples=3, ray_cpus=2)
    finally:
        ray.shutdown()
    assert len(result.results) == 3
    for r in result.results:
        assert 0.6 <= r.point["expectile"] <= 0.9 and r.point["awr_inverse_temperature"] in (1.0, 3.0)
        assert len(r.scores) == 2 and all(s == s for s in r.scores)
        run = load_run(r.folder)
        assert run.config.expectile == pytest.approx(r.point["expectile"]) and run.step == 4
    assert len({r.point["expectile"] for r in result.results}) == 3  # drawn, not a grid
    record = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert len(record["results"]) == 3 and record["best"] is not None
