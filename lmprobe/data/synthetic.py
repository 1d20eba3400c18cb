"""Synthetic sentiment sentences of SynTextBench (Ko et al., Sec 2.2, Eq. 1, Fig. 2, App. A.5-A.7).

Each sentence is built token by token from the mixture of Eq. 1,

    D = p_e * <eos> + p_n (1 - p_e) * last_unpaired_word + (1 - p_n)(1 - p_e) * D_new,

with a stack of unpaired words (nesting parentheses, Papadimitriou & Jurafsky 2020): a new word
is pushed, a repeat pops the top of the stack and writes it again, so pairs never cross. A new
word of a sentence with label y is drawn from p * f_NEU + (1 - p) * f_POS (y = +1) or f_NEG
(y = -1); p is the task's difficulty (share of neutral words among new words).

Rules, as the paper states them (resolved ambiguities are marked *):
- The first token is always a new word (worked example: "the first token can not be <eos>").
- When the stack is empty, the repeat mass p_n (1 - p_e) goes to new words (text after Eq. 1);
  <eos> keeps p_e. * The paper removes <eos> only at the first token, so a sentence may end
  with an empty stack, and equally with unpaired words left (the App. A.7 examples do both,
  e.g. "perfectibility lotus-eater shine shine health_care health_care pleasant-tasting").
  Hence the length L (in words, <eos> not written) is 1 + Geometric(p_e): E[L] = 1 / p_e.
- * The text after Eq. 1 says "p_n portion is assigned to new words"; Eq. 1, the stack rule and
  the p_n = 0 "no nesting" ablation (Sec 3.2) all make p_n the repeat share, which we follow
  (with the paper's p_n = 0.5 both readings coincide).
- * f_POS, f_NEG, f_NEU are uniform over their lists: the lexicon gives sets of words, no
  frequencies. Duplicates inside a list are dropped (first occurrence kept) so that uniform is
  over distinct words; the same word may sit in two lists (SentiWordNet senses), as in the paper.
- * Labels are exactly balanced (ceil(n/2) positive, floor(n/2) negative, shuffled): Sec 2.3
  uses the class-balanced (tau = 1/2) Bayes classifier.
- Words are joined by single spaces; multi-word lemmas keep their underscores (App. A.7).

DEFAULT_P_E: the paper takes p_e from the frequency of <eos> in English Wikipedia and compares
lengths with Wikipedia sentences *with stop words removed* (App. A.5, Fig. 5). * English
Wikipedia prose averages about 22 words per sentence (commonly reported range 20-25); the App.
A.6 stop words make up 44% of the words of WordNet 3.0's 48k gloss example sentences (measured
offline), leaving about 22 * 0.56 = 12.3 content words. We take p_e = 1/12, so the synthetic
mean length 1 / p_e matches 12 words (the literal frequency 1/(12 + 1) = 0.077 differs by less
than the uncertainty of the estimate). The twelve App. A.7 examples average 10.4 words,
consistent with a geometric mean of 12 (standard error about 3.3).

DEFAULT_MAX_LEN = 128 words: sentences still open at 128 words are cut there (no <eos>). With
p_e = 1/12 that affects (11/12)^127 = 1.6e-5 of sentences; it bounds the arrays and the models'
input length (rare lexicon words take several subword tokens each).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lmprobe.errors import LmprobeError

DEFAULT_P_E = 1.0 / 12.0
DEFAULT_P_N = 0.5
DEFAULT_MAX_LEN = 128
DEFAULT_TEST_FRACTION = 0.1
PAPER_LEVELS = tuple(round(0.05 * i, 2) for i in range(20))  # Sec 2.4: P = {0, 0.05, ..., 0.95}

_NEUTRAL, _POSITIVE, _NEGATIVE = "neutral", "positive", "negative"


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """The three word lists, deduplicated and laid end to end: neutral, positive, negative.

    A word id i < n_neutral is neutral, i < n_neutral + n_positive positive, else negative, so
    the list a token came from is known even when a word appears in two lists.
    """

    words: np.ndarray  # object array of str, length n_neutral + n_positive + n_negative
    n_neutral: int
    n_positive: int
    n_negative: int

    @classmethod
    def build(cls, positive: Sequence[str], negative: Sequence[str], neutral: Sequence[str]) -> Vocabulary:
        lists = {name: _clean_word_list(words, name) for name, words in
                 ((_NEUTRAL, neutral), (_POSITIVE, positive), (_NEGATIVE, negative))}
        words = np.empty(sum(map(len, lists.values())), dtype=object)
        words[:] = [w for name in (_NEUTRAL, _POSITIVE, _NEGATIVE) for w in lists[name]]
        return cls(words, len(lists[_NEUTRAL]), len(lists[_POSITIVE]), len(lists[_NEGATIVE]))

    def source(self, word_ids: np.ndarray) -> np.ndarray:
        """0 for neutral, +1 for positive, -1 for negative word ids."""
        word_ids = np.asarray(word_ids)
        out = np.zeros(word_ids.shape, dtype=np.int8)
        out[(word_ids >= self.n_neutral) & (word_ids < self.n_neutral + self.n_positive)] = 1
        out[word_ids >= self.n_neutral + self.n_positive] = -1
        return out


@dataclass(frozen=True, eq=False)
class SyntheticTask:
    """n synthetic sentences of one difficulty p, with their labels and token structure.

    Tokens of sentence i are token_ids[offsets[i]:offsets[i + 1]] (ids into vocabulary.words);
    is_new marks new (pushed) words, False marks repeats (pops) of the last unpaired word.
    """

    p: float
    sentences: tuple[str, ...]
    labels: np.ndarray  # (n,) int8, +1 positive / -1 negative
    token_ids: np.ndarray  # (total tokens,) int32
    offsets: np.ndarray  # (n + 1,) int64
    is_new: np.ndarray  # (total tokens,) bool
    vocabulary: Vocabulary

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def lengths(self) -> np.ndarray:
        """Words per sentence (<eos> not counted)."""
        return np.diff(self.offsets)


def generate_sentences(
    positive: Sequence[str] | Vocabulary,
    negative: Sequence[str] | None = None,
    neutral: Sequence[str] | None = None,
    *,
    p: float,
    n: int,
    seed: int | np.random.SeedSequence,
    p_e: float = DEFAULT_P_E,
    p_n: float = DEFAULT_P_N,
    max_len: int = DEFAULT_MAX_LEN,
) -> SyntheticTask:
    """n sentences of difficulty p by Eq. 1 (see the module docstring for the exact rules).

    Pass the three word lists, or a prebuilt Vocabulary as the first argument alone. All
    sentences advance in lockstep with numpy arrays (one step = one token of every open sentence).
    """
    vocab = positive if isinstance(positive, Vocabulary) else Vocabulary.build(positive, negative, neutral)
    _check_probability(p, "p (share of neutral words)", closed_low=True)
    _check_probability(p_e, "p_e (<eos> probability)", closed_low=False)
    _check_probability(p_n, "p_n (repeat share)", closed_low=True)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise LmprobeError(f"n = {n!r}: the number of sentences must be an integer >= 2 (one per class at least).")
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
        raise LmprobeError(f"max_len = {max_len!r}: the maximum sentence length must be an integer >= 1.")
    n, max_len = int(n), int(max_len)
    rng = np.random.default_rng(seed)

    labels = rng.permutation(np.repeat(np.array([1, -1], dtype=np.int8), [n - n // 2, n // 2]))
    tokens = np.empty((n, max_len), dtype=np.int32)
    is_new = np.zeros((n, max_len), dtype=bool)
    stack = np.empty((n, max_len), dtype=np.int32)  # unpaired word ids, top at depth - 1
    depth = np.ones(n, dtype=np.int64)
    lengths = np.ones(n, dtype=np.int64)

    first = _draw_new_words(rng, vocab, labels, p)  # t_1: always a new word
    tokens[:, 0] = stack[:, 0] = first
    is_new[:, 0] = True
    open_rows = np.arange(n)
    repeat_below = p_e + p_n * (1.0 - p_e)
    for t in range(1, max_len):
        u = rng.random(open_rows.size)
        keep = u >= p_e  # u < p_e: <eos>, the sentence ends
        open_rows, u = open_rows[keep], u[keep]
        if open_rows.size == 0:
            break
        repeat = (u < repeat_below) & (depth[open_rows] > 0)  # empty stack: repeat mass -> new
        rows = open_rows[repeat]
        depth[rows] -= 1
        tokens[rows, t] = stack[rows, depth[rows]]
        rows = open_rows[~repeat]
        words = _draw_new_words(rng, vocab, labels[rows], p)
        tokens[rows, t] = words
        stack[rows, depth[rows]] = words
        depth[rows] += 1
        is_new[rows, t] = True
        lengths[open_rows] = t + 1

    filled = np.arange(max_len) < lengths[:, None]
    token_ids, new_flags = tokens[filled], is_new[filled]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    words = vocab.words[token_ids].tolist()
    bounds = offsets.tolist()
    sentences = tuple(" ".join(words[a:b]) for a, b in itertools.pairwise(bounds))
    return SyntheticTask(float(p), sentences, labels, token_ids, offsets, new_flags, vocab)


def make_tasks(
    word_lists: object,
    levels: Sequence[float] = PAPER_LEVELS,
    n: int = 8192,
    seed: int = 0,
    *,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    p_e: float = DEFAULT_P_E,
    p_n: float = DEFAULT_P_N,
    max_len: int = DEFAULT_MAX_LEN,
) -> list[tuple[SyntheticTask, SyntheticTask]]:
    """One (train, test) pair per difficulty level (Algorithm 1, line 3).

    n is the size of one synthetic dataset, train + test (Table 1's n; its eSC values
    3686 = floor(0.9 * 4096) show the baselines trained on 90% of n). The paper gives no split
    for SynTextBench itself (*): test gets round(test_fraction * n) sentences, train the rest,
    each generated separately and class-balanced. Level i uses SeedSequence([seed, i]) (train and
    test are its two children), so adding levels after it changes nothing before.

    word_lists: a Vocabulary, or anything with positive/negative/neutral attributes or keys.
    """
    vocab = _vocabulary_of(word_lists)
    levels = tuple(levels)
    if not levels:
        raise LmprobeError("levels is empty: pass at least one difficulty p in [0, 1], e.g. PAPER_LEVELS.")
    for i, p in enumerate(levels):
        _check_probability(p, f"levels[{i}] (share of neutral words)", closed_low=True)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise LmprobeError(f"seed = {seed!r}: pass a non-negative integer.")
    if not (isinstance(test_fraction, (int, float)) and 0.0 < test_fraction < 1.0):
        raise LmprobeError(f"test_fraction = {test_fraction!r}: pass a number strictly between 0 and 1, e.g. 0.1.")
    n_is_int = isinstance(n, (int, np.integer)) and not isinstance(n, bool)
    n_test = test_size(n, test_fraction) if n_is_int else 0
    if n_test < 2 or n - n_test < 2:
        raise LmprobeError(
            f"n = {n!r} with test_fraction = {test_fraction}: both the train and the test split need at "
            "least 2 sentences; raise n.")
    tasks = []
    for i, p in enumerate(levels):
        train_seed, test_seed = np.random.SeedSequence([int(seed), i]).spawn(2)
        kw = {"p": p, "p_e": p_e, "p_n": p_n, "max_len": max_len}
        tasks.append((generate_sentences(vocab, n=n - n_test, seed=train_seed, **kw),
                      generate_sentences(vocab, n=n_test, seed=test_seed, **kw)))
    return tasks


def test_size(n: int, test_fraction: float = DEFAULT_TEST_FRACTION) -> int:
    """Sentences of the test split of an n-sentence task (make_tasks; the rest train)."""
    return round(test_fraction * int(n))


def _draw_new_words(rng: np.random.Generator, vocab: Vocabulary, labels: np.ndarray, p: float) -> np.ndarray:
    """D_new: neutral with probability p, else from the label's list; uniform within a list."""
    neutral = rng.random(labels.size) < p
    u = rng.random(labels.size)
    size = np.where(neutral, vocab.n_neutral, np.where(labels > 0, vocab.n_positive, vocab.n_negative))
    start = np.where(neutral, 0, np.where(labels > 0, vocab.n_neutral, vocab.n_neutral + vocab.n_positive))
    return (start + np.minimum((u * size).astype(np.int64), size - 1)).astype(np.int32)


