"""Run-directory artifacts written atomically, and cached arrays that make reruns resume.

A crash never leaves a half-written file: everything is written to a temporary file in the same
directory and renamed into place. ``cached`` computes an array once per key and reloads it on
later runs, so an interrupted run restarts where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Callable

import numpy as np


def _atomic(path: str, write: Callable, mode: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str, data) -> None:
    """``data`` as indented JSON at ``path``, atomically (numpy scalars and arrays allowed)."""
    _atomic(path, lambda f: json.dump(data, f, indent=2, default=_jsonable), "w")


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def write_jsonl(path: str, rows) -> None:
    """One JSON object per line, atomically (lm-eval-harness style samples files)."""
    _atomic(path, lambda f: f.writelines(json.dumps(r, default=_jsonable) + "\n" for r in rows), "w")


def cache_key(**parts) -> str:
    """A short stable hash of the settings an artifact depends on."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached(path: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """The array at ``path`` (.npy) if a previous run saved it, else ``compute()`` saved atomically."""
    if os.path.exists(path):
        return np.load(path)
    array = np.asarray(compute())
    _atomic(path, lambda f: np.save(f, array), "wb")
    return array
