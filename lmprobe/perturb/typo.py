"""Typo-Invariance's transformation (SCoPE, ../seeds/002 Sec. 3.2): swap two distinct interior
characters of a word, first and last kept ("loud" -> "luod", "funny" -> "fnuny")."""

from __future__ import annotations

import numpy as np

from lmprobe.perturb.constraints import Constraints, Words


def interior_swaps(word: str) -> list[str]:
    """Every word made by swapping two different interior characters (sorted, no repeats)."""
    out = set()
    for i in range(1, len(word) - 1):
        for j in range(i + 1, len(word) - 1):
            if word[i] != word[j]:
                out.add(word[:i] + word[j] + word[i + 1:j] + word[i] + word[j + 1:])
    return sorted(out)


def typos(word: str, rng: np.random.Generator, n: int = 3) -> list[str]:
    """Up to n distinct interior swaps of the word, drawn without replacement."""
    options = interior_swaps(word)
    if len(options) <= n:
        return options
    return [options[i] for i in sorted(rng.choice(len(options), size=n, replace=False))]


def typo(text: str, rng: np.random.Generator, constraints: Constraints = Constraints()) -> str | None:
    """The text with one random eligible word typo'd; None when no word is eligible."""
    words = Words.of(text)
    eligible = [i for i in constraints.eligible(words) if interior_swaps(words.words[i])]
    if not eligible:
        return None
    i = int(rng.choice(eligible))
    return words.replace({i: typos(words.words[i], rng, 1)[0]})
