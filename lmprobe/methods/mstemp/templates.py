"""Meta semantic templates (Sec. 3.1): parse a meta semantic sentence into a template whose
slots can be refilled, e.g. "Today brings me immense joy" -> "[x] brings [x] immense joy".

Parsing = tokenize, part-of-speech tag (nltk's tagger when its data is installed, else the
offline WordNet tagger of lmprobe.data.pos), then chunk noun phrases with ``GRAMMAR`` (nltk's
RegexpParser when nltk is installed, else ``regexp_chunks``, the same rules in plain ``re``).
Slots, inside noun-phrase chunks:
  * name: a run of proper nouns that starts with a given name (pos.FIRST_NAMES; places and
    brands stay), or a personal pronoun that a name can replace (he, she, him,
    her, me, us, them);
  * noun: the head (last common noun) of the chunk, in its lexicographer file ("noun.artifact");
  * adjective: an adjective (positive degree) before the head, in its file ("adj.all").
Never a slot: sentiment-bearing words (``protected``), stop words, nouns of affective
categories (lexicon.UNSAFE_LEXFILES), words WordNet does not know.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from lmprobe.data import pos as pos_tagging
from lmprobe.data.stopwords import PRINTED as STOP_WORDS
from lmprobe.methods.mstemp import lexicon

GRAMMAR = r"""
NP: {<DT|PDT|PRP\$|CD>*<JJ|JJR|JJS|VBN|VBG>*<NN|NNS|NNP|NNPS>+}
    {<PRP>}
"""
SLOT_KINDS = ("name", "noun", "adjective")
NAME_PRONOUNS = frozenset("he she him her me us them".split())
_STOP = frozenset(STOP_WORDS)
_NAMES = frozenset(pos_tagging.FIRST_NAMES)


@dataclass(frozen=True)
class Slot:
    start: int  # character span in Template.text
    end: int
    kind: str  # name | noun | adjective
    category: str  # "name", or the WordNet lexicographer file ("noun.artifact", "adj.all")
    plural: bool = False


@dataclass(frozen=True)
class Template:
    text: str  # the meta semantic sentence
    slots: tuple[Slot, ...] = field(default_factory=tuple)

    def render(self, marker: str = "[x]") -> str:
        """The template with every slot shown as ``marker``: "[x] brings [x] immense joy"."""
        return self.fill([marker] * len(self.slots))

    def fill(self, fillers: Sequence[str]) -> str:
        """The text with slot i replaced by fillers[i]."""
        pieces, last = [], 0
        for slot, word in zip(self.slots, fillers):
            pieces += [self.text[last:slot.start], word]
            last = slot.end
        return "".join(pieces) + self.text[last:]


def _tag_pattern(pattern: str) -> str:
    """nltk's tag-pattern syntax ("<DT>?<JJ.*>*<NN>") as a regex over "<TAG>" strings."""
    pattern = re.sub(r"\s+", "", pattern)
    out = re.sub(r"<([^<>]+)>", lambda m: "(?:<(?:" + m.group(1).replace(".", r"[^<>]") + ")>)", pattern)
    return out


def _rules(grammar: str) -> list[tuple[str, str]]:
    """(label, tag pattern) per chunk rule ("LABEL: {pattern}", continuation lines keep the label)."""
    rules, label = [], None
    for line in grammar.strip().splitlines():
        m = re.match(r"\s*(?:(\w+):)?\s*\{(.*)\}\s*$", line)
        if m:
            label = m.group(1) or label
            rules.append((label, m.group(2)))
    return rules


def regexp_chunks(tags: Sequence[str], grammar: str = GRAMMAR) -> list[tuple[str, list[int]]]:
    """(label, token indices) of each chunk, rules applied in order on still-unchunked tokens,
    leftmost-longest, as nltk's RegexpParser does for chunk rules."""
    chunked = [None] * len(tags)
    for label, pattern in _rules(grammar):
        regex = re.compile(_tag_pattern(pattern))
        text = "".join(f"<{t}>" if chunked[i] is None else "<#>" for i, t in enumerate(tags))
        starts = [m.start() for m in re.finditer("<", text)]
        for m in regex.finditer(text):
            if m.end() > m.start():
                first, last = starts.index(m.start()), starts.index(m.end()) if m.end() < len(text) else len(tags)
                for i in range(first, last):
                    chunked[i] = (label, first)
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(chunked):
        if c is not None:
            groups.setdefault(c, []).append(i)
    return sorted(((label, idx) for (label, _), idx in groups.items()), key=lambda c: c[1][0])


