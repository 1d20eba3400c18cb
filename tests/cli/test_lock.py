"""One writer per output directory (lmprobe.cli.lock): held with flock, taken over from a process
that is gone, decided by the lock file's PID, host and renewal where there is no flock."""

import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from lmprobe.cli import lock
from lmprobe.engine import runtime
from lmprobe.errors import LmprobeError

HOLD = """
import sys, time
from lmprobe.cli import lock
lock.take(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding tmp_path/run's lock (killed at the end)."""
    run = tmp_path / "run"
    run.mkdir()
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert process.stdout.readline().strip() == "held"
    yield run, process
    process.kill()
    process.wait()


@pytest.fixture(autouse=True)
def released():
    yield
    lock.release_all()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _write(run, **record):
    (run / lock.NAME).write_text(json.dumps({"host": socket.gethostname(), "started": "2024-05-01T12:00:00+00:00",
                                             "renewed": time.time(), "command": "lmprobe byod", **record}))


def test_a_run_holds_its_directory_and_lets_it_go(tmp_path):
    lock.take(tmp_path)
    record = lock.read_record(str(tmp_path / lock.NAME))
    assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
    lock.take(tmp_path)  # again in the same process (a front end called twice, a nested output_dir): nothing to do
    lock.take(os.path.relpath(tmp_path))  # another spelling of the same directory
    lock.release_all()
    assert not (tmp_path / lock.NAME).exists()


def test_a_second_run_gets_one_line_naming_the_first_and_takes_over_once_it_is_gone(holder, caplog):
    run, process = holder
    with pytest.raises(LmprobeError) as refused:
        lock.take(run)
    message = str(refused.value)
    assert message.startswith(f"output directory {run} is in use by process {process.pid} on {socket.gethostname()}, "
                              "running since ")
    assert "\n" not in message and message.endswith("wait for it to end, or pass another --output_dir")
    process.kill()  # kill -9: its lock file stays, its flock goes
    process.wait()
    assert (run / lock.NAME).exists()
    logger = logging.getLogger("lmprobe")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="lmprobe"):
            lock.take(run)
    finally:
        logger.removeHandler(caplog.handler)
    assert lock.read_record(str(run / lock.NAME))["pid"] == os.getpid()
    assert f"{run / lock.NAME}: took over the lock of process {process.pid} on {socket.gethostname()}, which has " \
           "ended" in caplog.messages


def test_a_lock_file_left_by_a_process_that_is_gone_is_taken_over(tmp_path):
    _write(tmp_path, pid=_dead_pid())
    lock.take(tmp_path)
    assert lock.read_record(str(tmp_path / lock.NAME))["pid"] == os.getpid()


@pytest.fixture
def no_flock(monkeypatch):
    """A file system without flock (some network file systems): the lock file's record decides."""
    import fcntl

    def refuse(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)


def test_without_flock_the_pid_on_this_host_decides(tmp_path, no_flock, holder):
    run, process = holder  # its lock file, written under flock: what it says decides here
    with pytest.raises(LmprobeError, match=f"in use by process {process.pid} on {socket.gethostname()}"):
        lock.take(run)
    _write(tmp_path, pid=_dead_pid())
    lock.take(tmp_path)
    assert lock.read_record(str(tmp_path / lock.NAME))["pid"] == os.getpid()


def test_without_flock_another_hosts_lock_holds_until_its_lease_runs_out(tmp_path, no_flock):
    _write(tmp_path, pid=1, host="pod-worker-0")
    with pytest.raises(LmprobeError, match=rf"in use by process 1 on pod-worker-0.*if that run has ended, delete "
                                           rf"{tmp_path / lock.NAME}$"):
        lock.take(tmp_path)
    _write(tmp_path, pid=1, host="pod-worker-0", renewed=time.time() - lock.LEASE_S - 1)
    lock.take(tmp_path)
    assert lock.read_record(str(tmp_path / lock.NAME))["host"] == socket.gethostname()


def test_other_processes_of_a_run_take_nothing_and_raise_with_process_0(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    monkeypatch.setattr(runtime, "agree", lambda flag: True)  # process 0 took it
    lock.take(tmp_path)
    assert not (tmp_path / lock.NAME).exists()
    monkeypatch.setattr(runtime, "agree", lambda flag: False)  # process 0 found it held
    with pytest.raises(LmprobeError, match="process 0 could not take the lock of output directory"):
        lock.take(tmp_path)
