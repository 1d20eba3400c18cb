"""Synonym-Invariance's transformation (SCoPE, Rawal & Toneva, arXiv:2311.04166v1 Sec. 3.2; Ren et al. 2019, PWWS):
replace a word by a WordNet synonym ("movie" -> "film", "movies" -> "films").

Candidates are the lemma names of the synsets of the word's lemmas, parts of speech in WordNet's
order (noun, verb, adjective, adverb), synsets in sense order, lemmas in synset order;
multi-word lemmas ("motion_picture"), the word itself and its lemma are left out, and so are
lemmas that are not one word of the text splitter (a.d.).

Lemmas: for each part of speech the word is looked up as it is when WordNet lists it, else
through its lemma (``lmprobe.data.pos.lemmatize``: morphy's suffix rules and WordNet's exception
lists), as nltk's ``wordnet.synsets`` does in the reference: "movies" -> movie (noun), "laughs"
-> laugh (noun and verb), "moving" -> moving (adjective) and move (verb). Adverbs are looked up
as they are (WordNet has no adverb inflections). As in ``lemmatize``, a word WordNet lists as a
lemma of that part of speech is not detached further: "feelings" is the noun feelings only
(nltk's morphy would add feeling).

Re-inflection: a synonym found through a lemma is put in the word's form: plural nouns and
third-person -s ("films", "chuckles"), -ed ("adored"), -ing ("travelling" -> "going").
WordNet's exception lists give irregular and doubled spellings ("children", "stopped",
"lying"). Where the form is uncertain the candidate is skipped, never guessed:
- a synonym with an irregular past ("make": "made"; "show": past "showed" but "shown"; "run":
  "ran" but participle "run") for an -ed word, which may be a past or a participle;
- a synonym with two listed irregular forms of the kind wanted ("get": "got", "gotten");
- a verb whose past is its lemma ("hurt", "cut", "upset"; SAME_PAST, and verbs with a listed
  doubled -ing but no -ed) for an -ed word;
- a one-syllable consonant-vowel-consonant verb WordNet lists no doubled form for ("cut",
  "put") for -ed / -ing; verbs ending in "c" for -ed / -ing, in "ie" for -ing;
- a synonym ending in a single "s" ("series", "news", "focus": plural / -s form unclear),
  or in a vowel + "z";
- a capitalised synonym (a name) or one ending in a non-letter;
- inflected adjectives ("funnier", "funniest") get no synonyms at all.
Case follows the original word (all capitals, or a capital first letter).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from lmprobe.data.pos import irregular_forms, lemmatize
from lmprobe.data.wordnet import find_wordnet_dir, load_wordnet
from lmprobe.perturb.constraints import Constraints, Words, is_single_word

POS_ORDER = ("n", "v", "a", "r")
# Irregular verbs whose past and participle are the lemma itself and that WordNet's exception
# list cannot show (morphy needs no exception for them): their -ed form is not lemma + "ed".
SAME_PAST = frozenset("""
    bet bid broadcast burst cast cost cut fit forecast hit hurt let miscast offset outbid put quit
    read recast reset rid set shed shut slit split spread sublet thrust typeset undercut upset wed wet
""".split())
_CVC = re.compile(r"(?:qu|[^aeiou])*[aeiou][^aeiouwxy]")  # one syllable ending consonant-vowel-consonant


def match_case(candidate: str, original: str) -> str:
    if len(original) > 1 and original.isupper():
        return candidate.upper()
    if original[:1].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


def _kind(form: str, pos: str) -> str:
    """'s' (plural noun, third-person verb), 'ed' (past or participle) or 'ing'."""
    if pos == "n":
        return "s"
    if form.endswith("ing"):
        return "ing"
    return "s" if form.endswith("s") and form != "was" else "ed"


@functools.lru_cache(maxsize=4)
def _irregular(directory: str) -> dict[str, dict[str, dict[str, tuple[str, ...]]]]:
    """{n|v: {lemma: {kind: inflected forms}}}: WordNet's noun.exc / verb.exc, reversed."""
    out: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {}
    for pos in ("n", "v"):
        table: dict[str, dict[str, tuple[str, ...]]] = {}
        for form, lemma in sorted(irregular_forms(directory)[pos].items()):
            kinds = table.setdefault(lemma, {})
            kinds[_kind(form, pos)] = kinds.get(_kind(form, pos), ()) + (form,)
        out[pos] = table
    return out


