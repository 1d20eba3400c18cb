"""GPT-Neo family against transformers' PyTorch model, with local attention windows shorter
than the sequences so that local and global layers really differ."""

import pytest
from transformers import GPTNeoConfig, GPTNeoForCausalLM

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError
from lmprobe.models import gpt_neo
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, hidden_size=32, num_layers=3, num_heads=4, max_position_embeddings=64,
            bos_token_id=0, eos_token_id=0)

VARIANTS = {
    "global_local_global": GPTNeoConfig(**TINY, attention_types=[[["global", "local"], 1], [["global"], 1]],
                                        window_size=3),
    "local_untied_gelu": GPTNeoConfig(**TINY, attention_types=[[["local"], 3]], window_size=4,
                                      tie_word_embeddings=False, intermediate_size=48,
                                      activation_function="gelu"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    config = VARIANTS[variant]
    hf = save_random(GPTNeoForCausalLM, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size)  # longest sequence 9 > window
    assert mask.sum(1).max() > config.window_size
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"gpt_neo/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


def test_attention_types_must_cover_every_layer():
    config = dict(VARIANTS["global_local_global"].to_dict(), attention_types=[[["global", "local"], 1]])
    with pytest.raises(CheckpointError, match="each of its 3 layers"):
        gpt_neo.FAMILY.config_from_hf(config)
    config["attention_types"] = [[["global", "sparse", "local"], 1]]
    with pytest.raises(CheckpointError, match="'global' or 'local'"):
        gpt_neo.FAMILY.config_from_hf(config)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt_neo")
    save_random(GPTNeoForCausalLM, VARIANTS["global_local_global"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(TINY["vocab_size"], lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, TINY["vocab_size"])
