"""Text corpora for the self-supervised metrics (BYOD, Jain et al., arXiv:2306.13651): "bring your own data".

A Corpus is a list of paragraphs, each a list of sentences. load_corpus reads a user's text
(.txt, a directory of .txt, .jsonl / .csv / .tsv with a text column, tfds:..., hf:...) or one of
two offline English corpora:

* "fortunes" (Debian fortunes-min + fortunes): ~15k quotations, one paragraph each (the
  lines of a quotation re-flowed, attributions dropped). Real prose with multi-sentence
  passages: the only offline source of paragraphs with >= 6 sentences (long-range).
* "wordnet-examples": the ~48k example sentences quoted in WordNet 3.0's glosses, one
  paragraph each: short, mostly lower-case sentence fragments ("the team is a unit").

The default is "fortunes" (DEFAULT_CORPUS): BYOD needs both single sentences (negation needs
is/was/were, word order > 5 words, toxicity and tokenization take any sentence) and paragraphs
of >= 6 sentences for long-range; fortunes has both, WordNet examples have no paragraphs, are
rarely full sentences and start in lower case. See the corpus tests for the counts.

Paragraphs are split on blank lines and re-flowed (runs of whitespace -> one space) before
sentence splitting, so no sentence holds a line break. max_documents caps how many source
documents are read: paragraphs of a .txt file, files of a directory, rows, quotations, examples.
Corpus.documents gives each paragraph back as one text.
"""

from __future__ import annotations

import csv
import glob
import importlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from lmprobe.data.wordnet import FILES, data_lines, find_wordnet_dir
from lmprobe.errors import LmprobeError

DEFAULT_CORPUS = "fortunes"
FORTUNES_DIRS = ("/usr/share/games/fortunes",)  # Debian fortunes-min, fortunes
FORTUNES_ENV = "LMPROBE_FORTUNES_DIR"
FORTUNES_SKIP = {"off", "ascii-art"}  # offensive subdirectory; pictures, not prose
SPLIT_NAMES = ("train", "test", "validation", "valid", "dev")

# ---------------------------------------------------------------------------------------------
# Sentence splitting (rule based: no nltk punkt data offline)

# Never end a sentence: titles and reference abbreviations ("Mr. Smith", "e.g. this", "Fig. 3").
ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof st mt ft rev hon gen col lt sgt capt cmdr adm gov sen rep pres messrs
    mme mlle vs v e.g i.e cf viz approx fig figs eq eqs ch sec vol vols no nos pp p ed eds op
    dept univ est ca c jan feb mar apr jun jul aug sep sept oct nov dec
""".split()
)
# End a sentence only before a common sentence-initial word: "in the U.S. The ...", "Plan B. It
# ...", but "J. R. R. Tolkien", "U.S. Army", "Smith et al. (2020)".
AMBIGUOUS = frozenset("etc inc ltd co corp jr sr al bros".split())
STARTERS = frozenset(
    """
    the a an this that these those it its he she they we i you his her their our my there
    here in on at but and or so however after before when while if as for to some many most
    one all each every such what who why how then thus also yet since although though because
""".split()
)
_BOUNDARY = re.compile(r"(?:[.!?]+|…)[\"'”’»)\]]*(?=\s)")
_OPENERS = "\"'“‘«(["


def split_sentences(text: str) -> list[str]:
    """Sentences of a text, each an exact (whitespace-stripped) substring of it.

    A sentence ends at . ! ? … (runs, and closing quotes/brackets after them, included) that is
    followed by whitespace and then a capital letter or digit (after any opening quote or
    bracket); not after ABBREVIATIONS, and after AMBIGUOUS abbreviations, dotted acronyms
    ("U.S.") and single-letter initials only when the next word is in STARTERS. Decimals
    ("3.14") and dotted names ("Media.Vision") have no whitespace after the dot: never a break.
    """
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        if _ends_sentence(text, start, match):
            sentences.append(text[start : match.end()].strip())
            start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def _ends_sentence(text: str, start: int, match: re.Match) -> bool:
    rest = text[match.end() :].lstrip().lstrip(_OPENERS)
    if not rest or not (rest[0].isupper() or rest[0].isdigit()):
        return False
    if not match.group().startswith(".") or match.group().startswith(".."):
        return True  # ! ? and ellipses
    before = text[start : match.start()].split()
    word = before[-1].lstrip(_OPENERS).lower() if before else ""
    if word in ABBREVIATIONS:
        return False
    if word in AMBIGUOUS or re.fullmatch(r"[^\W\d_](?:\.[^\W\d_])*", word):
        next_word = re.match(r"[^\W_]+", rest)
        return bool(next_word) and next_word.group().lower() in STARTERS
    return True


def split_paragraphs(text: str) -> list[str]:
    """Paragraphs: the text's blank-line separated blocks, stripped, empty ones dropped."""
    return [p.strip() for p in re.split(r"\n[ \t\r\f\v]*\n", text) if p.strip()]


