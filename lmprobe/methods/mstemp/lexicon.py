"""The word knowledge MSTemp's slots and fillers need: WordNet lexicographer files, how often a
lemma is sense-tagged in SemCor (a frequency proxy), given names, and the sentiment-bearing
words that must neither become a slot nor fill one (so that a filled sample keeps its seed's
sentiment label, Sec. 3.2).

lmprobe.data.wordnet keeps neither the lexicographer file number of a synset nor index.*'s
tagsense_cnt, so the two small readers below take them from the same files.
"""

from __future__ import annotations

import functools
import os

from lmprobe.data import lexicons
from lmprobe.data.wordnet import FILES, data_lines, find_wordnet_dir, load_wordnet

# WordNet 3.0's lexicographer files by number (the standard 'lexnames' list: Debian's
# wordnet-base does not ship the file).
LEXNAMES = tuple("""
    adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body
    noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location
    noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process
    noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body
    verb.change verb.cognition verb.communication verb.competition verb.consumption verb.contact
    verb.creation verb.emotion verb.motion verb.perception verb.possession verb.social
    verb.stative verb.weather adj.ppl
""".split())
# Categories whose words carry evaluation or affect (joy, motive, abstractions): never slots.
UNSAFE_LEXFILES = frozenset({"noun.feeling", "noun.motive", "noun.Tops", "noun.attribute", "noun.state"})
DEFAULT_SENTIMENT_LEXICONS = ("vader", "sentiwordnet")
DEFAULT_MIN_SENTIMENT = 0.125  # |mean PosScore - NegScore| (SentiWordNet) or |valence| (VADER) at or above


@functools.lru_cache(maxsize=2)
def _lexfiles(directory: str) -> dict[tuple[str, int], str]:
    """(n|v|a|r, offset) -> lexicographer file name, from data.* ('offset lex_filenum ss_type ...')."""
    out = {}
    for pos, name in FILES.items():
        for line in data_lines(os.path.join(directory, f"data.{name}")):
            offset, lexnum, _ = line.split(" ", 3)[:3]
            out[pos, int(offset)] = LEXNAMES[int(lexnum)]
    return out


@functools.lru_cache(maxsize=2)
def _tagged_counts(directory: str) -> dict[tuple[str, str], int]:
    """(lemma, n|v|a|r) -> tagsense_cnt: senses of the lemma tagged in SemCor (index.*)."""
    out = {}
    for pos, name in FILES.items():
        for line in data_lines(os.path.join(directory, f"index.{name}")):
            f = line.split()
            out[f[0], pos] = int(f[5 + int(f[3])])
    return out


def lexfile(lemma: str, pos: str, directory: str | None = None) -> str | None:
    """Lexicographer file of the lemma's most frequent sense (the first in index order)."""
    offsets = load_wordnet(directory).index.get(lemma.lower(), {}).get(pos)
    return _lexfiles(find_wordnet_dir(directory))[pos, offsets[0]] if offsets else None


DEFAULT_MIN_TAGGED = 3  # common words only: ~1.1k nouns, ~1k adjectives


def lemmas_by_lexfile(
    pos: str, directory: str | None = None, min_tagged: int = DEFAULT_MIN_TAGGED
) -> dict[str, list[str]]:
    """{lexfile: sorted single-word lower-case lemmas of part of speech ``pos`` whose most
    frequent sense lies in it}, keeping lemmas tagged at least ``min_tagged`` times in SemCor."""
    directory = find_wordnet_dir(directory)
    out: dict[str, list[str]] = {}
    for (lemma, p), count in sorted(_tagged_counts(directory).items()):
        if p == pos and count >= min_tagged and lemma.isalpha() and lemma.islower() and len(lemma) > 2:
            out.setdefault(lexfile(lemma, pos, directory), []).append(lemma)
    return out


@functools.lru_cache(maxsize=4)
def sentiment_words(
    names: tuple[str, ...] = DEFAULT_SENTIMENT_LEXICONS, min_score: float = DEFAULT_MIN_SENTIMENT
) -> frozenset[str]:
    """Lower-case words whose mean score in any of the lexicons has |score| >= min_score."""
    return frozenset(
        w for name in names for w, s in lexicons.load_lexicon(name).word_scores.items() if abs(s) >= min_score
    )
