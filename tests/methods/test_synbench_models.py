"""SynBench's representations by name: what a name is, and each kind built, models through the loaders."""

import json

import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.methods.synbench import representations as synbench_models
from lmprobe.methods.synbench.representations import FUNCTION, IDENTITY, LANGUAGE_MODEL, RANDOM_PROJECTION, VIT
from tests.engine.conftest import tiny_llama_dir  # noqa: F401  (fixture)
from tests.methods.test_synbench import LayerNormEncoder


def _never(name):
    pytest.fail(f"{name} was loaded")


def _load(name, **kwargs):
    return synbench_models.load_representation(name, load_scorer=_never, load_checkpoint=_never, **kwargs)


def test_a_name_says_what_kind_of_representation_it_is(tiny_llama_dir):  # noqa: F811
    assert [synbench_models.representation_kind(n) for n in ("identity", "random_projection", "numpy:tanh")] == [
        IDENTITY, RANDOM_PROJECTION, FUNCTION]
    assert synbench_models.representation_kind(str(tiny_llama_dir)) == LANGUAGE_MODEL
    assert synbench_models.representation_kind(f"{tiny_llama_dir}@bf16") == LANGUAGE_MODEL


def test_functions_are_built_without_loading_a_model():
    assert _load("identity").input_shape == synbench_models.FUNCTION_INPUT_SHAPE
    projection = _load("random_projection", input_shape=(8,), projection_dim=4, seed=3)
    assert projection.settings == {"dim": 4, "projection_seed": 3}
    assert projection.fn(np.ones((2, 8), np.float32)).shape == (2, 4)
    tanh = _load("jax.numpy:tanh", input_shape=(3,), channel_axis=0)
    assert tanh.name == "jax.numpy:tanh" and tanh.channel_axis == 0
    np.testing.assert_allclose(tanh.fn(np.full((1, 3), 0.5, np.float32)), np.tanh(np.full((1, 3), 0.5)), rtol=1e-6)
    with pytest.raises(LmprobeError, match="`model=no_such_module:f`: cannot import function 'f'"):
        _load("no_such_module:f")


def test_a_language_model_comes_from_the_scorer_loader(tiny_llama_dir):  # noqa: F811
    asked = []

    def load_scorer(name):
        asked.append(name)
        return LayerNormEncoder()

    rep = synbench_models.load_representation(str(tiny_llama_dir), load_scorer=load_scorer, load_checkpoint=_never,
                                              seq_len=4, inputs="rms", input_scale=2.0)
    assert asked == [str(tiny_llama_dir)] and rep.input_shape == (4, 48) and rep.checkpoint is None
    assert rep.settings["pooling"] == "first_last_avg" and rep.settings["input_scale"] == 2.0
    assert rep.settings["inputs"] == "rms"


def test_a_vit_comes_from_the_checkpoint_loader_and_takes_no_variants(tmp_path):
    from transformers import ViTConfig, ViTModel

    from lmprobe.checkpoints import load
    from tests.models.parity import save_random

    path = tmp_path / "vit"
    save_random(ViTModel, ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                    image_size=16, patch_size=8, num_channels=3), path)
    (path / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.4, 0.5, 0.6], "image_std": [0.2] * 3}))
    assert synbench_models.representation_kind(str(path)) == VIT
    with pytest.raises(LmprobeError, match=r"variants \(int8\) apply to language models; give the ViT checkpoint"):
        synbench_models.representation_kind(f"{path}@int8")
    rep = synbench_models.load_representation(str(path), load_scorer=_never,
                                              load_checkpoint=lambda name: load(name, tokenizer=False))
    assert rep.input_shape == (3, 16, 16) and rep.settings["mean"] == pytest.approx([0.4, 0.5, 0.6])
    assert rep.checkpoint["checkpoint"]["location"] == str(path) and "location" not in rep.identity["checkpoint"]
