"""realtask against independent references: sklearn for the probe and balanced accuracy, transformers'
PyTorch Llama on the same weights for zero-shot scores and perplexity."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from transformers import AutoTokenizer, LlamaForCausalLM

from lmprobe.data.labelled import LabelledData
from lmprobe.engine import Scorer
from lmprobe.errors import LmprobeError
from lmprobe.kernels import logistic
from lmprobe.methods import realtask
from tests.engine.conftest import tiny_llama_dir  # noqa: F401


def test_balanced_accuracy_is_sklearns():
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    assert realtask.balanced_accuracy(p, y, 3) == pytest.approx(balanced_accuracy_score(y, p))


def test_probe_matches_an_sklearn_grid_search_on_the_same_folds():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 20)) * rng.uniform(0.1, 10, 20)
    z = x / x.std(0)
    y = (z[:, :3] @ [1.0, -0.5, 0.2] + rng.normal(size=300) > 0).astype(int) + (z[:, 4] > 0.8)
    train, test = slice(0, 200), slice(200, None)
    got = realtask.probe_embeddings(x[train], y[train], x[test], y[test], 3, seed=3)
    folds = logistic.stratified_folds(y[train], realtask.FOLDS, 3)
    search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression(tol=1e-10, max_iter=10_000)),
                          {"logisticregression__C": list(realtask.SENTEVAL_CS)}, cv=PredefinedSplit(folds))
    search.fit(x[train], y[train])
    assert got["c"] == search.best_params_["logisticregression__C"]
    predictions = search.predict(x[test])
    assert {k: got[k] for k in realtask.accuracy_intervals(predictions, y[test], 3, seed=3)} == pytest.approx(
        realtask.accuracy_intervals(predictions, y[test], 3, seed=3))  # its intervals are over its test predictions
    assert got["cv_accuracy"] == pytest.approx(search.best_score_, abs=1e-9)
    assert got["accuracy"] == pytest.approx(search.score(x[test], y[test]), abs=1e-9)


def test_probe_with_a_validation_split_chooses_c_by_sklearns_validation_accuracy():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 40))
    y = (x[:, :5].sum(1) + 2 * rng.normal(size=200) > 0).astype(int)  # few rows per feature: C matters
    train, val, test = slice(0, 100), slice(100, 150), slice(150, None)
    got = realtask.probe_embeddings(x[train], y[train], x[test], y[test], 2, x_validation=x[val], y_validation=y[val])
    fits = [make_pipeline(StandardScaler(), LogisticRegression(C=c, tol=1e-10, max_iter=10_000)).fit(x[train], y[train])
            for c in realtask.SENTEVAL_CS]
    by_c = [f.score(x[val], y[val]) for f in fits]
    assert got["selection"] == "validation split" and len(set(by_c)) > 1
    assert got["cv_accuracy_by_c"] == pytest.approx(by_c, abs=1e-9)
    assert got["c"] == realtask.SENTEVAL_CS[int(np.argmax(by_c))]
    assert got["accuracy"] == pytest.approx(fits[int(np.argmax(by_c))].score(x[test], y[test]), abs=1e-9)


def test_probe_refuses_a_class_too_small_for_the_folds():
    x, y = np.zeros((12, 2)), np.array([0] * 9 + [1] * 3)
    with pytest.raises(LmprobeError, match="at least 5 examples"):
        realtask.probe_embeddings(x, y, x, y, 2)


def test_cut_keeps_whole_words():
    assert realtask.cut("one  two three", 9) == "one two"
    assert realtask.cut("short", 10) == "short"
    assert realtask.cut("abcdefghij", 4) == "abcd"


@pytest.fixture(scope="module")
def pair(tiny_llama_dir):  # noqa: F811
    scorer = Scorer.load(str(tiny_llama_dir), batch_size=4)
    torch_model = LlamaForCausalLM.from_pretrained(str(tiny_llama_dir), torch_dtype=torch.float32).eval()
    return scorer, torch_model, AutoTokenizer.from_pretrained(str(tiny_llama_dir))


def _torch_logprobs(model, ids) -> np.ndarray:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, -1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()


def test_the_start_token_is_the_one_each_model_was_trained_after():
    from lmprobe.checkpoints.resolve import resolve

    smollm2 = resolve("smollm2-135m").tokenizer()  # adds no BOS; its bos_token <|im_start|> is a chat token
    assert smollm2.convert_ids_to_tokens(realtask.start_tokens(smollm2)) == ["<|endoftext|>"]


def test_perplexity_is_the_nll_of_every_token_after_bos(pair):
    scorer, model, tok = pair
    assert realtask.start_tokens(tok) == [tok.bos_token_id]  # a Llama tokenizer adds <s>
    texts = ["w5 w9 w17 w3", "w40 w41 w42 w43 w44 w45 w46 w47", "w100 w7 w7 w7"]
    got = realtask.perplexity(scorer, texts, max_chars=22)
    cut = [realtask.cut(t, 22) for t in texts]
    nll = -sum(_torch_logprobs(model, [tok.bos_token_id, *tok(t, add_special_tokens=False)["input_ids"]]).sum()
               for t in cut)
    tokens = sum(len(t.split()) for t in cut)
    assert got["tokens"] == tokens and got["bytes"] == sum(len(t) for t in cut)
    assert got["nll_per_token"] == pytest.approx(nll / tokens, rel=1e-4)
    assert got["bits_per_byte"] == pytest.approx(nll / math.log(2) / got["bytes"], rel=1e-4)
    # the bootstrap resamples texts: from the per-text NLLs, the same draws as bits_per_byte_interval's
    per_text = [-_torch_logprobs(model, [tok.bos_token_id, *tok(t, add_special_tokens=False)["input_ids"]]).sum()
                for t in cut]
    expected = realtask.bits_per_byte_interval(per_text, [len(t) for t in cut])
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-4), key
    assert got["bits_per_byte_low"] < got["bits_per_byte"] < got["bits_per_byte_high"]


def test_zero_shot_picks_the_label_word_torch_scores_highest(pair):
    scorer, model, tok = pair
    data = LabelledData([f"w{i} w{i + 1} w{i + 2}" for i in range(3, 30, 3)], np.arange(9) % 2, ("w10", "w11"), "t")
    got = realtask.zero_shot(scorer, data, template="{text} w12")
    expected = []
    for text in data.texts:
        prompt = tok(f"{text} w12")["input_ids"]
        scores = [_torch_logprobs(model, [*prompt, *tok(" " + w, add_special_tokens=False)["input_ids"]])[-1]
                  for w in data.label_names]
        expected.append(int(np.argmax(scores)))
    assert got["predicted_share"] == np.bincount(expected, minlength=2).tolist()
    assert got["accuracy"] == pytest.approx(np.mean(np.asarray(expected) == data.labels))
    assert got["balanced_accuracy_stderr"] == realtask.accuracy_intervals(
        expected, data.labels, 2)["balanced_accuracy_stderr"]


def test_a_text_longer_than_the_context_is_scored_in_windows_each_token_once(pair, monkeypatch):
    scorer, model, tok = pair
    monkeypatch.setattr(scorer, "max_length", 6)
    long = "w1 w2 w3 w4 w5 w6 w7 w8"  # <s> and 8 tokens: windows [0:6] (predicts 1-5) and [3:9] (6-8)
    ids = [tok.bos_token_id, *tok(long, add_special_tokens=False)["input_ids"]]
    assert realtask.windows(ids, 1, 6) == [(ids[:6], 1), (ids[3:9], 3)]
    got = realtask.perplexity(scorer, [long], max_chars=1000)
    nll = -(_torch_logprobs(model, ids[:6]).sum() + _torch_logprobs(model, ids[3:9])[2:].sum())
    assert got["tokens"] == 8 and got["windows"] == 2
    assert got["nll"] == pytest.approx(float(nll), rel=1e-4)
    for n in range(1, 30):  # every token from the first predicted once, with half a window before it
        seq, limit = list(range(n)), 8
        predicted = [t for w, first in realtask.windows(seq, 1, limit) for t in w[first:]]
        assert predicted == seq[1:] and all(len(w) <= limit for w, _ in realtask.windows(seq, 1, limit))


def test_zero_shot_refuses_prompts_longer_than_the_context(pair, monkeypatch):
    scorer = pair[0]
    monkeypatch.setattr(scorer, "max_length", 6)
    long = "w1 w2 w3 w4 w5 w6 w7 w8"
    with pytest.raises(LmprobeError, match="pass max_chars"):
        realtask.zero_shot(scorer, LabelledData([long], np.asarray([0]), ("w1", "w2"), "t"), template="{text}")
