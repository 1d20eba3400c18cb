"""Labelled text-classification data (SCoPE's fine-tuning and test sets; MSTemp reuses it).

    load_labelled("sst2.tsv", text_column="sentence", label_column="label")
    load_labelled("hf:glue:sst2:validation", text_column="sentence")
    load_labelled("tfds:glue/sst2", split="validation", text_column="sentence")
    load_labelled()  # the offline default, silver labels (below)

Files: .csv / .tsv (header row) and .jsonl (one object per line). Labels may be integers or
strings: integer labels keep their values as class indices (names "0", "1", ...; a tfds
ClassLabel or HF ClassLabel feature gives the real names), string labels become indices in
sorted order of their names.

The offline default ("offline-sentiment"): there is no labelled sentiment data offline (no
SST-2). Its sentences are the Debian fortune quotations (lmprobe.data.corpus, sentences of 5 to
30 words) labelled positive / negative by the SentiWordNet sum-of-scores rule
(lexicons.lexicon_rule_predictions); sentences the rule cannot decide are dropped and the
classes balanced. These are SILVER labels: a lexicon rule's opinion, not human judgements, so
accuracies on them measure agreement with the rule.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from dataclasses import dataclass

import numpy as np

from lmprobe.data import corpus as corpus_lib
from lmprobe.errors import LmprobeError

OFFLINE_DEFAULT = "offline-sentiment"
OFFLINE_LABELS = ("negative", "positive")


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


def load_labelled(spec: str | None = None, *, text_column: str = "text", label_column: str = "label",
                  split: str = "train", max_examples: int | None = None, seed: int = 0) -> LabelledData:
    """Labelled texts from a file, tfds:NAME[:SPLIT], hf:NAME[:CONFIG][:SPLIT] or the offline default."""
    if max_examples is not None and max_examples < 1:
        raise LmprobeError(f"max_examples={max_examples} must be at least 1 (or None for all)")
    spec = OFFLINE_DEFAULT if spec in (None, "", "default") else spec
    if spec == OFFLINE_DEFAULT:
        data = offline_sentiment(seed=seed)
    elif spec.startswith("tfds:"):
        data = _tfds(spec, text_column, label_column, split)
    elif spec.startswith("hf:"):
        data = _hf(spec, text_column, label_column, split)
    else:
        data = _file(spec, text_column, label_column)
    if not len(data):
        raise LmprobeError(f"dataset '{spec}' has no labelled texts: give at least one row with "
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
                           f"'{OFFLINE_DEFAULT}'")
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
                               "name the text and label features with --text_column / --label_column")
    names = getattr(features[label_column], "names", None)
    texts, labels = [], []
    for example in tfds.as_numpy(dataset):
        value = example[text_column]
        texts.append(value.decode("utf-8") if isinstance(value, bytes) else str(value))
        label = example[label_column]
        if isinstance(label, bytes):
            label = label.decode("utf-8")
        labels.append(label.item() if hasattr(label, "item") else label)
    return _from_rows(texts, labels, spec, tuple(names) if names else None)


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
                "name them with --text_column / --label_column"
            )
    names = getattr(dataset.features[label_column], "names", None)
    pairs = [
        (t, y)
        for t, y in zip(dataset[text_column], dataset[label_column])
        if isinstance(t, str) and y is not None and y != -1
    ]  # GLUE test splits: label -1
    return _from_rows([t for t, _ in pairs], [y for _, y in pairs], spec, tuple(names) if names else None)


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
