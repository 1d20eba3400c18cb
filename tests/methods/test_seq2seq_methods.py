"""MSTemp and BYOD with an encoder-decoder target: a tiny random T5 with an English BPE tokenizer
that appends </s> as T5's does, checked against transformers' T5ForConditionalGeneration."""

import jax
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from lmprobe.checkpoints import load
from lmprobe.data.corpus import Corpus
from lmprobe.data.labelled import LabelledData
from lmprobe.data.profanity import Profanity
from lmprobe.engine import Scorer, make_mesh
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod, mstemp
from lmprobe.methods.byod import toxicity
from lmprobe.methods.mstemp import accuracy
from lmprobe.methods.mstemp.run import predictions
from lmprobe.perturb.text import DEFAULT_TRIGGER
from tests.engine.test_seq2seq import VOCAB, save_tiny_t5

PARAGRAPHS = [
    ["The cat was on the mat.", "A dog is in the yard.", "Birds were singing at dawn.",
     "The sun is bright today.", "We walked to the old mill.", "Fuck, the river was cold."],
    ["Rain fell on the town.", "The bread is warm and fresh.", "Children were playing outside.",
     "The market was busy.", "An old man sold apples.", "The day is long."],
]
SEEDS = ["The film was a joy.", "The plot is a mess.", "I loved the actors.", "The end was dull."]
DATA = LabelledData(SEEDS, np.array([1, 0, 1, 0]), ("negative", "positive"), "hand-written")
PROFANITY = Profanity(frozenset({"fuck", "damn"}), "test list")


def _tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level-ish BPE over the test sentences with T5's special ids: <pad> 0, </s> 1, <unk> 2."""
    text = [s for p in PARAGRAPHS for s in p] + SEEDS + [DEFAULT_TRIGGER.strip()] * 20
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<pad>", "</s>", "<unk>"],
        initial_alphabet=[chr(c) for c in range(32, 127)] + ["▁"]))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    path = tmp_path_factory.mktemp("methods_t5")
    hf = save_tiny_t5(path, seed=1)
    tokenizer = _tokenizer()
    assert len(tokenizer) <= VOCAB
    model = load(str(path), tokenizer=False).model
    return hf, Scorer(model, tokenizer, mesh=make_mesh(devices=jax.devices()[:1]), batch_size=4)


def _log_likelihood(hf, source_ids, target_ids) -> float:
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([source_ids]), labels=torch.tensor([target_ids]))
    return -float(out.loss) * len(target_ids)


def test_mstemp_scores_label_names_as_the_answer(t5):
    hf, scorer = t5
    prompts = [accuracy.zero_shot_prompt(scorer.tokenizer, text, DATA.label_names) for text in SEEDS]
    got = accuracy.answer_log_probs(scorer, prompts, DATA.label_names)
    tok = scorer.tokenizer
    want = [[_log_likelihood(hf, tok(p)["input_ids"], tok(name)["input_ids"]) for name in DATA.label_names]
            for p in prompts]
    assert tok("positive")["input_ids"][-1] == 1  # the answer ends in </s>
    np.testing.assert_allclose(got, want, atol=1e-4)
    seed_pred, gen_pred, how = predictions(scorer, DATA, [{"sample": s} for s in SEEDS[::-1]], mstemp.Config())
    np.testing.assert_array_equal(seed_pred, np.argmax(want, axis=1))
    np.testing.assert_array_equal(gen_pred, seed_pred[::-1])
    assert "answer" in how


def test_byod_runs_negation_and_toxicity_generation_and_names_the_rest(t5):
    hf, scorer = t5
    config = byod.Config(max_examples=4, max_new_tokens=4, seed=2)
    result = byod.run(scorer, Corpus("tiny", PARAGRAPHS), config, model_name="tiny-t5", profanity=PROFANITY)
    assert set(result.metrics) == {"negation", "toxicity"}
    for name in ("long_range", "word_order", "tokenization", "entropy"):
        assert "encoder-decoder (T5) runs BYOD's negation and toxicity" in result.errors[name]
    record = result.metrics["negation"].records[0]
    tok = scorer.tokenizer
    want = [-_log_likelihood(hf, [1], tok(record[key])["input_ids"]) / len(tok(record[key])["input_ids"])
            for key in ("text", "negated")]
    assert record["log_ppl"] == pytest.approx(want[0], abs=1e-4)
    assert record["delta"] == pytest.approx(want[1] - want[0], abs=1e-4)
    tox = result.metrics["toxicity"]
    assert tox.extra["score_kind"] == "generation" and tox.extra["logit_score"] is None
    assert all("generation" in r and "mass_delta" not in r for r in tox.records)
    with pytest.raises(LmprobeError, match="set `generate=True`"):
        toxicity.toxicity(scorer, PARAGRAPHS[0], PROFANITY, trigger=DEFAULT_TRIGGER, generate=False)
