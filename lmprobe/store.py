"""Run-directory artifacts written atomically by one process, and cached values that make reruns resume.

Paths are local paths or URLs that ``etils.epath`` understands (``gs://bucket/run`` with gcsfs or
TensorFlow installed); join them with ``join``, never ``os.path``. A crash never leaves a
half-written file: local files are written to a temporary file in the same directory and renamed
into place; remote objects (GCS) are written whole, which is atomic there.

``write_results`` keeps an earlier run's results.json beside the new one (results-<start>.json).

In a multi-process run (``lmprobe.engine.runtime``) process 0 alone writes: ``write_*`` do nothing
on the other processes. ``cached`` and ``cached_json`` are collective: every process must call
them in the same order. Process 0 decides whether the cache exists, so every process takes the
same branch (computing runs collectives). A saved value is read by every process from an object
store (gs://), and read by process 0 and broadcast when local (a pod's hosts need not share a
disk). A fresh value is computed everywhere and written by process 0; then the processes agree
that the write succeeded (the barrier after it: a failed write fails every process, none hangs).
A cache entry process 0 cannot decode (a truncated or empty file) is logged, discarded and
recomputed. ``cache_use`` counts the entries a block read from the cache (the same counts on
every process); ``Stages`` times a method's stages and says which were served from the cache.

JSON files (``write_json``, ``write_results``, ``write_jsonl``) are strict JSON: NaN and infinities
are written as null (``strict``); where a value is undefined by construction its writer says why
in a sibling ``<key>_note`` (``"std_error": null, "std_error_note": "undefined with one trial"``).
Cache entries (``cached_json``) keep NaN as Python's json writes it: they are lmprobe's own resume
state, and a resumed run must compute what the first one did.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lmprobe import log as _logging
from lmprobe.errors import LmprobeError
from lmprobe.umask import usual_mode

log = _logging.get(__name__)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_MANGLED_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/(?!/)")  # gs:/b/run: a URL that lost a slash


# ------------------------------------------------------------------ paths


def is_remote(path) -> bool:
    """True for URLs (gs://, s3://, ...) other than file://."""
    text = os.fspath(path) if not isinstance(path, str) else path
    return bool(_URL.match(str(text))) and not str(text).startswith("file://")


def epath_of(path):
    """``path`` as an ``etils.epath.Path``; a URL mangled into a local path is an error."""
    from etils import epath

    text = str(path)
    if _MANGLED_URL.match(text):
        raise LmprobeError(f"{text!r} looks like a URL that lost a slash (joined with os.path?): "
                           "write it as scheme://bucket/path and join with lmprobe.store.join")
    return epath.Path(text)


def join(base, *parts: str) -> str:
    """``base``/``parts``...: works for local paths and URLs alike (``gs://b/run`` + ``x``)."""
    return os.fspath(epath_of(base).joinpath(*parts))


def _fix_for(path, error: BaseException) -> str:
    if isinstance(error, ImportError):
        return (f"{error}; this Python has no file-system backend for {str(path).split('://')[0]}:// paths: "
                "install it (pip install gcsfs for gs://), or pass a local `output_dir`")
    return f"{type(error).__name__}: {error}; pass an `output_dir` this process can write"


def _io_error(path, action: str, error: BaseException) -> LmprobeError:
    return LmprobeError(f"cannot {action} {path}: {_fix_for(path, error)}")


# ------------------------------------------------------------------ which process writes


def _is_main() -> bool:
    from lmprobe.engine.runtime import is_main

    return is_main()


def _agree(flag: bool) -> bool:
    from lmprobe.engine.runtime import agree

    return agree(flag)


def _share(value: int) -> int:
    """Process 0's non-negative ``value`` on every process."""
    import jax

    if jax.process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    high, low = multihost_utils.broadcast_one_to_all(np.asarray([value >> 30, value & (2**30 - 1)], np.int32))
    return (int(high) << 30) | int(low)


_BROADCAST_CHUNK = 1 << 26  # bytes per collective: bounds the device memory one broadcast takes


def _broadcast_bytes(data: bytes | None) -> bytes:
    """Process 0's ``data`` on every process (the others pass None)."""
    import jax

    if jax.process_count() == 1:
        return data
    from jax.experimental import multihost_utils

    main, size, parts = _is_main(), _share(len(data) if _is_main() else 0), []
    for start in range(0, size, _BROADCAST_CHUNK):
        n = min(_BROADCAST_CHUNK, size - start)
        buffer = np.zeros(max(1024, 1 << (n - 1).bit_length()), np.uint8)  # a few widths, a few programs
        if main:
            buffer[:n] = np.frombuffer(data, np.uint8, count=n, offset=start)
        parts.append(multihost_utils.broadcast_one_to_all(buffer)[:n].tobytes())
    return b"".join(parts)


# ------------------------------------------------------------------ writing


def _write_local(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        usual_mode(tmp)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write(path, data: bytes) -> None:
    """``data`` at ``path`` atomically, on this process, whatever process it is."""

    def put(p):
        if is_remote(p):
            p.parent.mkdir(parents=True, exist_ok=True)  # no-op on object stores, needed on others
            p.write_bytes(data)  # one object, written whole: atomic on GCS / S3
        else:
            _write_local(os.fspath(p), data)

    _on_path(path, "write", put)


def write_bytes(path, data: bytes) -> None:
    """``data`` at ``path``, atomically, by process 0 only."""
    if _is_main():
        _write(path, data)


def write_json(path, data) -> None:
    """``data`` as indented JSON at ``path``, atomically, by process 0 (numpy scalars and arrays allowed)."""
    if _is_main():
        _write(path, _json_bytes(data))


def write_results(path, result: dict) -> None:
    """``result`` at ``path`` like ``write_json``; an earlier run's file there is kept first.

    A file at ``path`` from another run (its ``run_info.started`` differs from ``result``'s, or it
    has none) is renamed to ``<stem>-<its start, UTC %Y%m%dT%H%M%SZ>.json`` beside it (never over
    an existing file); the same run's earlier write is replaced."""
    if not _is_main():
        return
    if exists(path):
        previous = _started_of(path)
        if previous is None or previous != (result.get("run_info") or {}).get("started"):
            _keep_as_history(path, previous)
    _write(path, _json_bytes(result))


def _started_of(path) -> str | None:
    """``run_info.started`` of the JSON file at ``path``; None if it has none or is unreadable."""
    try:
        data = read_json(path)
    except (LmprobeError, ValueError):
        return None
    info = data.get("run_info") if isinstance(data, dict) else None
    return info.get("started") if isinstance(info, dict) else None


def _keep_as_history(path, started: str | None) -> None:
    """Rename ``path`` to ``<stem>-<stamp>[-k].json`` beside it; the stamp is ``started`` or the mtime."""

    def rename(p):
        when = _parse_time(started) or datetime.datetime.fromtimestamp(_mtime(p), datetime.UTC)
        stem = f"{p.stem}-{when.strftime('%Y%m%dT%H%M%SZ')}"
        target, k = p.parent / f"{stem}{p.suffix}", 1
        while target.exists():
            target, k = p.parent / f"{stem}-{k}{p.suffix}", k + 1
        p.rename(target)

    _on_path(path, "keep the earlier results of", rename)


def _parse_time(text):
    try:
        when = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=datetime.UTC)).astimezone(datetime.UTC)


