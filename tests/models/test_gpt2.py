"""GPT-2 family against transformers' PyTorch model."""

import numpy as np
import pytest
from transformers import GPT2Config, GPT2LMHeadModel

from lmprobe.checkpoints import load
from lmprobe.errors import LmprobeError
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, n_embd=32, n_layer=3, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0)

VARIANTS = {
    "default": GPT2Config(**TINY),
    "inverse_layer_idx": GPT2Config(**TINY, scale_attn_by_inverse_layer_idx=True),
    # HF's eager path is the only one that honours reorder_and_upcast_attn.
    "untied_unscaled_relu_reordered": GPT2Config(
        **TINY, tie_word_embeddings=False, scale_attn_weights=False, n_inner=48,
        activation_function="relu", reorder_and_upcast_attn=True, attn_implementation="eager"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    config = VARIANTS[variant]
    hf = save_random(GPT2LMHeadModel, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"gpt2/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2")
    save_random(GPT2LMHeadModel, VARIANTS["inverse_layer_idx"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(TINY["vocab_size"], lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, TINY["vocab_size"])


def test_sequence_longer_than_learned_positions_is_refused(tiny):
    with pytest.raises(LmprobeError, match="64 tokens"):
        tiny(np.zeros((1, 65), np.int32))
