"""Llama family (LLaMA, Llama-2/3, SmolLM2, Mistral) against transformers' PyTorch models."""

import pytest
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from lmprobe.checkpoints import load
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=151, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)

VARIANTS = {
    "gqa": (LlamaForCausalLM, LlamaConfig(**TINY)),
    "mha_tied_bias": (LlamaForCausalLM, LlamaConfig(**{**TINY, "num_key_value_heads": 6},
                                                    tie_word_embeddings=True, attention_bias=True,
                                                    mlp_bias=True)),
    "llama3_rope": (LlamaForCausalLM, LlamaConfig(**TINY, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=8))),
    "mistral_window": (MistralForCausalLM, MistralConfig(**TINY, sliding_window=4)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    cls, config = VARIANTS[variant]
    hf = save_random(cls, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"llama/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    save_random(LlamaForCausalLM, LlamaConfig(**TINY), path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(151, lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, 151)
