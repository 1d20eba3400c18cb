"""SCoPE's classification heads against transformers' ForSequenceClassification heads on the same weights."""

import string

import jax
import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    BertTokenizerFast,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    GPT2Config,
    GPT2ForSequenceClassification,
    MPNetConfig,
    MPNetForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer
from lmprobe.errors import LmprobeError
from lmprobe.methods.scope import models, training
from tests.models.parity import padded_batch, save_random

V, D, LABELS = 97, 32, 3
BERTISH = dict(vocab_size=V, hidden_size=D, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               max_position_embeddings=40, num_labels=LABELS)
CASES = {
    "bert": (BertForSequenceClassification, BertConfig(**BERTISH, classifier_dropout=0.3), "bert", 0.3),
    "roberta": (RobertaForSequenceClassification, RobertaConfig(**BERTISH, pad_token_id=1), "roberta", 0.1),
    "distilbert": (DistilBertForSequenceClassification,
                   DistilBertConfig(vocab_size=V, dim=D, hidden_dim=64, n_layers=2, n_heads=4,
                                    max_position_embeddings=40, num_labels=LABELS), "distilbert", 0.2),
    "mpnet": (MPNetForSequenceClassification, MPNetConfig(**BERTISH, hidden_dropout_prob=0.15), "roberta", 0.15),
    "gpt2": (GPT2ForSequenceClassification, GPT2Config(vocab_size=V, n_embd=D, n_layer=2, n_head=4, n_positions=40,
                                                       num_labels=LABELS, pad_token_id=0), "decoder", 0.0),
}


def _batch(kind):
    ids, mask = padded_batch(V, lengths=(9, 5, 1))
    pad = {"roberta": 1, "mpnet": 1, "gpt2": 0}.get(kind, 0)
    return np.where(mask == 1, ids, pad), mask


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    kind = request.param
    cls, config, _, _ = CASES[kind]
    path = tmp_path_factory.mktemp(kind)
    hf = save_random(cls, config, path)
    return kind, hf, load(str(path), tokenizer=False)


def test_hf_heads_match_transformers_on_the_same_weights(case):
    kind, hf, loaded = case
    _, _, layout, rate = CASES[kind]
    classifier = models.Classifier(loaded.model, LABELS, head="hf", seed=1)
    assert classifier.layout == layout and classifier.pooler is None  # BERT: the checkpoint's pretrained pooler
    assert getattr(classifier.head, "rate", 0.0) == pytest.approx(rate)
    models.load_hf_head(classifier, loaded.checkpoint.tensors)
    ids, mask = _batch(kind)
    with torch.no_grad():
        want = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    got = np.asarray(classifier(ids, mask))
    print(f"{kind}: max |logit difference| {np.abs(got - want).max():.2e}")
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_dropout_acts_in_training_only(case):
    kind, _, loaded = case
    classifier = models.Classifier(loaded.model, LABELS, head="hf")
    ids, mask = _batch(kind)
    served = np.asarray(classifier(ids, mask))
    np.testing.assert_array_equal(served, np.asarray(classifier(ids, mask)))
    key = jax.random.PRNGKey(0)
    a, b = np.asarray(classifier(ids, mask, key)), np.asarray(classifier(ids, mask, key))
    np.testing.assert_array_equal(a, b)  # seeded: the same key, the same mask
    if CASES[kind][3] > 0:
        other = np.asarray(classifier(ids, mask, jax.random.PRNGKey(1)))
        assert not np.allclose(a, served) and not np.allclose(a, other)
    else:  # decoders' score head has no dropout
        np.testing.assert_allclose(a, served)


def test_linear_probe_reads_the_heads_frozen_features(case):
    kind, _, loaded = case
    ids, mask = _batch(kind)
    probe = models.Classifier(loaded.model, LABELS, head="hf", linear=True)
    expected = {"bert": "pooler", "roberta": "cls", "distilbert": "cls", "mpnet": "cls", "gpt2": "last"}[kind]
    assert probe.pooling == expected and isinstance(probe.head, models.LinearHead) and probe.head.rate == 0.0
    features = np.asarray(probe.features(ids, mask))
    out = loaded.model(ids, mask, **({"compute_logits": False} if kind == "gpt2" else {}))
    h = np.asarray(out.last_hidden_state)
    if expected == "pooler":
        want = np.asarray(loaded.model.pooled(out))
    elif expected == "cls":
        want = h[:, 0]
    else:
        want = h[np.arange(len(h)), mask.sum(1) - 1]
    np.testing.assert_allclose(features, want, atol=1e-6)
    mean = models.Classifier(loaded.model, LABELS, head="mean", linear=True)
    m = mask[..., None]
    np.testing.assert_allclose(np.asarray(mean.features(ids, mask)), (h * m).sum(1) / m.sum(1), atol=1e-5)


