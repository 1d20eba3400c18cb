"""nomic-bert family (nomic-embed-text-v1.5) against transformers' PyTorch model."""

import numpy as np
import pytest
import torch
from transformers import NomicBertConfig, NomicBertForMaskedLM, NomicBertModel

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError
from lmprobe.models import nomic_bert
from tests.models import parity
from tests.models.parity import (
    check_inputs_embeds,
    check_left_padding,
    check_right_padding,
    jitted_encoder,
    max_diffs,
    padded_batch,
    save_random,
)

TINY = dict(vocab_size=131, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64)
LENGTHS = (37, 20, 1)


def test_nomic_bert_parity(tmp_path):
    """transformers saves nomic's own tensor names (fused attn.Wqkv, mlp.fc11/fc12/fc2, emb_ln)."""
    hf = save_random(NomicBertModel, NomicBertConfig(**TINY), tmp_path)
    diffs = max_diffs(tmp_path, hf, *padded_batch(TINY["vocab_size"], lengths=LENGTHS))
    print(f"nomic_bert: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


def test_nomic_bert_token_types_parity(tmp_path, monkeypatch):
    """Non-zero token types, head_dim != hidden/heads, another rope base, gelu gate, and tensors under
    the "nomic_bert." prefix of a task model."""
    config = NomicBertConfig(**TINY, head_dim=16, hidden_act="gelu",
                             rope_parameters={"rope_type": "default", "rope_theta": 50.0})
    hf = save_random(NomicBertForMaskedLM, config, tmp_path)
    ids, mask = padded_batch(TINY["vocab_size"], lengths=LENGTHS)
    types = np.tile(np.arange(ids.shape[1]) // 10 % 2, (ids.shape[0], 1))
    real_load = parity.load

    def load_with_types(path, **kw):  # max_diffs calls our model without token types
        loaded = real_load(path, **kw)
        model = loaded.model
        return loaded._replace(model=lambda *a, **k: model(*a, token_type_ids=types, **k))

    monkeypatch.setattr(parity, "load", load_with_types)
    diffs = max_diffs(tmp_path, hf.nomic_bert, ids, mask, token_type_ids=torch.tensor(types))
    print(f"nomic_bert/token_types: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("nomic_bert")
    save_random(NomicBertModel, NomicBertConfig(**TINY), path)
    return load(str(path), tokenizer=False).model


@pytest.fixture(scope="module")
def jitted(model):
    return jitted_encoder(model)


def test_left_padding_matches_unpadded(jitted):
    check_left_padding(jitted, *padded_batch(TINY["vocab_size"], lengths=LENGTHS, left=True))


def test_right_padding_matches_unpadded(jitted):
    check_right_padding(jitted, *padded_batch(TINY["vocab_size"], lengths=LENGTHS))


def test_inputs_embeds_match_input_ids(model, jitted):
    check_inputs_embeds(model, jitted, *padded_batch(TINY["vocab_size"], lengths=LENGTHS))


ORIGINAL = dict(model_type="nomic_bert", vocab_size=131, n_embd=48, n_head=4, n_layer=2, n_inner=80,
                n_positions=64, type_vocab_size=2, layer_norm_epsilon=1e-12, activation_function="swiglu",
                rotary_emb_base=1000, rotary_emb_fraction=1.0, rotary_emb_interleaved=False,
                rotary_scaling_factor=None, prenorm=False, qkv_proj_bias=False, mlp_fc1_bias=False,
                mlp_fc2_bias=False, causal=False)


def test_original_nomic_config_reads_as_transformers_config():
    """nomic's own config.json (trust_remote_code era) and transformers' give the same model."""
    ours = nomic_bert.NomicBertConfig.from_hf(ORIGINAL)
    assert ours == nomic_bert.NomicBertConfig.from_hf(NomicBertConfig(**TINY).to_dict())


@pytest.mark.parametrize("change", [dict(rotary_emb_interleaved=True), dict(rotary_emb_fraction=0.5),
                                    dict(rotary_scaling_factor=2.0), dict(prenorm=True), dict(qkv_proj_bias=True),
                                    dict(activation_function="gelu")])
def test_unsupported_config_is_refused(change):
    with pytest.raises(CheckpointError):
        nomic_bert.NomicBertConfig.from_hf({**ORIGINAL, **change})
