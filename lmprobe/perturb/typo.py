"""Typo-Invariance's transformation (SCoPE, Rawal & Toneva, arXiv:2311.04166v1 Sec. 3.2): swap interior characters of a
word ("all characters in a word except the first and last one"), first and last kept.

Two swap kinds (``SWAPS``):
- 'adjacent' (the default): two neighbouring interior characters, as in every typo the paper
  prints (Table 3, App. L: "fsat", "solw", "hpoe", "inevntive", "fnuny", "disappointemnt").
  "fast" has one ("fsat": 'a' and 's' are its only interior characters), "slow" one ("solw").
- 'any': two distinct interior characters anywhere in the word (also "funny" -> "fnnuy",
  "little" -> "lttile"), what this module did before; a wider, noisier space (a 14-letter word
  ("disappointment") has 63 swaps instead of 10).

Only letters are swapped: an apostrophe or hyphen inside a word ("wasabi's", "high-profile")
stays put, so a typo never turns "wasabi's" into "wasab'is". A swap of two equal letters is no
typo ("funny" has only "fnuny"), and no word is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.perturb.constraints import Constraints, Words

DEFAULT_SWAP = "adjacent"


def _swap(word: str, i: int, j: int) -> str:
    return word[:i] + word[j] + word[i + 1:j] + word[i] + word[j + 1:]


def _swappable(word: str, i: int, j: int) -> bool:
    return word[i] != word[j] and word[i].isalpha() and word[j].isalpha()


def adjacent_swaps(word: str) -> list[str]:
    """Every word made by swapping two neighbouring, different interior letters (sorted, no
    repeats): "fast" -> ["fsat"], "hope" -> ["hpoe"]."""
    return sorted({_swap(word, i, i + 1) for i in range(1, len(word) - 2) if _swappable(word, i, i + 1)})


def any_swaps(word: str) -> list[str]:
    """Every word made by swapping two different interior letters, anywhere (sorted, no repeats)."""
    return sorted({_swap(word, i, j) for i in range(1, len(word) - 1) for j in range(i + 1, len(word) - 1)
                   if _swappable(word, i, j)})


SWAPS: dict[str, Callable[[str], list[str]]] = {"adjacent": adjacent_swaps, "any": any_swaps}


def interior_swaps(word: str, swap: str = DEFAULT_SWAP) -> list[str]:
    """The swaps of the named kind ('adjacent' or 'any', module docstring)."""
    if swap not in SWAPS:
        raise LmprobeError(f"unknown typo swap '{swap}': use one of {', '.join(SWAPS)}")
    return SWAPS[swap](word)


def typos(word: str, rng: np.random.Generator, n: int = 3, swap: str = DEFAULT_SWAP) -> list[str]:
    """Up to n distinct interior swaps of the word, drawn without replacement (all of them, in
    sorted order, when there are at most n)."""
    options = interior_swaps(word, swap)
    if len(options) <= n:
        return options
    return [options[i] for i in sorted(rng.choice(len(options), size=n, replace=False))]


def typo(text: str, rng: np.random.Generator, constraints: Constraints = Constraints(),
         swap: str = DEFAULT_SWAP) -> str | None:
    """The text with one random eligible word typo'd; None when no word is eligible."""
    words = Words.of(text)
    eligible = [i for i in constraints.eligible(words) if interior_swaps(words.words[i], swap)]
    if not eligible:
        return None
    i = int(rng.choice(eligible))
    return words.replace({i: typos(words.words[i], rng, 1, swap)[0]})
