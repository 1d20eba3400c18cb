"""Logging: lmprobe's records go to one logger tree ('lmprobe'), on stderr, from process 0 only
(errors from every process), and third-party import noise is turned off.

    from lmprobe import log
    log.setup("info", is_main=runtime.is_main)   # a front end, after joining the job
    log.get(__name__).warning("...")               # 'warning: ...' on stderr

Library code only creates records: nothing is shown until a program calls ``setup`` (Python's own
last-resort handler still shows warnings and errors). Results (a front end's summary table) are
not logged: they go to stdout.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

ROOT = "lmprobe"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# transformers warns "PyTorch was not found..." at import when torch is absent (advisory warnings)
# and tells about tokenizers and generation settings at warning level: ours already says what matters.
QUIET_ENV = {"TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "TRANSFORMERS_VERBOSITY": "error",
             "TF_CPP_MIN_LOG_LEVEL": "2"}


def quiet_third_party() -> None:
    """Silence third-party import-time advisories (before they are imported); the user's own
    settings of these environment variables win."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)


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