def _mtime(p) -> float:
    try:
        return p.stat().mtime
    except Exception:  # noqa: BLE001 - a back end without stat: the time of keeping it
        return time.time()


def strict(value):
    """``value`` for strict JSON: numpy scalars and arrays as Python values, tuples as lists, and
    non-finite floats (NaN, inf, as Python or numpy numbers) as None."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return strict(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def note_undefined(record: dict, reason: str, *keys: str) -> dict:
    """``record`` with ``<key>_note: reason`` beside each of ``keys`` whose value is, or holds, a
    non-finite number (written as null): how a writer says why a value is undefined."""
    for key in keys:
        if key in record and not _finite(record[key]):
            record[f"{key}_note"] = reason
    return record


def _finite(value) -> bool:
    """Whether ``value`` (a number, or dicts / lists / numpy arrays of them) has no NaN or infinity."""
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, (np.ndarray, np.generic)):
        return _finite(value.tolist())
    return not isinstance(value, float) or math.isfinite(value)


def json_text(data, indent: int | None = 2) -> str:
    """``data`` as strict JSON text (``strict``: NaN and infinities as null)."""
    return json.dumps(strict(data), indent=indent, allow_nan=False)


def _json_bytes(data) -> bytes:
    return json_text(data).encode("utf-8")


def _numpy_value(value):
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def write_jsonl(path, rows) -> None:
    """One JSON object per line, atomically, by process 0 (lm-eval-harness style samples files)."""
    if _is_main():
        _write(path, "".join(json_text(r, indent=None) + "\n" for r in rows).encode("utf-8"))


def _on_path(path, action: str, fn):
    """``fn(epath of path)``; a back end's own error (auth, HTTP, missing gcsfs) as one LmprobeError."""
    try:
        return fn(epath_of(path))
    except LmprobeError:
        raise
    except Exception as e:  # noqa: BLE001 - remote back ends raise their own types
        raise _io_error(path, action, e) from e


