"""One writer per run folder: a second process is refused naming the holder's PID; a lock left
by a killed process is taken over with a warning; real processes, real flock."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

fcntl = pytest.importorskip("fcntl", reason="run-folder locks use fcntl.flock (POSIX only)")

from offrl.errors import RunFolderError  # noqa: E402
from offrl.locking import RunLock, acquire, lock_holder, release  # noqa: E402
from offrl.run_folder import RunFolderWarning  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLD = """
import sys, time
from offrl.locking import RunLock
with RunLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(folder, seconds=60):
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_naming_the_holders_pid(tmp_path):
    proc = _holder(tmp_path / "run")
    try:
        assert lock_holder(tmp_path / "run") == proc.pid
        with pytest.raises(RunFolderError, match=rf"run is in use by another offrl process \(PID {proc.pid}\)") as exc:
            acquire(tmp_path / "run")
        assert "\n" not in str(exc.value)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_warning(tmp_path):
    proc = _holder(tmp_path / "run")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert (tmp_path / "run" / ".lock").read_text().split()[0] == str(proc.pid)  # the file outlives the process
    assert lock_holder(tmp_path / "run") is None
    with pytest.warns(RunFolderWarning, match=rf"was left by PID {proc.pid}, which is no longer running"):
        with RunLock(tmp_path / "run"):
            assert (tmp_path / "run" / ".lock").read_text().split()[0] == str(os.getpid())
    assert (tmp_path / "run" / ".lock").read_text() == ""  # a clean release leaves no holder behind


def test_two_processes_started_together_one_wins(tmp_path):
    script = """
import sys, time
from offrl.errors import RunFolderError
from offrl.locking import RunLock
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
try:
    with RunLock(sys.argv[1]):
        print("won", flush=True)
        time.sleep(3)
except RunFolderError as exc:
    print("refused", exc, flush=True)
"""
    env = {**os.environ, "PYTHONPATH": ROOT}
    start = str(time.time() + 4)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run"), start], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outputs = {p.pid: p.communicate(timeout=60)[0].strip() for p in procs}
    winners = [pid for pid, out in outputs.items() if out == "won"]
    losers = [out for out in outputs.values() if out.startswith("refused")]
    assert len(winners) == 1 and len(losers) == 1, outputs
    assert f"PID {winners[0]}" in losers[0]


def test_the_lock_is_reentrant_within_a_process_and_an_error_releases_it(tmp_path):
    with RunLock(tmp_path):
        with RunLock(tmp_path):
            pass
        assert (tmp_path / ".lock").read_text().split()[0] == str(os.getpid())
    acquire(tmp_path)
    acquire(tmp_path)
    with pytest.raises(ValueError):
        with RunLock(tmp_path):
            raise ValueError("boom")
    assert (tmp_path / ".lock").read_text() == ""
    release(tmp_path)  # nothing held: a no-op


def test_a_prefs_trainer_refuses_a_folder_another_process_writes(tmp_path):
    pytest.importorskip("torch")
    from offrl.prefs.config import SFTConfig
    from offrl.prefs.runs import finish_run, start_run

    proc = _holder(tmp_path / "run")
    try:
        with pytest.raises(RunFolderError, match=rf"PID {proc.pid}"):
            start_run(str(tmp_path / "run"), "sft", "model", SFTConfig())
        assert not (tmp_path / "run" / "config.json").exists()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    with pytest.warns(RunFolderWarning):
        start_run(str(tmp_path / "run"), "sft", "model", SFTConfig())
    assert lock_holder(tmp_path / "run") == os.getpid()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["trainer"] == "sft"
    finish_run(str(tmp_path / "run"), [])
    assert (tmp_path / "run" / ".lock").read_text() == ""
