"""GPT-J family against transformers' PyTorch model."""

import numpy as np
import pytest
import torch
from transformers import GPTJConfig, GPTJForCausalLM

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError
from lmprobe.models import gptj
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)

VARIANTS = {
    "rotary8_of16": GPTJConfig(**TINY, rotary_dim=8),  # rotary_dim < head_dim, as GPT-J-6B (64 of 256)
    "rotary16_gelu_inner96": GPTJConfig(**TINY, rotary_dim=16, activation_function="gelu", n_inner=96),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    config = VARIANTS[variant]
    hf = save_random(GPTJForCausalLM, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"gptj/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


def test_left_padded_parity_with_position_ids(tmp_path):
    """Left padding against transformers given the position ids generate() would give it."""
    hf = save_random(GPTJForCausalLM, VARIANTS["rotary8_of16"], tmp_path)
    ids, mask = padded_batch(131, left=True)
    positions = torch.tensor(np.maximum(np.cumsum(mask, axis=1) - 1, 0))
    diffs = max_diffs(tmp_path, hf, ids, mask, position_ids=positions)
    print(f"gptj/left_padded: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


def test_tied_head_is_refused():
    with pytest.raises(CheckpointError, match="tie_word_embeddings"):
        gptj.FAMILY.config_from_hf(dict(VARIANTS["rotary8_of16"].to_dict(), tie_word_embeddings=True))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gptj")
    save_random(GPTJForCausalLM, VARIANTS["rotary8_of16"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(131, lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, 131)
