"""Checkpoint identities: digests that follow the weight files, hub blobs and commits, no full reads."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from safetensors.numpy import save_file

from lmprobe.checkpoints import fingerprint, identity
from lmprobe.checkpoints.resolve import resolve

from .conftest import tiny_tensors, write_model_dir
from .test_hub import COMMIT


def test_a_directory_identity_follows_its_weights_config_and_tokenizer(tmp_path):
    path = write_model_dir(tmp_path / "m")
    first = identity(resolve(path))
    assert first["format"] == "safetensors" and first["source"] == "local" and first["weight_files"] == 1
    assert first["location"] == os.path.abspath(path) and first["tokenizer_sha256"] is None
    json.dumps(first)
    assert identity(resolve(path)) == first  # unchanged files: the same identity
    save_file(tiny_tensors(seed=1), os.path.join(path, "model.safetensors"))  # new weights, same name
    second = identity(resolve(path))
    assert second["weights_sha256"] != first["weights_sha256"] and second["config_sha256"] == first["config_sha256"]
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        f.write("{}")
    assert identity(resolve(path))["tokenizer_sha256"] is not None


def test_a_gguf_identity_names_the_tokenizer_builder():
    """A GGUF file's tokenizer is built by lmprobe: a new builder must not reuse caches made with the old one."""
    from lmprobe.checkpoints.gguf_tokenizer import BUILDER_VERSION

    assert identity(resolve("smollm2-135m"))["tokenizer_sha256"] == f"lmprobe-gguf-tokenizer-{BUILDER_VERSION}"


def test_same_size_same_mtime_but_other_bytes_still_differ(tmp_path):
    path, digests = str(tmp_path / "w.bin"), []
    for content in (b"a" * 10, b"b" * 10):
        with open(path, "wb") as f:
            f.write(content)
        os.utime(path, ns=(1, 1))
        fingerprint._fingerprint.cache_clear()  # a new process: the memo keys on (path, size, mtime)
        digests.append(fingerprint.file_digest(path))
    assert digests[0] != digests[1]


def test_fingerprints_are_memoized_per_path_size_and_mtime(tmp_path, monkeypatch):
    path = write_model_dir(tmp_path / "m")
    fingerprint._fingerprint.cache_clear()
    identity(resolve(path))
    misses = fingerprint._fingerprint.cache_info().misses
    identity(resolve(path))
    assert fingerprint._fingerprint.cache_info().misses == misses  # nothing read again


def test_sharded_index_and_its_shards_are_covered(tmp_path):
    path = write_model_dir(tmp_path / "m")
    tensors = tiny_tensors()
    os.remove(os.path.join(path, "model.safetensors"))
    names = sorted(tensors)
    save_file({n: tensors[n] for n in names[:1]}, os.path.join(path, "model-1.safetensors"))
    save_file({n: tensors[n] for n in names[1:]}, os.path.join(path, "model-2.safetensors"))
    index = {"weight_map": {n: "model-1.safetensors" if n == names[0] else "model-2.safetensors" for n in names}}
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    first = identity(resolve(path))
    assert first["weight_files"] == 3 and first["format"] == "safetensors"
    save_file({n: tensors[n] * 2 for n in names[1:]}, os.path.join(path, "model-2.safetensors"))
    assert identity(resolve(path))["weights_sha256"] != first["weights_sha256"]


def test_hub_cache_files_use_their_blob_names_and_commit(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    repo = cache / "models--org--tiny"
    snapshot = repo / "snapshots" / COMMIT
    write_model_dir(snapshot)
    (repo / "blobs").mkdir()
    with open(snapshot / "model.safetensors", "rb") as f:
        blob = hashlib.sha256(f.read()).hexdigest()
    os.replace(snapshot / "model.safetensors", repo / "blobs" / blob)
    os.symlink(os.path.join("..", "..", "blobs", blob), snapshot / "model.safetensors")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    info = identity(resolve("org/tiny", offline=True))
    assert info["source"] == "hub" and info["repo_id"] == "org/tiny" and info["revision"] == COMMIT
    assert fingerprint.file_digest(str(snapshot / "model.safetensors")) == blob
    assert info["weights_sha256"] == fingerprint._digest([["model.safetensors", blob]])


@pytest.mark.parametrize("name", ["smollm2-135m", "minilm-l6"])
def test_embedded_defaults_have_a_real_identity(name):
    try:
        ckpt = resolve(name)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"embedded model not installed: {e}")
    info = identity(ckpt)
    assert info["source"] == "embedded" and info["package"].split("==")[1]
    assert info["format"] == ("gguf" if name == "smollm2-135m" else "safetensors")
    assert len(info["weights_sha256"]) == 64
