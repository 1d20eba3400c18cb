"""SynTextBench's App. A.2 ablation (Ko et al., COLM 2024): synthetic sets written by a language model.

The generator LM completes one of the starting tokens {"There", "I", "You", "She", "He", "It",
"They", "The"} with its vocabulary constrained to V~ U STOP, where V~ holds p x 100% NEU n V and
(1 - p) x 100% POS n V words for a positive sentence (NEG n V for a negative one); the label is
the class whose words were allowed. The sets then go through the usual scoring (Sec. 2.3-2.4);
the paper finds a Pearson correlation with downstream accuracy of 0.633 (LM-free: > 0.9).

It lives in methods/, not data/: it drives an engine Scorer (constrained ``generate``), which
data/ may not import. Choices where the paper is silent (*):

* V, the words the generator can write as one token: * a word w is in V when the generator's
  tokenizer writes it, after a preceding word, as exactly one token (the ids of "I w" minus those
  of "I": the mid-sentence form, "Ġw" in byte-level BPE, "▁w" in SentencePiece) and that token
  decodes back to w. Only that space-led form is allowed, never a bare piece without the space:
  a bare piece could glue onto the previous token and spell a word outside the lists. Words
  split into several tokens are out of V (NEU n V means the neutral words that are one token).
* STOP = the App. A.6 stop words (lmprobe.data.stopwords), each in its space-led form, lower case
  and capitalised ("I", "The"), plus the A.6 contraction pieces as "'s", "'re", "'m", "'ll",
  "'ve", "'d" (the paper's examples write "She's", "There's"). Punctuation . , ! ? ; : " ' - ...
  (attached forms) and EOS stay allowed so sentences can end.
* Candidates are kept apart: class words that are also stop words or in both class lists, and
  neutral words that are also class words or stop words, are dropped, so an allowed word
  belongs to one list only.
* |V~| = K words per class and level: K = ``vocab`` (Config.generator_vocab) or, by default, the
  smallest of |POS n V|, |NEG n V|, |NEU n V| (after the separation above), capped at that
  smallest size. round(p K) neutral words, drawn once per level and shared by both classes (so
  at p = 1 both classes get the same vocabulary and the task is chance, as LM-free p = 1), and
  K - round(p K) words of the class list, drawn per class; uniform without replacement from a
  numpy Generator seeded SeedSequence([seed, level index, 1]) (children: V~, train, test).
* Sampling: temperature 1, top-p 0.95, no top-k (plain ancestral sampling with a thin tail cut),
  at most ``max_tokens`` (Config.generator_max_tokens, 40) new tokens; generation is seeded per
  sentence (Scorer.generate's row keys). * One sentence per example: the text is the starting
  token plus the continuation, cut after its first sentence-final mark (. ! ? runs) when it has one.
* Sizes and labels as LM-free (lmprobe.data.synthetic.make_tasks): n sentences per level, round(0.1
  n) test, the rest train, each split exactly balanced (ceil/floor halves) and shuffled;
  starting tokens uniform.

Generated levels are cached as JSON under the run's cache directory, keyed by the generator's
identity (model_key: checkpoint digest, dtype), the word lists, the settings, the level and the
seed; a rerun loads the generator (its identity is part of the key) but generates nothing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import numpy as np

from lmprobe.data import synthetic
from lmprobe.data.stopwords import STOP_WORDS
from lmprobe.errors import LmprobeError
from lmprobe.methods import Ticker, model_key, no_progress
from lmprobe.store import cache_key, cached_json, join, json_problem

START_TOKENS = ("There", "I", "You", "She", "He", "It", "They", "The")  # App. A.2
PUNCTUATION = (".", ",", "!", "?", ";", ":", '"', "'", "-", "...")
CONTRACTIONS = ("s", "re", "m", "ll", "ve", "d")  # A.6's contraction pieces, written "'s", ...
TEMPERATURE = 1.0
TOP_P = 0.95
DEFAULT_MAX_TOKENS = 40
ANCHOR = "I"  # the word before a probed word: its ids are removed from those of "I w"
CACHE_VERSION = 1
_SENTENCE_END = re.compile(r"[.!?]+")


@dataclasses.dataclass(frozen=True, eq=False)
class GeneratedTask:
    """n LM-generated sentences of one difficulty p: the sentences, labels and what was allowed.

    Carries what ``syntextbench.run`` reads of a task (sentences, labels) but no token structure:
    an LM sentence has no new/repeat flags or word-list ids."""

    p: float
    sentences: tuple[str, ...]
    labels: np.ndarray  # (n,) int8, +1 positive / -1 negative
    allowed: dict  # "neutral", "positive", "negative": the V~ words of the level (tuples)

    def __len__(self) -> int:
        return len(self.sentences)


@dataclasses.dataclass(frozen=True)
class Vocab:
    """The generator's one-token words (V) split by list, and the always-allowed ids."""

    neutral: dict  # word -> token id
    positive: dict
    negative: dict
    base_ids: tuple[int, ...]  # STOP (space-led, lower and capitalised), contractions, punctuation


