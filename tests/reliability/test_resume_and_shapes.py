"""A resume keeps the run's config; data and env shapes are checked before anything runs.

Rules (``offrl.engine.training.resumed_config``): ``--set`` on a resume may only repeat stored
values; ``--steps`` may not extend a run past its learning-rate schedule; a damaged
``config.json`` is refused in one line naming it. Every refusal happens before the folder is
touched: ``config.json`` is byte-identical afterwards.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from pendulum_data import make_pendulum_dataset  # noqa: E402

from offrl import engine  # noqa: E402
from offrl.data.checks import DatasetWarning  # noqa: E402
from offrl.errors import ConfigError  # noqa: E402

TINY = {"hidden_dims": "32,32", "batch_size": "32"}
KW = dict(seeds=1, log_every=20, eval_every=20, eval_episodes=0, progress=False)


@pytest.fixture(scope="module")
def data():
    return make_pendulum_dataset(episodes=2, noise=1.0, seed=3)


@pytest.fixture(scope="module")
def iql_run(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("runs") / "iql"
    engine.train("iql", data, steps=40, out=folder, config_overrides=TINY, stop_at=20, **KW)
    return folder


def _unchanged(folder: Path, before: bytes):
    assert (folder / "config.json").read_bytes() == before


def test_set_that_changes_a_field_is_refused_before_touching_the_folder(iql_run, data):
    before = (iql_run / "config.json").read_bytes()
    for change in ({"expectile": "0.9"}, {"hidden_dims": "64,64"}):
        with pytest.raises(ConfigError) as err:
            engine.train("iql", data, steps=40, out=iql_run, resume=True, config_overrides={**TINY, **change}, **KW)
        message = str(err.value)
        assert "config.json" in message and next(iter(change)) in message and "\n" not in message
        _unchanged(iql_run, before)


def test_steps_past_the_schedule_are_refused_with_the_reason(iql_run, data):
    before = (iql_run / "config.json").read_bytes()
    with pytest.raises(ConfigError, match=r"schedule_steps 40 .*--steps 40"):
        engine.train("iql", data, steps=80, out=iql_run, resume=True, config_overrides=TINY, **KW)
    _unchanged(iql_run, before)


def test_steps_extend_a_run_without_a_schedule(tmp_path, data):
    folder = tmp_path / "bc"
    engine.train("bc", data, steps=20, out=folder, config_overrides=TINY, **KW)
    run = engine.train("bc", data, steps=40, out=folder, resume=True, config_overrides=TINY, **KW)
    assert run.step == 40
    assert json.loads((folder / "config.json").read_text())["settings"]["steps"] == 40


@pytest.mark.parametrize("text, phrase", [("{not json", "is not valid JSON (line 1"),
                                          ('{"algo": "iql", "config": {}}', "lacks 'settings'"),
                                          ("[1, 2]", "lacks 'algo'")])
def test_damaged_config_json_is_one_line_naming_it(tmp_path, data, text, phrase):
    folder = tmp_path / "run"
    engine.train("iql", data, steps=20, out=folder, config_overrides=TINY, **KW)
    (folder / "config.json").write_text(text)
    with pytest.raises(ConfigError) as err:
        engine.train("iql", data, steps=20, out=folder, resume=True, config_overrides=TINY, **KW)
    assert phrase in str(err.value) and "config.json" in str(err.value)


def test_string_values_in_config_json_name_the_file_not_set(tmp_path, data):
    folder = tmp_path / "run"
    engine.train("iql", data, steps=20, out=folder, config_overrides=TINY, **KW)
    record = json.loads((folder / "config.json").read_text())
    record["config"]["expectile"] = "high"
    (folder / "config.json").write_text(json.dumps(record))
    with pytest.raises(ConfigError) as err:
        engine.train("iql", data, steps=20, out=folder, resume=True, **KW)
    message = str(err.value)
    assert "config.json" in message and "expectile" in message and "--set" not in message


def test_pendulum_data_with_a_hopper_env_is_refused_before_training(tmp_path, data):
    with pytest.raises(ConfigError, match=r"3-dimensional observations .* Hopper-v5 has 11-dimensional"):
        engine.train("bc", data, steps=20, out=tmp_path / "run", env="Hopper-v5", config_overrides=TINY, **KW)
    assert not (tmp_path / "run" / "config.json").exists()


def test_evaluate_in_the_wrong_env_is_refused(tmp_path, data):
    engine.train("bc", data, steps=20, out=tmp_path / "run", config_overrides=TINY, **KW)
    with pytest.raises(ConfigError, match="MountainCarContinuous-v0 has 2-dimensional observations"):
        engine.evaluate(tmp_path / "run", episodes=1, env="MountainCarContinuous-v0")


def test_a_batch_beyond_memory_is_refused_and_one_beyond_the_dataset_warns(tmp_path, data):
    with pytest.raises(ConfigError, match=r"batch_size 99999999999 needs about [\d,]+ GB per minibatch, more than half"):
        engine.train("bc", data, steps=20, out=tmp_path / "run", config_overrides={"batch_size": "99999999999"}, **KW)
    assert not (tmp_path / "run").exists()
    with pytest.warns(DatasetWarning, match=r"batch_size 1000 is larger than the dataset \(\d+ transitions\)"):
        engine.train("bc", data, steps=20, out=tmp_path / "ok", config_overrides={"hidden_dims": "32,32", "batch_size": "1000"}, **KW)


def test_arrays_that_do_not_fit_the_device_are_refused_before_the_folder_is_written(tmp_path, data, monkeypatch):
    from offrl.engine import data as engine_data

    rows = len(data)
    need = 4 * rows * (2 * 3 + 1 + 2)  # Pendulum: 3-dim observations, 1-dim actions, rewards, masks
    info = engine_data.data_info(data, None, None)
    assert engine_data.array_bytes(rows, info) == need
    # free memory just below the arrays plus their temporary: refused, naming the sizes and the fix
    monkeypatch.setattr(engine_data, "device_free_bytes", lambda device=None: (need, "cuda:0"))
    with pytest.raises(ConfigError, match=rf"its {rows:,} transitions need [\d.]+ GB of arrays on cuda:0, which has "
                                          r"[\d.]+ GB free; .*no host-resident sampling path.*smaller file"):
        engine.train("bc", data, steps=20, out=tmp_path / "run", config_overrides=TINY, **KW)
    assert not (tmp_path / "run").exists()
    # ample memory: trains
    monkeypatch.setattr(engine_data, "device_free_bytes", lambda device=None: (100 * need, "cuda:0"))
    engine.train("bc", data, steps=20, out=tmp_path / "ok", config_overrides=TINY, **KW)
    assert (tmp_path / "ok" / "config.json").exists()


def test_device_free_bytes_reports_this_machine():
    from offrl.engine.data import device_free_bytes

    free, name = device_free_bytes()
    assert free is None or free > 0
    assert "cpu" in name or "cuda" in name or "gpu" in name or "tpu" in name
