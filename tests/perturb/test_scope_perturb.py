"""SCoPE's transformations and constraints (synonym, typo, fairness)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lmprobe.perturb.constraints import NONE, Constraints, Words
from lmprobe.perturb.fairness import PROTECTED_CATEGORIES, fairness_swap, substitutes
from lmprobe.perturb.synonym import synonym_swap, synonyms
from lmprobe.perturb.typo import interior_swaps, typo, typos


def test_typo_swaps_two_distinct_interior_characters():
    for t in interior_swaps("funny"):
        assert t[0] == "f" and t[-1] == "y" and sorted(t) == sorted("funny") and t != "funny"
        assert sum(a != b for a, b in zip(t, "funny")) == 2
    assert interior_swaps("loud") == ["luod"]
    assert interior_swaps("book") == []  # interior 'oo': no distinct pair


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="abcdefgh", min_size=1, max_size=10), st.integers(0, 2**31))
def test_typos_are_distinct_and_valid(word, seed):
    out = typos(word, np.random.default_rng(seed), 3)
    assert len(out) == len(set(out)) <= 3
    assert all(t[0] == word[0] and t[-1] == word[-1] and t != word for t in out)


def test_constraints_are_case_insensitive_and_check_length_and_repeats():
    c = Constraints()
    words = Words.of("The Movie was made BEFORE dinner, and they were good.")
    eligible = [words.words[i] for i in c.eligible(words)]
    assert eligible == ["Movie", "dinner", "good"]  # The/BEFORE/made/they/were: stop words; and, was: short
    i = words.words.index("Movie")
    assert i not in c.eligible(words, modified={i})
    assert NONE.allows("men") and not c.allows("men")


def test_every_perturbation_respects_its_constraints():
    rng = np.random.default_rng(0)
    c = Constraints()
    for text in ["A man laughs out loud.", "a fast, funny, highly enjoyable movie.",
                 "too slow, too long, and too little happens."]:
        words = Words.of(text)
        for make in (typo, synonym_swap):
            out = make(text, rng)
            changed = [i for i, (a, b) in enumerate(zip(words.words, Words.of(out).words)) if a != b]
            assert len(Words.of(out).words) == len(words.words) and len(changed) == 1
            assert changed[0] in c.eligible(words)


def test_synonyms_pwws_candidates():
    assert synonyms("movie") == ["film", "picture", "pic", "flick"]
    assert synonyms("Movie")[0] == "Film"
    assert all("_" not in s and " " not in s for s in synonyms("loud"))
    assert synonym_swap("the of and", np.random.default_rng(0)) is None  # no eligible word


def test_fairness_swaps_within_domain_and_role():
    assert set(substitutes("men")) <= set(PROTECTED_CATEGORIES["gender"]["plural"])
    assert "Women" in substitutes("Men")
    out = fairness_swap("Men love sports.", np.random.default_rng(0))
    assert out.endswith(" love sports.") and out.split()[0] in substitutes("Men")
    assert fairness_swap("Cats love sports.", np.random.default_rng(0)) is None
