"""MPT family against transformers' PyTorch model."""

import numpy as np
import pytest
from transformers import MptConfig, MptForCausalLM
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

from lmprobe.checkpoints import load
from lmprobe.engine.packing import pack_pairs, visibility
from lmprobe.errors import CheckpointError
from lmprobe.models import mpt
from tests.models.parity import check_kv_cache, check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, n_layers=2, max_seq_len=64)

# transformers always builds ALiBi with alibi_bias_max=8 (it does not pass the config's value);
# other values are checked on the slopes alone (test_alibi_slopes_match_transformers).
VARIANTS = {
    "heads4": MptConfig(**TINY, d_model=64, n_heads=4),
    # 6 heads: slopes interleaved from those of 8; clipped q/k/v; an explicit softmax scale
    "heads6_clip_scale": MptConfig(**TINY, d_model=48, n_heads=6, attn_config=dict(clip_qkv=0.3, softmax_scale=0.2)),
}


@pytest.mark.parametrize("variant,left", [("heads4", False), ("heads6_clip_scale", False),
                                          ("heads6_clip_scale", True)])
def test_parity_with_transformers(tmp_path, variant, left):
    # transformers' MPT takes no position ids: ALiBi distances in slots, left padding included
    config = VARIANTS[variant]
    hf = save_random(MptForCausalLM, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size, left=left)
    diffs = max_diffs(tmp_path, hf, ids, mask)
    print(f"mpt/{variant}/{'left' if left else 'right'}: {diffs}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4


@pytest.mark.parametrize("bias_max", [8, 6, 16])
def test_alibi_slopes_match_transformers(bias_max):
    for heads in (1, 2, 3, 4, 5, 6, 8, 12, 32, 48):
        ref = -build_mpt_alibi_tensor(heads, 2, alibi_bias_max=bias_max)[:, 0, 0].numpy()  # -(1 * slope)
        np.testing.assert_allclose(mpt.alibi_slopes(heads, bias_max), ref, rtol=1e-6)  # torch pow: 1 ulp


def test_unsupported_variants_are_refused():
    base = VARIANTS["heads4"].to_dict()
    with pytest.raises(CheckpointError, match="qk_ln"):
        mpt.FAMILY.config_from_hf(dict(base, attn_config=dict(base["attn_config"], qk_ln=True)))
    with pytest.raises(CheckpointError, match="alibi=false"):
        mpt.FAMILY.config_from_hf(dict(base, attn_config=dict(base["attn_config"], alibi=False)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("mpt")
    save_random(MptForCausalLM, VARIANTS["heads6_clip_scale"], path)
    return load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    check_left_padding(tiny, *padded_batch(131, lengths=(9, 5, 2), left=True))


def test_kv_cache_decoding_matches_full_forward(tiny):
    check_kv_cache(tiny, 131)


def test_packed_pair_matches_each_sequence_alone(tiny):
    """A packed row [prefix | rest of a | rest of b]: b's ALiBi distances are in positions, not slots."""
    a, b = [5, 6, 7, 8, 9, 10], [5, 6, 7, 20, 21]
    packed = pack_pairs([a], [b], limit=64)
    row, segments = np.asarray(packed.rows), np.asarray(packed.segments)
    out = tiny(row, visibility(segments), positions=np.asarray(packed.positions), output_hidden_states=True)
    alone = tiny(np.asarray([b]), output_hidden_states=True)  # b's slots skip a's rest: 0 1 2 6 7
    np.testing.assert_allclose(np.asarray(out.hidden_states)[:, 0, packed.slots[1]],
                               np.asarray(alone.hidden_states)[:, 0], atol=1e-5)