def nltk_chunks(tags: Sequence[str], grammar: str = GRAMMAR) -> list[tuple[str, list[int]]] | None:
    """The same chunks from nltk.RegexpParser (needs no nltk data), or None without nltk."""
    try:
        import nltk
    except ImportError:
        return None
    tree = nltk.RegexpParser(grammar).parse([(i, t) for i, t in enumerate(tags)])
    return [(sub.label(), [i for i, _ in sub.leaves()]) for sub in tree if isinstance(sub, nltk.Tree)]


def chunk(tags: Sequence[str], grammar: str = GRAMMAR, use_nltk: bool = True) -> list[tuple[str, list[int]]]:
    found = nltk_chunks(tags, grammar) if use_nltk else None
    return found if found is not None else regexp_chunks(tags, grammar)


class TemplateParser:
    """Sentences -> Templates. ``protected``: lower-case words never made slots (sentiment)."""

    def __init__(self, tagger: str = "auto", kinds: Sequence[str] = SLOT_KINDS,
                 protected: frozenset[str] | None = None, use_nltk_chunker: bool = True):
        unknown = set(kinds) - set(SLOT_KINDS)
        if unknown:
            from lmprobe.errors import LmprobeError
            raise LmprobeError(f"unknown slot kinds {sorted(unknown)}: use some of {', '.join(SLOT_KINDS)}")
        self.tag = pos_tagging.get_tagger(tagger)
        self.kinds = tuple(kinds)
        self.protected = lexicon.sentiment_words() if protected is None else protected
        self.use_nltk_chunker = use_nltk_chunker

    def __call__(self, text: str) -> Template:
        spans = pos_tagging.tokenize(text)
        tokens = [text[a:b] for a, b in spans]
        tags = self.tag(tokens) if tokens else []
        slots = []
        for _, indices in chunk(tags, use_nltk=self.use_nltk_chunker):
            slots += self._slots(indices, tokens, tags, spans)
        return Template(text, tuple(sorted(slots, key=lambda s: s.start)))

    def _safe(self, word: str) -> bool:
        lower = word.lower()
        return lower not in self.protected and lower not in _STOP and word.isalpha()

    def _slots(self, indices, tokens, tags, spans) -> list[Slot]:
        out = []
        names = [i for i in indices if tags[i] in ("NNP", "NNPS") and tokens[i][:1].isupper() and tokens[i].isalpha()]
        if "name" in self.kinds:
            if names and names == list(range(names[0], names[-1] + 1)) and tokens[names[0]] in _NAMES:
                out.append(Slot(spans[names[0]][0], spans[names[-1]][1], "name", "name"))
            for i in indices:
                if tags[i] == "PRP" and tokens[i].lower() in NAME_PRONOUNS:
                    out.append(Slot(*spans[i], "name", "name"))
        commons = [i for i in indices if tags[i] in ("NN", "NNS")]
        if "noun" in self.kinds and commons and self._safe(tokens[commons[-1]]):
            i = commons[-1]
            lemma = pos_tagging.lemmatize(tokens[i], "n") if tags[i] == "NNS" else tokens[i].lower()
            category = lemma and lexicon.lexfile(lemma, "n")
            if category and category not in lexicon.UNSAFE_LEXFILES and lemma not in self.protected:
                out.append(Slot(*spans[i], "noun", category, plural=tags[i] == "NNS"))
        if "adjective" in self.kinds:
            for i in indices:
                if tags[i] == "JJ" and self._safe(tokens[i]):
                    category = lexicon.lexfile(tokens[i].lower(), "a")
                    if category in ("adj.all", "adj.pert"):
                        out.append(Slot(*spans[i], "adjective", category))
        return out