def reflow(text: str) -> str:
    """Runs of whitespace (line breaks included) -> one space."""
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# The corpus


@dataclass
class Corpus:
    name: str
    paragraphs: list[list[str]]  # each paragraph a list of sentences

    @property
    def sentences(self) -> list[str]:
        """All sentences, in order."""
        return [s for p in self.paragraphs for s in p]

    @property
    def documents(self) -> list[str]:
        """Each paragraph as one text (its sentences joined with single spaces)."""
        return [" ".join(p) for p in self.paragraphs]

    def long_paragraphs(self, min_sentences: int = 6) -> list[list[str]]:
        """Paragraphs with at least min_sentences sentences (long-range sensitivity, Sec. 6)."""
        return [p for p in self.paragraphs if len(p) >= min_sentences]

    @classmethod
    def from_texts(cls, name: str, texts: Iterable[str], *, paragraphs: bool = True) -> Corpus:
        """Paragraphs of the texts (split on blank lines unless paragraphs=False), re-flowed and
        split into sentences; LmprobeError when nothing is left."""
        out = []
        for text in texts:
            for block in split_paragraphs(text) if paragraphs else [text]:
                sentences = split_sentences(reflow(block))
                if sentences:
                    out.append(sentences)
        if not out:
            raise LmprobeError(f"corpus '{name}' has no text: give a corpus with at least one non-empty sentence")
        return cls(name, out)


def load_corpus(
    spec: str | None = None, *, column: str = "text", split: str = "train", max_documents: int | None = None
) -> Corpus:
    """The corpus named by spec (module docstring): None / "default" ("fortunes"), "fortunes",
    "wordnet-examples", a .txt file, a directory (*.txt, recursively, sorted), a .jsonl / .csv /
    .tsv file with a `column` of text, "tfds:NAME[:SPLIT]" or "hf:NAME[:CONFIG][:SPLIT]"."""
    if max_documents is not None and max_documents < 1:
        raise LmprobeError(f"max_documents={max_documents} must be at least 1 (or None for all)")
    spec = DEFAULT_CORPUS if spec in (None, "", "default") else spec
    if spec == "fortunes":
        return Corpus.from_texts(spec, _take(read_fortunes(), max_documents), paragraphs=False)
    if spec == "wordnet-examples":
        return Corpus.from_texts(spec, _take(read_wordnet_examples(), max_documents), paragraphs=False)
    if spec.startswith("tfds:"):
        return Corpus.from_texts(spec, _tfds_texts(spec, column, split, max_documents))
    if spec.startswith("hf:"):
        return Corpus.from_texts(spec, _hf_texts(spec, column, split, max_documents))
    path = os.path.expanduser(spec)
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "**", "*.txt"), recursive=True))
        if not files:
            raise LmprobeError(
                f"corpus directory '{spec}' holds no .txt files: put UTF-8 .txt files in it (searched recursively)"
            )
        return Corpus.from_texts(spec, (read_text(f) for f in _take(files, max_documents)))
    if not os.path.isfile(path):
        raise LmprobeError(
            f"corpus '{spec}' is not a file, a directory or a known corpus name: give a .txt, "
            ".jsonl, .csv or .tsv file, a directory of .txt files, 'fortunes', "
            "'wordnet-examples', 'tfds:NAME[:SPLIT]' or 'hf:NAME[:CONFIG][:SPLIT]'"
        )
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".jsonl":
        texts = _jsonl_texts(path, column)
    elif suffix in (".csv", ".tsv"):
        texts = _table_texts(path, column, "\t" if suffix == ".tsv" else ",")
    else:
        texts = split_paragraphs(read_text(path))  # a plain text file: its paragraphs are documents
    return Corpus.from_texts(spec, _take(texts, max_documents))


