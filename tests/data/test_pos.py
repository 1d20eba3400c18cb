"""Tokenization and the offline WordNet part-of-speech tagger."""

import pytest

from lmprobe.data import pos
from lmprobe.errors import LmprobeError

# Hand-tagged (Penn Treebank) sentences.
GOLD = [
    ("The movie was boring and the actors didn't care .",
     "DT NN VBD JJ CC DT NNS VBD RB VB ."),
    ("She loves the old house near the river .", "PRP VBZ DT JJ NN IN DT NN ."),
    ("John gave Mary a beautiful red car in Paris .", "NNP VBD NNP DT JJ JJ NN IN NNP ."),
    ("The children are playing in the garden .", "DT NNS VBP VBG IN DT NN ."),
    ("I don't like it , and we'll see .", "PRP VBP RB VB PRP , CC PRP MD VB ."),
    ("It's a film about two brothers who run a small restaurant .",
     "PRP VBZ DT NN IN CD NNS WP VBP DT JJ NN ."),
    ("My heart is filled with happiness on this day .", "PRP$ NN VBZ VBN IN NN IN DT NN ."),
    ("A great story with wonderful music .", "DT JJ NN IN JJ NN ."),
]


def test_tokenize_splits_clitics_and_punctuation_with_exact_spans():
    text = "It's Bob's car, isn't it?"
    spans = pos.tokenize(text)
    assert [text[a:b] for a, b in spans] == ["It", "'s", "Bob", "'s", "car", ",", "is", "n't", "it", "?"]


def test_wordnet_tagger_accuracy_on_hand_tagged_sentences():
    tagger = pos.WordNetTagger()
    right = total = 0
    for text, gold in GOLD:
        tokens = pos.words(text)
        tags = tagger(tokens)
        gold = gold.split()
        assert len(tags) == len(gold), text
        # VBP vs VB after "do n't" and VBD vs VBN are not distinctions slot finding relies on
        right += sum(t == g or {t, g} <= {"VB", "VBP"} for t, g in zip(tags, gold))
        total += len(gold)
    assert right / total >= 0.9


def test_lemmatize_regular_and_irregular_forms():
    assert pos.lemmatize("actors", "n") == "actor"
    assert pos.lemmatize("children", "n") == "child"
    assert pos.lemmatize("ran", "v") == "run"
    assert pos.lemmatize("stopped", "v") == "stop"
    assert pos.lemmatize("happier", "a") == "happy"
    assert pos.lemmatize("xyzzies", "n") is None


def test_tagger_choice():
    assert isinstance(pos.get_tagger("wordnet"), pos.WordNetTagger)
    with pytest.raises(LmprobeError, match="unknown tagger"):
        pos.get_tagger("spacy")
    if pos.nltk_tagger() is None:  # nltk or its tagger data missing: auto falls back, nltk asks for it
        assert isinstance(pos.get_tagger("auto"), pos.WordNetTagger)
        with pytest.raises(LmprobeError, match="averaged_perceptron_tagger"):
            pos.get_tagger("nltk")
