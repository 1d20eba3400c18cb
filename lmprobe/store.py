"""Run-directory artifacts written atomically by one process, and cached values that make reruns resume.

Paths are local paths or URLs that ``etils.epath`` understands (``gs://bucket/run`` with gcsfs or
TensorFlow installed); join them with ``join``, never ``os.path``. A crash never leaves a
half-written file: local files are written to a temporary file in the same directory (``temp_name``)
and renamed into place; remote objects (GCS) are written whole, which is atomic there. The
temporary files of a killed write are removed by ``remove_leftovers`` (a front end's next start).

``write_results`` keeps an earlier run's results.json beside the new one (results-<start>.json),
in an order that never loses it: the new file written, the old one copied, the new one renamed.

In a multi-process run (``lmprobe.engine.runtime``) process 0 alone writes: ``write_*`` do nothing
on the other processes. ``cached`` and ``cached_json`` are collective: every process must call
them in the same order. Process 0 decides whether the cache exists, so every process takes the
same branch (computing runs collectives). A saved value is read by every process from an object
store (gs://), and read by process 0 and broadcast when local (a pod's hosts need not share a
disk). A fresh value is computed everywhere and written by process 0; then the processes agree
that the write succeeded (the barrier after it: a failed write fails every process, none hangs).
Every entry is checked when read against what its computation returns: ``cached`` against an
``Array`` (shape, dtype, finite values; a SHA-256 checksum follows each array's .npy bytes, so
damaged bytes are found), ``cached_json`` against a schema of the JSON its writer produces
(``json_problem``). An entry that fails (truncated, damaged, of another shape, ``{}``) gives one
warning naming the file and why; it is discarded and recomputed. A fresh value that fails is an
error, never written. ``require_finite`` refuses a model's non-finite embeddings, logits or scores
(NonFinite: the model, the stage, how many) before they are cached or scored. ``cache_use``
counts the entries a block read from the cache (the same counts on every process); ``StageTimes``
times a method's stages and says which were served from the cache.

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
import secrets
import shutil
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lmprobe import log as _logging
from lmprobe.errors import LmprobeError, NonFinite

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


_TEMP_PREFIX = ".tmp-"  # a local file being written: ``<_TEMP_PREFIX><16 hex digits><name>`` beside it (temp_name)
_TEMP_NAME = re.compile(r"\.tmp-([0-9a-f]{16}|[a-z0-9_]{8})")  # temp_name's, and mkstemp's of earlier lmprobes


def _write_local(path: str, data: bytes, before_rename: Callable[[], None] = lambda: None) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the usual file mode: 0o666 less the umask
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        before_rename()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def temp_name(path: str) -> str:
    """A new name beside local ``path`` for a file or folder being written (remove_leftovers knows it)."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), f"{_TEMP_PREFIX}{secrets.token_hex(8)}"
                        f"{os.path.basename(path)}")


def _write(path, data: bytes, before_rename: Callable[[], None] = lambda: None) -> None:
    """``data`` at ``path`` atomically, on this process, whatever process it is; ``before_rename()``
    runs once ``data`` is safely written beside ``path`` (locally) and before it replaces ``path``."""

    def put(p):
        if is_remote(p):
            p.parent.mkdir(parents=True, exist_ok=True)  # no-op on object stores, needed on others
            before_rename()
            p.write_bytes(data)  # one object, written whole: atomic on GCS / S3
        else:
            _write_local(os.fspath(p), data, before_rename)

    _on_path(path, "write", put)