def read_bytes(path) -> bytes:
    return _on_path(path, "read", lambda p: p.read_bytes())


def read_json(path):
    return json.loads(read_bytes(path))


def exists(path) -> bool:
    return _on_path(path, "reach", lambda p: p.exists())


def check_writable(directory) -> None:
    """Fail early, with one clear message, when process 0 cannot write into ``directory``.

    Collective: every process calls it (before any model work), every process raises.
    """
    problem = None
    if _is_main():
        probe = None
        try:
            d = epath_of(directory)
            if not is_remote(d) and os.path.exists(os.fspath(d)) and not os.path.isdir(os.fspath(d)):
                raise LmprobeError(f"output directory {directory} is a file: pass a directory")
            d.mkdir(parents=True, exist_ok=True)
            probe = d / f".lmprobe-write-test-{os.getpid()}"
            probe.write_bytes(b"ok")
        except LmprobeError as e:
            problem = str(e)
        except Exception as e:  # noqa: BLE001
            problem = f"cannot write to output directory {directory}: {_fix_for(directory, e)}"
        finally:
            if probe is not None:
                try:
                    probe.unlink()
                except Exception:  # noqa: BLE001 - a probe left behind is harmless
                    pass
    if not _agree(problem is None):
        raise LmprobeError(problem or f"process 0 cannot write to output directory {directory} (see its log)")


# ------------------------------------------------------------------ caches


def cache_key(**parts) -> str:
    """A short stable hash of the settings an artifact depends on."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


_MISSING, _SAVED, _FAILED = 0, 1, 2


@dataclasses.dataclass(eq=False)  # blocks are told apart by identity
class CacheUse:
    """Cache entries read from the cache (``hits``) and computed (``misses``) in a ``cache_use`` block."""

    hits: int = 0
    misses: int = 0

    @property
    def entries(self) -> int:
        return self.hits + self.misses

    def to_json(self) -> dict:
        return {"hits": self.hits, "entries": self.entries}


_uses: list[CacheUse] = []  # the open cache_use blocks, innermost last


@contextlib.contextmanager
def cache_use(desc: str | None = None):
    """Count the cache entries (``cached``, ``cached_json``) the block reads and computes (nested
    blocks count them too); with ``desc``, log how many came from the cache. Every process counts
    the same: process 0 decides each entry's branch."""
    use = CacheUse()
    _uses.append(use)
    try:
        yield use
    finally:
        _uses.remove(use)
    if desc and use.hits:
        log.info(f"{desc}: {use.hits} of {use.entries} cache entries read from the cache")


