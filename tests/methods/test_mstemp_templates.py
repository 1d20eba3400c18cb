"""MSTemp templates and fillings on hand-written sentences (offline tagger, both chunkers)."""

import numpy as np
import pytest

from lmprobe.methods.mstemp import fill, lexicon, templates


@pytest.fixture(scope="module")
def parser():
    return templates.TemplateParser(tagger="wordnet")


@pytest.fixture(scope="module")
def pools(parser):
    return fill.word_pools(parser.protected)


def test_template_keeps_sentiment_words_and_slots_names_nouns_adjectives(parser):
    t = parser("Today brings me immense joy.")
    assert t.render() == "Today brings [x] immense joy."  # 'immense joy' carries the label: no slot
    assert [s.kind for s in t.slots] == ["name"]

    t = parser("John gave Mary a big car in Paris.")
    assert t.render() == "[x] gave [x] a [x] [x] in Paris."  # places are not given names
    assert [(s.kind, s.category) for s in t.slots] == [
        ("name", "name"), ("name", "name"), ("adjective", "adj.all"), ("noun", "noun.artifact")]

    t = parser("The movie was boring and the actors didn't care.")
    assert t.render() == "The [x] was boring and the [x] didn't care."
    assert [s.plural for s in t.slots] == [False, True]
    assert parser("This is terrible.").slots == ()


def test_filling_uses_same_category_words_and_keeps_grammar(parser, pools):
    t = parser("The actors loved a wooden car.")
    samples = fill.fill_templates(t, 5, pools, np.random.default_rng(0))
    assert len(samples) == 5 and len(set(samples)) == 5
    for s in samples:
        words = s.rstrip(".").split()
        assert words[0] == "The" and words[2] == "loved"
        assert words[1].endswith("s")  # plural slot, plural filler
        assert words[3] == ("an" if words[4][0] in "aeiou" else "a")  # article agreement
        assert lexicon.lexfile(words[5], "n") == "noun.artifact"
        assert not {words[1].lower(), words[4], words[5]} & lexicon.sentiment_words()


def test_fillers_are_never_sentiment_words(pools):
    sentiment = lexicon.sentiment_words()
    for category, words in pools.pools.items():
        assert words, category
        assert not sentiment & {w.lower() for w in words}
    assert {"happy", "joy", "terrible", "love"} <= sentiment


def test_same_rng_same_samples_and_no_slot_no_sample(parser, pools):
    t = parser("Mary bought an old house near the river.")
    a = fill.fill_templates(t, 4, pools, np.random.default_rng(7))
    b = fill.fill_templates(t, 4, pools, np.random.default_rng(7))
    assert a == b
    assert fill.fill_templates(parser("It is awful."), 3, pools, np.random.default_rng(0)) == []


def test_regexp_chunker_matches_nltk():
    nltk = pytest.importorskip("nltk")
    assert nltk
    tags = "DT JJ NN VBD IN PRP$ NNS CC NNP NNP VBZ PRP DT NN".split()
    assert templates.regexp_chunks(tags) == templates.nltk_chunks(tags)
    assert templates.regexp_chunks(tags) == [("NP", [0, 1, 2]), ("NP", [5, 6]), ("NP", [8, 9]),
                                             ("NP", [11]), ("NP", [12, 13])]


def test_pluralize():
    assert [fill.pluralize(w) for w in ("car", "city", "box", "child", "day")] == \
        ["cars", "cities", "boxes", "children", "days"]
