"""Linguistic capabilities = transformation + constraints (+ the goal function and search of
search.py), Rawal & Toneva, arXiv:2311.04166v1 Sec. 3 and App. C.

A capability says which words of a text may change (constraints), what each may become
(transformation: word, rng -> replacement words) and in which order the greedy search visits
the words. Add your own with ``register``:

    register(Capability("antonym", lambda word, rng: my_antonyms(word), Constraints()))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.perturb import constraints as c
from lmprobe.perturb.fairness import PROTECTED_CATEGORIES, is_protected, substitutes
from lmprobe.perturb.synonym import synonyms
from lmprobe.perturb.typo import DEFAULT_SWAP, SWAPS, typos

ORDERS = ("pwws", "best")
DEFAULT_TYPOS_PER_WORD = 3
# Typo-Invariance may typo up to three words (typo_invariance's docstring); the other
# capabilities change one word, as the reference does.
DEFAULT_TYPO_MAX_WORDS = 3


@dataclasses.dataclass(frozen=True)
class Capability:
    """name; transform(word, rng) -> candidate replacement words; constraints; order:
    'pwws' (probability weighted word saliency, Ren et al. 2019) or 'best' (words by their best
    candidate's objective); max_words: words the greedy search may change (it stops earlier
    when a further word does not lower the objective; 1 for synonyms and fairness, as in the
    reference, DEFAULT_TYPO_MAX_WORDS for typos); applies(word): words the transformation knows
    (others are not eligible)."""

    name: str
    transform: Callable[[str, np.random.Generator], Sequence[str]]
    constraints: c.Constraints = c.Constraints()
    order: str = "best"
    max_words: int = 1
    applies: Callable[[str], bool] = lambda word: True
    description: str = ""

    def check(self) -> None:
        if self.order not in ORDERS:
            raise LmprobeError(f"capability '{self.name}': order '{self.order}' is not one of {ORDERS}")
        if self.max_words < 1:
            raise LmprobeError(f"capability '{self.name}': max_words={self.max_words} must be at least 1")


def synonym_invariance(**overrides) -> Capability:
    """Sec. 3.2: WordNet synonyms (PWWS candidates), weighted-saliency word order."""
    return dataclasses.replace(Capability(
        "synonym", lambda word, rng: synonyms(word), order="pwws",
        description="WordNet synonym swap (PWWS), no stop words, words of >= 4 letters"), **overrides)


def typo_invariance(typos_per_word: int = DEFAULT_TYPOS_PER_WORD, swap: str = DEFAULT_SWAP, **overrides) -> Capability:
    """Sec. 3.2: swap interior characters of a word, 'adjacent' ones by default (every typo of
    Table 3: "fsat", "solw", "hpoe") or 'any' two (lmprobe.perturb.typo); ``typos_per_word``
    random swaps per word and search step.

    Several words: Table 3 (App. L) typos one to three words of a sentence ("allows us to hpoe
    that nolan is poised to embark ... yet inevntive filmmaker": three marked words; "too
    solw, too long, and too lilte happens": two), so the search may change up to
    DEFAULT_TYPO_MAX_WORDS = 3 words, the most the paper shows. The paper states no limit;
    the search stops before when a further word does not lower L(m(x), m(x')), so the cap
    only bounds how misspelt a text gets and the search steps (one batched model call each).
    The reference code instead scores 15 random candidates per step that each typo every
    eligible word, which Table 3's partly typo'd sentences do not look like."""
    if swap not in SWAPS:
        raise LmprobeError(f"capability 'typo': swap '{swap}' is not one of {tuple(SWAPS)}")
    return dataclasses.replace(Capability(
        "typo", lambda word, rng: typos(word, rng, typos_per_word, swap), order="best",
        max_words=DEFAULT_TYPO_MAX_WORDS,
        description=f"swap {'two adjacent' if swap == 'adjacent' else 'any two'} interior characters "
                    f"({typos_per_word} draws per word), no stop words, words of >= 4 letters"), **overrides)


def fairness(table=PROTECTED_CATEGORIES, **overrides) -> Capability:
    """App. C: protected-category words -> same-domain categories; no further constraints."""
    return dataclasses.replace(Capability(
        "fairness", lambda word, rng: substitutes(word, table), constraints=c.NONE, order="best",
        applies=lambda word: is_protected(word, table),
        description="protected-category word -> another of its stereotype domain"), **overrides)


CAPABILITIES: dict[str, Callable[..., Capability]] = {
    "synonym": synonym_invariance, "typo": typo_invariance, "fairness": fairness,
    # the wider any-pair swaps (lmprobe.perturb.typo), by name
    "typo-any": lambda **overrides: typo_invariance(**{"swap": "any", "name": "typo-any", **overrides})}


def register(capability: Capability) -> None:
    """Make a user capability available by name (get, experiments.scope --capability)."""
    capability.check()
    CAPABILITIES[capability.name] = lambda **overrides: dataclasses.replace(capability, **overrides)


def get(name: str, **overrides) -> Capability:
    if name not in CAPABILITIES:
        raise LmprobeError(f"unknown capability '{name}': use one of {', '.join(CAPABILITIES)} "
                           "(or register your own)")
    capability = CAPABILITIES[name](**overrides)
    capability.check()
    return capability