def test_bert_without_a_pooler_gets_a_fresh_one(tmp_path):
    save_random(lambda c: BertModel(c, add_pooling_layer=False), BertConfig(**BERTISH), tmp_path)
    loaded = load(str(tmp_path), tokenizer=False)
    assert loaded.model.pooler is None
    classifier = models.Classifier(loaded.model, LABELS, head="hf", seed=0)
    kernel = np.asarray(classifier.pooler.kernel[...])
    assert kernel.shape == (D, D) and 0.015 < kernel.std() < 0.025 and not np.asarray(classifier.pooler.bias[...]).any()
    assert models.Classifier(loaded.model, LABELS, linear=True).pooling == "cls"  # a random pooler is no feature
    with pytest.raises(LmprobeError, match="no BERT pooler"):
        models.load_hf_head(classifier, loaded.checkpoint.tensors)
    with pytest.raises(LmprobeError, match="not one of"):
        models.Classifier(loaded.model, LABELS, head="cls")


def _char_bert(path, cls=BertModel, **config):
    """A tiny random BERT checkpoint (``cls``) with a character-level WordPiece tokenizer."""
    save_random(cls, BertConfig(**{**BERTISH, "vocab_size": 100, **config}), path)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase,
             *("##" + c for c in string.ascii_lowercase), *".,!?'-:", *string.digits]
    vocab += [f"[unused{i}]" for i in range(100 - len(vocab))]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(str(path / "vocab.txt")).save_pretrained(path)
    return path


TEXTS = ["a fine cast and a great plot", "great fun from start to end", "truly great acting",
         "a great film", "an awful mess of a plot", "awful from start to end", "truly awful acting", "an awful film"]
TOY_LABELS = np.array([1, 1, 1, 1, 0, 0, 0, 0])


def test_checkpoint_head_is_the_fine_tuned_classifier(tmp_path):
    """--head=checkpoint: a BertForSequenceClassification's own pooler + classifier, its labels
    (id2label, in the other order) matched to the data's by name."""
    _char_bert(tmp_path, BertForSequenceClassification, num_labels=2,
               id2label={0: "POSITIVE", 1: "NEGATIVE"}, label2id={"POSITIVE": 0, "NEGATIVE": 1})
    hf = BertForSequenceClassification.from_pretrained(tmp_path).eval()
    scorer = Scorer.load(str(tmp_path), batch_size=4)
    model = training.from_checkpoint(scorer, ("negative", "positive"), name="sst2")
    assert model.identity["head"] == {"kind": "checkpoint", "layout": "bert", "label_order": [1, 0]}
    batch = scorer.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = torch.log_softmax(hf(**batch).logits, -1).numpy()[:, ::-1]
    np.testing.assert_allclose(np.asarray(model.log_probs(TEXTS)), want, atol=1e-5)
    with pytest.raises(LmprobeError, match="do not match"):
        training.from_checkpoint(scorer, ("sad", "happy"))


def test_checkpoint_head_needs_a_classification_checkpoint(tmp_path):
    scorer = Scorer.load(str(_char_bert(tmp_path)), batch_size=4)  # a BertModel: pooler, no classifier
    with pytest.raises(LmprobeError, match="'classifier.bias' of the bert classification head is missing"):
        training.from_checkpoint(scorer, ("negative", "positive"))


@pytest.mark.parametrize("head", ["hf", "mean"])
def test_finetuning_separates_a_toy_set(tmp_path, head):
    scorer = Scorer.load(str(_char_bert(tmp_path)), batch_size=8)
    config = training.TrainConfig(learning_rate=2e-3, batch_size=4, epochs=8, head=head)
    model, losses = training.finetune(scorer, TEXTS, TOY_LABELS, ("negative", "positive"), config=config)
    assert losses[-1] < losses[0] and model.identity["head"]["head"] == head
    accuracy = (np.asarray(model.log_probs(TEXTS)).argmax(-1) == TOY_LABELS).mean()
    assert accuracy >= 0.875, (losses, accuracy)
    np.testing.assert_array_equal(np.asarray(model.log_probs(TEXTS)), np.asarray(model.log_probs(TEXTS)))