def _count(hit: bool) -> None:
    for use in _uses:
        use.hits += hit
        use.misses += not hit


@dataclasses.dataclass
class Stages:
    """Wall time (``seconds``) and cache use (``cached``: stage -> {"hits", "entries"}, stages that
    read any entry from the cache) of a method's stages, for results.json's ``timings_s`` and
    ``cached_stages``: ``with stages("embedding", desc="minilm-l6: embedding"): ...``."""

    seconds: dict = dataclasses.field(default_factory=dict)
    cached: dict = dataclasses.field(default_factory=dict)

    @contextlib.contextmanager
    def __call__(self, name: str, desc: str | None = None):
        """Time the block as stage ``name``; its cache hits are logged as ``desc`` (default: name)."""
        start = time.perf_counter()
        with cache_use(desc or name) as use:
            yield use
        self.seconds[name] = time.perf_counter() - start
        if use.hits:
            self.cached[name] = use.to_json()


def _read_saved(path, decode: Callable[[bytes], Any]) -> tuple[int, bytes | None, Any]:
    """(_SAVED, bytes, value) of the entry at ``path``; (_MISSING, None, None) when there is none,
    or when it cannot be decoded (a truncated or empty file: logged and deleted)."""
    if not exists(path):
        return _MISSING, None, None
    data = read_bytes(path)
    try:
        return _SAVED, data, decode(data)
    except Exception as e:  # noqa: BLE001 - whatever the decoder raises, the entry is unusable
        log.warning(f"cache entry {path} is unreadable ({type(e).__name__}: {e}): discarded, recomputing")
        _on_path(path, "discard", lambda p: p.unlink(missing_ok=True))
        return _MISSING, None, None


def _cached_bytes(path, compute: Callable[[], Any], encode: Callable[[Any], bytes],
                  decode: Callable[[bytes], Any]):
    """The value saved at ``path`` (decoded), or ``compute()`` saved by process 0. Collective."""
    state, data, value, error = _MISSING, None, None, None
    if _is_main():
        try:
            state, data, value = _read_saved(path, decode)
        except Exception as e:  # noqa: BLE001 - shared first, raised below: no process waits forever
            state, error = _FAILED, e
    state = _share(state)  # process 0 decides: every process takes the same branch
    if state == _FAILED:
        raise error if error is not None else LmprobeError(f"process 0 cannot read the cache {path} (see its log)")
    _count(hit=state == _SAVED)
    if state == _SAVED:
        if not is_remote(path):  # a local path may be one host's own disk: process 0's bytes, broadcast
            data = _broadcast_bytes(data)
        elif not _is_main():  # an object store: every host reads the same object
            data = read_bytes(path)
        return value if _is_main() else decode(data)
    value = compute()  # on every process: computing runs collectives
    if _is_main():
        try:
            _write(path, encode(value))
        except Exception as e:  # noqa: BLE001
            error = e
    if not _agree(error is None):  # the barrier after the write; a failed write fails every process
        raise error if error is not None else LmprobeError(f"process 0 could not write the cache {path} (see its log)")
    return value


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def cached(path, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """The array at ``path`` (.npy) if a previous run saved it, else ``compute()`` saved atomically.

    Collective in a multi-process run: every process calls it with the same ``path``."""
    return _cached_bytes(path, lambda: np.asarray(compute()), _npy_bytes,
                         lambda data: np.load(io.BytesIO(data), allow_pickle=False))


def cached_json(path, compute: Callable[[], Any], *, encode: Callable[[Any], Any] = lambda v: v,
                decode: Callable[[Any], Any] = lambda v: v):
    """``decode(json)`` of ``path`` if a previous run saved it, else ``compute()`` saved as
    JSON ``encode(value)`` (NaN kept: see the module docstring). Collective in a multi-process
    run, like ``cached``."""
    return _cached_bytes(path, compute, lambda v: json.dumps(encode(v), indent=2, default=_numpy_value).encode(),
                         lambda data: decode(json.loads(data)))
