"""The training text: documents from the offline English sources or a user's corpus, deduplicated and
split (seeded, by document) into a training part and a held-out part that is never trained on.

Sources: ``fortunes`` (Debian fortune quotations), ``wordnet`` (each WordNet 3.0 synset as
"lemma: gloss; "example""), ``rt-reviews`` / ``rt-polarity`` (the train splits of Pang & Lee's
Rotten Tomatoes sets: their test splits are lmprobe's real-task data, so never trained on), or
anything ``lmprobe.data.corpus.load_corpus`` reads (a .txt file or directory, .jsonl / .csv,
wordnet-examples, tfds:, hf:), one document per paragraph.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re

import numpy as np

from lmprobe.data import corpus as corpus_lib
from lmprobe.data.labelled import load_labelled
from lmprobe.data.wordnet import FILES, data_lines, find_wordnet_dir
from lmprobe.errors import LmprobeError


@dataclasses.dataclass(frozen=True)
class Split:
    train: list[str]
    heldout: list[str]
    counts: dict  # source -> documents read


def read_wordnet_glosses(directory: str | None = None):
    """Each synset as one document: its first lemma, then its gloss (definitions and quoted examples)."""
    root = find_wordnet_dir(directory)
    for name in FILES.values():
        for line in data_lines(os.path.join(root, f"data.{name}")):
            head, _, gloss = line.partition(" | ")
            fields = head.split(" ", 5)
            lemma = re.sub(r"\((?:a|p|ip)\)$", "", fields[4]).replace("_", " ")
            gloss = gloss.strip()
            if gloss:
                yield f"{lemma}: {gloss}"


def documents(source: str, max_documents: int | None = None) -> list[str]:
    """The documents of one source (module docstring), at most ``max_documents``."""
    if source == "fortunes":
        texts = corpus_lib.read_fortunes()
    elif source == "wordnet":
        texts = read_wordnet_glosses()
    elif source in ("rt-reviews", "rt-polarity"):
        texts = iter(load_labelled(source, split="train").texts)
    else:
        texts = iter(corpus_lib.load_corpus(source, max_documents=max_documents).documents)
    out = [t for t in itertools.islice(texts, max_documents) if t.strip()]
    if not out:
        raise LmprobeError(f"corpus '{source}' gave no text: give a corpus with at least one non-empty document")
    return out


def load_split(sources, *, heldout: int, seed: int, max_documents: int | None = None) -> Split:
    """All sources' documents, exact duplicates dropped (the first kept), and ``heldout`` of them drawn
    with ``seed`` as the held-out part; the rest, in source order, is the training part."""
    counts, seen = {}, {}
    for source in sources:
        docs = documents(source, max_documents)
        counts[source] = len(docs)
        for doc in docs:
            seen.setdefault(doc, None)
    unique = list(seen)
    if len(unique) < 2 * heldout:
        raise LmprobeError(f"the corpus ({', '.join(sources)}) has {len(unique)} distinct documents, too few to "
                           f"hold out {heldout}: give more text (`corpus`, `max_documents`) or a smaller "
                           "`heldout_documents`")
    chosen = np.zeros(len(unique), bool)
    chosen[np.random.default_rng(seed).permutation(len(unique))[:heldout]] = True
    return Split([d for d, c in zip(unique, chosen) if not c], [d for d, c in zip(unique, chosen) if c], counts)
