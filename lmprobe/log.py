"""Logging: lmprobe's records go to one logger tree ('lmprobe'), on stderr, from process 0 only
(errors from every process), and third-party import noise is turned off.

    from lmprobe import log
    log.setup("info", is_main=runtime.is_main)   # a front end, after joining the job
    log.get(__name__).warning("...")               # 'warning: ...' on stderr

Library code only creates records: nothing is shown until a program calls ``setup`` (Python's own
last-resort handler still shows warnings and errors). What a user must see even in a plain script
(a fallback, a re-placement of weights, a recompilation) is a ``notice``: a Python warning
(category ``Notice``), on stderr once per message. Results (a front end's summary table) are
not logged: they go to stdout. ``Progress`` is progress as log lines, where no terminal shows a bar.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable

ROOT = "lmprobe"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# transformers warns "PyTorch was not found..." at import when torch is absent (advisory warnings)
# and tells about tokenizers and generation settings at warning level: ours already says what matters.
QUIET_ENV = {"TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "TRANSFORMERS_VERBOSITY": "error",
             "TF_CPP_MIN_LOG_LEVEL": "2"}


def quiet_third_party() -> None:
    """Silence third-party import-time advisories (before they are imported); the user's own
    settings of these environment variables win. On a host without TPU chips where libtpu is
    installed (a developer's install, or a CPU host's that compiles for TPU targets) and no other jax
    plugin is, jax runs on the CPU alone (JAX_PLATFORMS=cpu, unless set): else it starts its TPU
    backend when a program first touches a device, and libtpu's failed look-up of this host's TPU
    role printed a screen of errors on stderr before jax fell back to the CPU. Compiling for a TPU
    target needs no TPU backend (lmprobe.planning.targets)."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    if "JAX_PLATFORMS" not in os.environ and not tpu_chips_here() and _only_libtpu_installed():
        os.environ["JAX_PLATFORMS"] = "cpu"


def tpu_chips_here() -> bool:
    """Whether this host has TPU chips (their device files)."""
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def _only_libtpu_installed() -> bool:
    """libtpu is installed and no jax plugin (CUDA, ROCm, ...): jax's backends are the TPU's and the CPU's."""
    if importlib.util.find_spec("libtpu") is None or importlib.util.find_spec("jax_plugins") is not None:
        return False
    from importlib.metadata import entry_points

    return not entry_points(group="jax_plugins")


class Notice(UserWarning):
    """Something the engine did instead of what was asked, that a user must see once."""


def notice(message: str, *, stacklevel: int = 1) -> None:
    """``message`` as a ``Notice`` warning: on stderr once per message (Python's default filter), in
    a plain script as in a front end; shown at the line that calls ``notice`` (``stacklevel`` 1;
    2: that line's caller, as for ``warnings.warn``)."""
    warnings.warn(message, Notice, stacklevel=stacklevel + 1)


def get(name: str = ROOT) -> logging.Logger:
    """The logger ``name`` under lmprobe's tree ('experiments.byod' -> 'lmprobe.experiments.byod')."""
    return logging.getLogger(name if name == ROOT or name.startswith(ROOT + ".") else f"{ROOT}.{name}")


class _Stderr(logging.StreamHandler):
    """A handler writing to the current ``sys.stderr`` (which tests and notebooks replace)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.levelno == logging.INFO else f"{record.levelname.lower()}: {message}"


_handler: _Stderr | None = None


def setup(verbosity: str = "info", *, is_main: Callable[[], bool] = lambda: True) -> None:
    """Show lmprobe's records at ``verbosity`` and above on stderr; below ERROR only where
    ``is_main()`` (process 0 of a multi-process job). Calling it again replaces the settings."""
    global _handler
    if verbosity not in LEVELS:
        from lmprobe.errors import LmprobeError

        raise LmprobeError(f"verbosity '{verbosity}' is not one of {', '.join(LEVELS)}")
    logger = logging.getLogger(ROOT)
    if _handler is not None:
        logger.removeHandler(_handler)
    _handler = _Stderr()
    _handler.setFormatter(_Format("%(message)s"))
    _handler.addFilter(lambda record: record.levelno >= logging.ERROR or is_main())
    logger.addHandler(_handler)
    logger.setLevel(LEVELS[verbosity])
    logger.propagate = False
    if verbosity == "debug":  # third parties' warnings too
        os.environ["TRANSFORMERS_VERBOSITY"] = "warning"
        if "transformers" in sys.modules:
            sys.modules["transformers"].logging.set_verbosity_warning()


def enabled(level: int = logging.INFO) -> bool:
    """Whether lmprobe's records of ``level`` are shown (progress bars follow INFO)."""
    return logging.getLogger(ROOT).isEnabledFor(level)


PROGRESS_INTERVAL_S = 30.0  # seconds between two ``Progress`` lines


class Progress:
    """A tqdm-like ``Progress(iterable, desc=, total=)`` that logs (INFO) instead of drawing a bar,
    for a stderr that is a file or a job log: the stage's start (desc and total), every
    ``interval`` seconds done/total with the rate and ETA (from a timer thread: a long item is no
    silence), and the end with the elapsed time. As with tqdm, an item is done when the next one
    is asked for. ``interval``, ``clock`` and ``logger`` are injectable (tests)."""

    def __init__(self, iterable: Iterable, desc: str = "", total: int | None = None, *, unit: str = "it",
                 interval: float = PROGRESS_INTERVAL_S, clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger | None = None, **_):
        self.iterable, self.desc, self.unit = iterable, desc or "progress", unit
        self.total = total if total is not None else getattr(iterable, "__len__", lambda: None)()
        self.interval, self.clock, self.logger = interval, clock, logger or get("progress")
        self.done, self.start = 0, None

    def __len__(self) -> int:
        return self.total if self.total is not None else len(self.iterable)  # as tqdm: a TypeError without one

    def __iter__(self):
        self.done, self.start = 0, self.clock()
        self.logger.info(f"{self.desc}: {self._count()} started")
        stop = threading.Event()
        beat = threading.Thread(target=self._beat, args=(stop,), name=f"progress of {self.desc}", daemon=True)
        beat.start()
        try:
            for item in self.iterable:
                yield item
                self.done += 1
        finally:  # also when the loop is left early: no line after the stage
            stop.set()
            beat.join()
        self.logger.info(f"{self.desc}: {self._count()} done in {duration(self.clock() - self.start)}")

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            self.logger.info(f"{self.desc}: {self.status(self.done, self.clock() - self.start)}")

    def _count(self, done: int | None = None) -> str:
        done = self.done if done is None else done
        return f"{done}/{self.total}" if self.total is not None else str(done)

    def status(self, done: int, elapsed: float) -> str:
        """'12/40 (30%) after 1m02s, 5.2 s/it, ETA 2m25s' (no rate or ETA before the first item)."""
        line = self._count(done) + (f" ({100 * done / self.total:.0f}%)" if self.total else "")
        line += f" after {duration(elapsed)}"
        if not done or elapsed <= 0:
            return line
        rate = done / elapsed
        line += f", {rate:.2f} {self.unit}/s" if rate >= 1 else f", {1 / rate:.1f} s/{self.unit}"
        if self.total is not None and done <= self.total:
            line += f", ETA {duration((self.total - done) / rate)}"
        return line


def duration(seconds: float) -> str:
    """'4.2s', '3m05s', '2h07m'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
