"""Statistics of labelled sentiment sentences behind SynTextBench's Fig. 3 and Fig. 5 (Ko et al., COLM 2024).

Fig. 3: the average percentage of label-class words (positive words in positive sentences,
negative words in negative ones) per sentence, against the mixing ratio p, for LM-free (Sec. 2.2)
and LM-generated (App. A.2) sets. Fig. 5 / App. A.5: histograms of sentence lengths, synthetic
(positive / negative) against English prose with the A.6 stop words removed.

Pure functions of texts, labels and word lists (no model):

* ``words``: a sentence's words: lower case, runs of letters/digits/underscores, hyphens and
  underscores inside a word kept ("lotus-eater", "health_care"), everything else a separator
  (punctuation goes; "she's" -> "she", "s", the A.6 contraction piece).
* ``label_word_fractions``: per sentence, the share of its words (those not in ``ignore``) that
  lie in its label's list. * The paper does not say whether an LM sentence's stop words count in
  the denominator; by default they do (the share of the sentence that carries the class), and
  ``ignore=STOP_WORDS`` gives the share among content words.
* ``task_label_fractions``: the same for a task object; an LM-free SyntheticTask knows the list
  every token was drawn from, so its share is exact (1 at p = 0, 0 at p = 1, 1 - p in
  expectation: every token, new or repeated, copies a new word, class with probability 1 - p),
  even for words that sit in two lists.
* ``sentence_lengths`` / ``length_histogram``: words per sentence (stop words dropped when given),
  and a normalised histogram over integer lengths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

_WORD = re.compile(r"\w+(?:[-_]\w+)*")


def words(sentence: str) -> list[str]:
    """The sentence's words, lower case, without punctuation (module docstring)."""
    return _WORD.findall(sentence.lower())


def label_word_fractions(sentences: Sequence[str], labels: Sequence[int], positive: Iterable[str],
                         negative: Iterable[str], *, ignore: Iterable[str] = ()) -> np.ndarray:
    """Per sentence, the share of its counted words in its label's list (+1: ``positive``, -1:
    ``negative``); words in ``ignore`` are not counted; NaN for a sentence with no counted word."""
    lists = {1: frozenset(w.lower() for w in positive), -1: frozenset(w.lower() for w in negative)}
    skip = frozenset(w.lower() for w in ignore)
    out = np.full(len(sentences), np.nan)
    for i, (sentence, label) in enumerate(zip(sentences, labels, strict=True)):
        counted = [w for w in words(sentence) if w not in skip]
        if counted:
            out[i] = sum(w in lists[1 if label > 0 else -1] for w in counted) / len(counted)
    return out


def task_label_fractions(task, positive: Iterable[str] = (), negative: Iterable[str] = (), *,
                         ignore: Iterable[str] = ()) -> np.ndarray:
    """``label_word_fractions`` of a task's sentences: exact from the drawn lists for an LM-free
    task (one with ``vocabulary``, ``token_ids`` and ``offsets``), else by list membership."""
    vocabulary = getattr(task, "vocabulary", None)
    if vocabulary is not None and getattr(task, "token_ids", None) is not None:
        source = vocabulary.source(task.token_ids).astype(np.int64)
        row = np.repeat(np.arange(len(task.sentences)), np.diff(task.offsets))
        hits = np.bincount(row, weights=source == np.asarray(task.labels)[row], minlength=len(task.sentences))
        return hits / np.maximum(np.diff(task.offsets), 1)
    return label_word_fractions(task.sentences, task.labels, positive, negative, ignore=ignore)


def mean_label_fraction(fractions: np.ndarray) -> float:
    """The mean over sentences that have counted words (NaN when none has)."""
    fractions = np.asarray(fractions, np.float64)
    return float(np.nanmean(fractions)) if np.isfinite(fractions).any() else float("nan")


def sentence_lengths(sentences: Iterable[str], stop_words: Iterable[str] = ()) -> np.ndarray:
    """Words per sentence, not counting ``stop_words`` (App. A.5 removes the A.6 list from prose)."""
    skip = frozenset(w.lower() for w in stop_words)
    return np.asarray([sum(w not in skip for w in words(s)) for s in sentences], np.int64)


def length_histogram(lengths: Sequence[int], max_length: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """(share of sentences of each length 0..max_length, the lengths); longer sentences count in
    the last bin (max_length means "max_length or more"). Shares sum to 1 (all zero when empty)."""
    lengths = np.minimum(np.asarray(lengths, np.int64), max_length)
    counts = np.bincount(lengths, minlength=max_length + 1).astype(np.float64)
    return counts / max(counts.sum(), 1.0), np.arange(max_length + 1)
