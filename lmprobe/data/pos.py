"""Word tokenization and Penn-Treebank part-of-speech tagging, with or without nltk data.

MSTemp (Liu et al., arXiv:2310.01448v2, Sec. 3.1) parses paraphrases with NLTK. nltk's tagger needs its
'averaged_perceptron_tagger_eng' data, which cannot be downloaded offline, so ``get_tagger``
gives nltk's tagger when that data is installed and otherwise ``WordNetTagger``: closed-class
word lists (determiners, pronouns, prepositions, auxiliaries, ...) plus WordNet 3.0's lexicon
(index.* for the parts of speech a lemma can take, *.exc and suffix rules for inflections),
with a few context rules (after a determiner or adjective prefer a noun, after "to" or a
modal a base verb, after a form of "be" an adjective, ...).

Accuracy limits of WordNetTagger: a lexicon lookup, not a trained model. It picks the most
common WordNet part of speech unless a context rule applies, so noun/verb ambiguity without a
determiner ("plans change") and "that"/"her"/"'s" are often wrong; capitalised words that are
not sentence-initial, and unknown capitalised sentence-initial words, are proper nouns; unknown
lower-case words fall back on suffix rules (-ly RB, -ing VBG, -ous JJ, ... else NN). 76 of 79
tokens right on the hand-tagged sentences of tests/data/test_pos.py, which were written
alongside the rules (so: optimistic; expect clearly less on real text); nltk's trained tagger
does ~97% on newswire. Good enough for slot finding: a wrong tag only moves a slot, the filter on
sentiment words still guards the label.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence

from lmprobe.data.wordnet import find_wordnet_dir, load_wordnet

# Words and numbers with internal apostrophes/hyphens, clitics ("n't", "'s") as tokens of their
# own (Penn style), any other non-space character as punctuation.
_TOKEN = re.compile(r"[A-Za-z]+(?=n't\b|'(?:s|re|ve|ll|d|m)\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\d+(?:[.,]\d+)*"
                    r"|[^\W_]+(?:['\-][^\W_]+)*|\S", re.IGNORECASE)

CLOSED_CLASS = {
    **dict.fromkeys("a an the this these those every each no some any all both either neither another".split(), "DT"),
    **dict.fromkeys("i you he she it we they me him us them myself yourself himself herself itself "
                    "ourselves themselves one someone something anyone anything everyone everything "
                    "nobody nothing".split(), "PRP"),
    **dict.fromkeys("my your his its our their".split(), "PRP$"),
    **dict.fromkeys("in on at by with from of for about into onto over under after before between "
                    "through during without within against among around behind beyond despite "
                    "near since until upon across along toward towards like than because although "
                    "though while whereas if unless whether as per via".split(), "IN"),
    **dict.fromkeys("and or but nor yet so".split(), "CC"),
    **dict.fromkeys("can could may might must shall should will would".split(), "MD"),
    **dict.fromkeys("who whom".split(), "WP"), "whose": "WP$", "which": "WDT", "what": "WP",
    **dict.fromkeys("when where why how".split(), "WRB"),
    **dict.fromkeys("not never also very too quite rather really just only even still already "
                    "often always sometimes again here there now then today tomorrow yesterday "
                    "however perhaps almost ever".split(), "RB"),
    "n't": "RB", "to": "TO", "that": "IN", "her": "PRP$", "'s": "POS",
    "am": "VBP", "are": "VBP", "is": "VBZ", "was": "VBD", "were": "VBD", "be": "VB", "been": "VBN",
    "being": "VBG", "have": "VBP", "has": "VBZ", "had": "VBD", "do": "VBP", "does": "VBZ",
    "did": "VBD", "'m": "VBP", "'re": "VBP", "'ve": "VBP", "'ll": "MD", "'d": "MD",
    "more": "JJR", "most": "JJS", "less": "JJR", "least": "JJS", "many": "JJ", "much": "JJ",
    "few": "JJ", "several": "JJ",
    **dict.fromkeys("two three four five six seven eight nine ten eleven twelve twenty thirty forty "
                    "fifty hundred thousand million".split(), "CD"),
}
# Common English given names (US census / SSA top lists): proper-noun cues for the tagger and
# MSTemp's name slots (CheckList-style fillers).
FIRST_NAMES = tuple("""
    James Mary John Patricia Robert Jennifer Michael Linda William Elizabeth David Barbara Richard
    Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty Mark
    Sandra Donald Ashley Steven Kimberly Paul Emily Andrew Donna Joshua Michelle Kevin Carol Brian
    Amanda George Melissa Edward Deborah Ronald Stephanie Timothy Rebecca Jason Laura Jeffrey Helen
    Ryan Sharon Jacob Cynthia Gary Kathleen Nicholas Amy Eric Angela Alice Bob Emma Olivia Noah
    Liam Sophia Lucas Chloe Henry Grace
