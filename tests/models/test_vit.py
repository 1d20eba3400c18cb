"""ViT family against transformers' PyTorch ViTModel / ViTForImageClassification."""

import dataclasses
import functools
import json

import numpy as np
import pytest
import torch
from flax import nnx
from transformers import ViTConfig, ViTForImageClassification, ViTModel

from lmprobe.checkpoints import image_processor, load
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.models import vit
from tests.models.parity import save_random

TINY = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=48, intermediate_size=80,
            num_hidden_layers=2, num_attention_heads=4)


def pixels(image_size=(32, 32), batch=3, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 3, *image_size)).astype(np.float32)


def vit_diffs(path, hf_vit, x) -> dict:
    """Max |difference| of last_hidden_state, every hidden state and (if any) the pooler output."""
    model = load(str(path), tokenizer=False).model
    with torch.no_grad():
        ref = hf_vit(pixel_values=torch.tensor(x), output_hidden_states=True)
    out = model(x, output_hidden_states=True)
    ours = np.asarray(out.hidden_states)
    assert ours.shape[0] == len(ref.hidden_states) == model.config.num_hidden_layers + 1
    diffs = {"last_hidden": float(np.abs(np.asarray(out.last_hidden_state) - ref.last_hidden_state.numpy()).max()),
             "hidden": max(float(np.abs(ours[i] - h.numpy()).max()) for i, h in enumerate(ref.hidden_states))}
    assert (model.pooler is None) == (ref.pooler_output is None)
    if ref.pooler_output is not None:
        diffs["pooler"] = float(np.abs(np.asarray(model.pooled(out)) - ref.pooler_output.numpy()).max())
    return diffs


@pytest.mark.parametrize("name, model_cls, change", [
    ("vit_model+pooler", ViTModel, {}),
    ("vit_model/no_pooler/no_qkv_bias/eps1e-6", functools.partial(ViTModel, add_pooling_layer=False),
     dict(qkv_bias=False, layer_norm_eps=1e-6, hidden_size=32, intermediate_size=64)),
    ("classification/non_square/gelu_new", ViTForImageClassification,
     dict(image_size=[32, 24], num_labels=5, hidden_act="gelu_new")),
])
def test_vit_parity(tmp_path, name, model_cls, change):
    config = ViTConfig(**{**TINY, **change})
    hf = save_random(model_cls, config, tmp_path)
    diffs = vit_diffs(tmp_path, getattr(hf, "vit", hf), pixels(tuple(np.broadcast_to(config.image_size, 2))))
    print(f"{name}: {diffs}")
    assert all(d <= 1e-4 for d in diffs.values()), diffs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("vit")
    save_random(functools.partial(ViTModel, add_pooling_layer=False), ViTConfig(**TINY), path)
    return path, load(str(path), tokenizer=False).model


def test_properties_and_no_pooler(tiny):
    _, model = tiny
    assert (model.image_size, model.num_channels, model.hidden_size) == ((32, 32), 3, 48)
    out = model(pixels())
    assert out.last_hidden_state.shape == (3, 1 + 16, 48) and out.hidden_states is None
    with pytest.raises(LmprobeError, match="no pooler"):
        model.pooled(out)


@pytest.mark.parametrize("shape", [(1, 3, 64, 64), (1, 3, 32, 24), (1, 1, 32, 32), (3, 32, 32)])
def test_wrong_image_size_is_refused(tiny, shape):
    _, model = tiny
    with pytest.raises(LmprobeError, match=r"\[batch, 3, 32, 32\].*32x32"):
        model(np.zeros(shape, np.float32))


def test_tokenizer_request_is_refused(tiny):
    path, _ = tiny
    with pytest.raises(CheckpointError, match="tokenizer=False"):
        load(str(path))


def test_image_normalization(tmp_path):
    mean, std = image_processor.image_normalization(str(tmp_path))  # no preprocessor_config.json: HF's defaults
    np.testing.assert_array_equal(mean, [0.5] * 3)
    np.testing.assert_array_equal(std, [0.5] * 3)
    conf = tmp_path / image_processor.PREPROCESSOR_CONFIG
    conf.write_text(json.dumps({"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}))
    mean, std = image_processor.image_normalization(str(tmp_path))
    np.testing.assert_allclose(mean, [0.485, 0.456, 0.406])
    np.testing.assert_allclose(std, [0.229, 0.224, 0.225])
    conf.write_text(json.dumps({"do_normalize": False, "image_mean": [0.485, 0.456, 0.406]}))
    mean, std = image_processor.image_normalization(str(tmp_path))
    np.testing.assert_array_equal(mean, [0.0] * 3)
    np.testing.assert_array_equal(std, [1.0] * 3)
    conf.write_text(json.dumps({"image_mean": [0.5, 0.5]}))
    with pytest.raises(CheckpointError, match="image_mean"):
        image_processor.image_normalization(str(tmp_path))


@pytest.mark.parametrize("change", [dict(hidden_act="quick_gelu"), dict(pooler_act="sigmoid")])
def test_unsupported_config_is_refused(change):
    cfg = vit.ViTConfig.from_hf({**ViTConfig(**TINY).to_dict(), **change})
    with pytest.raises(CheckpointError, match="not supported"):
        vit.ViT(dataclasses.replace(cfg, add_pooling_layer=True), rngs=nnx.Rngs(0))
