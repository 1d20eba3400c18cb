"""OPT family (opt-125m-like pre-norm, opt-350m-like post-norm with projections) against transformers."""

import pytest
from transformers import OPTConfig, OPTForCausalLM

from lmprobe.checkpoints import load
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, hidden_size=48, ffn_dim=80, num_hidden_layers=3, num_attention_heads=4,
            max_position_embeddings=32)

VARIANTS = {
    "pre_norm": OPTConfig(**TINY),  # opt-125m ... opt-66b
    "post_norm_projected": OPTConfig(**TINY, do_layer_norm_before=False, word_embed_proj_dim=24),  # opt-350m
    "untied_plain_norms": OPTConfig(**TINY, tie_word_embeddings=False, layer_norm_elementwise_affine=False,
                                    enable_bias=False, activation_function="gelu", _remove_final_layer_norm=True),
}


def _unprojected_last_hidden(hf):
    """HF's model, but with its last hidden state taken before project_out, as lmprobe keeps it
    (in hidden_size, so that all hidden states stack); the logits still cover project_out."""
    seen = {}
    hf.model.decoder.project_out.register_forward_hook(lambda module, args, out: seen.update(h=args[0]))

    def call(**kwargs):
        out = hf(**kwargs)
        out.hidden_states = out.hidden_states[:-1] + (seen["h"],)
        return out

    return call


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    config = VARIANTS[variant]
    hf = save_random(OPTForCausalLM, config, tmp_path)
    if config.word_embed_proj_dim != config.hidden_size:
        hf = _unprojected_last_hidden(hf)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"opt/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("opt")
    save_random(OPTForCausalLM, VARIANTS["post_norm_projected"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(TINY["vocab_size"], lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, TINY["vocab_size"])
