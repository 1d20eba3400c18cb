"""icl.label_log_probs: a label word is scored as the model reads it after the prompt, i.e. the
tokens of prompt + " " + word tokenized together, not of " word" tokenized alone."""

from __future__ import annotations

import types

import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.methods import icl


class SentencePieceLike:
    """Words become "▁word" pieces; a string that starts with a space also gets a lone "▁" piece
    first, as a legacy SentencePiece tokenizer does for " word" tokenized on its own."""

    def __init__(self):
        self.vocab = {"<s>": 0, "▁": 1}

    def _id(self, piece):
        return self.vocab.setdefault(piece, len(self.vocab))

    def __call__(self, texts, add_special_tokens=True):
        def encode(text):
            ids = [0] if add_special_tokens else []
            ids += [self._id("▁")] if text.startswith(" ") else []
            return ids + [self._id("▁" + w) for w in text.split()]
        return {"input_ids": [encode(t) for t in texts] if isinstance(texts, list) else encode(texts)}


class RecordingScorer:
    """token_logprobs[t] = -(id of token t + 1) / 10: a sum over tokens says which tokens were summed."""

    def __init__(self):
        self.tokenizer, self.seen = SentencePieceLike(), []

    def score(self, seqs):
        self.seen += seqs
        return types.SimpleNamespace(token_logprobs=[-(np.asarray(s[1:], float) + 1) / 10 for s in seqs])


def test_label_words_are_tokenized_with_the_prompt_not_alone():
    scorer = RecordingScorer()
    got = icl.label_log_probs(scorer, ["Review: fine film\nSentiment:", "Review: dull\nSentiment:"],
                              ["positive", "negative"])
    tok = scorer.tokenizer
    stray = tok(" positive", add_special_tokens=False)["input_ids"]
    assert tok.vocab["▁"] in stray  # what the old rule scored: a space piece the model never reads there
    for seq in scorer.seen:
        assert tok.vocab["▁"] not in seq  # every scored sequence is the joint tokenization
    positive, negative = tok.vocab["▁positive"], tok.vocab["▁negative"]
    np.testing.assert_allclose(got, [[-(positive + 1) / 10, -(negative + 1) / 10]] * 2)
    assert scorer.seen[0] == tok("Review: fine film\nSentiment: positive")["input_ids"]


def test_a_word_the_prompt_swallows_is_an_error():
    merging = types.SimpleNamespace(tokenizer=lambda texts: {"input_ids": [[1, 2]] * len(texts)},
                                    score=RecordingScorer().score)  # "a" and "a b" are both [1, 2]
    with pytest.raises(LmprobeError, match="'b' adds no token"):
        icl.label_log_probs(merging, ["a"], ["b"])
