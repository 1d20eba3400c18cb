"""Labelled data: files, label mapping, errors, the offline silver default."""

import json

import numpy as np
import pytest

from lmprobe.data.labelled import load_labelled
from lmprobe.errors import LmprobeError


def test_tsv_with_string_labels(tmp_path):
    path = tmp_path / "d.tsv"
    path.write_text("sentence\tlabel\ngood film\tpos\nbad film\tneg\nfine\tpos\n")
    data = load_labelled(str(path), text_column="sentence")
    assert data.texts == ["good film", "bad film", "fine"]
    assert data.label_names == ("neg", "pos") and data.labels.tolist() == [1, 0, 1]


def test_jsonl_with_int_labels_and_split(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": f"t{i}", "label": i % 3}) + "\n" for i in range(10)))
    data = load_labelled(str(path))
    assert data.label_names == ("0", "1", "2") and len(data) == 10
    train, test = data.split(0.2, seed=0)
    assert len(test) == 2 and not set(train.texts) & set(test.texts)


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,y\na,1\n")
    with pytest.raises(LmprobeError, match="no 'label' column"):
        load_labelled(str(path))
    jl = tmp_path / "d.jsonl"
    jl.write_text(json.dumps({"sentence": "a", "label": 1}) + "\n")
    with pytest.raises(LmprobeError, match="no 'text' field"):
        load_labelled(str(jl))
    with pytest.raises(LmprobeError, match="not a file"):
        load_labelled(str(tmp_path / "missing.csv"))


def test_offline_default_is_balanced_silver():
    data = load_labelled(max_examples=200)
    assert "SILVER" in data.source and data.label_names == ("negative", "positive")
    assert len(data) == 200 and 0.3 < np.mean(data.labels) < 0.7
