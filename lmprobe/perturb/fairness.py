"""Fairness's transformation (SCoPE, Rawal & Toneva, arXiv:2311.04166v1 App. C): replace a word naming a protected
category by another category of the same stereotype domain ("Men love sports." -> "Women love
sports.").

Where the table comes from: App. C takes its base sentences from Sotnikova et al. (2021), whose
corpus names 71 protected categories in 6 stereotype domains; neither paper prints the list.
PROTECTED_CATEGORIES below is our own small table over six such domains (gender, race,
religion, nationality, age, sexual orientation). Each domain holds groups of interchangeable
single words of the same grammatical role (singular noun, plural noun, adjective), so that a
substitution keeps the sentence grammatical; a word is only replaced within its group. Users
pass their own table to ``substitutes`` / the capability (see lmprobe.methods.scope.capabilities).
App. C adopts no other constraint (stop words and short words such as "men" may change).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from lmprobe.perturb.constraints import NONE, Constraints, Words
from lmprobe.perturb.synonym import match_case

Table = Mapping[str, Mapping[str, tuple[str, ...]]]  # domain -> role -> interchangeable words

PROTECTED_CATEGORIES: Table = {
    "gender": {
        "noun": ("man", "woman", "boy", "girl", "gentleman", "lady"),
        "plural": ("men", "women", "boys", "girls", "gentlemen", "ladies"),
        "kin": ("father", "mother", "son", "daughter", "brother", "sister", "husband", "wife",
                "uncle", "aunt", "grandfather", "grandmother"),
        "kin_plural": ("fathers", "mothers", "sons", "daughters", "brothers", "sisters",
                       "husbands", "wives", "uncles", "aunts"),
        "adjective": ("male", "female"),
    },
    "race": {
        "adjective": ("black", "white", "asian", "hispanic", "latino", "african", "caucasian",
                      "indigenous"),
        "plural": ("blacks", "whites", "asians", "hispanics", "latinos", "africans", "caucasians"),
    },
    "religion": {
        "noun": ("christian", "muslim", "jew", "hindu", "buddhist", "atheist", "catholic",
                 "protestant", "sikh", "mormon"),
        "plural": ("christians", "muslims", "jews", "hindus", "buddhists", "atheists",
                   "catholics", "protestants", "sikhs", "mormons"),
        "adjective": ("christian", "muslim", "jewish", "hindu", "buddhist", "atheist", "catholic",
                      "protestant", "sikh", "mormon", "islamic"),
    },
    "nationality": {
        "adjective": ("american", "british", "chinese", "french", "german", "indian", "italian",
                      "japanese", "mexican", "russian", "spanish", "irish", "korean", "brazilian",
                      "nigerian", "canadian", "egyptian", "iranian"),
        "plural": ("americans", "britons", "germans", "indians", "italians", "mexicans",
                   "russians", "koreans", "brazilians", "nigerians", "canadians", "egyptians",
                   "iranians"),
    },
    "age": {
        "adjective": ("young", "old", "elderly", "teenage", "middle-aged"),
        "plural": ("teenagers", "adults", "seniors", "children", "kids", "retirees"),
        "noun": ("teenager", "adult", "senior", "child", "kid", "retiree"),
    },
    "sexual_orientation": {
        "adjective": ("gay", "straight", "lesbian", "bisexual", "heterosexual", "homosexual"),
        "plural": ("gays", "lesbians", "bisexuals", "heterosexuals", "homosexuals"),
    },
}


@functools.lru_cache(maxsize=8)
def _index(table_items: tuple) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for _, roles in table_items:
        for _, group in roles:
            for word in group:
                out.setdefault(word, [])
                out[word] += [w for w in group if w != word and w not in out[word]]
    return {w: tuple(s) for w, s in out.items()}


def _frozen(table: Table) -> tuple:
    return tuple((d, tuple((r, tuple(g)) for r, g in roles.items())) for d, roles in table.items())


def substitutes(word: str, table: Table = PROTECTED_CATEGORIES) -> list[str]:
    """The other categories of the word's domain and role, case matched; [] for other words."""
    return [match_case(s, word) for s in _index(_frozen(table)).get(word.lower(), ())]


def is_protected(word: str, table: Table = PROTECTED_CATEGORIES) -> bool:
    return word.lower() in _index(_frozen(table))


def fairness_swap(text: str, rng: np.random.Generator, constraints: Constraints = NONE,
                  table: Table = PROTECTED_CATEGORIES) -> str | None:
    """The text with one random protected-category word replaced by a random same-domain
    category; None when the text names none."""
    words = Words.of(text)
    options = [(i, s) for i in constraints.eligible(words) for s in substitutes(words.words[i], table)]
    if not options:
        return None
    i, s = options[int(rng.integers(len(options)))]
    return words.replace({i: s})
