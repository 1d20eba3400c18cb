"""Sentiment lexicons -> positive / negative / neutral word lists (SynTextBench Sec 2.2, A.3) and
the lexicon's own sentence-sentiment rule used as the task-feasibility reference (A.4).

A Lexicon holds one row per (word, sense): SentiWordNet gives a row per synset term, so a word
with several senses has several rows. Sec 2.2 / A.3 classify each row, then drop the sense
number: PosScore > NegScore -> positive, PosScore < NegScore -> negative, PosScore = NegScore
= 0 -> neutral, equal non-zero scores (A.3's unquestioning#2, 0.5/0.5) -> no list. A word
whose senses differ lands in several lists ('good' is positive and neutral), as in the paper.
* The paper's sizes (23147 / 26440 / 154993) count one entry per synset term, repeats kept
(WordNet has only ~147k distinct lemmas): word_lists(..., senses=True) follows that counting
(ours: 23155 / 26294 / 155163 from SentiWn.p, whose scores differ slightly from the text
release); the default gives each distinct word once (19327 / 21708 / 117703), which is what a
uniform f_POS / f_NEG / f_NEU over words needs. * Stop words (A.6) are not removed: removing
them moves our counts away from the paper's (by 1077 entries), so the paper kept them.

Words are lowercased (the paper's examples: 'anne_sexton', 'linanthus_dianthiflorus') and
multi-word entries are joined with underscores, as WordNet lemmas are ('health_care', A.7;
AFINN's 'some kind' -> 'some_kind'), so every list entry is one whitespace-free token.
Single-score lexicons (VADER, AFINN, TextBlob, a user TSV) give each row pos = max(s, 0),
neg = max(-s, 0), so the same rule reads: s > 0 positive, s < 0 negative, s = 0 exactly
neutral. * VADER lists no zero-valence word and AFINN two, so their neutral lists are (nearly)
empty: take neutral words from another lexicon when p > 0 needs them.
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import os
import pickle
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lmprobe.data.wordnet import load_wordnet
from lmprobe.errors import LmprobeError

SENTIWORDNET_ENV = "LMPROBE_SENTIWORDNET"  # path of a SentiWordNet_3.0.0.txt
NLTK_SENTIWORDNET = "corpora/sentiwordnet/SentiWordNet_3.0.0.txt"


class LexiconError(LmprobeError):
    """A lexicon that cannot be found, read or turned into word lists."""


@dataclass(frozen=True, eq=False)
class Lexicon:
    """Sense-level scores: row i gives one sense of words[i] the scores (pos[i], neg[i]) >= 0."""

    name: str
    source: str  # file the scores came from, for provenance
    words: tuple[str, ...]
    pos: np.ndarray
    neg: np.ndarray

    @classmethod
    def from_rows(cls, name: str, source: str, rows: Iterable[tuple[str, float, float]]) -> Lexicon:
        rows = list(rows)
        if not rows:
            raise LexiconError(f"lexicon '{name}' ({source}) has no entries: check the file")
        words, pos, neg = zip(*rows)
        return cls(name, source, tuple("_".join(w.lower().split()) for w in words),
                   np.asarray(pos, np.float64), np.asarray(neg, np.float64))

    @classmethod
    def from_signed(cls, name: str, source: str, rows: Iterable[tuple[str, float]]) -> Lexicon:
        """One polarity s per row: pos = max(s, 0), neg = max(-s, 0)."""
        return cls.from_rows(name, source, ((w, max(s, 0.0), max(-s, 0.0)) for w, s in rows))

    @functools.cached_property
    def word_scores(self) -> dict[str, float]:
        """Per word: the mean over its senses of PosScore - NegScore (the A.4 rule's input)."""
        vocab, inverse = np.unique(np.asarray(self.words, dtype=object), return_inverse=True)
        total = np.bincount(inverse, weights=self.pos - self.neg, minlength=len(vocab))
        return dict(zip(vocab.tolist(), (total / np.bincount(inverse)).tolist()))


class WordLists(NamedTuple):
    """Sorted word lists (tuples of str) built by word_lists()."""

    positive: tuple[str, ...]
    negative: tuple[str, ...]
    neutral: tuple[str, ...]


def word_lists(lexicon: Lexicon, *, senses: bool = False) -> WordLists:
    """Sec 2.2 criteria applied to every (word, sense) row; senses=True keeps one entry per row
    (the paper's counting: repeats for words with several senses of the same class)."""
    words = np.asarray(lexicon.words, dtype=object)
    masks = (lexicon.pos > lexicon.neg, lexicon.pos < lexicon.neg,
             (lexicon.pos == 0) & (lexicon.neg == 0))
    lists = [words[m].tolist() for m in masks]
    lists = WordLists(*(tuple(sorted(w if senses else set(w))) for w in lists))
    for kind in ("positive", "negative"):
        if not getattr(lists, kind):
            raise LexiconError(
                f"lexicon '{lexicon.name}' ({lexicon.source}) yields an empty {kind} word list: "
                "use a lexicon with both positive and negative entries (e.g. 'sentiwordnet')"
            )
    return lists


class _ScoreTable(dict):
    """word -> A.4 score; unknown tokens are looked up lowercased, else score 0 (memoized)."""

    def __init__(self, scores: dict[str, float]):
        super().__init__(scores)
        self._scores = scores

    def __missing__(self, token: str) -> float:
        value = self[token] = self._scores.get(token.lower(), 0.0)
        return value


def lexicon_rule_predictions(lexicon: Lexicon, sentences: Sequence[Sequence[str] | str]) -> np.ndarray:
    """A.4 reference classifier, the SentiWordNet rule of Denecke (2008): each word scores the
    mean over its senses of PosScore - NegScore (no sense disambiguation: all senses, all POS),
    a sentence scores the sum over its words (unknown words and stop words score 0), and the
    prediction is its sign: +1, -1, or 0 when undecided (no sentiment words, or they cancel).
    Sentences are token lists or whitespace-separated strings. Returns int8 of len(sentences)."""
    table = _ScoreTable(lexicon.word_scores)
    sentences = [s.split() if isinstance(s, str) else s for s in sentences]
    lengths = np.fromiter(map(len, sentences), np.int64, len(sentences))
    flat = np.fromiter((table[t] for s in sentences for t in s), np.float64, int(lengths.sum()))
    sums = np.bincount(np.repeat(np.arange(len(sentences)), lengths), weights=flat,
                       minlength=len(sentences))
    return np.where(np.abs(sums) <= 1e-9, 0, np.sign(sums)).astype(np.int8)


# ---------------------------------------------------------------------------- loaders


def package_file(package: str, relative: str, install: str) -> str:
    """A data file shipped inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, relative)
        if os.path.isfile(path):
            return path
    raise LexiconError(f"'{package}/{relative}' not found (package not installed, or a version "
                       f"without this file): run '{install}'")


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise LexiconError(f"cannot read lexicon file '{path}' ({e.__class__.__name__}: {e}): "
                           "pass a readable UTF-8 text file") from None


def _is_sentiwordnet_line(fields: list[str]) -> bool:
    return len(fields) >= 5 and fields[0] in ("a", "n", "v", "r") and fields[1].isdigit() and "#" in fields[4]


def parse_sentiwordnet_text(lines: Iterable[str], source: str, name: str = "sentiwordnet") -> Lexicon:
    """The SentiWordNet 3.0 text release: 'POS ID PosScore NegScore SynsetTerms Gloss', tab
    separated, SynsetTerms like 'good#1 right#3'; '#' lines are comments."""
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split("\t")
        try:
            if not _is_sentiwordnet_line(f):
                raise ValueError
            pos, neg = float(f[2]), float(f[3])
            rows.extend((term.rsplit("#", 1)[0], pos, neg) for term in f[4].split())
        except ValueError:
            raise LexiconError(
                f"{source}:{number}: not a SentiWordNet line 'POS<TAB>ID<TAB>PosScore<TAB>NegScore"
                f"<TAB>term#n ...<TAB>gloss': {line[:60]!r}; fix or delete that line"
            ) from None
    return Lexicon.from_rows(name, source, rows)


def parse_scored_tsv(path: str, scale: float = 1.0, name: str | None = None) -> Lexicon:
    """'word<TAB>score' lines (further columns ignored, '#' lines and blank lines skipped); the
    score's sign gives the class, 0 is neutral; scores are divided by scale."""
    rows = []
    for number, line in enumerate(_read_lines(path), 1):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split("\t")
        try:
            if len(f) < 2 or not f[0].strip():
                raise ValueError
            rows.append((f[0].strip(), float(f[1]) / scale))
        except ValueError:
            raise LexiconError(
                f"{path}:{number}: expected 'word<TAB>score' (a number), got {line[:60]!r}; "
                "fix or delete that line"
            ) from None
    return Lexicon.from_signed(name or os.path.basename(path), path, rows)


class _ScoresUnpickler(pickle.Unpickler):
    """Unpickles only what SentiWn.p is made of: defaultdict(list/float), str, float."""

    ALLOWED = {("collections", "defaultdict"): collections.defaultdict,
               ("__builtin__", "list"): list, ("builtins", "list"): list,
               ("__builtin__", "float"): float, ("builtins", "float"): float}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise LexiconError(
                f"'{getattr(self, 'path', '?')}' references {module}.{name}, which a SentiWordNet "
                "score pickle never needs: refusing to unpickle it; reinstall "
                "'pip install --no-deps sentiment-classifier==0.6' or pass SentiWordNet_3.0.0.txt"
            )
        return self.ALLOWED[module, name]


def read_score_pickle(path: str) -> dict[str, tuple[float, float]]:
    """{synset name: (pos, neg)} from a Python-2 pickle like senti_classifier's SentiWn.p,
    through a restricted unpickler (never plain pickle.load)."""
    try:
        with open(path, "rb") as f:
            unpickler = _ScoresUnpickler(f, encoding="latin1")
            unpickler.path = path
            raw = unpickler.load()
        return {str(k): (float(v["pos"]), float(v["neg"])) for k, v in raw.items()}
    except LexiconError:
        raise
    except Exception as e:  # noqa: BLE001 - corrupt pickles raise many kinds
        raise LexiconError(f"cannot read the SentiWordNet score pickle '{path}' ({type(e).__name__}: "
                           f"{e}): reinstall 'pip install --no-deps sentiment-classifier==0.6'") from None


@functools.lru_cache(maxsize=2)
def sentiwordnet_from_pickle(path: str | None = None, wordnet_dir: str | None = None) -> Lexicon:
    """Offline SentiWordNet 3.0: SentiWn.p scores joined with WordNet 3.0 lemma names."""
    path = path or package_file("senti_classifier", "data/SentiWn.p",
                                 "pip install --no-deps sentiment-classifier==0.6")
    scores = read_score_pickle(path)
    wordnet = load_wordnet(wordnet_dir)
    missing = sorted(set(scores) - set(wordnet.synsets))
    if missing:
        raise LexiconError(f"'{path}' scores {len(missing)} synsets WordNet in {wordnet.directory} "
                           f"lacks (e.g. {missing[0]}): use WordNet 3.0 ('apt-get install wordnet-base')")
    rows = [(lemma, *scores[s.name]) for s in wordnet.synsets.values() if s.name in scores
            for lemma in s.lemmas]
    return Lexicon.from_rows("sentiwordnet", f"{path} + {wordnet.directory}", rows)


def _nltk_sentiwordnet() -> Lexicon | None:
    """nltk's sentiwordnet corpus (the same text release), when nltk and its data are installed."""
    try:
        import nltk
        pointer = nltk.data.find(NLTK_SENTIWORDNET)
    except (ImportError, LookupError):
        return None
    with pointer.open() as stream:
        text = stream.read()
    text = text.decode("utf-8") if isinstance(text, bytes) else text
    return parse_sentiwordnet_text(text.splitlines(), str(pointer))


def load_sentiwordnet() -> Lexicon:
    """SentiWordNet 3.0 from, in order: the text file at $LMPROBE_SENTIWORDNET, nltk's
    sentiwordnet corpus, or offline SentiWn.p (sentiment-classifier 0.6) + WordNet 3.0."""
    if os.environ.get(SENTIWORDNET_ENV):
        path = os.environ[SENTIWORDNET_ENV]
        return parse_sentiwordnet_text(_read_lines(_existing(path, f"${SENTIWORDNET_ENV}")), path)
    return _nltk_sentiwordnet() or sentiwordnet_from_pickle()


def load_vader() -> Lexicon:
    """VADER 3.3.2: token, mean valence in [-4, 4], std, ratings; scaled to [-1, 1]."""
    path = package_file("vaderSentiment", "vader_lexicon.txt", "pip install vadersentiment==3.3.2")
    return parse_scored_tsv(path, scale=4.0, name="vader")


def load_afinn() -> Lexicon:
    """AFINN-165: word, integer valence in [-5, 5]; scaled to [-1, 1]."""
    path = package_file("afinn", "data/AFINN-en-165.txt", "pip install afinn==0.1")
    return parse_scored_tsv(path, scale=5.0, name="afinn")


def load_textblob() -> Lexicon:
    """TextBlob's (pattern) adjective lexicon: one row per <word form polarity> sense entry."""
    path = package_file("textblob", "en/en-sentiment.xml", "pip install textblob==0.20.1")
    try:
        entries = ET.parse(path).getroot().iter("word")
        rows = [(e.attrib["form"], float(e.attrib["polarity"])) for e in entries]
    except (ET.ParseError, KeyError, ValueError) as e:
        raise LexiconError(f"cannot parse '{path}' ({e}): reinstall 'pip install textblob==0.20.1'") from None
    return Lexicon.from_signed("textblob", path, rows)


LOADERS = {"sentiwordnet": load_sentiwordnet, "vader": load_vader, "afinn": load_afinn,
           "textblob": load_textblob}


def _existing(path: str, what: str) -> str:
    if not os.path.isfile(path):
        raise LexiconError(f"lexicon file '{path}' ({what}) does not exist or is not a file: "
                           "pass the path of a SentiWordNet_3.0.0.txt or a 'word<TAB>score' TSV")
    return path


def load_path(path: str) -> Lexicon:
    """A lexicon file: the SentiWordNet text release (detected from its first data line) or a
    'word<TAB>score' TSV."""
    lines = _read_lines(_existing(path, "lexicon path"))
    first = next((line for line in lines if line.strip() and not line.startswith("#")), "")
    if _is_sentiwordnet_line(first.split("\t")):
        return parse_sentiwordnet_text(lines, path)
    return parse_scored_tsv(path)


def load_lexicon(spec: str) -> Lexicon:
    """A lexicon by name (sentiwordnet, vader, afinn, textblob) or by file path."""
    if spec.lower() in LOADERS:
        return LOADERS[spec.lower()]()
    spec = os.path.expanduser(spec)
    if os.path.exists(spec) or re.search(r"[/\\]|\.\w+$", spec):
        return load_path(spec)
    raise LexiconError(f"unknown lexicon '{spec}': use one of {', '.join(LOADERS)}, or the path of a "
                       "SentiWordNet_3.0.0.txt or 'word<TAB>score' TSV file")
