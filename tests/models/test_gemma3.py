"""Gemma 3 text model against transformers' PyTorch model, with a sliding window shorter than the
sequences so that local and global layers (and their two RoPE bases) really differ."""

import pytest
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError
from lmprobe.models import gemma3
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=151, hidden_size=48, intermediate_size=80, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, max_position_embeddings=64,
            sliding_window=4, layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                           "sliding_attention"])
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        "full_attention": {"rope_type": "default", "rope_theta": 10000.0}}

VARIANTS = {
    "local_global": Gemma3TextConfig(**TINY, rope_parameters=ROPE),
    "untied_linear_rope_softcap": Gemma3TextConfig(
        **TINY, tie_word_embeddings=False, final_logit_softcapping=3.0,
        rope_parameters={**ROPE, "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}}),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    config = VARIANTS[variant]
    hf = save_random(Gemma3ForCausalLM, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size)  # longest sequence 9 > window
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"gemma3/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


def test_transformers_4_config():
    """Hub configs written by transformers 4: rope_theta / rope_scaling / rope_local_base_freq, and
    sliding_window_pattern in place of layer_types."""
    c = dict(TINY, model_type="gemma3_text", layer_types=None, sliding_window_pattern=2, rope_theta=1e6,
             rope_scaling={"rope_type": "linear", "factor": 8.0}, rope_local_base_freq=1e4)
    cfg = gemma3.FAMILY.config_from_hf(c)
    assert cfg.attention_windows() == (4, None, 4, None)
    assert (cfg.rope_theta, dict(cfg.rope_scaling)["factor"], cfg.rope_local_theta) == (1e6, 8.0, 1e4)
    with pytest.raises(CheckpointError, match="use_bidirectional_attention"):
        gemma3.FAMILY.config_from_hf(dict(c, use_bidirectional_attention=True))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma3")
    save_random(Gemma3ForCausalLM, VARIANTS["local_global"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(TINY["vocab_size"], lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, TINY["vocab_size"])
