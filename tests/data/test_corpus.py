import json
import os
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmprobe.data import corpus as corpus_module
from lmprobe.data.corpus import (
    Corpus,
    load_corpus,
    read_fortunes,
    split_paragraphs,
    split_sentences,
)
from lmprobe.errors import LmprobeError

FORTUNES = os.path.isdir("/usr/share/games/fortunes")
WORDNET = os.path.isfile("/usr/share/wordnet/data.noun")


@pytest.mark.parametrize("text, expected", [
    ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
    ("Use tools, e.g. Python. It helps.", ["Use tools, e.g. Python.", "It helps."]),
    ("He moved to the U.S. Army base. It was big.", ["He moved to the U.S. Army base.", "It was big."]),
    ("He lives in the U.S. The weather is nice.", ["He lives in the U.S.", "The weather is nice."]),
    ("J. R. R. Tolkien wrote it. Pi is 3.14 or so.", ["J. R. R. Tolkien wrote it.", "Pi is 3.14 or so."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("It ended (finally.) Next came more.", ["It ended (finally.)", "Next came more."]),
    ('"Where?" he asked. Nobody knew!', ['"Where?" he asked.', "Nobody knew!"]),
    ("Wait... what? I think... Maybe.", ["Wait... what?", "I think...", "Maybe."]),
    ("See Fig. 3 and No. 5. Done.", ["See Fig. 3 and No. 5.", "Done."]),
    ("Media.Vision made it. 1990 was a year.", ["Media.Vision made it.", "1990 was a year."]),
    ("Fruit, etc. and more. Smith et al. (2020) agree.", ["Fruit, etc. and more.", "Smith et al. (2020) agree."]),
    ("No terminal punctuation", ["No terminal punctuation"]),
])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


@settings(max_examples=100, deadline=None)
@given(st.text(st.sampled_from(list("aB .!?\"')(\n…3")), max_size=60))
def test_sentences_are_exact_substrings_in_order(text):
    sentences, at = split_sentences(text), 0
    for s in sentences:
        assert s and s == s.strip()
        at = text.index(s, at) + len(s)
    assert "".join("".join(sentences).split()) == "".join(text.split())  # nothing lost


def test_split_paragraphs():
    assert split_paragraphs("a b\nc\n\n  \n\nd\n \t\ne\n") == ["a b\nc", "d", "e"]


def test_corpus_properties():
    c = Corpus("x", [["A b.", "C d."], ["E."]])
    assert c.sentences == ["A b.", "C d.", "E."]
    assert c.documents == ["A b. C d.", "E."]
    assert c.long_paragraphs(2) == [["A b.", "C d."]]


TEXT = "First one here.\nIt wraps lines. Second.\n\nAnother paragraph is here."


def test_txt_and_directory(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT)
    c = load_corpus(str(tmp_path / "a.txt"))
    assert c.paragraphs == [["First one here.", "It wraps lines.", "Second."], ["Another paragraph is here."]]
    assert load_corpus(str(tmp_path / "a.txt"), max_documents=1).paragraphs == c.paragraphs[:1]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("Deep file.")
    (tmp_path / "ignored.md").write_text("Not read.")
    assert load_corpus(str(tmp_path)).sentences == [*c.sentences, "Deep file."]  # sorted: a.txt, sub/b.txt
    assert load_corpus(str(tmp_path), max_documents=1).sentences == c.sentences


def test_jsonl_csv_tsv(tmp_path):
    rows = [{"text": "Row one is here. Two.", "id": 1}, {"text": "Row three.", "id": 2}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "d.csv").write_text('id,body\n1,"Row one is here. Two."\n2,"Row, three."\n')
    (tmp_path / "d.tsv").write_text("body\tid\nRow one is here. Two.\t1\n")
    assert load_corpus(str(tmp_path / "d.jsonl")).paragraphs == [["Row one is here.", "Two."], ["Row three."]]
    assert load_corpus(str(tmp_path / "d.csv"), column="body").sentences[-1] == "Row, three."
    assert load_corpus(str(tmp_path / "d.tsv"), column="body").sentences == ["Row one is here.", "Two."]
    assert len(load_corpus(str(tmp_path / "d.jsonl"), max_documents=1).paragraphs) == 1
    with pytest.raises(LmprobeError, match=r"d\.jsonl.*no 'body' field.*`column`"):
        load_corpus(str(tmp_path / "d.jsonl"), column="body")
    with pytest.raises(LmprobeError, match=r"d\.csv.*no 'text' column.*\['id', 'body'\]"):
        load_corpus(str(tmp_path / "d.csv"))


def test_bad_inputs(tmp_path):
    with pytest.raises(LmprobeError, match="nowhere.txt' is not a file"):
        load_corpus(str(tmp_path / "nowhere.txt"))
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(LmprobeError, match="has no text"):
        load_corpus(str(tmp_path / "empty.txt"))
    (tmp_path / "blob.txt").write_bytes(b"ok\x00\x01\x02")
    with pytest.raises(LmprobeError, match="blob.txt' is not text"):
        load_corpus(str(tmp_path / "blob.txt"))
    (tmp_path / "latin1.txt").write_bytes("café au lait".encode("latin-1"))
    with pytest.raises(LmprobeError, match="latin1.txt' is not text"):
        load_corpus(str(tmp_path / "latin1.txt"))
    (tmp_path / "nodir").mkdir()
    with pytest.raises(LmprobeError, match="no .txt files"):
        load_corpus(str(tmp_path / "nodir"))
    with pytest.raises(LmprobeError, match="max_documents"):
        load_corpus("fortunes", max_documents=0)


def _fake_tfds(calls):
    module = types.ModuleType("tensorflow_datasets")
    module.load = lambda name, split: calls.append((name, split)) or [
        {"text": b"A wiki article. It is long.", "title": b"T"}, {"text": b"Second article.", "title": b"U"}]
    module.as_numpy = lambda ds: iter(ds)
    return module


class _FakeDataset:
    column_names = ["text", "label"]

    def __getitem__(self, column):
        return {"text": ["Great movie. Loved it.", "Bad one."], "label": [1, 0]}[column]


def test_tfds_and_hf_with_fake_modules(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", _fake_tfds(calls))
    c = load_corpus("tfds:wikipedia/20230601.en", max_documents=1)
    assert c.sentences == ["A wiki article.", "It is long."] and calls == [("wikipedia/20230601.en", "train[:1]")]
    assert load_corpus("tfds:wiki:test").name == "tfds:wiki:test" and calls[-1] == ("wiki", "test")
    with pytest.raises(LmprobeError, match="no 'body' feature"):
        load_corpus("tfds:wiki", column="body")

    datasets = types.ModuleType("datasets")
    datasets.load_dataset = lambda name, config, split: calls.append((name, config, split)) or _FakeDataset()
    monkeypatch.setitem(sys.modules, "datasets", datasets)
    assert load_corpus("hf:imdb").sentences == ["Great movie.", "Loved it.", "Bad one."]
    assert calls[-1] == ("imdb", None, "train")
    load_corpus("hf:imdb:test")
    assert calls[-1] == ("imdb", None, "test")
    load_corpus("hf:wikitext:wikitext-103-raw-v1", split="validation", max_documents=5)
    assert calls[-1] == ("wikitext", "wikitext-103-raw-v1", "validation[:5]")
    load_corpus("hf:org/set:cfg:dev")
    assert calls[-1] == ("org/set", "cfg", "dev")
    with pytest.raises(LmprobeError, match=r"no 'body' column \(it has \['text', 'label'\]\)"):
        load_corpus("hf:imdb", column="body")


def test_missing_packages_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(LmprobeError, match="pip install datasets"):
        load_corpus("hf:imdb")
    with pytest.raises(LmprobeError, match="pip install tensorflow-datasets"):
        load_corpus("tfds:wikipedia")


def test_fortunes_reader_on_fixture(tmp_path):
    (tmp_path / "lit").write_text(
        "A banker is a fellow who lends you his umbrella when the sun is shining\n"
        "and wants it back the minute it begins to rain.\n\t\t-- Mark Twain\n%\n"
        "Always do right.  This will gratify some people.\n\t\t-- Mark Twain, \"Pudd'nhead\n"
        "\t\t   Wilson's Calendar\"\n%\n"
        "  /\\_/\\  ( o.o )  > ^ <  ||| ### |||\n%\n"
        "_\bBold text is here.\n%\n")
    (tmp_path / "lit.dat").write_bytes(b"\x00\x02binary")
    (tmp_path / "off").mkdir()
    (tmp_path / "off" / "rude").write_text("Offensive text.\n%\n")
    assert list(read_fortunes(str(tmp_path))) == [
        "A banker is a fellow who lends you his umbrella when the sun is shining and wants it back "
        "the minute it begins to rain.",
        "Always do right. This will gratify some people.",
        "Bold text is here."]


@pytest.mark.skipif(not FORTUNES, reason="Debian fortunes-min / fortunes not installed")
def test_default_is_fortunes_with_enough_data():
    c = load_corpus()
    assert c.name == "fortunes" and len(c.paragraphs) > 10_000
    assert len(c.sentences) > 20_000 and len(c.long_paragraphs(6)) > 500
    assert not any(s.startswith("--") for s in c.sentences)
    assert any(s.startswith("A banker is a fellow who lends you his umbrella") for s in c.sentences)
    assert load_corpus("fortunes", max_documents=10).paragraphs == c.paragraphs[:10]


@pytest.mark.skipif(not WORDNET, reason="Debian wordnet-base not installed")
def test_wordnet_examples():
    c = load_corpus("wordnet-examples")
    assert len(c.paragraphs) > 40_000
    assert ["the team is a unit"] in c.paragraphs  # from the gloss of whole.n.02
    assert len(set(c.documents)) == len(c.documents)


def test_default_spec_names(monkeypatch):
    seen = []
    monkeypatch.setattr(corpus_module, "read_fortunes", lambda: seen.append(1) or iter(["It is so."]))
    assert load_corpus(None).name == load_corpus("default").name == "fortunes" and len(seen) == 2
