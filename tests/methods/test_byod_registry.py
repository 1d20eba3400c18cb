"""BYOD's metric registry: every metric declared once (computation, default example count, cache
settings), per-metric example counts, and negation on topic sentences (on a tiny random Llama)."""

import dataclasses
import os

import pytest

from lmprobe.data.corpus import Corpus
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod
from lmprobe.methods.byod import knowledge
from tests.engine.conftest import tiny_llama_dir  # noqa: F401 - the fixture
from tests.methods.test_byod import PARAGRAPHS, PROFANITY, _scorer

CORPUS = Corpus("tiny", PARAGRAPHS)


@pytest.fixture(scope="module")
def scorer(tiny_llama_dir):  # noqa: F811
    return _scorer(tiny_llama_dir, bos=False)


def test_the_registry_covers_every_metric_with_the_papers_counts():
    assert byod.METRICS == tuple(byod.REGISTRY) == byod.Config().metrics
    assert byod.METRICS == ("negation", "toxicity", "long_range", "word_order", "tokenization", "entropy")
    assert all(m.name == name for name, m in byod.REGISTRY.items())
    # Secs. 4.1, 6.1, 8.1: 1000 examples; Sec. 7.1 (word order): 5000; toxicity, entropy: no count given
    assert {name: m.examples for name, m in byod.REGISTRY.items()} == {
        "negation": 1000, "toxicity": 1000, "long_range": 1000, "word_order": 5000, "tokenization": 1000,
        "entropy": 1000}
    assert {name: byod.Config().limit(name) for name in byod.METRICS} == {
        name: m.examples for name, m in byod.REGISTRY.items()}


def test_every_metric_runs_from_the_registry_with_its_own_cache_entry(scorer, tmp_path):
    config = byod.Config(max_examples=2, generate=False, toxicity_logit="next")
    result = byod.run(scorer, CORPUS, config, model_name="tiny", benign=CORPUS, profanity=PROFANITY,
                      cache_dir=str(tmp_path))
    assert set(result.metrics) == set(byod.METRICS) and not result.errors
    files = sorted(os.listdir(tmp_path))
    assert [f.split("-")[0] for f in files] == sorted(byod.METRICS)
    for name in ("toxicity", "word_order", "negation"):
        assert result.metrics[name].n == 2, name


def test_per_metric_counts_override_max_examples_and_the_defaults(scorer):
    config = byod.Config(metrics=("word_order", "tokenization", "entropy"), max_examples=2,
                         examples=("word_order:4", "entropy:all"))
    assert [config.limit(m) for m in config.metrics] == [4, 2, None]
    result = byod.run(scorer, CORPUS, config, model_name="tiny")
    usable = sum(len(p) for p in PARAGRAPHS)  # every sentence has >= 2 tokens
    assert [result.metrics[m].n for m in config.metrics] == [4, 2, usable]
    assert usable > 4
    # no --max_examples: the registry's default for the unnamed metrics
    config = byod.Config(examples=("negation:3",))
    assert (config.limit("negation"), config.limit("word_order"), config.limit("entropy")) == (3, 5000, 1000)


def test_a_per_metric_count_changes_that_metrics_cache_key_only(scorer, tmp_path):
    base = byod.Config(metrics=("word_order", "entropy"), max_examples=2)
    for config in (base, dataclasses.replace(base, examples=("word_order:3",))):
        byod.run(scorer, CORPUS, config, model_name="tiny", cache_dir=str(tmp_path))
    names = sorted(f.split("-")[0] for f in os.listdir(tmp_path))
    assert names == ["entropy", "word_order", "word_order"]


@pytest.mark.parametrize("entry, match", [("word_order", "METRIC:N"), ("nope:3", "METRIC:N"),
                                          ("negation:0", ">= 1"), ("negation:many", ">= 1")])
def test_bad_examples_entries_fail_before_any_model(entry, match):
    with pytest.raises(LmprobeError, match=match):
        byod.Config(examples=(entry,)).check()


def test_topic_sentences_are_the_first_sentence_of_each_document(scorer, tmp_path):
    config = byod.Config(metrics=("negation",), max_examples=None, topic_sentences=True)
    result = byod.run(scorer, CORPUS, config, model_name="tiny", cache_dir=str(tmp_path))
    firsts = [p[0] for p in PARAGRAPHS]
    negation = result.metrics["negation"]
    texts = sorted(r["text"] for r in negation.records)
    # "Rain fell on the town." (the second document's first sentence) has no is/was/were
    assert texts == sorted(["The cat was on the mat.", "My friend is a painter.", "This one is short."])
    assert set(texts) <= set(firsts) and negation.skipped == {knowledge.NOT_NEGATABLE: 1}
    everything = byod.run(scorer, CORPUS, dataclasses.replace(config, topic_sentences=False), model_name="tiny",
                          cache_dir=str(tmp_path)).metrics["negation"]
    assert everything.n > negation.n and not {r["text"] for r in everything.records} <= set(firsts)
    assert len(os.listdir(tmp_path)) == 2  # the option is in the cache key
