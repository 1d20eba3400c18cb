"""Lexicons -> word lists (SynTextBench Sec 2.2 / A.3), loaders and their errors, the A.4 rule,
the restricted SentiWn.p unpickler, the A.6 stop-word list, the WordNet reader."""

import os
import pickle
import sys
import types

import numpy as np
import pytest

from lmprobe.data import lexicons
from lmprobe.data.lexicons import (
    Lexicon,
    LexiconError,
    lexicon_rule_predictions,
    load_lexicon,
    read_score_pickle,
    sentiwordnet_from_pickle,
    word_lists,
)
from lmprobe.data.stopwords import PRINTED, STOP_WORDS, remove_stopwords
from lmprobe.data.wordnet import load_wordnet
from lmprobe.errors import LmprobeError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TABLE5 = os.path.join(FIXTURES, "sentiwordnet_table5.txt")


@pytest.fixture(scope="module")
def swn():
    return sentiwordnet_from_pickle()


# ------------------------------------------------------------------ WordNet reader


def test_wordnet_names_follow_nltk_convention():
    wn = load_wordnet()
    assert len(wn.synsets) == 117659
    assert wn.synsets["good.a.01"].lemmas == ("good",)
    assert wn.synsets["movie.n.01"].lemmas[:5] == ("movie", "film", "picture", "moving_picture",
                                                  "moving-picture_show")
    assert "flick" in wn.synsets["movie.n.01"].lemmas
    # satellites are numbered within index.adj: good's 2nd adjective sense is full.s.06
    assert [s.name for s in wn.synsets_of("good", "a")][:4] == ["good.a.01", "full.s.06",
                                                                "good.a.03", "estimable.s.02"]
    assert wn.synsets_of("Moving picture")[0].name == "movie.n.01"


def test_wordnet_missing_directory_names_the_install(tmp_path):
    with pytest.raises(LmprobeError, match=r"apt-get install wordnet-base"):
        load_wordnet(str(tmp_path))


# ------------------------------------------------------------------ SentiWordNet offline


def test_sentiwordnet_offline_sizes(swn):
    """Regression numbers of our data (SentiWn.p + WordNet 3.0), not the paper's."""
    assert len(swn.words) == 206978
    per_sense = word_lists(swn, senses=True)
    assert tuple(map(len, per_sense)) == (23155, 26294, 155163)
    assert tuple(map(len, word_lists(swn))) == (19327, 21708, 117703)
    # keeping the A.6 stop words is what brings these close to the paper's counts
    assert sum(len(remove_stopwords(words)) for words in per_sense) == 23155 + 26294 + 155163 - 1077
    # the paper's SentiWordNet_3.0.0.txt counts (per synset term) agree within 1%
    for ours, paper in zip(map(len, per_sense), (23147, 26440, 154993)):
        assert abs(ours - paper) / paper < 0.01


def test_sentiwordnet_known_words(swn):
    lists = word_lists(swn)
    assert {"good", "excellent", "able"} <= set(lists.positive)
    assert {"bad", "terrible", "unable"} <= set(lists.negative)
    assert {"table", "movie", "acroscopic"} <= set(lists.neutral)
    assert "good" in lists.neutral  # a neutral sense (good.n.04, commodity) keeps it there too
    assert "table" not in lists.positive and "bad" not in lists.positive
    assert "health_care" in lists.positive  # multi-word lemmas kept with underscores (A.7)
    assert "anne_sexton" in lists.positive  # lowercased as in A.7
    for words in lists:
        assert list(words) == sorted(set(words))


def test_load_lexicon_sentiwordnet_falls_back_to_offline(monkeypatch, swn):
    monkeypatch.delenv(lexicons.SENTIWORDNET_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "nltk", None)  # no nltk data path either
    lex = load_lexicon("SentiWordNet")
    assert lex is swn and "SentiWn.p" in lex.source


# ------------------------------------------------------------------ text release, nltk, TSV


def test_text_release_reproduces_paper_table5():
    """A.3: Table 5 gives {able, living, accurate, concrete, active} / {unfaithful, unable} /
    {acroscopic, straight}; unquestioning#2 (0.5 / 0.5) is in no list."""
    lists = word_lists(load_lexicon(TABLE5))
    assert lists.positive == ("able", "accurate", "active", "concrete", "living")
    assert lists.negative == ("unable", "unfaithful")
    assert lists.neutral == ("acroscopic", "straight")