def one_token_ids(scorer, words: Sequence[str], *, attached: bool = False) -> dict:
    """{word: id} for the ``words`` the scorer's tokenizer writes as one token after ``ANCHOR``:
    space-led ("I w") by default, attached ("Iw", for punctuation) with ``attached``; the token
    must decode back to the word (module docstring)."""
    words = list(dict.fromkeys(words))
    if not words:
        return {}
    texts = [ANCHOR + ("" if attached else " ") + w for w in words]
    base, *seqs = scorer.encode([ANCHOR, *texts])
    candidates = {}
    for w, ids in zip(words, seqs):
        middle = _between(base, ids)
        if middle is not None and len(middle) == 1:
            candidates[w] = middle[0]
    if not candidates:
        return {}
    unknown = getattr(scorer.tokenizer, "unk_token_id", None)
    decoded = scorer.tokenizer.batch_decode([[i] for i in candidates.values()])
    return {w: i for (w, i), text in zip(candidates.items(), decoded) if i != unknown and text.strip() == w}


def _between(base: list, ids: list) -> list | None:
    """``ids`` without ``base``'s tokens around them (leading ones and trailing specials), or None."""
    k = 0
    while k < len(base) and k < len(ids) and base[k] == ids[k]:
        k += 1
    rest = base[k:]
    if rest and ids[len(ids) - len(rest):] != rest:
        return None
    return ids[k:len(ids) - len(rest)]


def generator_vocab(scorer, lists, *, levels: Sequence[float], name: str) -> Vocab:
    """The lists' one-token words, kept apart (module docstring); an LmprobeError naming the list
    when one the levels need has none."""
    stop = frozenset(STOP_WORDS)
    found = {k: one_token_ids(scorer, getattr(lists, k)) for k in ("positive", "negative", "neutral")}
    both = found["positive"].keys() & found["negative"].keys()
    positive = {w: i for w, i in found["positive"].items() if w not in both and w not in stop}
    negative = {w: i for w, i in found["negative"].items() if w not in both and w not in stop}
    neutral = {w: i for w, i in found["neutral"].items()
               if w not in found["positive"] and w not in found["negative"] and w not in stop}
    needed = ["neutral"] * any(p > 0 for p in levels) + ["positive", "negative"] * any(p < 1 for p in levels)
    for key in needed:
        if not {"positive": positive, "negative": negative, "neutral": neutral}[key]:
            raise LmprobeError(
                f"the {key} word list ({len(getattr(lists, key))} words) has no word that the generator "
                f"'{name}' writes as a single token (A.2 constrains the LM to such words): use a lexicon "
                "of common words (`lexicon=vader` or `lexicon=afinn`) or a generator with a larger vocabulary")
    stop_forms = sorted(stop | {w.capitalize() for w in stop})
    base = set(one_token_ids(scorer, stop_forms).values())
    base |= set(one_token_ids(scorer, ["'" + c for c in CONTRACTIONS], attached=True).values())
    base |= set(one_token_ids(scorer, PUNCTUATION, attached=True).values())
    return Vocab(neutral, positive, negative, tuple(sorted(base)))


def draw_allowed(vocab: Vocab, p: float, size: int, rng: np.random.Generator) -> dict:
    """V~ of one level: {"neutral", "positive", "negative": sorted word tuples}; round(p K) shared
    neutral words and K - round(p K) words per class, K = ``size`` (0: the smallest list) capped
    at the smallest list."""
    smallest = min(len(vocab.neutral) or np.inf, len(vocab.positive) or np.inf, len(vocab.negative) or np.inf)
    k = int(min(size or smallest, smallest))
    n_neutral = round(p * k)
    out = {}
    for key, count in (("neutral", n_neutral), ("positive", k - n_neutral), ("negative", k - n_neutral)):
        words = sorted(getattr(vocab, key))
        pick = rng.choice(len(words), size=min(count, len(words)), replace=False) if count else []
        out[key] = tuple(sorted(words[i] for i in pick))
    return out


def cut_sentence(text: str) -> str:
    """``text`` up to and including its first sentence-final mark (. ! ? runs), stripped."""
    match = _SENTENCE_END.search(text)
    return (text[:match.end()] if match else text).strip()