def word_form(word: str, lemma: str, pos: str) -> str | None:
    """How ``word`` inflects ``lemma``: '' (not at all), 's', 'ed' or 'ing'; None when it is
    an inflection this module does not re-inflect (adjective comparatives)."""
    if word == lemma:
        return ""
    return _kind(word, pos) if pos in ("n", "v") else None


def inflect(lemma: str, pos: str, form: str, wordnet_dir: str | None = None) -> str | None:
    """``lemma`` (noun or verb) in the form ('' / 's' / 'ed' / 'ing'), or None where the form
    is uncertain (module docstring)."""
    if not form:
        return lemma
    if pos not in ("n", "v") or not lemma[-1:].isalpha() or lemma != lemma.lower():
        return None
    listed = _irregular(find_wordnet_dir(wordnet_dir))[pos].get(lemma, {})
    forms = listed.get(form, ())
    if form == "ed":
        regular = (lemma + "d", lemma + "ed", lemma[:-1] + "ied", lemma + lemma[-1] + "ed", lemma + "ked")
        if forms:  # "tried", "stopped", "picnicked": regular; "made", "ran", "shown": past or participle?
            return forms[0] if len(forms) == 1 and forms[0] in regular else None
        if lemma in SAME_PAST or listed.get("ing", ("",))[0] == lemma + lemma[-1] + "ing":
            return None  # "hurt", "upset" (doubled -ing, no -ed listed): the past is the lemma
    if forms:
        return forms[0] if len(forms) == 1 else None
    if (lemma.endswith("s") and not lemma.endswith("ss")) or re.search(r"[aeiou]z$", lemma):
        return None
    consonant_y = re.search(r"[^aeiou]y$", lemma) is not None
    if form == "s":
        if lemma.endswith(("s", "x", "z", "ch", "sh")) or (pos == "v" and lemma.endswith("o")):
            return lemma + "es"
        return lemma[:-1] + "ies" if consonant_y else lemma + "s"
    if lemma.endswith("c") or _CVC.fullmatch(lemma):
        return None
    if form == "ed":
        if lemma.endswith("e"):
            return lemma + "d"
        return lemma[:-1] + "ied" if consonant_y else lemma + "ed"
    if lemma.endswith("ie"):
        return None
    if lemma.endswith("e") and len(lemma) > 2 and not lemma.endswith(("ee", "ye", "oe")):
        return lemma[:-1] + "ing"
    return lemma + "ing"


def _readings(word: str, directory: str | None) -> list[tuple[str, str, str]]:
    """(part of speech, lemma, form) of each WordNet reading of the (lower-case) word."""
    wordnet = load_wordnet(directory)
    out = []
    for pos in POS_ORDER:
        if pos == "r":
            lemma = word if "r" in wordnet.index.get(word, {}) else None
        else:
            lemma = lemmatize(word, pos, directory)
        form = None if lemma is None else word_form(word, lemma, pos)
        if form is not None:
            out.append((pos, lemma, form))
    return out


@functools.lru_cache(maxsize=65536)
def _lemmas(word: str, directory: str | None) -> tuple[str, ...]:
    wordnet = load_wordnet(directory)
    seen, out = {word}, []
    for pos, lemma, form in _readings(word, directory):
        for synset in wordnet.synsets_of(lemma, pos):
            for name in synset.lemmas:
                key = name.lower()
                if "_" in name or key in (word, lemma) or not is_single_word(name):
                    continue
                candidate = name if name[:1].isupper() and not word[:1].isupper() else key
                candidate = inflect(candidate, pos, form, directory)
                if candidate is None or candidate.lower() in seen or not is_single_word(candidate):
                    continue
                seen.add(candidate.lower())
                out.append(candidate)
    return tuple(out)


def synonyms(word: str, wordnet_dir: str | None = None) -> list[str]:
    """PWWS candidates for the word, in its form and case (module docstring)."""
    return [match_case(s, word) for s in _lemmas(word.lower(), wordnet_dir)]


def synonym_swap(text: str, rng: np.random.Generator, constraints: Constraints = Constraints()) -> str | None:
    """The text with one random eligible word replaced by a random synonym; None when no word
    has one."""
    words = Words.of(text)
    options = [(i, s) for i in constraints.eligible(words) for s in synonyms(words.words[i])]
    if not options:
        return None
    i, s = options[int(rng.integers(len(options)))]
    return words.replace({i: s})