def _take(items: Iterable, n: int | None) -> Iterator:
    for i, item in enumerate(items):
        if n is not None and i >= n:
            return
        yield item


def read_text(path: str) -> str:
    """A file's UTF-8 text; LmprobeError naming it when it is binary or not UTF-8."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        if b"\0" in data:
            raise UnicodeDecodeError("utf-8", data, 0, 1, "NUL byte")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise LmprobeError(
            f"corpus file '{path}' is not text (binary or not UTF-8): convert it "
            "to UTF-8 text (iconv -t utf-8) or leave it out"
        ) from None


def _jsonl_texts(path: str, column: str) -> Iterator[str]:
    for number, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise LmprobeError(
                f"corpus file '{path}' line {number} is not JSON ({e.msg}): give one JSON object per line"
            ) from None
        if not isinstance(row, dict) or column not in row:
            keys = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise LmprobeError(
                f"corpus file '{path}' line {number} has no '{column}' field "
                f"(it has {keys}): name the text field with `column`"
            )
        if isinstance(row[column], str):
            yield row[column]


def _table_texts(path: str, column: str, delimiter: str) -> Iterator[str]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader = csv.DictReader(read_text(path).splitlines(), delimiter=delimiter)
    if column not in (reader.fieldnames or []):
        raise LmprobeError(
            f"corpus file '{path}' has no '{column}' column (its header: "
            f"{reader.fieldnames}): name the text column with `column`"
        )
    for row in reader:
        yield row[column] or ""


def optional_import(module: str, pip_name: str, spec: str):
    """``module``, or an LmprobeError naming ``pip install pip_name`` for ``spec``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LmprobeError(
            f"'{spec}' needs the '{pip_name}' package: pip install {pip_name}, or give a local file"
        ) from None


def _sliced(split: str, max_documents: int | None) -> str:
    """Split with the tfds / datasets slicing syntax: 'train[:1000]'."""
    return split if max_documents is None or "[" in split else f"{split}[:{max_documents}]"