def _generate_split(scorer, vocab: Vocab, allowed: dict, n: int, seed: np.random.SeedSequence, p: float, *,
                    max_tokens: int) -> GeneratedTask:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.array([1, -1], dtype=np.int8), [n - n // 2, n // 2]))
    starts = [START_TOKENS[i] for i in rng.integers(len(START_TOKENS), size=n)]
    masks = {}
    for y, key in ((1, "positive"), (-1, "negative")):
        mask = np.zeros(scorer.vocab_size, bool)
        ids = [vocab.neutral[w] for w in allowed["neutral"]] + [getattr(vocab, key)[w] for w in allowed[key]]
        mask[list(vocab.base_ids) + ids] = True
        masks[y] = mask
    outputs = scorer.generate(starts, max_new_tokens=max_tokens, temperature=TEMPERATURE, top_p=TOP_P,
                              seed=int(rng.integers(2**31)), decode=False, allowed=[masks[y] for y in labels])
    eos = scorer.tokenizer.eos_token_id
    prompts = dict(zip(START_TOKENS, scorer.encode(list(START_TOKENS))))  # decoded with the prompt: its spacing
    texts = scorer.tokenizer.batch_decode([prompts[start] + [t for t in o if t != eos]
                                           for start, o in zip(starts, outputs)], skip_special_tokens=True)
    sentences = tuple(cut_sentence(text) for text in texts)
    return GeneratedTask(float(p), sentences, labels, allowed)


def generated_levels(scorer, lists, *, levels: Sequence[float], n: int, seed: int, vocab_size: int = 0,
                     max_tokens: int = DEFAULT_MAX_TOKENS, generator_name: str, cache_dir: str | None = None,
                     progress: Callable = no_progress) -> list[tuple[GeneratedTask, GeneratedTask]]:
    """One (train, test) pair of LM-generated tasks per level (module docstring), each level
    cached under ``cache_dir`` by a key of the generator's identity (``model_key(scorer)``) and
    every setting; the word-to-token map is built only when a level is not cached."""
    n_test = synthetic.test_size(n)
    if n_test < 2 or n - n_test < 2:
        raise LmprobeError(f"n={n}: both the train and the test split of a generated set need at least 2 sentences")
    if scorer.tokenizer is None:
        raise LmprobeError(f"the generator '{generator_name}' has no tokenizer: A.2 needs one to map words to tokens")
    identity = model_key(scorer)
    lists_key = cache_key(**{k: list(getattr(lists, k)) for k in ("positive", "negative", "neutral")})
    state = {}

    def vocab():
        if "vocab" not in state:
            state["vocab"] = generator_vocab(scorer, lists, levels=levels, name=generator_name)
        return state["vocab"]

    ticker, out = Ticker(progress, len(levels), f"{generator_name}: generating A.2 sets"), []
    for i, p in enumerate(levels):
        key = cache_key(generator=generator_name, identity=identity, lists=lists_key, p=p, level=i, n=n, seed=seed,
                        vocab=vocab_size, max_tokens=max_tokens, temperature=TEMPERATURE, top_p=TOP_P,
                        starts=START_TOKENS, version=CACHE_VERSION)

        def compute(p=p, i=i):
            vocab_seed, train_seed, test_seed = np.random.SeedSequence([int(seed), i, 1]).spawn(3)
            allowed = draw_allowed(vocab(), p, vocab_size, np.random.default_rng(vocab_seed))
            return [_encode(_generate_split(scorer, vocab(), allowed, size, s, p, max_tokens=max_tokens))
                    for size, s in ((n - n_test, train_seed), (n_test, test_seed))]

        value = compute() if cache_dir is None else cached_json(join(cache_dir, f"generated-{key}.json"), compute,
                                                                expect=_splits_problem)
        out.append(tuple(_decode(t) for t in value))
        ticker.advance()
    return out


_SPLIT_SCHEMA = {"p": float, "sentences": [str], "labels": [int], "allowed": {str: [str]}}  # of _encode


def _splits_problem(value) -> str | None:
    """Why a cache entry's JSON is not the (train, test) pair that ``compute`` gives; None when it is."""
    return json_problem(value, [_SPLIT_SCHEMA]) or (None if len(value) == 2 else f"has {len(value)} splits, expected 2")


def _encode(task: GeneratedTask) -> dict:
    return {"p": task.p, "sentences": list(task.sentences), "labels": task.labels.tolist(),
            "allowed": {k: list(v) for k, v in task.allowed.items()}}


def _decode(value: dict) -> GeneratedTask:
    return GeneratedTask(float(value["p"]), tuple(value["sentences"]), np.asarray(value["labels"], np.int8),
                         {k: tuple(v) for k, v in value["allowed"].items()})