def remove_leftovers(directory) -> int:
    """Delete the temporary files (and folders) that killed writes left under local ``directory``
    (temp_name's names); how many. Only for a directory no other process writes
    (a front end calls it holding the directory's lock: lmprobe.cli.lock)."""
    if is_remote(directory) or not os.path.isdir(os.fspath(directory)):
        return 0  # object stores have no temporary files: their objects are written whole
    removed = 0
    for root, dirs, files in os.walk(os.fspath(directory)):
        for name in [*files, *dirs]:
            if _TEMP_NAME.match(name):
                path = os.path.join(root, name)
                if name in dirs and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
                removed += 1
        dirs[:] = [d for d in dirs if not _TEMP_NAME.match(d)]
    return removed


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
    has none) is copied to ``<stem>-<its start, UTC %Y%m%dT%H%M%SZ>.json`` beside it (never over
    another file) after the new file is written beside ``path`` and before it replaces ``path``:
    a failure at any step (a full disk, a kill) leaves the old results at ``path``. The same
    run's earlier write is replaced."""
    if not _is_main():
        return

    def keep_earlier():
        if exists(path):
            previous = _started_of(path)
            if previous is None or previous != (result.get("run_info") or {}).get("started"):
                _keep_as_history(path, previous)

    _write(path, _json_bytes(result), keep_earlier)


def _started_of(path) -> str | None:
    """``run_info.started`` of the JSON file at ``path``; None if it has none or is unreadable."""
    try:
        data = read_json(path)
    except (LmprobeError, ValueError):
        return None
    info = data.get("run_info") if isinstance(data, dict) else None
    return info.get("started") if isinstance(info, dict) else None


def _keep_as_history(path, started: str | None) -> None:
    """Copy ``path`` to ``<stem>-<stamp>[-k].json`` beside it (the stamp: ``started``, else its mtime),
    unless a file there already holds the same bytes (a write killed after keeping it)."""

    def keep(p):
        data = p.read_bytes()
        when = _parse_time(started) or datetime.datetime.fromtimestamp(_mtime(p), datetime.UTC)
        stem = f"{p.stem}-{when.strftime('%Y%m%dT%H%M%SZ')}"
        target, k = p.parent / f"{stem}{p.suffix}", 1
        while target.exists():
            if target.read_bytes() == data:
                return
            target, k = p.parent / f"{stem}-{k}{p.suffix}", k + 1
        _write(target, data)

    _on_path(path, "keep the earlier results of", keep)


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
    return _non_finite(value)[0] == 0