def _clean_word_list(words: Sequence[str], name: str) -> tuple[str, ...]:
    if isinstance(words, str) or not isinstance(words, Sequence | np.ndarray | set | frozenset):
        raise LmprobeError(f"The {name} word list must be a sequence of words, got {type(words).__name__}.")
    if isinstance(words, set | frozenset):
        words = sorted(words, key=str)  # a set's order varies between runs: fix it for seeding
    unique = tuple(dict.fromkeys(words))
    if not unique:
        raise LmprobeError(f"The {name} word list is empty: build it from a lexicon that has {name} words.")
    for w in unique:
        if not isinstance(w, str) or w.split() != [w]:
            raise LmprobeError(
                f"The {name} word list holds {w!r}: every entry must be one non-empty word without spaces "
                "(join multi-word lemmas with '_', as SentiWordNet does).")
    return unique


def _vocabulary_of(word_lists: object) -> Vocabulary:
    if isinstance(word_lists, Vocabulary):
        return word_lists
    get = word_lists.get if isinstance(word_lists, Mapping) else lambda k: getattr(word_lists, k, None)
    lists = {k: get(k) for k in (_POSITIVE, _NEGATIVE, _NEUTRAL)}
    missing = [k for k, v in lists.items() if v is None]
    if missing:
        raise LmprobeError(f"word_lists has no {', '.join(missing)} list: pass an object or mapping with "
                           "positive, negative and neutral word lists.")
    return Vocabulary.build(lists[_POSITIVE], lists[_NEGATIVE], lists[_NEUTRAL])


def _check_probability(value: float, name: str, *, closed_low: bool) -> None:
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > 1 or value < 0 or (value == 0 and not closed_low):
        interval = "[0, 1]" if closed_low else "(0, 1]"
        raise LmprobeError(f"{name} = {value!r} must be a number in {interval}.")
