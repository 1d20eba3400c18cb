"""Real evaluation samples (Sec. 3.2): m random fillings of each template, CheckList style
("[x] brings [x] immense joy" -> "Bob brings Alice immense joy").

Each slot is filled from the pool of its own category: given names for name slots, WordNet
lemmas of the same part of speech and lexicographer file for nouns and adjectives (plural
nouns get a plural filler, capitalised slots a capitalised one, "a"/"an" before a slot is
agreed with the filler). Pools hold only common words (sense-tagged in SemCor) and no
sentiment-bearing or stop words, so a sample keeps its seed's label (Sec. 3.2: "the original
ground truth labels are taken as the labels for the generated samples").
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lmprobe.data.pos import CLOSED_CLASS, FIRST_NAMES
from lmprobe.data.profanity import load_profanity
from lmprobe.data.stopwords import PRINTED as STOP_WORDS
from lmprobe.data.wordnet import find_wordnet_dir
from lmprobe.errors import LmprobeError
from lmprobe.methods.mstemp import lexicon
from lmprobe.methods.mstemp.templates import Template

_ARTICLE = re.compile(r"\b([Aa])n?(\s+)$")


@dataclass(frozen=True)
class WordPools:
    """category ("name", "noun.artifact", "adj.all", ...) -> candidate fillers."""

    pools: dict[str, tuple[str, ...]]

    def __getitem__(self, category: str) -> tuple[str, ...]:
        return self.pools.get(category, ())


@functools.lru_cache(maxsize=4)
def word_pools(protected: frozenset[str] | None = None, min_tagged: int = lexicon.DEFAULT_MIN_TAGGED,
               names: tuple[str, ...] = FIRST_NAMES) -> WordPools:
    """Names plus WordNet nouns and adjectives by lexicographer file, without ``protected``
    (default: lexicon.sentiment_words()), stop words, closed-class words and profanity."""
    banned = ((lexicon.sentiment_words() if protected is None else protected) | frozenset(STOP_WORDS)
              | frozenset(CLOSED_CLASS) | load_profanity().words)
    pools = {"name": tuple(n for n in names if n.lower() not in banned)}
    for pos in ("n", "a"):
        for category, lemmas in lexicon.lemmas_by_lexfile(pos, min_tagged=min_tagged).items():
            if category not in lexicon.UNSAFE_LEXFILES:
                pools[category] = tuple(w for w in lemmas if w not in banned)
    return WordPools(pools)


@functools.lru_cache(maxsize=1)
def _irregular_plurals() -> dict[str, str]:
    with open(os.path.join(find_wordnet_dir(), "noun.exc"), encoding="utf-8") as f:
        pairs = [line.split() for line in f]
    return {p[1]: p[0] for p in pairs if len(p) > 1 and not p[0].endswith("a")}


def pluralize(noun: str) -> str:
    """English plural: WordNet's irregular forms (noun.exc), else the usual suffix rules."""
    if noun in _irregular_plurals():
        return _irregular_plurals()[noun]
    if re.search(r"[^aeiou]y$", noun):
        return noun[:-1] + "ies"
    if re.search(r"(s|x|z|ch|sh)$", noun):
        return noun + "es"
    return noun + "s"


def _filler(slot, original: str, pools: WordPools, rng: np.random.Generator, used: set) -> str | None:
    pool = [w for w in pools[slot.category] if w.lower() != original.lower() and w not in used]
    if not pool:
        return None
    word = pool[int(rng.integers(len(pool)))]
    used.add(word)
    if slot.plural:
        word = pluralize(word)
    return word[:1].upper() + word[1:] if original[:1].isupper() else word


def fill_template(template: Template, pools: WordPools, rng: np.random.Generator) -> str | None:
    """One sample: every slot refilled (None when a slot's pool is empty, or no slot)."""
    if not template.slots:
        return None
    used: set[str] = set()
    fillers = []
    for slot in template.slots:
        word = _filler(slot, template.text[slot.start:slot.end], pools, rng, used)
        if word is None:
            return None
        fillers.append(word)
    return _agree_articles(template, fillers)


def _agree_articles(template: Template, fillers: Sequence[str]) -> str:
    """template.fill(fillers) with "a"/"an" right before a slot matching the filler's sound."""
    pieces, last = [], 0
    for slot, word in zip(template.slots, fillers):
        before = template.text[last:slot.start]
        article = "n" if word[:1].lower() in "aeiou" else ""
        pieces += [_ARTICLE.sub(lambda m, article=article: m.group(1) + article + m.group(2), before), word]
        last = slot.end
    return "".join(pieces) + template.text[last:]


def fill_templates(template: Template, m: int, pools: WordPools, rng: np.random.Generator,
                   max_tries: int = 4) -> list[str]:
    """Up to m distinct samples of one template, none equal to the template's own text."""
    if m < 1:
        raise LmprobeError(f"m_samples={m}: need at least one sample per template")
    out: list[str] = []
    for _ in range(m * max_tries):
        sample = fill_template(template, pools, rng)
        if sample is None:
            break
        if sample != template.text and sample not in out:
            out.append(sample)
        if len(out) == m:
            break
    return out