""".split())
_NAMES = frozenset(FIRST_NAMES)
BE_FORMS = frozenset("am are is was were be been being 's 're 'm seem seems seemed look looks looked "
                     "feel feels felt become becomes became remain remains".split())
_PUNCT = {".": ".", "!": ".", "?": ".", ",": ",", ";": ":", ":": ":", "-": ":", "(": "(", ")": ")",
          '"': "''", "'": "''", "`": "``", "$": "$", "#": "#", "%": "NN", "&": "CC"}
_SUFFIX_RULES = (("ly", "RB"), ("ing", "VBG"), ("ed", "VBD"), ("ous", "JJ"), ("ful", "JJ"),
                 ("ive", "JJ"), ("able", "JJ"), ("ible", "JJ"), ("al", "JJ"), ("ic", "JJ"),
                 ("less", "JJ"), ("ness", "NN"), ("ment", "NN"), ("tion", "NN"), ("s", "NNS"))
_WN_TAGS = {"n": "NN", "v": "VB", "a": "JJ", "r": "RB"}

Tagger = Callable[[Sequence[str]], list[str]]


def tokenize(text: str) -> list[tuple[int, int]]:
    """Character spans of the words, clitics and punctuation marks of ``text``."""
    return [m.span() for m in _TOKEN.finditer(text)]


def words(text: str) -> list[str]:
    return [text[a:b] for a, b in tokenize(text)]


@functools.lru_cache(maxsize=2)
def irregular_forms(directory: str) -> dict[str, dict[str, str]]:
    """WordNet's irregular inflections, {n|v|a: {inflected: lemma}} (noun.exc, verb.exc, adj.exc)."""
    out = {}
    for pos, name in (("n", "noun"), ("v", "verb"), ("a", "adj")):
        with open(os.path.join(directory, f"{name}.exc"), encoding="utf-8") as f:
            out[pos] = {parts[0]: parts[1] for parts in (line.split() for line in f) if len(parts) > 1}
    return out


_RULES = {"n": (("ies", "y"), ("ses", "s"), ("xes", "x"), ("ches", "ch"), ("shes", "sh"), ("s", "")),
          "v": (("ies", "y"), ("es", "e"), ("es", ""), ("s", ""), ("ied", "y"), ("ed", "e"), ("ed", ""),
                ("ing", "e"), ("ing", "")),
          "a": (("iest", "y"), ("ier", "y"), ("est", "e"), ("er", "e"), ("est", ""), ("er", ""))}


def lemmatize(word: str, pos: str, directory: str | None = None) -> str | None:
    """The WordNet lemma of an inflected ``word`` of part of speech n, v or a (morphy's rules
    and exception lists), or None when neither the word nor a detached form is a lemma."""
    wn = load_wordnet(directory)
    word = word.lower()
    if pos in wn.index.get(word, {}):
        return word
    irregular = irregular_forms(find_wordnet_dir(directory))[pos].get(word)
    if irregular:
        return irregular
    for suffix, ending in _RULES[pos]:
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            base = word[: -len(suffix)] + ending
            if pos in wn.index.get(base, {}):
                return base
            if pos == "v" and suffix in ("ed", "ing") and len(base) > 2 and base[-1] == base[-2]:
                if pos in wn.index.get(base[:-1], {}):  # stopped -> stop
                    return base[:-1]
    return None


