"""A full disk or a read-only run folder: one sentence (exit 2), no partial ``.tmp`` left, and
nothing already written truncated or lost. Run on real small tmpfs mounts (needs root and
``mount``; skipped with the reason elsewhere)."""

import json
import os
import subprocess
import uuid

import numpy as np
import pytest
from conftest import tiny_state, trees_equal

from offrl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from offrl.errors import RunFolderError
from offrl.run_folder import MetricsLog, atomic_write, check_writable, read_metrics, truncate_metrics


def _mount(path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path):
    """A 3 MB tmpfs, unmounted afterwards."""
    mounted = []

    def make(size="3m"):
        path = tmp_path / f"fs{len(mounted)}"
        _mount(path, size)
        mounted.append(path)
        return path

    yield make
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(folder, leave: int) -> None:
    """Fill ``folder``'s device up to ``leave`` free bytes."""
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    with open(folder / f"filler-{uuid.uuid4().hex}", "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))


def _no_tmp(folder) -> bool:
    return not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def _big_state(mb: float) -> dict:
    state = tiny_state()
    state["agent"]["critic"]["params"]["kernel"] = np.ones((int(mb * 1e6 / 4) // 2, 2), np.float32)
    return state


def test_atomic_write_on_a_full_disk_names_the_folder_and_the_size_and_keeps_the_old_file(tmpfs):
    fs = tmpfs()
    target = fs / "metrics.csv"
    target.write_text("step,loss\n1,0.5\n")
    _fill(fs, leave=100_000)
    with pytest.raises(RunFolderError, match=rf"no space left on the device holding {fs}: 1\.0 MB needed, 0\.[01] MB free") as exc:
        atomic_write(target, b"x" * 1_000_000)
    assert "\n" not in str(exc.value)
    assert target.read_text() == "step,loss\n1,0.5\n" and _no_tmp(fs)


def test_checkpoint_on_a_full_disk_keeps_the_previous_one_whole(tmpfs):
    fs = tmpfs("6m")
    ckpt = fs / "run" / "checkpoints"
    save_checkpoint(ckpt, _big_state(2.0), 10)
    with pytest.raises(RunFolderError, match=rf"no space left on the device holding {ckpt}: 8\.0 MB needed"):
        save_checkpoint(ckpt, _big_state(8.0), 20)
    assert _no_tmp(fs)
    assert sorted(p.name for p in ckpt.iterdir()) == ["latest.json", "step_10.msgpack", "step_10.msgpack.sha256"]
    record = latest_checkpoint(ckpt)
    assert record["step"] == 10 and trees_equal(load_checkpoint(record["path"], _big_state(2.0)), _big_state(2.0))


def test_metrics_log_never_truncates_or_tears_on_a_full_disk(tmpfs):
    fs = tmpfs()
    log = MetricsLog(fs)
    log.add([{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}])
    log.write_csv()
    jsonl, csv = (fs / "metrics.jsonl").read_bytes(), (fs / "metrics.csv").read_bytes()
    _fill(fs, leave=0)
    with pytest.raises(RunFolderError, match="no space left on the device holding"):
        log.add([{"step": 3, "loss": 0.1, "note": "x" * 20_000}])  # more than a page: cannot fit in a tail block
    with pytest.raises(RunFolderError, match="no space left on the device holding"):
        log.write_csv()
    assert (fs / "metrics.jsonl").read_bytes() == jsonl and (fs / "metrics.csv").read_bytes() == csv
    assert [r["step"] for r in read_metrics(fs / "metrics.jsonl")] == [1, 2] and _no_tmp(fs)


def test_resume_truncation_on_a_full_disk_rewrites_nothing_it_does_not_need_to(tmpfs):
    fs = tmpfs()
    path = fs / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (10, 20, 30)))
    before = path.read_bytes()
    _fill(fs, leave=0)
    assert [r["step"] for r in truncate_metrics(path, 30)] == [10, 20, 30]  # nothing dropped: untouched
    try:
        truncate_metrics(path, 20)  # dropping a row needs a rewrite, which may not fit
    except RunFolderError as exc:
        assert "no space left" in str(exc) and path.read_bytes() == before
    else:
        assert [r["step"] for r in read_metrics(path)] == [10, 20]
    assert _no_tmp(fs)


def test_read_only_run_folder_is_one_sentence(tmpfs):
    fs = tmpfs()
    (fs / "run" / "checkpoints").mkdir(parents=True)
    subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
    with pytest.raises(RunFolderError, match=rf"^{fs / 'run'} is read-only \(read-only file system\)"):
        check_writable(fs / "run")
    with pytest.raises(RunFolderError, match=rf"{fs / 'run' / 'checkpoints'} is read-only"):
        save_checkpoint(fs / "run" / "checkpoints", tiny_state(), 10)
    from offrl.locking import acquire

    with pytest.raises(RunFolderError, match=rf"^{fs / 'run'} is read-only"):
        acquire(fs / "run")


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory, pendulum_small):
    from offrl import data as offrl_data

    path = tmp_path_factory.mktemp("data") / "pendulum.npz"
    offrl_data.save(pendulum_small, path)
    return path


def test_train_on_a_3mb_disk_is_one_line_and_leaves_no_partial_file(tmpfs, dataset_file, capsys):
    """The issue's case: default-width networks on a 3 MB tmpfs. The first checkpoint (~4 MB)
    cannot fit: one line, exit 2, no .tmp, and the metrics rows already logged are intact."""
    from offrl.cli import main

    fs = tmpfs("3m")
    out = fs / "run"
    rc = main(["train", "--algo", "td3_bc", "--dataset", str(dataset_file), "--steps", "20", "--eval-every", "10",
               "--log-every", "10", "--eval-episodes", "0", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("offrl: error: no space left on the device holding") and "\n" not in err and "MB needed" in err
    assert _no_tmp(fs)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [10]


def test_cli_commands_on_a_read_only_run_folder_say_so_in_one_line(tmpfs, dataset_file, capsys):
    from offrl.cli import main

    fs = tmpfs("20m")
    out = fs / "run"
    assert main(["train", "--algo", "td3_bc", "--dataset", str(dataset_file), "--steps", "10", "--eval-every", "10",
                 "--log-every", "10", "--eval-episodes", "0", "--out", str(out), "--no-progress",
                 "--set", "hidden_dims=8,8"]) == 0
    subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
    capsys.readouterr()
    for argv in (["train", "--algo", "td3_bc", "--dataset", str(dataset_file), "--steps", "20", "--eval-every", "10",
                  "--eval-episodes", "0", "--out", str(out), "--resume", "--no-progress"],
                 ["plot", str(out)], ["export", str(out), "--format", "numpy"]):
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "is read-only (read-only file system)" in err and "\n" not in err, (argv, err)
