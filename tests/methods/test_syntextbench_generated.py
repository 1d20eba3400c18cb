"""SynTextBench's A.2 ablation: synthetic sets written by a (tiny random) LM under the vocabulary
constraint V~ U STOP; caching; the error for a word list the generator cannot write."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from lmprobe.cli import syntextbench as front_end
from lmprobe.data import sentence_stats
from lmprobe.data.stopwords import STOP_WORDS
from lmprobe.engine import Scorer
from lmprobe.errors import LmprobeError
from lmprobe.methods import syntextbench
from lmprobe.methods.syntextbench import generated
from tests.methods.test_syntextbench import GaussianScorer
from tests.models.parity import save_random

POSITIVE = ("good", "great", "happy", "lovely", "kind", "nice", "brilliant", "fine")
NEGATIVE = ("bad", "awful", "sad", "cruel", "nasty", "poor", "horrid", "ugly")
NEUTRAL = ("table", "chair", "river", "stone", "paper", "window", "road", "cloud")
OUTSIDE = ("zebra", "quartz")  # in the tokenizer, in no list
STOP = ("the", "and", "is", "was", "very", "i", "there", "it", "they", "she", "he", "you", "of", "a")


@pytest.fixture(scope="module")
def generator_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("generator")
    tokens = ["<pad>", "<s>", "</s>", *generated.START_TOKENS, *STOP, *POSITIVE, *NEGATIVE, *NEUTRAL, *OUTSIDE,
              ".", ",", "!", "?"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    save_random(LlamaForCausalLM, LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64), path)
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def generator(generator_dir):
    return Scorer.load(str(generator_dir), batch_size=8)


LISTS = SimpleNamespace(positive=POSITIVE + ("multi_word",), negative=NEGATIVE, neutral=NEUTRAL + ("unknownword",))
LEVELS = (0.0, 0.5, 1.0)


@pytest.fixture(scope="module")
def levels(generator):
    return generated.generated_levels(generator, LISTS, levels=LEVELS, n=40, seed=0, max_tokens=12,
                                      generator_name="tiny")


def test_vocabulary_is_the_one_token_words_and_the_stop_words(generator):
    vocab = generated.generator_vocab(generator, LISTS, levels=LEVELS, name="tiny")
    assert set(vocab.positive) == set(POSITIVE) and set(vocab.negative) == set(NEGATIVE)
    assert set(vocab.neutral) == set(NEUTRAL)  # "unknownword" maps to <pad> (unk), "multi_word" to 3 tokens
    written = set(generator.tokenizer.convert_ids_to_tokens(list(vocab.base_ids)))
    assert written == {*STOP, *generated.START_TOKENS, ".", ",", "!", "?"}  # capitalised forms the tokenizer has


def test_sentences_hold_only_allowed_words_and_labels_are_balanced(levels):
    stop = {w.lower() for w in STOP_WORDS}
    for p, (train, test) in zip(LEVELS, levels):
        assert (len(train), len(test)) == (36, 4)
        allowed = train.allowed
        assert allowed == test.allowed and len(allowed["neutral"]) == round(p * 8)
        assert len(allowed["positive"]) == len(allowed["negative"]) == 8 - round(p * 8)
        for split in (train, test):
            assert sorted(np.unique(split.labels, return_counts=True)[1]) == [len(split) // 2] * 2
            for sentence, label in zip(split.sentences, split.labels):
                assert sentence.split()[0] in generated.START_TOKENS
                own = allowed["positive" if label > 0 else "negative"]
                assert set(sentence_stats.words(sentence)) <= set(own) | set(allowed["neutral"]) | stop, sentence
        content = [w for s in train.sentences for w in sentence_stats.words(s) if w not in stop]
        assert content, "the random generator wrote no list word at all"
        fractions = sentence_stats.label_word_fractions(train.sentences, train.labels, POSITIVE, NEGATIVE,
                                                        ignore=STOP_WORDS)
        expected = {0.0: 1.0, 1.0: 0.0}.get(p)
        if expected is not None:  # p = 0: only class words; p = 1: only neutral ones
            assert np.all(fractions[np.isfinite(fractions)] == expected)


def test_generation_is_seeded(generator, levels):
    again = generated.generated_levels(generator, LISTS, levels=LEVELS[:1], n=40, seed=0, max_tokens=12,
                                       generator_name="tiny")
    assert again[0][0].sentences == levels[0][0].sentences
    other = generated.generated_levels(generator, LISTS, levels=LEVELS[:1], n=40, seed=1, max_tokens=12,
                                       generator_name="tiny")
    assert other[0][0].sentences != levels[0][0].sentences


def test_generated_sets_are_cached_under_the_generators_identity(generator, tmp_path, monkeypatch):
    kwargs = dict(levels=LEVELS[:2], n=20, seed=0, max_tokens=8, generator_name="tiny", cache_dir=str(tmp_path))
    first = generated.generated_levels(generator, LISTS, **kwargs)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2
    calls = []
    monkeypatch.setattr(generator, "generate", lambda prompts, **k: calls.append(1) or [[] for _ in prompts])
    second = generated.generated_levels(generator, LISTS, **kwargs)
    assert not calls and [t.sentences for pair in second for t in pair] == [t.sentences for pair in first for t in pair]
    assert all(np.array_equal(a.labels, b.labels) for x, y in zip(first, second) for a, b in zip(x, y))
    # another generator (another identity) misses the cache
    monkeypatch.setattr(generator, "identity", {**generator.identity, "checkpoint": "another"}, raising=False)
    generated.generated_levels(generator, LISTS, **kwargs)
    assert calls and len(list(tmp_path.iterdir())) == 4


def test_a_list_without_one_token_words_is_a_clear_error(generator):
    lists = SimpleNamespace(positive=("multi_word", "unknownword"), negative=NEGATIVE, neutral=NEUTRAL)
    with pytest.raises(LmprobeError, match=r"the positive word list \(2 words\) has no word that the generator "
                                           r"'tiny' writes as a single token.*`lexicon=vader`"):
        generated.generated_levels(generator, lists, levels=LEVELS, n=20, seed=0, generator_name="tiny")
    # a list only the levels do not need is not an error: p = 0 draws no neutral word
    lists = SimpleNamespace(positive=POSITIVE, negative=NEGATIVE, neutral=("unknownword",))
    assert generated.generated_levels(generator, lists, levels=(0.0,), n=20, seed=0, max_tokens=4,
                                      generator_name="tiny")


def test_cut_sentence():
    assert generated.cut_sentence("There good road. bad ...") == "There good road."
    assert generated.cut_sentence("I fine!!? more") == "I fine!!?"
    assert generated.cut_sentence(" They kind ") == "They kind"


def _lexicon(tmp_path):
    path = tmp_path / "tiny_lexicon.tsv"
    rows = [(w, 1.0) for w in POSITIVE] + [(w, -1.0) for w in NEGATIVE] + [(w, 0.0) for w in NEUTRAL]
    path.write_text("".join(f"{w}\t{s}\n" for w, s in rows))
    return str(path)


def test_config_generator_scores_on_generated_sets(generator, tmp_path):
    config = syntextbench.Config(lexicon=_lexicon(tmp_path), levels=(0.0, 1.0), n=200, baselines=False,
                                 icl_examples=0, generator="tiny", generator_max_tokens=8)
    tasks = syntextbench.build_tasks(config)
    sets = syntextbench.generated_tasks(generator, config, tasks, cache_dir=str(tmp_path / "cache"))
    assert sets.source == "tiny" and sets.lists == tasks.lists
    result = syntextbench.run(GaussianScorer(sets, 1.0), config, model_name="g", tasks=[sets])
    assert result.to_dict()["sets"] == "tiny" and result.to_dict()["config"]["generator"] == "tiny"
    fractions = [level["label_word_fraction"] for level in result.levels]
    assert fractions[0] > 0 and fractions[1] == 0  # p = 1: neutral words and stop words only
    lm_free = syntextbench.run(GaussianScorer(tasks, 1.0), config, model_name="g", tasks=[tasks])
    assert [lv["label_word_fraction"] for lv in lm_free.levels] == [1.0, 0.0]


def test_front_end_with_a_generator_writes_fig3(generator_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = [f"--model={generator_dir}", f"--generator={generator_dir}", f"--lexicon={_lexicon(tmp_path)}",
            "--n=200", "--levels=0,1", "--no_baselines", "--icl_examples=0", "--generator_max_tokens=6",
            "--batch_size=8", "--paper_figures", f"--output_dir={out}"]
    front_end.main(args)
    result = json.loads((out / "results.json").read_text())
    assert result["sets"] == str(generator_dir) and "label_word_fraction" in result["levels"][0]
    assert (out / "label_words.png").stat().st_size > 0 and (out / "sentence_lengths.png").stat().st_size > 0
    assert "on sets generated by" in capsys.readouterr().out
    cached = sorted(p.name for p in (out / "cache").iterdir() if p.name.startswith("generated-"))
    assert len(cached) == 2
    front_end.main(args)  # rerun: the same sets from the cache
    assert json.loads((out / "results.json").read_text())["score"] == result["score"]
