"""Linguistic capabilities = transformation + constraints (+ the goal function and search of
search.py), ../seeds/002 Sec. 3 and App. C.

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
from lmprobe.perturb.typo import typos

ORDERS = ("pwws", "best")
DEFAULT_TYPOS_PER_WORD = 3


@dataclasses.dataclass(frozen=True)
class Capability:
    """name; transform(word, rng) -> candidate replacement words; constraints; order:
    'pwws' (probability weighted word saliency, Ren et al. 2019) or 'best' (words by their best
    candidate's objective); max_words: words the greedy search may change (the reference
    changes one); applies(word): words the transformation knows (others are not eligible)."""

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


def typo_invariance(typos_per_word: int = DEFAULT_TYPOS_PER_WORD, **overrides) -> Capability:
    """Sec. 3.2: swap two distinct interior characters; ``typos_per_word`` random swaps per word."""
    return dataclasses.replace(Capability(
        "typo", lambda word, rng: typos(word, rng, typos_per_word), order="best",
        description=f"swap two interior characters ({typos_per_word} draws per word), no stop "
                    "words, words of >= 4 letters"), **overrides)


def fairness(table=PROTECTED_CATEGORIES, **overrides) -> Capability:
    """App. C: protected-category words -> same-domain categories; no further constraints."""
    return dataclasses.replace(Capability(
        "fairness", lambda word, rng: substitutes(word, table), constraints=c.NONE, order="best",
        applies=lambda word: is_protected(word, table),
        description="protected-category word -> another of its stereotype domain"), **overrides)


CAPABILITIES: dict[str, Callable[..., Capability]] = {
    "synonym": synonym_invariance, "typo": typo_invariance, "fairness": fairness}


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
