"""Constraints on word-level perturbations (SCoPE, Rawal & Toneva, arXiv:2311.04166v1 Sec. 3.2): which words of a text
a linguistic capability may modify.

Synonym- and Typo-Invariance leave alone stop words (case-insensitive: "The" is as much a stop
word as "the"; the reference checked case-sensitively), words shorter than four characters, and
words already perturbed. Fairness (App. C) adopts no constraint beyond the last one.

The stop words are NLTK's English list by default (179 words, lmprobe.data.nltk_stopwords), the
list the SCoPE reference code filters with; ``Constraints(stopwords="a6")`` names SynTextBench's
A.6 list instead (271 words; it also blocks "make", "give", "really", "show", ... and lets
"don't" or "isn't" through). Apostrophes count as one: "don’t" is "don't".

Words are the ``lmprobe.perturb.text.WORD`` runs of a text (letters and digits with internal
apostrophes / hyphens); spacing and punctuation between them never change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from lmprobe.data.stopwords import STOP_LISTS, is_stopword
from lmprobe.errors import LmprobeError
from lmprobe.perturb.text import WORD, rebuild

DEFAULT_MIN_LENGTH = 4  # "lengths less than four" are skipped (Sec. 3.2)
DEFAULT_STOPWORDS = "nltk"  # the SCoPE reference's list (module docstring)


@dataclass(frozen=True)
class Words:
    """A text cut into its words (with character spans); other characters stay put."""

    text: str
    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, text: str) -> Words:
        spans = tuple(m.span() for m in WORD.finditer(text))
        return cls(text, tuple(text[a:b] for a, b in spans), spans)

    def replace(self, replacements: dict[int, str]) -> str:
        """The text with word i replaced by replacements[i]."""
        words = [replacements.get(i, w) for i, w in enumerate(self.words)]
        return rebuild(self.text, list(self.spans), words)


def is_single_word(candidate: str) -> bool:
    """Whether a replacement is exactly one WORD (so word positions stay aligned)."""
    return WORD.fullmatch(candidate) is not None


@dataclass(frozen=True)
class Constraints:
    """skip_stopwords: no stop words (the list named by ``stopwords``: 'nltk' or 'a6', see
    lmprobe.data.stopwords; any case; plus ``extra_stopwords``); min_length: no shorter words;
    no_repeat: no word modified twice."""

    skip_stopwords: bool = True
    min_length: int = DEFAULT_MIN_LENGTH
    no_repeat: bool = True
    extra_stopwords: frozenset[str] = frozenset()
    stopwords: str = DEFAULT_STOPWORDS

    def __post_init__(self):
        if self.stopwords not in STOP_LISTS:
            raise LmprobeError(f"unknown stop-word list '{self.stopwords}': use one of {', '.join(STOP_LISTS)}")

    def allows(self, word: str) -> bool:
        """Whether the word itself may be modified (ignoring repeats)."""
        if len(word) < self.min_length:
            return False
        return not (self.skip_stopwords and (is_stopword(word, self.stopwords)
                                             or word.lower() in self.extra_stopwords))

    def eligible(self, words: Words, modified: Collection[int] = (),
                 applies: Callable[[str], bool] = lambda w: True) -> list[int]:
        """Indices of the words that may still be modified (and that ``applies`` accepts)."""
        return [i for i, w in enumerate(words.words)
                if self.allows(w) and applies(w) and not (self.no_repeat and i in modified)]


NONE = Constraints(skip_stopwords=False, min_length=0, no_repeat=True)  # Fairness (App. C)