def _non_finite(value) -> tuple[int, int]:
    """(non-finite numbers, numbers) in ``value``: a number, or dicts / lists / numpy arrays of them."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        counts = [_non_finite(v) for v in value]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind not in "fc":
            return 0, value.size if value.dtype.kind in "iub" else 0
        return value.size - int(np.count_nonzero(np.isfinite(value))), value.size
    if isinstance(value, float):
        return int(not math.isfinite(value)), 1
    return 0, int(isinstance(value, int) and not isinstance(value, bool))


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
class StageTimes:
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


# ------------------------------------------------------------------ what a cache entry must be


@dataclasses.dataclass(frozen=True)
class Array:
    """What a cached array must be: its ``shape`` (None: any length on that axis), its ``dtype``
    (a numpy dtype, or an abstract one: np.floating, np.integer) and, with ``finite``, no NaN or
    infinity (in floating arrays)."""

    shape: tuple[int | None, ...]
    dtype: Any = np.floating
    finite: bool = True

    def problem(self, array: np.ndarray) -> str | None:
        """Why ``array`` is not such an array (a phrase: "has shape ..."); None when it is."""
        if array.ndim != len(self.shape) or any(e not in (None, n) for e, n in zip(self.shape, array.shape)):
            sizes = ", ".join("any" if e is None else str(e) for e in self.shape)
            return f"has shape {array.shape}, expected ({sizes}{',' * (len(self.shape) == 1)})"
        if not np.issubdtype(array.dtype, self.dtype):
            return f"has dtype {array.dtype}, expected {getattr(self.dtype, '__name__', self.dtype)}"
        if self.finite and array.dtype.kind in "fc":
            bad = array.size - int(np.count_nonzero(np.isfinite(array)))
            if bad:
                return f"has {bad} non-finite values (NaN or infinite) of {array.size}"
        return None


_KIND = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
         list: "a list", dict: "an object"}


def json_problem(value, schema, where: str = "") -> str | None:
    """Why decoded JSON ``value`` does not fit ``schema`` (a phrase: "lacks keys ..."); None when it does.

    A schema is the shape its writer produces: ``object`` (anything); ``None``, ``bool``, ``int``,
    ``float`` (any number: NaN too, as cache entries keep it), ``str``, ``list``, ``dict`` (that kind
    of value); a tuple of schemas (any of them); ``[item]`` (a list of such items); ``{key: schema,
    ...}`` (an object with exactly these keys); ``{str: schema}`` (an object of any keys, each value
    such); or a function of the value giving a phrase or None."""
    at = f" at {where}" if where else ""
    if schema is object:
        return None
    if isinstance(schema, tuple):
        problems = [json_problem(value, s, where) for s in schema]
        if None in problems:
            return None
        inside = [p for s, p in zip(schema, problems) if isinstance(s, (list, dict)) and isinstance(value, type(s))]
        return inside[0] if inside else _mismatch(value, where, _expected(schema))
    if schema is None or isinstance(schema, type):
        ok = value is None if schema is None else isinstance(value, (int, float) if schema is float else schema) and (
            schema is bool or not isinstance(value, bool))
        return None if ok else _mismatch(value, where, _expected(schema))
    if isinstance(schema, list):
        if not isinstance(value, list):
            return _mismatch(value, where, _expected(schema))
        return next((p for i, v in enumerate(value) if (p := json_problem(v, schema[0], f"{where}[{i}]"))), None)
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return _mismatch(value, where, _expected(schema))
        if list(schema) == [str]:
            items = [(k, schema[str]) for k in value]
        else:
            missing, extra = [k for k in schema if k not in value], [k for k in value if k not in schema]
            if missing or extra:
                return "; ".join(f"{what} {', '.join(map(repr, keys))}{at}" for what, keys in
                                 (("lacks keys", missing), ("has unexpected keys", extra)) if keys)
            items = schema.items()
        return next((p for k, s in items if (p := json_problem(value[k], s, f"{where}.{k}" if where else k))), None)
    return schema(value)


def _mismatch(value, where: str, expected: str) -> str:
    """"is null, expected an object" (the entry itself), "has a string at a.b[1], expected a number"."""
    return f"has {_kind(value)} at {where}, expected {expected}" if where else f"is {_kind(value)}, expected {expected}"


def _expected(schema) -> str:
    if isinstance(schema, tuple):
        return " or ".join(map(_expected, schema))
    return "a list" if isinstance(schema, list) else "an object" if isinstance(schema, dict) else _KIND.get(
        schema or type(None), "a valid value")


def _kind(value) -> str:
    return next((name for t, name in _KIND.items() if type(value) is t), type(value).__name__)


def require_finite(values, *, model: str, stage: str):
    """``values`` (an array, or numbers in lists and dicts) when all are finite; else NonFinite naming
    ``model``, ``stage`` and how many were not: a model's NaN is never cached, scored or reported."""
    bad, total = _non_finite(values)
    if bad:
        raise NonFinite(f"{model}: {stage} gave {bad} non-finite values (NaN or infinite) of {total}: its "
                        "weights or its function give NaN or overflow (a damaged or wrongly converted checkpoint, "
                        "or a dtype too narrow for it); nothing of it was cached")
    return values


class _Unfit(Exception):
    """A cache entry (or a fresh value) that is not what its computation returns; the message is why,
    as a phrase about the entry ("has shape ...")."""


# ------------------------------------------------------------------ reading and writing entries


