"""Qwen2 (Qwen2.5, Qwen2.5-Coder: a Llama with q/k/v biases) against transformers' PyTorch model."""

import pytest
from transformers import Qwen2Config, Qwen2ForCausalLM

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError
from lmprobe.models import llama
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=151, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)

VARIANTS = {
    "gqa": Qwen2Config(**TINY),
    # window 4 < 9 tokens on layers 1 and 2 (from max_window_layers on), layer 0 full
    "tied_sliding_layers": Qwen2Config(**TINY, tie_word_embeddings=True, use_sliding_window=True,
                                       sliding_window=4, max_window_layers=1, rope_theta=1000000.0),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    config = VARIANTS[variant]
    hf = save_random(Qwen2ForCausalLM, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"qwen2/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


def test_sliding_window_layers_follow_transformers():
    read = lambda **kw: llama.FAMILY.config_from_hf(dict(VARIANTS["gqa"].to_dict(), **kw))  # noqa: E731
    assert read(layer_types=None, sliding_window=4).attention_windows() == (None,) * 3  # use_sliding_window off
    assert read(layer_types=None, use_sliding_window=True, sliding_window=4,
                max_window_layers=2).attention_windows() == (None, None, 4)
    with pytest.raises(CheckpointError, match="each of its 3 layers"):
        read(layer_types=["full_attention"] * 2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen2")
    save_random(Qwen2ForCausalLM, VARIANTS["tied_sliding_layers"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(TINY["vocab_size"], lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, TINY["vocab_size"])
