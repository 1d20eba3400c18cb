import numpy as np
import pytest

from lmprobe.perturb.text import (
    DEFAULT_TRIGGER,
    WORD,
    LongRangePair,
    append_trigger,
    long_range_pair,
    swap_words,
)

WORD_ORDER = ("Media.Vision would return to the franchise with the development of Valkyria: Azure "
              "Revolution for the PlayStation 4.")  # paper A.4 Fig. 19


def test_trigger_is_two_f_bombs_appended():
    assert DEFAULT_TRIGGER == " Fuck Fuck"
    assert append_trigger("He plays football.") == "He plays football. Fuck Fuck"
    assert append_trigger("x", " F F F") == "x F F F"


def _skeleton(text):
    return WORD.sub("W", text)


@pytest.mark.parametrize("n", [1, 2, 10])
def test_swap_keeps_spacing_punctuation_and_multiset(n):
    out = swap_words(WORD_ORDER, n, np.random.default_rng(0))
    assert out != WORD_ORDER
    assert _skeleton(out) == _skeleton(WORD_ORDER)  # punctuation and spaces untouched
    assert sorted(WORD.findall(out)) == sorted(WORD.findall(WORD_ORDER))


def test_one_swap_changes_exactly_two_words():
    src = "Don't let the well-known dog eat my homework today, please."
    out = swap_words(src, 1, np.random.default_rng(3))
    a, b = WORD.findall(src), WORD.findall(out)
    changed = [i for i in range(len(a)) if a[i] != b[i]]
    assert len(changed) == 2 and a[changed[0]] == b[changed[1]] and a[changed[1]] == b[changed[0]]
    assert "Don't" in out and "well-known" in out  # words keep internal apostrophes / hyphens


def test_same_seed_same_swaps():
    a = [swap_words(WORD_ORDER, 2, np.random.default_rng(7)) for _ in range(2)]
    assert a[0] == a[1]
    assert len({swap_words(WORD_ORDER, 1, np.random.default_rng(s)) for s in range(20)}) > 5


def test_swap_needs_enough_distinct_words():
    rng = np.random.default_rng(0)
    assert swap_words("one two three four five.", 1, rng) is None  # 5 words: paper needs > 5
    assert swap_words("one two three four five six.", 1, rng) is not None
    assert swap_words("la la la la la la", 1, rng) is None  # every swap would be a no-op
    out = swap_words("a a a a a b", 3, rng)  # only pairs of different words are swapped
    assert out != "a a a a a b" and sorted(out.split()) == sorted("a a a a a b".split())


PARAGRAPH = [f"Sentence {i}." for i in range(1, 8)]
DONOR = ["Ireland has won medals.", "Boxing is governed by a body.", "Third."]


def test_long_range_pair_paper_layout():
    pair = long_range_pair(PARAGRAPH, DONOR)
    assert pair == LongRangePair("Sentence 5. Sentence 6.", "Ireland has won medals. Boxing is governed by a body.",
                                 "Sentence 7.")
    assert pair.original == "Sentence 5. Sentence 6. Sentence 7."
    assert pair.perturbed.endswith(" Sentence 7.")


def test_long_range_pair_ablation_and_limits():
    one = long_range_pair(PARAGRAPH, DONOR, k=1)
    assert one.perturbed_context == "Ireland has won medals. Sentence 6."
    assert long_range_pair(PARAGRAPH, DONOR, k=0).perturbed_context == "Sentence 5. Sentence 6."
    wide = long_range_pair(PARAGRAPH, DONOR, k=3, window=5)
    assert wide.context == "Sentence 3. Sentence 4. Sentence 5. Sentence 6."
    assert wide.perturbed_context == "Ireland has won medals. Boxing is governed by a body. Third. Sentence 6."
    assert long_range_pair(PARAGRAPH[:5], DONOR) is None  # fewer than 6 sentences
    assert long_range_pair(PARAGRAPH, DONOR, k=3) is None  # k > window - 1
    assert long_range_pair(PARAGRAPH, DONOR[:1]) is None  # donor too short
    with pytest.raises(ValueError):
        long_range_pair(PARAGRAPH, DONOR, window=1)
