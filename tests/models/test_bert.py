"""BERT family (BERT, RoBERTa, all-MiniLM-L6-v2) against transformers' PyTorch models."""

import numpy as np
import pytest
import torch
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertModel, RobertaConfig, RobertaForMaskedLM

from lmprobe.checkpoints import load
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.models import bert
from tests.models import parity
from tests.models.parity import check_left_padding, max_diffs, padded_batch, save_random

TINY = dict(vocab_size=131, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
            num_attention_heads=4, max_position_embeddings=40)
ROBERTA_PAD = 1


def roberta_batch(**kw):
    """A padded batch whose padding slots hold RoBERTa's pad token, as its tokenizer makes them."""
    ids, mask = padded_batch(TINY["vocab_size"], **kw)
    return np.where(mask == 1, ids, ROBERTA_PAD), mask


def test_bert_parity(tmp_path):
    hf = save_random(BertModel, BertConfig(**TINY), tmp_path)
    diffs = max_diffs(tmp_path, hf, *padded_batch(TINY["vocab_size"]))
    print(f"bert: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


def test_bert_pooler_is_built_iff_the_checkpoint_has_one(tmp_path):
    ids, mask = padded_batch(TINY["vocab_size"])
    hf = save_random(BertModel, BertConfig(**TINY, classifier_dropout=0.25), tmp_path / "pooled")
    model = load(str(tmp_path / "pooled"), tokenizer=False).model
    with torch.no_grad():
        want = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).pooler_output.numpy()
    np.testing.assert_allclose(np.asarray(model.pooled(model(ids, mask))), want, atol=1e-5)
    assert model.config.add_pooling_layer and model.config.classifier_dropout == 0.25
    save_random(lambda c: BertModel(c, add_pooling_layer=False), BertConfig(**TINY), tmp_path / "bare")
    bare = load(str(tmp_path / "bare"), tokenizer=False).model
    assert bare.pooler is None and bare.config.classifier_dropout == 0.1  # hidden_dropout_prob
    with pytest.raises(LmprobeError, match="no pooler"):
        bare.pooled(bare(ids, mask))


def test_bert_token_types_parity(tmp_path, monkeypatch):
    """Non-zero token_type_ids, gelu_new, and tensors under the "bert." prefix of a task model."""
    hf = save_random(BertForMaskedLM, BertConfig(**TINY, type_vocab_size=3, hidden_act="gelu_new"), tmp_path)
    ids, mask = padded_batch(TINY["vocab_size"])
    types = np.tile(np.minimum(np.arange(ids.shape[1]) // 3, 2), (ids.shape[0], 1))
    real_load = parity.load

    def load_with_types(path, **kw):  # max_diffs calls our model without token types
        loaded = real_load(path, **kw)
        model = loaded.model
        return loaded._replace(model=lambda *a, **k: model(*a, token_type_ids=types, **k))

    monkeypatch.setattr(parity, "load", load_with_types)
    diffs = max_diffs(tmp_path, hf.bert, ids, mask, token_type_ids=torch.tensor(types))
    print(f"bert/token_types: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


def test_roberta_parity(tmp_path):
    """Pad tokens in the batch: RoBERTa's position ids skip them, counted from pad_token_id + 1."""
    hf = save_random(RobertaForMaskedLM, RobertaConfig(**TINY, pad_token_id=ROBERTA_PAD), tmp_path)
    diffs = max_diffs(tmp_path, hf.roberta, *roberta_batch())
    print(f"roberta: {diffs}")
    assert diffs["hidden"] <= 1e-4 and diffs["last_hidden"] <= 1e-4


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tiny(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    if request.param == "bert":
        save_random(BertModel, BertConfig(**TINY), path)
    else:
        save_random(RobertaForMaskedLM, RobertaConfig(**TINY, pad_token_id=ROBERTA_PAD), path)
    return request.param, load(str(path), tokenizer=False).model


def test_left_padding_matches_unpadded(tiny):
    kind, model = tiny
    batch = dict(lengths=(9, 5, 2), left=True)
    check_left_padding(model, *(roberta_batch(**batch) if kind == "roberta"
                                else padded_batch(TINY["vocab_size"], **batch)))


def test_inputs_embeds_match_input_ids(tiny):
    _, model = tiny
    ids, mask = roberta_batch()
    from_ids = model(ids, mask).last_hidden_state
    from_embeds = model(None, mask, inputs_embeds=model.embed(ids)).last_hidden_state
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(from_embeds)[real], np.asarray(from_ids)[real], atol=1e-5)


def test_too_long_input_is_refused(tiny):
    _, model = tiny
    with pytest.raises(LmprobeError, match="limit"):
        model(np.full((1, model.max_length + 1), 5))


@pytest.mark.parametrize("change", [dict(position_embedding_type="relative_key"), dict(is_decoder=True)])
def test_unsupported_config_is_refused(change):
    with pytest.raises(CheckpointError):
        bert.BertConfig.from_hf({**BertConfig(**TINY).to_dict(), **change})


@pytest.mark.slow
def test_all_minilm_l6_v2_matches_transformers():
    """The embedded sentence encoder: every hidden state and the mean-pooled similarity."""
    loaded = load("minilm-l6")
    assert loaded.family is bert.FAMILY
    tok = loaded.tokenizer
    hf = AutoModel.from_pretrained(loaded.checkpoint.location).eval()
    sentences = ["I loved this movie.", "I adored this film.",
                 "The committee postponed its decision on the new bridge until next spring."]
    enc = tok(sentences, padding=True, return_tensors="np")
    out = loaded.model(enc["input_ids"], enc["attention_mask"], token_type_ids=enc["token_type_ids"],
                       output_hidden_states=True)
    with torch.no_grad():
        ref = hf(**{k: torch.tensor(v) for k, v in enc.items()}, output_hidden_states=True)
    real = enc["attention_mask"].astype(bool)
    assert len(ref.hidden_states) == out.hidden_states.shape[0] == 7
    hidden = max(float(np.abs(np.asarray(out.hidden_states[i]) - h.numpy())[real].max())
                 for i, h in enumerate(ref.hidden_states))
    last = float(np.abs(np.asarray(out.last_hidden_state) - ref.last_hidden_state.numpy())[real].max())

    def cosine(h):  # sentence-transformers' mean pooling over real tokens
        m = enc["attention_mask"][..., None]
        e = (np.asarray(h) * m).sum(1) / m.sum(1)
        return float(e[0] @ e[1] / np.linalg.norm(e[0]) / np.linalg.norm(e[1]))

    ours, theirs = cosine(out.last_hidden_state), cosine(ref.last_hidden_state.numpy())
    print(f"minilm-l6: hidden {hidden:.2e} last {last:.2e} cosine {ours:.5f} (transformers {theirs:.5f})")
    assert hidden <= 1e-4 and last <= 1e-4
    assert abs(ours - theirs) <= 1e-5 and abs(ours - 0.817) <= 0.005
