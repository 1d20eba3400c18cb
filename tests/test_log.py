"""Progress as log lines (lmprobe.log.Progress) and how the front ends choose it."""

import importlib.util
import io
import logging
import os
import subprocess
import sys
import threading
import time

import pytest
from tqdm.auto import tqdm

from lmprobe import log
from lmprobe.cli import common
from lmprobe.engine import runtime
from lmprobe.methods import Ticker


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Lines(logging.Handler):
    """A logger's messages, in a list."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def lines():
    logger, handler = logging.getLogger("tests.progress"), Lines()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield handler.lines, logger
    logger.removeHandler(handler)


def test_progress_status_has_done_total_rate_and_eta():
    bar = log.Progress(range(10), desc="m: embedding")
    assert bar.status(0, 30.0) == "0/10 (0%) after 30.0s"  # nothing done yet: no rate
    assert bar.status(3, 30.0) == "3/10 (30%) after 30.0s, 10.0 s/it, ETA 1m10s"
    assert bar.status(6, 3.0) == "6/10 (60%) after 3.0s, 2.00 it/s, ETA 2.0s"
    assert log.Progress(iter("ab"), unit="text").status(1, 2.0) == "1 after 2.0s, 2.0 s/text"  # no total


def test_progress_logs_start_a_line_every_interval_even_inside_a_long_item_and_the_end(lines):
    lines, logger = lines
    clock = Clock()
    for _ in log.Progress(range(2), desc="m: embedding", interval=0.01, clock=clock, logger=logger):
        clock.now += 10
        time.sleep(0.1)  # a long item: the timer still logs
    assert lines[0] == "m: embedding: 0/2 started" and lines[-1] == "m: embedding: 2/2 done in 20.0s"
    beats = lines[1:-1]
    assert len(beats) >= 2 and all(line.startswith("m: embedding: ") and " after " in line for line in beats)
    assert "1/2 (50%) after 20.0s, 20.0 s/it, ETA 20.0s" in " ".join(beats)


def test_progress_counts_an_item_done_when_the_next_is_asked_for_and_moves_a_ticker(lines):
    lines, logger = lines

    def progress(iterable, desc, total):
        return log.Progress(iterable, desc=desc, total=total, interval=60, logger=logger)

    ticker = Ticker(progress, 4, "t")
    ticker.advance(2)
    ticker.advance_to(4)
    assert lines[0] == "t: 0/4 started" and lines[1].startswith("t: 4/4 done in ") and len(lines) == 2


def test_progress_left_early_stops_its_timer(lines):
    lines, logger = lines
    bar = log.Progress(range(100), desc="x", interval=0.01, logger=logger)
    for i in bar:
        if i == 1:
            break  # the loop drops the generator: its finally stops the timer
    count = len(lines)
    time.sleep(0.1)
    assert len(lines) == count and not [t for t in threading.enumerate() if t.name == "progress of x"]


def test_progress_without_a_total_and_durations():
    assert log.duration(4.25) == "4.2s" and log.duration(185) == "3m05s" and log.duration(7620) == "2h07m"
    stream = iter(x for x in "ab")  # no len()
    bar = log.Progress(stream, desc="gen", interval=60, clock=Clock())
    assert bar.total is None and list(bar) == ["a", "b"]


def test_cli_progress_is_a_bar_on_a_terminal_log_lines_elsewhere_and_nothing_on_other_processes(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    common.parse(common.parser("x"), [])  # --verbosity=info
    monkeypatch.setattr("sys.stderr", Terminal())
    assert isinstance(common.progress(range(2), desc="x"), tqdm)
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a file: `> run.log 2>&1`
    bar = common.progress(range(2), desc="x", total=2)
    assert isinstance(bar, log.Progress) and list(bar) == [0, 1]
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    numbers = range(2)
    assert common.progress(numbers, desc="x") is numbers


def test_a_front_end_logs_progress_to_a_file(monkeypatch, capsys):
    common.parse(common.parser("x"), [])
    list(common.progress(range(3), desc="stage", total=3))
    err = capsys.readouterr().err
    assert "stage: 0/3 started\n" in err and "stage: 3/3 done in " in err


NOTICE_SCRIPT = """
import jax, jax.numpy as jnp
from lmprobe.engine import Scorer
from lmprobe.models import CallableLM
model = CallableLM(lambda p, ids, mask: p["w"][ids], {"w": jnp.ones((16, 16))}, max_length=16)
for _ in range(2):  # two scorers, two queries each: the fallback is said once
    scorer = Scorer(model, batch_size=2)
    scorer.score_pairs([[1, 2, 3]], [[1, 2, 4]])
    scorer.score_pairs([[1, 2, 3]], [[1, 2, 5]])
"""


def test_a_notice_reaches_a_plain_scripts_stderr_once():
    """No log.setup: a fallback is a warning on stderr, once, in a script that configures nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    done = subprocess.run([sys.executable, "-c", NOTICE_SCRIPT], capture_output=True, text=True, timeout=120,
                          env={**env, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Notice: callable models have no packed rows") == 1, done.stderr


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None or log.tpu_chips_here(),
                    reason="needs libtpu (the test extra installs it) on a host without TPU chips")
def test_a_run_on_a_host_without_tpu_chips_prints_nothing_of_libtpu():
    """With libtpu installed, jax starts its TPU backend when a program first touches a device: on a host without
    TPU chips libtpu's failed look-up of the host's TPU role printed errors on stderr before jax fell back to the
    CPU. Importing lmprobe first keeps jax on the CPU (the control shows the noise; libtpu loads there even while
    another process holds its lock, as this session's TPU compilations may, and without the host's role that
    compiling for a target gives this process: lmprobe.planning.targets.prepare_host)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS" and not k.startswith("TPU_")}
    outputs = [subprocess.run([sys.executable, "-c", f"{first}import jax; print(jax.devices()[0].platform)"],
                              capture_output=True, text=True, timeout=120,
                              env={**env, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"})
               for first in ("", "import lmprobe; ")]
    assert all(done.returncode == 0 and done.stdout.strip() == "cpu" for done in outputs), outputs
    control, with_lmprobe = (done.stderr for done in outputs)
    assert "TPU" in control  # libtpu's look-up, unasked
    assert with_lmprobe == ""
