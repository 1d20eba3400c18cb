"""hf_config: a model argument's config.json without reading weights (local directory, config.json,
.gguf, embedded model, config dict, hub cache, shipped configs), and its one-line errors."""

from __future__ import annotations

import json

import pytest

from lmprobe.checkpoints import safetensors_io
from lmprobe.checkpoints.configs import path_of, shipped_config
from lmprobe.checkpoints.model_config import hf_config
from lmprobe.errors import CheckpointError

from .conftest import TINY_CONFIG, write_model_dir


def test_shipped_config_lookup_by_alias_and_hub_id():
    assert shipped_config("opt-13b") == shipped_config("facebook/opt-13b") == shipped_config("OPT-13B")
    assert shipped_config("EleutherAI/gpt-neo-1.3B")["hidden_size"] == 2048
    assert shipped_config("meta-llama/Llama-2-7b-hf")["num_hidden_layers"] == 32
    assert shipped_config("bert-base")["model_type"] == "bert"
    assert shipped_config("opt-66b") is None and shipped_config("nobody/nothing") is None
    assert shipped_config("opt-350m")["word_embed_proj_dim"] == 512
    assert shipped_config("opt-350m")["do_layer_norm_before"] is False


def test_local_directory_and_config_file_read_no_weights(tmp_path, monkeypatch):
    directory = write_model_dir(tmp_path / "m")
    monkeypatch.setattr(safetensors_io, "open_file", lambda *a, **k: pytest.fail("opened the weights"))
    assert hf_config(directory) == (TINY_CONFIG, str(tmp_path / "m" / "config.json"))
    assert hf_config(tmp_path / "m" / "config.json") == (TINY_CONFIG, str(tmp_path / "m" / "config.json"))
    assert hf_config(dict(TINY_CONFIG)) == (TINY_CONFIG, "the given config")


def test_gguf_config_comes_from_its_metadata():
    config, where = hf_config("smollm2-135m")
    assert config["model_type"] == "llama" and where.endswith(".gguf")


def test_shipped_config_when_the_hub_cache_lacks_it():
    config, where = hf_config("facebook/opt-125m", offline=True)
    assert where == path_of("opt-125m") and config == shipped_config("opt-125m")


def test_errors(tmp_path):
    with pytest.raises(CheckpointError, match=r"`revision=main` applies to hub models; '.*' is a local model"):
        hf_config(write_model_dir(tmp_path / "m"), revision="main")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"'.*empty' has no config.json"):
        hf_config(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CheckpointError, match=r"neither a directory, a config.json nor a .gguf file"):
        hf_config(tmp_path / "notes.txt")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4}))
    with pytest.raises(CheckpointError, match=r"has no 'model_type'"):
        hf_config(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match=r"unknown model 'gtp2': .*hub id \(org/name\)"):
        hf_config("gtp2")
    with pytest.raises(CheckpointError, match=r"ships no config for it \(offline mode is on\)"):
        hf_config("opt-66b", offline=True)
    with pytest.raises(CheckpointError, match=r"revision 'v1' is not cached \(offline mode is on\)"):
        hf_config("opt-125m", revision="v1", offline=True)
