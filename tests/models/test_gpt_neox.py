"""GPT-NeoX family (Pythia, Dolly-v2) against transformers' PyTorch model."""

import json

import pytest
from flax import nnx
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError
from lmprobe.models import gpt_neox
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64)

VARIANTS = {
    "parallel_rotary0.25": GPTNeoXConfig(**TINY, use_parallel_residual=True, rotary_pct=0.25),
    "parallel_rotary1.0": GPTNeoXConfig(**TINY, use_parallel_residual=True, rotary_pct=1.0),
    "sequential_rotary0.25": GPTNeoXConfig(**TINY, use_parallel_residual=False, rotary_pct=0.25),
    "sequential_rotary1.0": GPTNeoXConfig(**TINY, use_parallel_residual=False, rotary_pct=1.0),
    # config.json rewritten below in the Pythia (transformers 4) spelling: rotary_pct, rotary_emb_base.
    "legacy_tied_nobias": GPTNeoXConfig(**TINY, rotary_pct=0.5, rotary_emb_base=500.0, hidden_act="gelu_new",
                                        tie_word_embeddings=True, attention_bias=False),
}


def _legacy_config_json(path):
    config = json.loads((path / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config.update(rotary_pct=rope["partial_rotary_factor"], rotary_emb_base=rope["rope_theta"])
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    config = VARIANTS[variant]
    hf = save_random(GPTNeoXForCausalLM, config, tmp_path)
    if variant.startswith("legacy"):
        _legacy_config_json(tmp_path)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"gpt_neox/{variant}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


def test_unsupported_rope_scaling_is_refused():
    config = dict(VARIANTS["parallel_rotary0.25"].to_dict(), rope_parameters=None,
                  rope_scaling={"type": "dynamic", "factor": 2.0})
    with pytest.raises(CheckpointError, match="dynamic"):
        cfg = gpt_neox.FAMILY.config_from_hf(config)
        nnx.eval_shape(lambda: gpt_neox.GPTNeoX(cfg, rngs=nnx.Rngs(0)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt_neox")
    save_random(GPTNeoXForCausalLM, VARIANTS["parallel_rotary0.25"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(131, lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, 131)
