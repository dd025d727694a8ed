"""Checkpoints carry a SHA-256 written with them; a damaged one is refused in one sentence naming
the file, and the newest intact one is used instead, with a warning saying so."""

import hashlib
import json
import warnings

import numpy as np
import pytest
from conftest import tiny_state, trees_equal

from offrl.checkpoint import (CheckpointWarning, checkpoint_steps, latest_checkpoint, latest_intact_checkpoint,
                              load_checkpoint, save_checkpoint)
from offrl.errors import CheckpointError


def _one_line(exc_info, name: str) -> None:
    text = str(exc_info.value)
    assert "\n" not in text and name in text


def test_save_writes_a_sha256sum_readable_checksum_and_loads_identical(tmp_path):
    state = tiny_state()
    path = save_checkpoint(tmp_path, state, 10)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (tmp_path / "step_10.msgpack.sha256").read_text() == f"{digest}  step_10.msgpack\n"
    assert json.loads((tmp_path / "latest.json").read_text())["sha256"] == digest
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert trees_equal(load_checkpoint(path, tiny_state(1)), state)


@pytest.mark.parametrize("damage", ["flip3", "truncate", "empty"])
def test_damaged_checkpoint_is_refused_in_one_line(tmp_path, damage):
    path = save_checkpoint(tmp_path, tiny_state(), 10)
    data = bytearray(path.read_bytes())
    if damage == "flip3":
        for i in (40, len(data) // 2, len(data) - 5):
            data[i] ^= 0x10
    elif damage == "truncate":
        data = data[: len(data) // 3]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="is damaged") as exc:
        load_checkpoint(path, tiny_state())
    _one_line(exc, str(path))


def test_resume_falls_back_to_the_newest_intact_checkpoint_and_says_so(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, tiny_state(step), step, keep=0)
    newest = tmp_path / "step_30.msgpack"
    newest.write_bytes(newest.read_bytes()[:-1])
    with pytest.warns(CheckpointWarning, match=r"step_30.msgpack is damaged.*falling back .*step_20.msgpack \(step 20\)"):
        record = latest_intact_checkpoint(tmp_path)
    assert record["step"] == 20 and record["path"] == str(tmp_path / "step_20.msgpack")
    assert trees_equal(load_checkpoint(record["path"], tiny_state()), tiny_state(20))


def test_damaged_latest_json_falls_back_to_the_newest_step_file(tmp_path):
    for step in (10, 20):
        save_checkpoint(tmp_path, tiny_state(step), step, keep=0)
    (tmp_path / "latest.json").write_text('{"step": 20, "fi')
    with pytest.warns(CheckpointWarning, match="latest.json is damaged"):
        assert latest_checkpoint(tmp_path)["step"] == 20


def test_no_intact_checkpoint_is_one_error_listing_why(tmp_path):
    for step in (10, 20):
        save_checkpoint(tmp_path, tiny_state(step), step, keep=0)
        (tmp_path / f"step_{step}.msgpack").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"no intact checkpoint in .*step_20.msgpack is damaged.*step_10.msgpack is damaged") as exc:
        latest_checkpoint(tmp_path)
    _one_line(exc, str(tmp_path))
    with pytest.warns(CheckpointWarning, match="no intact checkpoint"):
        assert latest_intact_checkpoint(tmp_path) is None  # for the divergence message: never fails itself


def test_empty_folder_has_no_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None


def test_checkpoint_without_checksum_loads_with_a_warning_and_is_still_decode_checked(tmp_path):
    """A checkpoint written before checksums (no sidecar, no digest in latest.json)."""
    path = save_checkpoint(tmp_path, tiny_state(), 10)
    (tmp_path / "step_10.msgpack.sha256").unlink()
    record = json.loads((tmp_path / "latest.json").read_text())
    del record["sha256"]
    (tmp_path / "latest.json").write_text(json.dumps(record))
    with pytest.warns(CheckpointWarning, match="has no checksum"):
        assert trees_equal(load_checkpoint(path, tiny_state()), tiny_state())
    path.write_bytes(path.read_bytes()[:25])
    with pytest.warns(CheckpointWarning), pytest.raises(CheckpointError, match="is unreadable") as exc:
        load_checkpoint(path, tiny_state())
    _one_line(exc, str(path))


def test_damaged_checksum_file_is_refused(tmp_path):
    path = save_checkpoint(tmp_path, tiny_state(), 10)
    (tmp_path / "step_10.msgpack.sha256").write_text("not a digest\n")
    with pytest.raises(CheckpointError, match=r"checksum file .*step_10.msgpack.sha256 is damaged"):
        load_checkpoint(path, tiny_state())


def test_array_of_another_shape_is_refused_naming_the_leaf(tmp_path):
    path = save_checkpoint(tmp_path, tiny_state(), 10)
    target = tiny_state()
    target["agent"]["actor"]["params"]["kernel"] = np.zeros((3, 8), np.float32)
    with pytest.raises(CheckpointError, match=r"'/agent/actor/params/kernel' is float32\[3, 4\] where float32\[3, 8\] is expected"):
        load_checkpoint(path, target)


def test_stale_temporaries_are_cleaned_at_the_next_save(tmp_path):
    save_checkpoint(tmp_path, tiny_state(), 10)
    for name in ("step_20.msgpack.tmp", "latest.json.tmp", "step_20.msgpack.sha256.tmp", "step_20.msgpack.sha256"):
        (tmp_path / name).write_bytes(b"partial")
    save_checkpoint(tmp_path, tiny_state(), 30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "step_30.msgpack", "step_30.msgpack.sha256"]
    assert checkpoint_steps(tmp_path) == [30]


def test_a_pruned_checkpoint_takes_its_checksum_with_it(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, tiny_state(), step, keep=2)
    assert sorted(p.name for p in tmp_path.glob("*.sha256")) == ["step_20.msgpack.sha256", "step_30.msgpack.sha256"]


def test_cli_evaluate_and_resume_refuse_a_damaged_checkpoint_with_exit_2(tmp_path, pendulum_small, capsys):
    from offrl import engine
    from offrl.cli import main

    out = tmp_path / "run"
    engine.train("td3_bc", pendulum_small, steps=20, seeds=1, log_every=10, eval_every=10, eval_episodes=0,
                 out=out, progress=False, config_overrides={"hidden_dims": "8,8", "batch_size": "8"})
    ckpt = out / "checkpoints" / "step_20.msgpack"
    data = bytearray(ckpt.read_bytes())
    for i in (100, 200, 300):
        data[i] ^= 0xFF
    ckpt.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["evaluate", str(out), "--episodes", "1", "--env", "Pendulum-v1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("offrl: error:") and "step_20.msgpack" in err and ("damaged" in err or "no intact checkpoint" in err)
