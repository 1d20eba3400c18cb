"""Installed markers: the ``installed.json`` an installer writes last into an asset's folder (PyPI
models: ``<cache root>/models/<alias>/``, data: ``<cache root>/data/<alias>/``), vouching for the
files beside it. Readers trust a marker that matches today's pins and do not re-hash the files.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import tempfile
from collections.abc import Iterable

from lmprobe.umask import usual_mode

MARKER = "installed.json"
INSTALL = "lmprobe assets --install {alias}"


def install_command(alias: str) -> str:
    """The command that installs the model or data asset ``alias``."""
    return INSTALL.format(alias=alias)


def read(directory: str, pins: dict, files: Iterable[str]) -> dict | None:
    """The marker in ``directory`` when it records each of ``pins`` (key: value) and each of ``files``
    (relative to ``directory``) is there, else None (no marker, an unreadable one, other pins)."""
    try:
        with open(os.path.join(directory, MARKER), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and all(record.get(key) == value for key, value in pins.items())
    return record if ok and all(os.path.isfile(os.path.join(directory, name)) for name in files) else None


def write(directory: str, record: dict) -> None:
    """``record`` plus the time (``installed_at``, UTC) as the marker in ``directory``; written to a
    temporary file renamed over the marker, so that a reader never sees half of one."""
    record = {**record, "installed_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{MARKER}.", suffix=".partial")
    try:
        with open(fd, "w", encoding="utf-8") as f:
            usual_mode(tmp)
            json.dump(record, f, indent=2)
        os.replace(tmp, os.path.join(directory, MARKER))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
