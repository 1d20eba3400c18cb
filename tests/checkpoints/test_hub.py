"""Hub ids and aliases resolved from a fake Hugging Face cache, with no network."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from lmprobe.checkpoints import aliases, hub
from lmprobe.checkpoints.resolve import resolve
from lmprobe.errors import CheckpointError

from .conftest import tiny_tensors, write_model_dir

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_cache(cache, repo_id="org/tiny", weights=True) -> str:
    """models--org--tiny/{refs/main, snapshots/<commit>/...} as huggingface_hub lays it out."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(COMMIT)
    snapshot = write_model_dir(os.path.join(repo, "snapshots", COMMIT))
    if not weights:
        os.remove(os.path.join(snapshot, "model.safetensors"))
    return snapshot


def test_hub_id_from_hf_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    snapshot = fake_cache(str(tmp_path / "cache"))
    ckpt = resolve("org/tiny", offline=True)
    assert ckpt.name == "org/tiny" and os.path.samefile(ckpt.location, snapshot)
    assert ckpt.config["model_type"] == "llama"
    want = tiny_tensors()["model.layers.0.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(ckpt.tensors.read("model.layers.0.self_attn.q_proj.weight"), want)


def test_hub_id_from_hf_home_and_by_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    snapshot = fake_cache(str(tmp_path / "home" / "hub"))
    assert os.path.samefile(resolve("org/tiny", offline=True).location, snapshot)
    assert os.path.samefile(resolve("org/tiny", offline=True, revision=COMMIT).location, snapshot)


def test_alias_from_cache_case_insensitive(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setitem(aliases.ALIASES, "tiny-alias", "org/tiny")
    snapshot = fake_cache(str(tmp_path))
    ckpt = resolve("Tiny-Alias", offline=True)
    assert ckpt.name == "Tiny-Alias" and os.path.samefile(ckpt.location, snapshot)


def test_env_offline_and_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError) as err:
        resolve("opt-13b")
    msg = str(err.value)
    assert "'opt-13b' (facebook/opt-13b) is not in the local Hugging Face cache" in msg
    assert f"HF_HUB_CACHE={tmp_path}" in msg and "offline" in msg and "hf download facebook/opt-13b" in msg


def test_offline_flag_and_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(CheckpointError, match=r"'org/missing' is not in the local Hugging Face cache"):
        resolve("org/missing", offline=True)


def test_unreachable_hub_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # HF_ENDPOINT is a closed port (conftest)
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"not in the local Hugging Face cache .* the hub is unreachable"):
        resolve("org/missing")
    assert time.monotonic() - start < 10


def test_incomplete_cached_snapshot_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = fake_cache(str(tmp_path), weights=False)
    with pytest.raises(CheckpointError, match=r"has no weights") as err:
        resolve("org/tiny", offline=True)
    assert snapshot in str(err.value)


def test_incomplete_cached_snapshot_online_tries_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    fake_cache(str(tmp_path), weights=False)
    calls = []
    real = hub.download
    monkeypatch.setattr(hub, "download", lambda *a, **k: calls.append(a) or real(*a, **k))
    with pytest.raises(CheckpointError, match=r"has no safetensors weights.*allow_pickle=True"):
        resolve("org/tiny", offline=False)  # hub down: huggingface_hub hands back the cached snapshot
    assert calls == [("org/tiny", "org/tiny", None)]


def test_invalid_hub_id(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(CheckpointError, match=r"not a valid Hugging Face hub id"):
        resolve("org/bad--name", offline=True)


def test_online_pickle_only_repo_downloads_pickles_only_when_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "config.json").write_text('{"model_type": "llama"}')
    calls = []

    def fake_download(model, repo_id, revision, *, pickle=False):
        calls.append(pickle)
        if pickle:
            import torch

            torch.save({"w": torch.ones(2)}, snapshot / "pytorch_model.bin")
        return str(snapshot)

    monkeypatch.setattr(hub, "download", fake_download)
    with pytest.raises(CheckpointError, match="has no safetensors weights.*allow_pickle=True"):
        resolve("org/pickled")
    assert calls == [False]
    ckpt = resolve("org/pickled", allow_pickle=True)
    assert calls == [False, False, True] and ckpt.tensors.read("w").tolist() == [1.0, 1.0]


def test_download_patterns_never_fetch_pickles_unasked():
    from fnmatch import fnmatch

    base = hub.CONFIG_AND_TOKENIZER + hub.SAFETENSORS
    for name in ("pytorch_model.bin", "pytorch_model-00001-of-00002.bin", "flax_model.msgpack", "tf_model.h5",
                 "onnx/model.onnx", "original/consolidated.00.pth"):
        assert not any(fnmatch(name, p) for p in base), name
    for name in ("model.safetensors", "model-00001-of-00003.safetensors", "tokenizer.json", "config.json"):
        assert any(fnmatch(name, p) for p in base), name