def test_text_release_terms_senses_and_case(tmp_path):
    path = tmp_path / "swn.txt"
    path.write_text("n\t06613686\t0\t0\tmovie#1 Moving_picture#1\tgloss\n"
                    "a\t01123148\t0.75\t0\tgood#1\tgloss\n"
                    "n\t04849241\t0\t0\tgood#3 goodness#2\tgloss\n")
    lex = load_lexicon(str(path))
    assert lex.name == "sentiwordnet" and lex.words == ("movie", "moving_picture", "good", "good", "goodness")
    with pytest.raises(LexiconError, match="empty negative"):
        word_lists(lex)
    assert lex.word_scores["good"] == pytest.approx(0.375)  # mean over its two senses


def test_env_var_points_at_text_release(monkeypatch):
    monkeypatch.setenv(lexicons.SENTIWORDNET_ENV, TABLE5)
    assert load_lexicon("sentiwordnet").source == TABLE5
    monkeypatch.setenv(lexicons.SENTIWORDNET_ENV, TABLE5 + ".missing")
    with pytest.raises(LexiconError, match=r"LMPROBE_SENTIWORDNET"):
        load_lexicon("sentiwordnet")


def test_nltk_sentiwordnet_corpus_is_used_when_present(monkeypatch):
    monkeypatch.delenv(lexicons.SENTIWORDNET_ENV, raising=False)

    class Pointer:
        def open(self):
            return open(TABLE5, "rb")

        def __str__(self):
            return "nltk:" + lexicons.NLTK_SENTIWORDNET

    def find(resource):
        assert resource == lexicons.NLTK_SENTIWORDNET
        return Pointer()

    fake = types.ModuleType("nltk")
    fake.data = types.SimpleNamespace(find=find)
    monkeypatch.setitem(sys.modules, "nltk", fake)
    lex = load_lexicon("sentiwordnet")
    assert lex.source.startswith("nltk:") and word_lists(lex).negative == ("unable", "unfaithful")


def test_tsv_round_trip(tmp_path):
    scores = {"Great": 2.0, "awful": -1.5, "chair": 0.0, "meh": -0.25, "ok": 0.5, "Cashing in": 1}
    path = tmp_path / "mine.tsv"
    path.write_text("# word\tscore\n\n" + "".join(f"{w}\t{s}\textra\n" for w, s in scores.items()))
    lex = load_lexicon(str(path))
    assert lex.name == "mine.tsv" and lex.source == str(path)
    assert word_lists(lex) == (("cashing_in", "great", "ok"), ("awful", "meh"), ("chair",))
    assert lex.word_scores == {"great": 2.0, "awful": -1.5, "chair": 0.0, "meh": -0.25, "ok": 0.5,
                               "cashing_in": 1.0}


@pytest.mark.parametrize("name, neutral", [("vader", 0), ("afinn", 2), ("textblob", 474)])
def test_package_lexicons_load(name, neutral):
    lex = load_lexicon(name)
    lists = word_lists(lex)
    assert len(lists.positive) > 500 and len(lists.negative) > 500
    assert len(lists.neutral) == neutral  # the Sec 2.2 rule: exactly-zero scores only
    assert lex.pos.max() <= 1.0 and lex.neg.max() <= 1.0  # scaled to [-1, 1]
    assert {"good", "bad"} <= set(lists.positive) | set(lists.negative)
    assert all(w.split() == [w] for words in lists for w in words)  # one token each


# ------------------------------------------------------------------ errors


def test_unknown_name_lists_known_ones():
    known = r"sentiwordnet, vader, afinn, textblob"
    with pytest.raises(LexiconError, match=r"unknown lexicon 'sentiwordnt': use one of " + known):
        load_lexicon("sentiwordnt")


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(LexiconError, match=r"'.*nope\.tsv' .*does not exist"):
        load_lexicon(str(tmp_path / "nope.tsv"))
    with pytest.raises(LexiconError, match="not a file"):
        load_lexicon(str(tmp_path) + "/")
    bad = tmp_path / "latin1.tsv"
    bad.write_bytes(b"caf\xe9\t1\n")
    with pytest.raises(LexiconError, match=r"cannot read lexicon file .*latin1\.tsv.*UTF-8"):
        load_lexicon(str(bad))


