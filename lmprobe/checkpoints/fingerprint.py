"""What a resolved checkpoint is, for results.json and cache keys, without reading its weights.

``identity(checkpoint)``: location, format, source (local / hub / embedded / pypi_models), the hub repo and
snapshot commit, and ``weights_sha256``, a digest that changes whenever a weight file changes.
Hub-cache files are symlinks to blobs named by their content hash (sha256 for LFS weights): the
name is used. Other files are fingerprinted by (name, size, mtime_ns, sha256 of the first and
last MiB), memoized per (path, size, mtime); an index json is hashed whole. ``config_sha256``
and ``tokenizer_sha256`` cover the files that change the model's outputs beside the weights.
An Orbax checkpoint (lmprobe's or MaxText's) is its step: ``step``, ``root`` and a fingerprint of
every file of its parameters (the same per-file fingerprint).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re

from lmprobe.checkpoints import levanter, pickle_io
from lmprobe.checkpoints.base import read_weight_map
from lmprobe.checkpoints.embedded import EMBEDDED
from lmprobe.checkpoints.gguf_tokenizer import BUILDER_VERSION
from lmprobe.checkpoints.pypi_models import ASSETS
from lmprobe.checkpoints.tokenizer import TOKENIZER_FILES

_EDGE = 1 << 20  # bytes hashed at each end of a weight file
_BLOB = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a hub blob: git sha1 (small files) or sha256 (LFS)
_INDEXES = ("model.safetensors.index.json", pickle_io.INDEX)
_SINGLES = ("model.safetensors", pickle_io.SINGLE)


def identity(checkpoint) -> dict:
    """A JSON-able identity of ``checkpoint`` (``load(...).checkpoint``); its digests change with its files."""
    location = os.path.abspath(checkpoint.location)
    files = weight_files(location)
    info = {"name": checkpoint.name, "location": location, "format": _format(files),
            "source": "local", "weight_files": len(files),
            "weights_sha256": _digest([(os.path.basename(f), file_digest(f)) for f in files]),
            "config_sha256": _digest(checkpoint.config),
            "tokenizer_sha256": _tokenizer_digest(location)}
    orbax = getattr(checkpoint, "orbax", None)
    if orbax is not None:
        params = os.path.join(location, "params")
        info.update(format="orbax", step=orbax.step, root=orbax.root, weights_sha256=tree_digest(params),
                    weight_files=len(_tree(params)), tokenizer_sha256=_tokenizer_digest(orbax.tokenizer_dir))
    elif levanter.is_step(location):  # TensorStore arrays under model/ (and the optimizer's state beside)
        step = re.fullmatch(r"step-(\d+)", os.path.basename(location.rstrip(os.sep)))
        info.update(format="levanter-tensorstore", weights_sha256=tree_digest(os.path.join(location, levanter.ROOT)),
                    weight_files=len(_tree(os.path.join(location, levanter.ROOT))),
                    **({"step": int(step.group(1))} if step else {}))
    elif not files and os.path.isdir(location):  # a MaxText checkpoint: an Orbax tree of arrays
        step = os.path.basename(os.path.dirname(location.rstrip(os.sep)))
        info.update(format="maxtext-orbax", weights_sha256=tree_digest(location), weight_files=len(_tree(location)),
                    **({"step": int(step)} if step.isdigit() else {}))
    embedded = EMBEDDED.get(str(checkpoint.name).lower())
    if embedded is not None:
        info.update(source="embedded", package=embedded[1])
    pypi = ASSETS.get(str(checkpoint.name).lower())
    if pypi is not None:
        info.update(source="pypi_models", packages=list(pypi.requirements), pinned_sha256=pypi.sha256)
    hub = hub_snapshot(location)
    if hub is not None:
        info.update(source="hub", **hub)
    return info


def weight_files(location: str) -> list[str]:
    """The files holding a checkpoint's weights: a GGUF file, a single weights file, or an
    index json followed by its shards (sorted)."""
    if not os.path.isdir(location):
        return [location]
    for name in _INDEXES:
        index = os.path.join(location, name)
        if os.path.isfile(index):
            return [index, *sorted(set(read_weight_map(index).values()))]
    for name in _SINGLES:
        if os.path.isfile(os.path.join(location, name)):
            return [os.path.join(location, name)]
    found = pickle_io.find_pickle(location)
    return [found] if found else []


def tree_digest(directory: str) -> str:
    """A digest of every file under ``directory`` (each fingerprinted as ``file_digest`` does)."""
    return _digest([(os.path.relpath(f, directory), file_digest(f, whole=False)) for f in _tree(directory)])


def _tree(directory: str) -> list[str]:
    return sorted(os.path.join(d, n) for d, _, names in os.walk(directory) for n in names)


def hub_snapshot(location: str) -> dict | None:
    """{repo_id, revision} for a path inside a hub cache snapshot (…/models--org--name/snapshots/<commit>)."""
    parts = os.path.normpath(location).split(os.sep)
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
            return {"repo_id": parts[i - 1][len("models--"):].replace("--", "/"), "revision": parts[i + 1]}
    return None


def file_digest(path: str, whole: bool | None = None) -> str:
    """The hub blob name of a hub-cache file, else a fingerprint of the file (memoized); ``whole``
    (default: for .json files) hashes all its bytes, not just both ends."""
    target = os.path.realpath(path)
    if os.path.islink(path) and _BLOB.fullmatch(os.path.basename(target)):
        return os.path.basename(target)
    stat = os.stat(target)
    whole = path.endswith(".json") if whole is None else whole
    return _fingerprint(target, stat.st_size, stat.st_mtime_ns, whole)


@functools.lru_cache(maxsize=4096)
def _fingerprint(path: str, size: int, mtime_ns: int, whole: bool) -> str:
    h = hashlib.sha256(json.dumps([os.path.basename(path), size, mtime_ns]).encode())
    with open(path, "rb") as f:
        if whole:
            h.update(hashlib.sha256(f.read()).digest())
            return h.hexdigest()
        h.update(hashlib.sha256(f.read(_EDGE)).digest())
        f.seek(max(0, size - _EDGE))
        h.update(hashlib.sha256(f.read(_EDGE)).digest())
    return h.hexdigest()


def _tokenizer_digest(location: str) -> str | None:
    """The tokenizer files of a directory; for a GGUF file (its vocabulary is in its weights digest),
    the version of lmprobe's builder that makes a tokenizer of that vocabulary."""
    if not os.path.isdir(location):
        return f"lmprobe-gguf-tokenizer-{BUILDER_VERSION}" if location.lower().endswith(".gguf") else None
    found = [os.path.join(location, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(location, n))]
    return _digest([(os.path.basename(f), file_digest(f, whole=True)) for f in found]) if found else None


def _format(files: list[str]) -> str | None:
    if not files:
        return None
    name = files[-1].lower()
    return "gguf" if name.endswith(".gguf") else "safetensors" if name.endswith(".safetensors") else "pickle"


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
