"""Synonym-Invariance's transformation (SCoPE, ../seeds/002 Sec. 3.2; Ren et al. 2019, PWWS):
replace a word by a WordNet synonym ("movie" -> "film").

Candidates are the lemma names of every synset of the word, any part of speech, in WordNet's
sense order; multi-word lemmas ("motion_picture") and the word itself are left out, and so are
lemmas that are not one word of the text splitter (a.d.). No morphological analysis: "movies"
has no entry (nltk's morphy would map it to "movie" and offer the singular "film"). Case follows
the original word (all capitals, or a capital first letter).
"""

from __future__ import annotations

import functools

import numpy as np

from lmprobe.data.wordnet import load_wordnet
from lmprobe.perturb.constraints import Constraints, Words, is_single_word


def match_case(candidate: str, original: str) -> str:
    if len(original) > 1 and original.isupper():
        return candidate.upper()
    if original[:1].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


@functools.lru_cache(maxsize=65536)
def _lemmas(word: str, directory: str | None) -> tuple[str, ...]:
    wordnet = load_wordnet(directory)
    seen, out = {word}, []
    for synset in wordnet.synsets_of(word):
        for lemma in synset.lemmas:
            key = lemma.lower()
            if "_" in lemma or key in seen or not is_single_word(lemma):
                continue
            seen.add(key)
            out.append(lemma if lemma[:1].isupper() and not word[:1].isupper() else key)
    return tuple(out)


def synonyms(word: str, wordnet_dir: str | None = None) -> list[str]:
    """PWWS candidates for the word, case matched (module docstring)."""
    return [match_case(s, word) for s in _lemmas(word.lower(), wordnet_dir)]


def synonym_swap(text: str, rng: np.random.Generator, constraints: Constraints = Constraints()) -> str | None:
    """The text with one random eligible word replaced by a random synonym; None when no word
    has one."""
    words = Words.of(text)
    options = [(i, s) for i in constraints.eligible(words) for s in synonyms(words.words[i])]
    if not options:
        return None
    i, s = options[int(rng.integers(len(options)))]
    return words.replace({i: s})
