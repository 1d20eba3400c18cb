"""One writer per output directory: a front end holds OUTPUT_DIR/.lmprobe.lock while it runs
(``common.output_dir`` takes it, ``common.main_guard`` lets it go); a second run on the same
directory stops with one line naming the first (its PID, host, start and command).

Local directories: the lock file is held with ``flock``, which the kernel lets go when the holder
ends, however it ends (kill -9 too): a lock file that a process left behind is taken over at once,
whatever it says. The PID and host written in it are for the message. Where the file system has no
``flock``, and in object stores (gs://), what the file says decides: a lock of a process on this
host that is no longer alive is taken over, and so is one of another host that its holder has not
renewed for LEASE_S (a holder renews it every RENEW_S). An object store offers no atomic
create-if-absent through epath: two runs started within about a second of each other on one gs://
directory may both take it; give concurrent runs their own ``--output_dir`` there.

In a multi-process run (a pod) process 0 alone takes the lock; the others learn from it whether it
could (one collective, as ``lmprobe.store.check_writable``), so none waits on another.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import socket
import sys
import threading
import time

from lmprobe import log as _logging
from lmprobe import store
from lmprobe.engine import runtime
from lmprobe.errors import LmprobeError

log = _logging.get(__name__)
NAME = ".lmprobe.lock"
LEASE_S, RENEW_S = 600.0, 60.0  # a lock that flock does not hold: stale when not renewed for LEASE_S


class Lock:
    """This process's hold on one directory's lock file: the flock'd descriptor (local), or the
    thread that renews the file (no flock, object stores)."""

    def __init__(self, path: str, fd: int | None = None):
        self.path, self.fd = path, fd
        self.stop = threading.Event()
        if fd is None:
            threading.Thread(target=self._renew, daemon=True, name=f"renew {path}").start()

    def _renew(self) -> None:
        while not self.stop.wait(RENEW_S):
            with contextlib.suppress(Exception):  # a missed renewal: the next one, LEASE_S is ten of them
                _write_record(self.path)

    def release(self) -> None:
        self.stop.set()
        with contextlib.suppress(Exception):  # gone already (deleted by hand): nothing to let go
            if self.fd is not None or _is_ours(read_record(self.path)):
                store.epath_of(self.path).unlink()
        if self.fd is not None:
            os.close(self.fd)


_held: dict[str, Lock] = {}  # directory -> this process's lock on it


def take(directory) -> None:
    """Hold ``directory``'s lock for this process (again: nothing to do), or raise one LmprobeError
    naming the process that holds it. Collective: every process of a run calls it; process 0 takes it."""
    key = str(directory) if store.is_remote(directory) else os.path.realpath(directory)
    problem = None
    if runtime.is_main() and key not in _held:
        try:
            _held[key] = _take(key)
        except LmprobeError as e:
            problem = str(e)
    if not runtime.agree(problem is None):
        raise LmprobeError(problem or f"process 0 could not take the lock of output directory {key} (see its log)")


def release_all() -> None:
    """Let go of every lock this process holds (a front end's end, however it ends)."""
    while _held:
        _held.popitem()[1].release()


def _take(directory: str) -> Lock:
    path = store.join(directory, NAME)
    if store.is_remote(path):
        return _take_by_record(directory, path)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LmprobeError(_in_use(directory, path, read_record(path), by_flock=True)) from None
            return _take_by_record(directory, path)  # no flock here (some network file systems)
        except ImportError:  # no fcntl (Windows)
            os.close(fd)
            return _take_by_record(directory, path)
        if _same_file(fd, path):  # not a file that its holder deleted as we opened it
            break
        os.close(fd)
    _said_taken_over(path, read_record(path))
    os.ftruncate(fd, 0)
    os.write(fd, _record())
    return Lock(path, fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _take_by_record(directory: str, path: str) -> Lock:
    record = read_record(path)
    if record is not None and not _is_ours(record) and not _gone(record):
        raise LmprobeError(_in_use(directory, path, record, by_flock=False))
    _said_taken_over(path, record)
    _write_record(path)
    return Lock(path)


def _record() -> bytes:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": _now(),
                       "renewed": time.time(), "command": " ".join(sys.argv)}).encode()


def _write_record(path: str) -> None:
    store.write_bytes(path, _record())


def read_record(path: str) -> dict | None:
    """What the lock file at ``path`` says (pid, host, started, renewed, command); None when there
    is none or it is empty or unreadable (being written)."""
    try:
        record = json.loads(store.read_bytes(path))
    except (LmprobeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _is_ours(record: dict | None) -> bool:
    return bool(record) and record.get("pid") == os.getpid() and record.get("host") == socket.gethostname()


def _gone(record: dict) -> bool:
    """Whether the process a lock file names has ended: its PID is not alive on this host, or, on
    another host, it has not renewed the file for LEASE_S."""
    if record.get("host") == socket.gethostname() and isinstance(record.get("pid"), int):
        try:
            os.kill(record["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False
    renewed = record.get("renewed")
    return not isinstance(renewed, (int, float)) or time.time() - renewed > LEASE_S


def _said_taken_over(path: str, record: dict | None) -> None:
    if record and not _is_ours(record):
        log.info(f"{path}: took over the lock of process {record.get('pid')} on {record.get('host')}, "
                 "which has ended")


def _in_use(directory: str, path: str, record: dict | None, *, by_flock: bool) -> str:
    """The one line a second run gets: who holds ``directory`` (what its lock file at ``path`` says)."""
    if not record:
        return f"output directory {directory} is in use by another run (its lock {path} is being written): " \
               "wait for it to end, or pass another --output_dir"
    who = f"process {record.get('pid')} on {record.get('host')}"
    since = f", running since {record.get('started')}" if record.get("started") else ""
    command = f": {record['command']}" if record.get("command") else ""
    checked = by_flock or record.get("host") == socket.gethostname()  # it is alive: no advice to delete
    fix = "" if checked else f"; if that run has ended, delete {path}"
    return (f"output directory {directory} is in use by {who}{since}{command}; wait for it to end, or pass "
            f"another --output_dir{fix}")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