class WordNetTagger:
    """Penn tags from closed-class lists, WordNet's lexicon and context rules (see module doc)."""

    def __init__(self, directory: str | None = None):
        self.directory = directory
        self.wn = load_wordnet(directory)

    def __call__(self, tokens: Sequence[str]) -> list[str]:
        tags: list[str] = []
        for i, token in enumerate(tokens):
            prev = tags[-1] if tags else None
            prev_word = tokens[i - 1].lower() if i else None
            tags.append(self._tag(token, i, prev, prev_word, tokens[i + 1] if i + 1 < len(tokens) else None))
        return tags

    def _tag(self, token, i, prev, prev_word, next_token) -> str:
        lower = token.lower()
        if token in _PUNCT:
            return _PUNCT[token]
        if not re.search(r"[^\W_]", token):
            return "SYM"
        if re.fullmatch(r"\d+(?:[.,]\d+)*", token):
            return "CD"
        if lower in ("her",) and next_token and (next_token[:1].isupper() or not next_token[:1].isalnum()):
            return "PRP"
        if lower == "'s" and prev in ("PRP", "EX", "WP", "DT"):
            return "VBZ"
        if lower == "that" and prev in ("NN", "NNS"):
            return "WDT"
        sentence_start = i == 0 or prev in (".", ":", "``")
        if lower == "like" and prev in ("PRP", "RB", "MD", "TO", "NNS"):
            return "VB" if prev in ("MD", "TO") else "VBP"
        if lower in CLOSED_CLASS and (not token[:1].isupper() or sentence_start or lower == "i"):
            return CLOSED_CLASS[lower]
        if token[:1].isupper() and (not sentence_start or token in _NAMES or not self._known(lower)):
            return "NNP"
        return self._open_class(lower, prev, prev_word, (next_token or "").lower())

    def _known(self, lower: str) -> bool:
        return lower in CLOSED_CLASS or any(lemmatize(lower, p, self.directory) for p in ("n", "v", "a")) \
            or lower in self.wn.index

    def _candidates(self, word: str) -> dict[str, tuple[str, int]]:
        """{n|v|a|r: (Penn tag, sense count of the lemma)} for every reading of ``word``."""
        out = {}
        exact = self.wn.index.get(word, {})
        for pos in "nvar":
            if pos in exact:
                tag = {"n": "NN", "v": "VB", "a": "JJ", "r": "RB"}[pos]
                out[pos] = (tag, len(exact[pos]))
                continue
            if pos == "r":
                continue
            lemma = lemmatize(word, pos, self.directory)
            if lemma:
                out[pos] = (_inflected_tag(word, lemma, pos), len(self.wn.index[lemma].get(pos, ())))
        return out

    def _open_class(self, word: str, prev, prev_word, next_word: str = "") -> str:
        options = self._candidates(word)
        if not options:
            return next((tag for suffix, tag in _SUFFIX_RULES if word.endswith(suffix) and len(word) > len(suffix) + 2),
                        "NN")
        if prev in ("TO", "MD") and "v" in options:
            return "VB"
        if prev_word in BE_FORMS:
            for pos in ("a", "v"):
                if pos in options and (pos == "a" or options[pos][0] in ("VBG", "VBN", "VBD")):
                    tag = options[pos][0]
                    return "VBN" if tag == "VBD" else tag
        if prev in ("DT", "PRP$", "JJ", "JJR", "JJS", "POS", "CD", "IN") and ("n" in options or "a" in options):
            if "a" in options and "n" in options and "n" in self.wn.index.get(next_word, {}):
                return options["a"][0]  # "a red car"
            if "a" in options and (prev in ("DT", "PRP$", "POS", "CD") or "n" not in options):
                return options["a"][0] if options["a"][1] >= options.get("n", ("", 0))[1] or "n" not in options \
                    else options["n"][0]
            if "a" in options and "n" in self.wn.index.get(next_word, {}):
                return options["a"][0]  # "beautiful red car"
            if "n" in options:
                return options["n"][0]
        if prev in ("PRP", "NNP", "NNS", "NN", "WDT", "WP", "RB") and "v" in options:
            tag = options["v"][0]
            return ("VBP" if prev_word in ("i", "you", "we", "they") or prev == "NNS" else "VBZ") \
                if tag == "VB" and prev != "RB" else tag
        if prev in ("VBZ", "VBP", "VBD") and "a" in options and prev_word not in ("has", "have", "had"):
            return options["a"][0]
        if prev in ("VBZ", "VBP", "VBD", "VB", "VBG") and "v" in options and prev_word in ("has", "have", "had"):
            return "VBN"
        best = max(options, key=lambda p: (options[p][1], -"nvar".index(p)))
        return options[best][0]


def _inflected_tag(word: str, lemma: str, pos: str) -> str:
    if pos == "n":
        return "NN" if word == lemma else "NNS"
    if pos == "a":
        return "JJS" if word.endswith("est") else "JJR" if word.endswith("er") else "JJ"
    if word.endswith("ing"):
        return "VBG"
    if word.endswith("s") and not word.endswith("ss"):
        return "VBZ"
    return "VBN" if word.endswith("en") else "VBD"


def nltk_tagger() -> Tagger | None:
    """nltk.pos_tag when nltk and its tagger data are installed, else None."""
    try:
        import nltk

        nltk.pos_tag(["test"])
    except (ImportError, LookupError):
        return None
    return lambda tokens: [tag for _, tag in nltk.pos_tag(list(tokens))]


def get_tagger(name: str = "auto", directory: str | None = None) -> Tagger:
    """'nltk' (needs nltk + its tagger data), 'wordnet' (offline), or 'auto': nltk when available."""
    from lmprobe.errors import LmprobeError

    if name not in ("auto", "nltk", "wordnet"):
        raise LmprobeError(f"unknown tagger '{name}': use auto, nltk or wordnet")
    tagger = nltk_tagger() if name in ("auto", "nltk") else None
    if tagger is None and name == "nltk":
        raise LmprobeError("the nltk tagger needs 'pip install nltk' and its data "
                           "(python -m nltk.downloader averaged_perceptron_tagger_eng); "
                           "or use `tagger=wordnet`")
    return tagger or WordNetTagger(directory)
