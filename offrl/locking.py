"""One writer per run folder: an exclusive ``flock`` on ``RUN/.lock``, which holds the writer's
PID and host.

The kernel releases a ``flock`` when its process ends, however it ends (``kill -9`` included),
so a lock file left by a dead process is simply taken over, with a
:class:`~offrl.run_folder.RunFolderWarning` naming the PID it recorded. A second process that
tries to write a locked folder is refused with one :class:`~offrl.errors.RunFolderError`
sentence naming the holder's PID. Within one process the lock is re-entrant (a trainer that
takes it and then calls a loop that takes it again).

Example::

    with RunLock("runs/iql"):          # refused if another process is training into runs/iql
        ...write config.json, metrics, checkpoints...

On a platform without ``fcntl`` (Windows) the lock does nothing.
"""

from __future__ import annotations

import errno
import os
import socket
import time
import warnings
from pathlib import Path

from offrl.errors import RunFolderError
from offrl.run_folder import RunFolderWarning, disk_errors

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

LOCK_NAME = ".lock"
_HELD: dict[str, list] = {}  # real path of the folder -> [fd, depth]


def _read_holder(fd: int) -> tuple[int | None, str]:
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
    except OSError:
        return None, ""
    pid = int(text[0]) if text and text[0].isdigit() else None
    return pid, text[1] if len(text) > 1 else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_holder(folder: str | Path) -> int | None:
    """The PID of the process holding ``folder``'s lock (this one's included), else ``None``."""
    if os.path.realpath(folder) in _HELD:
        return os.getpid()
    path = Path(folder) / LOCK_NAME
    if fcntl is None or not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read_holder(fd)[0]
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def acquire(folder: str | Path) -> None:
    """Take ``folder``'s lock for this process (re-entrant); see the module docstring."""
    folder = Path(folder)
    with disk_errors(folder):
        folder.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(folder)
    if key in _HELD:
        _HELD[key][1] += 1
        return
    if fcntl is None:  # pragma: no cover
        _HELD[key] = [None, 1]
        return
    with disk_errors(folder):
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise
        pid, host = _read_holder(fd)
        for _ in range(50):  # the holder may have taken the lock a moment ago and not yet written its PID
            if pid is not None:
                break
            time.sleep(0.02)
            pid, host = _read_holder(fd)
        os.close(fd)
        who = f"PID {pid}" + (f" on {host}" if host and host != socket.gethostname() else "") if pid else "an unknown PID"
        raise RunFolderError(f"{folder} is in use by another offrl process ({who}); wait for it to finish, "
                             "or choose another --out.") from None
    pid, host = _read_holder(fd)
    if pid is not None and pid != os.getpid():
        state = "is no longer running" if host in ("", socket.gethostname()) and not _alive(pid) else "no longer holds it"
        warnings.warn(f"{folder / LOCK_NAME} was left by PID {pid}, which {state} (killed?); taking the run folder over.",
                      RunFolderWarning, stacklevel=3)
    try:
        record = f"{os.getpid()} {socket.gethostname()}\n".encode()
        os.pwrite(fd, record, 0)  # then cut: a reader never sees an empty file while the lock is held
        os.ftruncate(fd, len(record))
    except OSError:
        pass  # the lock is held even if the PID could not be recorded (a full disk)
    _HELD[key] = [fd, 1]


def release(folder: str | Path, everything: bool = False) -> None:
    """Give back one hold of ``folder``'s lock (``everything``: all of this process's holds)."""
    key = os.path.realpath(folder)
    held = _HELD.get(key)
    if held is None:
        return
    held[1] = 0 if everything else held[1] - 1
    if held[1] > 0:
        return
    fd = _HELD.pop(key)[0]
    if fd is not None:
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class RunLock:
    """``with RunLock(folder):`` holds ``folder``'s lock for the block. Leaving the block by an
    exception gives back every hold this process has on the folder (the run has ended)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def __enter__(self) -> "RunLock":
        acquire(self.folder)
        return self

    def __exit__(self, kind, value, traceback) -> None:
        release(self.folder, everything=kind is not None)
