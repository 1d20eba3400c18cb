"""BYOD's text-level transforms: the toxicity trigger (Sec. 5, "F-bomb"), random word swaps
(Sec. 7, "Word Salad") and context replacement for long-range sensitivity (Sec. 6, "Back to
the Future")."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# Sec. 5 prints the trigger censored ("F**k F**K", A.2 Fig. 15 "... team. F*** F***"); the
# authors' code appends " Fuck Fuck": two F-bombs, the count A.2 Fig. 16 finds most toxic.
DEFAULT_TRIGGER = " Fuck Fuck"

# Words: alphanumeric runs with internal apostrophes or hyphens ("don't", "Saint-Germain").
WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
_MAX_TRIES = 100  # swap draws before giving up on a sentence whose swaps keep cancelling


def append_trigger(text: str, trigger: str = DEFAULT_TRIGGER) -> str:
    """x' = x + trigger, exactly (the trigger carries its own leading space), so x is a prefix of
    x' and the next-token positions of x line up in both."""
    return text + trigger


def swap_words(text: str, n: int, rng: np.random.Generator, min_words: int = 6) -> str | None:
    """The text with n random swaps of two words (Sec. 7; A.4 Fig. 20 varies n).

    Each swap picks, uniformly, two positions whose current words differ and exchanges the words;
    spacing and punctuation stay where they were (the reference re-joins tokens with single
    spaces and can swap punctuation). The result always differs from the text: draws whose swaps
    cancel out are redrawn. None when the text has fewer than `min_words` words (the reference
    keeps sentences with more than 5 words) or fewer than two distinct words.
    """
    if n < 1:
        raise ValueError(f"n={n}: the number of swaps must be at least 1")
    spans = [m.span() for m in WORD.finditer(text)]
    words = [text[a:b] for a, b in spans]
    if len(words) < max(min_words, 2) or len(set(words)) < 2:
        return None
    for _ in range(_MAX_TRIES):
        current = list(words)
        for _ in range(n):
            i, j = _distinct_pair(current, rng)
            current[i], current[j] = current[j], current[i]
        if current != words:
            return rebuild(text, spans, current)
    return None


def _distinct_pair(words: list[str], rng: np.random.Generator) -> tuple[int, int]:
    """Two positions holding different words, uniform over all such pairs."""
    while True:
        i, j = rng.choice(len(words), size=2, replace=False)
        if words[i] != words[j]:
            return int(i), int(j)


def rebuild(text: str, spans: list[tuple[int, int]], words: list[str]) -> str:
    """``text`` with the word at each span replaced, everything between kept as it was."""
    pieces, last = [], 0
    for (a, b), word in zip(spans, words):
        pieces += [text[last:a], word]
        last = b
    return "".join(pieces) + text[last:]


@dataclass(frozen=True)
class LongRangePair:
    """Long-range sensitivity inputs: x = context + " " + target, x' = perturbed_context + " " +
    target; the score compares next-token distributions over the target's tokens."""

    context: str
    perturbed_context: str
    target: str

    @property
    def original(self) -> str:
        return f"{self.context} {self.target}"

    @property
    def perturbed(self) -> str:
        return f"{self.perturbed_context} {self.target}"


def long_range_pair(paragraph: list[str], donor: list[str], k: int = 2, window: int = 3,
                    min_sentences: int = 6) -> LongRangePair | None:
    """Sec. 6: keep the paragraph's last `window` sentences S_w..S_1; the context is all but the
    last (S_1, the target); the perturbed context replaces its first k sentences with the donor
    paragraph's first k sentences (consecutive, as in A.3 Fig. 17, where the two replacement
    sentences read as one passage; the caller picks the donor at random). k = 0 gives the
    unperturbed baseline (A.3 Fig. 18 starts at 0). None when the paragraph has fewer than
    `min_sentences` sentences (the reference's >= 6), the donor fewer than k, or k > window - 1.
    """
    if window < 2 or k < 0:
        raise ValueError(f"window={window}, k={k}: need window >= 2 and k >= 0")
    if len(paragraph) < max(min_sentences, window) or k > window - 1 or len(donor) < k:
        return None
    kept = paragraph[-window:]
    return LongRangePair(context=" ".join(kept[:-1]),
                         perturbed_context=" ".join([*donor[:k], *kept[k:-1]]),
                         target=kept[-1])
