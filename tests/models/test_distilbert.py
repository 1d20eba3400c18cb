"""DistilBERT family against transformers' PyTorch model."""

import pytest
from transformers import DistilBertConfig, DistilBertForMaskedLM, DistilBertModel

from lmprobe.checkpoints import load
from tests.models.parity import check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, dim=48, hidden_dim=80, n_layers=3, n_heads=4, max_position_embeddings=40)

VARIANTS = {
    "base": (DistilBertModel, DistilBertConfig(**TINY)),
    # relu, a stored sinusoidal position table, tensors under the task model's "distilbert." prefix
    "relu_sinusoidal_mlm": (DistilBertForMaskedLM, DistilBertConfig(**TINY, activation="relu",
                                                                    sinusoidal_pos_embds=True)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    cls, config = VARIANTS[variant]
    hf = save_random(cls, config, tmp_path)
    diffs = max_diffs(tmp_path, getattr(hf, "distilbert", hf), *padded_batch(config.vocab_size))
    print(f"distilbert/{variant}: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


def test_left_padding_matches_unpadded(tmp_path):
    save_random(DistilBertModel, DistilBertConfig(**TINY), tmp_path)
    model = load(str(tmp_path), tokenizer=False).model
    check_left_padding(model, *padded_batch(TINY["vocab_size"], lengths=(9, 5, 2), left=True))