def _tfds_texts(spec: str, column: str, split: str, max_documents: int | None) -> Iterator[str]:
    """tfds:NAME[:SPLIT], e.g. tfds:wikipedia/20230601.en:train (a text feature per example)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[1]:
        raise LmprobeError(f"corpus '{spec}': write tfds:NAME or tfds:NAME:SPLIT")
    tfds = optional_import("tensorflow_datasets", "tensorflow-datasets", spec)
    split = parts[2] if len(parts) == 3 else split
    try:
        dataset = tfds.load(parts[1], split=_sliced(split, max_documents))
    except Exception as e:
        raise LmprobeError(
            f"corpus '{spec}': tfds cannot load '{parts[1]}' split '{split}' "
            f"({type(e).__name__}: {e}): check the name and that it is prepared"
        ) from None
    for i, example in enumerate(tfds.as_numpy(dataset)):
        if column not in example:
            raise LmprobeError(
                f"corpus '{spec}' has no '{column}' feature (it has "
                f"{sorted(example)}): name the text feature with `column`"
            )
        value = example[column]
        yield value.decode("utf-8") if isinstance(value, bytes) else str(value)
        if max_documents is not None and i + 1 >= max_documents:
            return


def parse_hf_spec(spec: str, split: str) -> tuple[str, str | None, str]:
    """hf:NAME[:CONFIG][:SPLIT] -> (name, config, split); with one extra part it is a SPLIT when
    named like one (train, test, validation, valid, dev, or sliced 'train[:100]'), else a CONFIG."""
    parts = spec.split(":")
    if len(parts) not in (2, 3, 4) or not parts[1]:
        raise LmprobeError(f"'{spec}': write hf:NAME, hf:NAME:CONFIG or hf:NAME:CONFIG:SPLIT")
    name, config = parts[1], None
    if len(parts) == 4:
        config, split = parts[2] or None, parts[3]
    elif len(parts) == 3:
        if parts[2].split("[")[0] in SPLIT_NAMES:
            split = parts[2]
        else:
            config = parts[2]
    return name, config, split


def _hf_texts(spec: str, column: str, split: str, max_documents: int | None) -> Iterator[str]:
    """Texts of an HF dataset (``parse_hf_spec``)."""
    name, config, split = parse_hf_spec(spec, split)
    datasets = optional_import("datasets", "datasets", spec)
    try:
        dataset = datasets.load_dataset(name, config, split=_sliced(split, max_documents))
    except Exception as e:
        raise LmprobeError(
            f"corpus '{spec}': datasets cannot load '{name}' (config {config}, "
            f"split '{split}'): {type(e).__name__}: {e}"
        ) from None
    if column not in dataset.column_names:
        raise LmprobeError(
            f"corpus '{spec}' has no '{column}' column (it has "
            f"{dataset.column_names}): name the text column with `column`"
        )
    for i, value in enumerate(dataset[column]):
        if isinstance(value, str):
            yield value
        if max_documents is not None and i + 1 >= max_documents:
            return


# ---------------------------------------------------------------------------------------------
# Offline corpora

_OVERSTRIKE = re.compile(r".\x08")  # "_\bA": underlined or bold characters in fortune files
_ATTRIBUTION = re.compile(r"\s*(--|―|—)\s*\S")


def find_fortunes_dir(directory: str | None = None) -> str:
    """The fortune database directory: the argument, $LMPROBE_FORTUNES_DIR or Debian's."""
    candidates = [directory] if directory else [os.environ.get(FORTUNES_ENV), *FORTUNES_DIRS]
    for d in filter(None, candidates):
        if os.path.isdir(d):
            return d
    raise LmprobeError(
        f"no fortune files in {directory or ', '.join(FORTUNES_DIRS)}: install "
        f"them with 'apt-get install fortunes-min fortunes' or set {FORTUNES_ENV}"
    )


def read_fortunes(directory: str | None = None) -> Iterator[str]:
    """Each quotation of the fortune files ('%' lines separate them), attribution lines ("--
    Mark Twain" and their indented continuation) removed and lines re-flowed. Files sorted;
    .dat / .u8 indexes, the offensive 'off' directory and the ascii-art file skipped, as are
    quotations that are mostly not letters (pictures, code)."""
    root = find_fortunes_dir(directory)
    paths = []
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in FORTUNES_SKIP)
        paths += [os.path.join(base, f) for f in files if not f.endswith((".dat", ".u8")) and f not in FORTUNES_SKIP]
    for path in sorted(paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = _OVERSTRIKE.sub("", f.read())
        for quotation in re.split(r"^%\s*$", text, flags=re.MULTILINE):
            prose = reflow(_drop_attributions(quotation))
            letters = sum(c.isalpha() or c.isspace() for c in prose)
            if prose and letters >= 0.85 * len(prose):
                yield prose


def _drop_attributions(quotation: str) -> str:
    kept, indent = [], None  # indent: column of the attribution being skipped
    for line in quotation.expandtabs(8).splitlines():
        depth = len(line) - len(line.lstrip())
        if indent is not None and line.strip() and depth >= indent:
            continue  # continuation of an attribution
        indent = None
        if _ATTRIBUTION.match(line) and not line.strip().startswith("---"):
            indent = depth
            continue
        kept.append(line)
    return "\n".join(kept)


def read_wordnet_examples(directory: str | None = None) -> Iterator[str]:
    """The example sentences quoted in WordNet glosses (data.noun ... data.adv, after '|'), each
    once, in file order; double quotes inside an example are not used by WordNet."""
    root = find_wordnet_dir(directory)
    seen = set()
    for name in FILES.values():
        for line in data_lines(os.path.join(root, f"data.{name}")):
            _, _, gloss = line.partition(" | ")
            for example in re.findall(r'"([^"]+)"', gloss):
                example = example.strip()
                if example and example not in seen:
                    seen.add(example)
                    yield example
