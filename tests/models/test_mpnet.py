"""MPNet family (all-mpnet-base-v2) against transformers' PyTorch model."""

import numpy as np
import pytest
import torch
from transformers import MPNetConfig, MPNetForMaskedLM, MPNetModel
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.models import mpnet
from tests.models.parity import (
    check_inputs_embeds,
    check_left_padding,
    check_right_padding,
    jitted_encoder,
    max_diffs,
    padded_batch,
    save_random,
)

# 40 positions: distances up to 37 reach the log-spaced buckets (beyond 8 slots)
TINY = dict(vocab_size=131, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=40)
PAD = 1  # MPNet's padding_idx


def mpnet_batch(lengths=(37, 20, 1), **kw):
    """A padded batch whose padding slots hold the pad token, as MPNet's tokenizer makes them."""
    ids, mask = padded_batch(TINY["vocab_size"], lengths=lengths, **kw)
    return np.where(mask == 1, ids, PAD), mask


def test_relative_position_bucket_matches_transformers():
    rel = np.arange(-3000, 3001)
    ref = MPNetEncoder.relative_position_bucket(torch.tensor(rel)[None]).numpy()[0]
    np.testing.assert_array_equal(mpnet.relative_position_bucket(rel), ref)


def test_mpnet_parity(tmp_path):
    hf = save_random(MPNetModel, MPNetConfig(**TINY), tmp_path)  # pooler tensors are saved, and ignored
    diffs = max_diffs(tmp_path, hf, *mpnet_batch())
    print(f"mpnet: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


def test_mpnet_task_model_parity(tmp_path):
    """Tensors under the "mpnet." prefix of a task model, gelu_new."""
    hf = save_random(MPNetForMaskedLM, MPNetConfig(**TINY, hidden_act="gelu_new"), tmp_path)
    diffs = max_diffs(tmp_path, hf.mpnet, *mpnet_batch())
    print(f"mpnet/masked_lm: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("mpnet")
    save_random(MPNetModel, MPNetConfig(**TINY), path)
    return load(str(path), tokenizer=False).model


@pytest.fixture(scope="module")
def jitted(model):
    return jitted_encoder(model)


def test_left_padding_matches_unpadded(jitted):
    check_left_padding(jitted, *mpnet_batch(left=True))


def test_right_padding_matches_unpadded(jitted):
    check_right_padding(jitted, *mpnet_batch())


def test_inputs_embeds_match_input_ids(model, jitted):
    check_inputs_embeds(model, jitted, *mpnet_batch())


def test_too_long_input_is_refused(model):
    assert model.max_length == TINY["max_position_embeddings"] - 2
    with pytest.raises(LmprobeError, match="limit"):
        model(np.full((1, model.max_length + 1), 5))


def test_too_few_buckets_are_refused():
    with pytest.raises(CheckpointError, match="buckets"):
        mpnet.MPNetConfig.from_hf({**MPNetConfig(**TINY).to_dict(), "relative_attention_num_buckets": 16})
