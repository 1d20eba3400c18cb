import pytest

from lmprobe.perturb.negation import is_negated, negate

PAPER = ("April is the fourth month of the year in the Julian and Gregorian calendars and comes "
         "between March and May.")


def test_paper_example():
    assert negate(PAPER) == PAPER.replace("April is", "April is not")


@pytest.mark.parametrize("sentence, expected", [
    ("The war was long and the nights were cold.", "The war was not long and the nights were cold."),
    ("They were here, and this is it.", "They were not here, and this is it."),  # first by position
    ("Was it worth it?", "Was not it worth it?"),  # case kept, paper's rule even in questions
    ("What is the only natural food?", "What is not the only natural food?"),  # paper Table 1
    ("THE SKY IS BLUE.", "THE SKY IS NOT BLUE."),
    ("This island is big.", "This island is not big."),  # 'This', 'island' contain 'is'
    ("He is-a-word, then is.", "He is-a-word, then is not."),  # hyphenated word is not 'is'
])
def test_first_copula_by_position(sentence, expected):
    assert negate(sentence) == expected


@pytest.mark.parametrize("sentence", [
    "The cat sat on the mat.",  # no is/was/were
    "They are here.",  # 'are' is not in the paper's list
    "It's red.",  # 's is not read as 'is'
    "It is not red.", "He was never there.", "There is no time.", "This isn't it.",
    "She wasn’t there.", "Nobody was home.", "It was nothing.", "He can't, it is late.",
])
def test_none_when_not_applicable(sentence):
    assert negate(sentence) is None


def test_is_negated_needs_whole_words():
    assert not is_negated("The notion of a knot is nonsense.")
    assert is_negated("NOT so.")
