"""A small direct reader of the WordNet 3.0 database files (data.* and index.*), no nltk needed.

Synsets are named as nltk names them, ``lemma.pos.NN``: the synset's first lemma (lowercased),
its type (n, v, a, s for adjective satellites, r) and NN = the synset's 1-based position in that
lemma's offset list in index.<pos> (satellites are listed in index.adj). SentiWordNet's pickled
scores (lexicons.py) are keyed by these names.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from lmprobe.errors import LmprobeError

DEFAULT_DIRS = ("/usr/share/wordnet",)  # Debian/Ubuntu package wordnet-base
ENV_VAR = "LMPROBE_WORDNET_DIR"
FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_MARKER = re.compile(r"\((?:a|p|ip)\)$")  # adjective syntactic markers: galore(ip)


@dataclass(frozen=True)
class Synset:
    name: str  # nltk-style 'movie.n.01'
    pos: str  # n, v, a, s, r
    offset: int  # byte offset in data.<pos>
    lemmas: tuple[str, ...]  # as written in data.<pos> (case kept), markers removed


@dataclass(frozen=True, eq=False)
class WordNet:
    directory: str
    synsets: dict[str, Synset]  # name -> synset
    index: dict[str, dict[str, tuple[int, ...]]]  # lemma -> {n|v|a|r: offsets in sense order}

    def synsets_of(self, lemma: str, pos: str | None = None) -> tuple[Synset, ...]:
        """The synsets of a lemma ('moving picture' or 'moving_picture'), in sense order; pos
        one of n, v, a (adjectives and satellites), r, or None for all."""
        by_pos = self.index.get(lemma.lower().replace(" ", "_"), {})
        wanted = FILES if pos is None else ("a" if pos == "s" else pos,)  # satellites: index.adj
        return tuple(self._by_offset[p, off] for p in wanted for off in by_pos.get(p, ()))

    @functools.cached_property
    def _by_offset(self) -> dict[tuple[str, int], Synset]:
        return {("a" if s.pos == "s" else s.pos, s.offset): s for s in self.synsets.values()}


def find_wordnet_dir(directory: str | None = None) -> str:
    """The WordNet database directory: the argument, $LMPROBE_WORDNET_DIR, or /usr/share/wordnet."""
    candidates = [directory] if directory else [os.environ.get(ENV_VAR), *DEFAULT_DIRS]
    for d in filter(None, candidates):
        if all(os.path.isfile(os.path.join(d, f"{kind}.{name}"))
               for name in FILES.values() for kind in ("data", "index")):
            return d
    where = directory or f"${ENV_VAR} or {', '.join(DEFAULT_DIRS)}"
    raise LmprobeError(
        f"no WordNet 3.0 database (data.noun ... index.adv) in {where}: install it with "
        f"'apt-get install wordnet-base' or point {ENV_VAR} at a WordNet 'dict' directory"
    )


def data_lines(path: str):
    """The lines of a WordNet file, its license header left out."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if not line.startswith("  "):  # license header lines start with two spaces
                yield line


def _read_index(path: str) -> dict[str, tuple[int, ...]]:
    """lemma -> synset offsets, from 'lemma pos synset_cnt p_cnt [ptr...] sense_cnt tagsense_cnt offsets'."""
    out = {}
    for line in data_lines(path):
        f = line.split()
        n_synsets, n_ptr = int(f[2]), int(f[3])
        out[f[0]] = tuple(int(o) for o in f[6 + n_ptr:6 + n_ptr + n_synsets])
    return out


def _read_data(path: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """(offset, synset type, lemmas), from 'offset lex_filenum ss_type w_cnt(hex) word lex_id ...'."""
    out = []
    for line in data_lines(path):
        f = line.split(" ", 4 + 2 * 255)
        n_words = int(f[3], 16)
        out.append((int(f[0]), f[2], tuple(_MARKER.sub("", f[4 + 2 * i]) for i in range(n_words))))
    return out


@functools.lru_cache(maxsize=4)
def load_wordnet(directory: str | None = None) -> WordNet:
    """Read the WordNet database (about 1 s; cached per directory)."""
    directory = find_wordnet_dir(directory)
    index: dict[str, dict[str, tuple[int, ...]]] = {}
    synsets: dict[str, Synset] = {}
    for pos, name in FILES.items():
        pos_index = _read_index(os.path.join(directory, f"index.{name}"))
        for lemma, offsets in pos_index.items():
            index.setdefault(lemma, {})[pos] = offsets
        for offset, ss_type, lemmas in _read_data(os.path.join(directory, f"data.{name}")):
            head = lemmas[0].lower()
            try:
                sense = pos_index[head].index(offset) + 1
            except (KeyError, ValueError):
                raise LmprobeError(
                    f"WordNet files in {directory} disagree: synset {offset} of data.{name} is not "
                    f"listed under '{head}' in index.{name}; reinstall a WordNet 3.0 database "
                    "('apt-get install --reinstall wordnet-base')"
                ) from None
            key = f"{head}.{ss_type}.{sense:02d}"
            synsets[key] = Synset(key, ss_type, offset, lemmas)
    return WordNet(directory, synsets, index)