def _read_saved(path, decode: Callable[[bytes], Any]) -> tuple[int, bytes | None, Any]:
    """(_SAVED, bytes, value) of the entry at ``path``; (_MISSING, None, None) when there is none,
    or when it cannot be decoded or is not what its computation returns (one warning naming the
    file and why; the entry is deleted)."""
    if not exists(path):
        return _MISSING, None, None
    data = read_bytes(path)
    try:
        return _SAVED, data, decode(data)
    except _Unfit as e:
        why = str(e)
    except Exception as e:  # noqa: BLE001 - whatever the decoder raises, the entry is unusable
        why = f"is unreadable ({type(e).__name__}: {e})"
    log.warning(f"cache entry {path} {why}: discarded, recomputing")
    _on_path(path, "discard", lambda p: p.unlink(missing_ok=True))
    return _MISSING, None, None


def _cached_bytes(path, compute: Callable[[], Any], encode: Callable[[Any], bytes],
                  decode: Callable[[bytes], Any]):
    """The value saved at ``path`` (decoded), or ``compute()`` saved by process 0. Collective.
    ``decode`` raises _Unfit for an entry that decodes but is wrong; ``encode`` for a fresh value
    that is (never written: an LmprobeError naming ``path``)."""
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
        except _Unfit as e:
            error = LmprobeError(f"the value computed for cache entry {path} {e}: not cached")
        except Exception as e:  # noqa: BLE001
            error = e
    if not _agree(error is None):  # the barrier after the write; a failed write fails every process
        raise error if error is not None else LmprobeError(f"process 0 could not write the cache {path} (see its log)")
    return value


def _refuse(problem: str | None) -> None:
    if problem:
        raise _Unfit(problem)


_CHECKSUM = b"\nsha256:"  # after an array's .npy bytes: this tag, then the hex SHA-256 of those bytes
_CHECKSUM_SIZE = len(_CHECKSUM) + 64


def _npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as .npy bytes followed by their checksum (np.load reads the file and ignores it)."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    data = buffer.getvalue()
    return data + _CHECKSUM + hashlib.sha256(data).hexdigest().encode()


def _npy_checked(data: bytes) -> bytes:
    """The .npy bytes of a cache entry whose checksum matches them."""
    body, tag, digest = data[:-_CHECKSUM_SIZE], data[-_CHECKSUM_SIZE:-64], data[-64:]
    if len(data) < _CHECKSUM_SIZE or tag != _CHECKSUM:
        raise _Unfit("has no checksum at its end (cut short, or written by an lmprobe that did not check its caches)")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise _Unfit("does not match its checksum (its bytes changed on disk)")
    return body


def cached(path, compute: Callable[[], np.ndarray], *, expect: Array) -> np.ndarray:
    """The array at ``path`` (.npy, with its checksum) if a previous run saved it and it is what
    ``expect`` says ``compute()`` returns, else ``compute()`` saved atomically (refused, never
    written, when it is not). Collective in a multi-process run: every process calls it with the
    same ``path``."""

    def encode(array):
        _refuse(expect.problem(array))
        return _npy_bytes(array)

    def decode(data):
        array = np.load(io.BytesIO(_npy_checked(data)), allow_pickle=False)
        _refuse(expect.problem(array))
        return array

    return _cached_bytes(path, lambda: np.asarray(compute()), encode, decode)


def cached_json(path, compute: Callable[[], Any], *, expect, encode: Callable[[Any], Any] = lambda v: v,
                decode: Callable[[Any], Any] = lambda v: v):
    """``decode(json)`` of ``path`` if a previous run saved it and its JSON fits ``expect`` (a
    schema of the JSON ``encode(compute())`` gives: ``json_problem``), else ``compute()`` saved as
    JSON ``encode(value)`` (NaN kept: see the module docstring; refused, never written, when it does
    not fit). Collective in a multi-process run, like ``cached``."""

    def to_bytes(value):
        data = json.dumps(encode(value), indent=2, default=_numpy_value).encode()
        _refuse(json_problem(json.loads(data), expect))
        return data

    def from_bytes(data):
        saved = json.loads(data)
        _refuse(json_problem(saved, expect))
        return decode(saved)

    return _cached_bytes(path, compute, to_bytes, from_bytes)
