"""Checkpoints that do not fit their model get one clear error naming the input and the fix."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError
from tests.models.parity import save_random


@pytest.fixture
def tiny_dir(tmp_path):
    save_random(LlamaForCausalLM, LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                              num_hidden_layers=2, num_attention_heads=2), tmp_path)
    return tmp_path


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def _edit_tensors(path, edit):
    tensors = load_file(path / "model.safetensors")
    edit(tensors)
    save_file(tensors, path / "model.safetensors")


def test_unknown_model_type(tiny_dir):
    _edit_config(tiny_dir, model_type="mamba")
    with pytest.raises(CheckpointError, match=r"model_type 'mamba'.*supported model types: .*llama"):
        load(str(tiny_dir), tokenizer=False)


def test_missing_tensor_is_named(tiny_dir):
    _edit_tensors(tiny_dir, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"'model\.layers\.1\.mlp\.up_proj\.weight' is missing"):
        load(str(tiny_dir), tokenizer=False)


def test_wrong_shape_is_named(tiny_dir):
    def shrink(tensors):
        tensors["model.norm.weight"] = np.ones(8, np.float32)

    _edit_tensors(tiny_dir, shrink)
    with pytest.raises(CheckpointError, match=r"'model\.norm\.weight'.*shape \(8,\).*implies \(16,\)"):
        load(str(tiny_dir), tokenizer=False)


def test_config_that_disagrees_with_weights(tiny_dir):
    _edit_config(tiny_dir, intermediate_size=40)
    with pytest.raises(CheckpointError, match=r"mlp\.\w+_proj\.weight.*config\.json"):
        load(str(tiny_dir), tokenizer=False)


def test_tf_era_layernorm_names_load(tmp_path):
    """Checkpoints converted from TF BERT name LayerNorm parameters gamma / beta."""
    from transformers import BertConfig, BertModel

    from tests.models.parity import max_diffs, padded_batch

    hf = save_random(BertModel, BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                           num_attention_heads=2, intermediate_size=32), tmp_path)

    def rename(tensors):
        for name in [n for n in tensors if "LayerNorm" in n]:
            tensors[name.replace(".weight", ".gamma").replace(".bias", ".beta")] = tensors.pop(name)

    _edit_tensors(tmp_path, rename)
    assert max_diffs(tmp_path, hf, *padded_batch(64))["hidden"] <= 1e-4