def test_malformed_lines_name_file_and_line(tmp_path):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("good\t1\nbad -1\n")
    with pytest.raises(LexiconError, match=r"bad\.tsv:2: expected 'word<TAB>score'"):
        load_lexicon(str(tsv))
    tsv.write_text("good\t1\nbad\tvery\n")
    with pytest.raises(LexiconError, match=r"bad\.tsv:2:"):
        load_lexicon(str(tsv))
    swn = tmp_path / "swn.txt"
    swn.write_text("a\t00001740\t0.125\t0\table#1\tgloss\na\t00002098\tx\t0.75\tunable#1\tgloss\n")
    with pytest.raises(LexiconError, match=r"swn\.txt:2: not a SentiWordNet line"):
        load_lexicon(str(swn))


def test_package_not_installed_says_the_pip_command(monkeypatch):
    monkeypatch.setattr(lexicons.importlib.util, "find_spec", lambda name: None)
    for name, command in [("vader", "pip install vadersentiment==3.3.2"), ("afinn", "pip install afinn==0.1"),
                          ("textblob", "pip install textblob==0.20.1")]:
        with pytest.raises(LexiconError, match=command):
            load_lexicon(name)
    with pytest.raises(LexiconError, match=r"pip install --no-deps sentiment-classifier==0\.6"):
        sentiwordnet_from_pickle.__wrapped__()


def test_empty_positive_or_negative_list_is_an_error(tmp_path):
    path = tmp_path / "onesided.tsv"
    path.write_text("awful\t-2\nchair\t0\n")
    with pytest.raises(LexiconError, match=r"lexicon 'onesided\.tsv' .* empty positive word list"):
        word_lists(load_lexicon(str(path)))
    path.write_text("# nothing\n")
    with pytest.raises(LexiconError, match="has no entries"):
        load_lexicon(str(path))


# ------------------------------------------------------------------ restricted unpickler


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_unpickler_refuses_other_globals(tmp_path, protocol):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.p"
    path.write_bytes(pickle.dumps({"good.a.01": _Evil(marker)}, protocol=protocol))
    with pytest.raises(LexiconError, match=r"evil\.p' references (posix|os|nt)\.system.*refusing"):
        read_score_pickle(str(path))
    assert not marker.exists()


def test_unpickler_reads_python2_style_scores(tmp_path):
    path = tmp_path / "scores.p"
    # the layout of SentiWn.p: protocol 0, __builtin__ names, defaultdicts of floats
    path.write_bytes(b"ccollections\ndefaultdict\np1\n(c__builtin__\nlist\np2\ntRp3\nS'good.a.01'\np4\n"
                     b"g1\n(c__builtin__\nfloat\np5\ntRp6\nS'neg'\nF0\nsS'pos'\nF0.875\nss.")
    assert read_score_pickle(str(path)) == {"good.a.01": (0.875, 0.0)}
    path.write_bytes(b"garbage")
    with pytest.raises(LexiconError, match="cannot read the SentiWordNet score pickle"):
        read_score_pickle(str(path))


# ------------------------------------------------------------------ A.4 rule


def test_rule_predictions_by_hand():
    lex = Lexicon.from_rows("toy", "test", [("good", 0.75, 0.0), ("good", 0.0, 0.25), ("bad", 0.0, 0.5),
                                            ("chair", 0.0, 0.0), ("meh", 0.25, 0.25)])
    # good: mean(0.75, -0.25) = 0.25; bad: -0.5
    preds = lexicon_rule_predictions(lex, [["good", "chair"], ["good", "bad"], ["Good", "Good", "bad"],
                                           [], ["meh", "unknown"], "bad chair"])
    assert preds.tolist() == [1, -1, 0, 0, 0, -1]
    assert preds.dtype == np.int8


def test_rule_separates_pure_sentences(swn):
    lists = word_lists(swn)
    rng = np.random.default_rng(0)
    pos = [list(rng.choice(lists.positive, 8)) for _ in range(200)]
    neg = [list(rng.choice(lists.negative, 8)) for _ in range(200)]
    preds = lexicon_rule_predictions(swn, pos + neg)
    assert (preds[:200] == 1).mean() > 0.95 and (preds[200:] == -1).mean() > 0.95


# ------------------------------------------------------------------ stop words


def test_stopwords_as_printed():
    assert len(PRINTED) == 284 and len(STOP_WORDS) == 271
    assert PRINTED[:3] == ("must", "meanwhile", "among") and PRINTED[-1] == "using"
    assert "not" not in STOP_WORDS and "the" in STOP_WORDS
    assert remove_stopwords(["The", "good", "movie", "is", "here"]) == ["good", "movie"]
