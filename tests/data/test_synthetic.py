"""SynTextBench sentence generator (Sec 2.2, Eq. 1): nesting, word sources, seeding, lengths."""

import re

import numpy as np
import pytest

from lmprobe.data.synthetic import (
    PAPER_LEVELS,
    SyntheticTask,
    Vocabulary,
    generate_sentences,
    make_tasks,
)
from lmprobe.errors import LmprobeError

POS = [f"good{i}" for i in range(7)]
NEG = [f"bad{i}" for i in range(5)]
NEU = [f"thing{i}" for i in range(11)]


def _gen(**kw):
    args = {"p": 0.3, "n": 2000, "seed": 1}
    args.update(kw)
    return generate_sentences(POS, NEG, NEU, **args)


def _sentence_tokens(task: SyntheticTask):
    for i in range(len(task)):
        a, b = task.offsets[i], task.offsets[i + 1]
        yield task.token_ids[a:b], task.is_new[a:b]


def test_repeats_close_the_innermost_open_word():
    task = _gen(n=3000, p_e=0.1)
    ended_open = ended_closed = 0
    for ids, new in _sentence_tokens(task):
        assert new[0], "the first token is a new word"
        stack = []
        for word, is_new in zip(ids.tolist(), new.tolist()):
            if is_new:
                stack.append(word)
            else:
                assert stack and stack.pop() == word
        ended_open += bool(stack)
        ended_closed += not stack
    # The paper ends sentences at <eos> whatever the stack holds (App. A.7 shows both kinds).
    assert ended_open > 100 and ended_closed > 100


def test_sentence_strings_are_the_token_words_joined_by_spaces():
    task = _gen(n=50)
    for sentence, (ids, _) in zip(task.sentences, _sentence_tokens(task)):
        assert sentence.split(" ") == [task.vocabulary.words[i] for i in ids]


def test_positive_sentences_hold_no_negative_word_and_vice_versa():
    task = _gen(p=0.5)
    for sentence, label in zip(task.sentences, task.labels):
        words = set(sentence.split())
        forbidden = set(NEG) if label > 0 else set(POS)
        assert not words & forbidden
        assert words <= set(NEU) | (set(POS) if label > 0 else set(NEG))


@pytest.mark.parametrize("p", [0.0, 0.3, 0.95, 1.0])
def test_share_of_neutral_words_among_new_words_is_p(p):
    task = _gen(p=p, n=4000)
    sources = task.vocabulary.source(task.token_ids[task.is_new])
    share = np.mean(sources == 0)
    sigma = np.sqrt(p * (1 - p) / sources.size)
    assert abs(share - p) <= 5 * sigma + 1e-12


def test_word_choice_is_uniform_within_a_list():
    task = _gen(p=1.0, n=4000)
    counts = np.bincount(task.token_ids[task.is_new], minlength=len(NEU))
    expected = counts.sum() / len(NEU)
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 40  # chi-square, 10 degrees of freedom: p-value ~1e-5


def test_labels_are_exactly_balanced_and_shuffled():
    task = _gen(n=1001)
    assert np.sum(task.labels == 1) == 501 and np.sum(task.labels == -1) == 500
    assert 0 < np.sum(task.labels[:500] == 1) < 500


def test_pn_zero_gives_no_repeats():
    task = _gen(p_n=0.0)
    assert task.is_new.all()


def test_pn_one_pairs_every_word_immediately():
    # Empty stack: the repeat mass goes to new words, so tokens alternate new, repeat, new, ...
    task = _gen(p_n=1.0, n=500)
    for ids, new in _sentence_tokens(task):
        assert new.tolist() == [k % 2 == 0 for k in range(len(ids))]
        assert (ids[1::2] == ids[0::2][: len(ids[1::2])]).all()


def test_mean_length_matches_geometric_theory():
    p_e, max_len = 0.1, 40
    task = _gen(p_e=p_e, max_len=max_len, n=20000)
    theory = (1 - (1 - p_e) ** max_len) / p_e  # E[min(1 + Geometric(p_e), max_len)]
    lengths = task.lengths
    assert lengths.min() >= 1 and lengths.max() <= max_len
    assert abs(lengths.mean() - theory) < 5 * lengths.std() / np.sqrt(lengths.size)


def test_max_len_cuts_and_pe_one_gives_single_words():
    assert (_gen(p_e=1e-9, max_len=6, n=20).lengths == 6).all()
    assert (_gen(p_e=1.0, n=20).lengths == 1).all()


def test_same_seed_same_output_different_seed_different_output():
    a, b, c = _gen(seed=7), _gen(seed=7), _gen(seed=8)
    assert a.sentences == b.sentences and (a.labels == b.labels).all()
    assert a.sentences != c.sentences


def test_vocabulary_and_word_lists_give_the_same_sentences():
    vocab = Vocabulary.build(POS, NEG, NEU)
    assert generate_sentences(vocab, p=0.4, n=100, seed=3).sentences == _gen(p=0.4, n=100, seed=3).sentences


def test_duplicates_in_a_list_do_not_change_the_draw():
    a = generate_sentences(POS + POS[:3], NEG, NEU, p=0.2, n=100, seed=5)
    assert a.sentences == _gen(p=0.2, n=100, seed=5).sentences


def test_make_tasks_splits_and_seeds_levels_independently():
    lists = {"positive": POS, "negative": NEG, "neutral": NEU}
    tasks = make_tasks(lists, PAPER_LEVELS, n=200, seed=0)
    assert len(tasks) == 20 and PAPER_LEVELS[0] == 0.0 and PAPER_LEVELS[-1] == 0.95
    for (train, test), p in zip(tasks, PAPER_LEVELS):
        assert (len(train), len(test)) == (180, 20) and train.p == test.p == p
        assert train.labels.sum() == 0 and test.labels.sum() == 0
        assert train.sentences != test.sentences
    first_three = make_tasks(lists, PAPER_LEVELS[:3], n=200, seed=0)
    for (a, b), (c, d) in zip(first_three, tasks):
        assert a.sentences == c.sentences and b.sentences == d.sentences
    assert make_tasks(lists, (0.2,), n=200, seed=1)[0][0].sentences != tasks[0][0].sentences


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"p": -0.1}, "p (share of neutral words)"),
        ({"p": 1.5}, "p (share of neutral words)"),
        ({"p": float("nan")}, "p (share of neutral words)"),
        ({"p_e": 0.0}, "p_e"),
        ({"p_n": 2.0}, "p_n"),
        ({"n": 1}, "n = 1"),
        ({"n": 2.5}, "n = 2.5"),
        ({"max_len": 0}, "max_len"),
    ],
)
def test_bad_parameters_raise_one_clear_error(kwargs, message):
    with pytest.raises(LmprobeError, match=re.escape(message)):
        _gen(**kwargs)


@pytest.mark.parametrize("which", ["positive", "negative", "neutral"])
def test_empty_word_list_is_named(which):
    lists = {"positive": POS, "negative": NEG, "neutral": NEU, which: []}
    with pytest.raises(LmprobeError, match=f"The {which} word list is empty"):
        generate_sentences(lists["positive"], lists["negative"], lists["neutral"], p=0.5, n=10, seed=0)


def test_words_with_spaces_and_bad_make_tasks_inputs_are_rejected():
    with pytest.raises(LmprobeError, match="'ice cream'"):
        generate_sentences(POS, NEG, NEU + ["ice cream"], p=0.5, n=10, seed=0)
    lists = {"positive": POS, "negative": NEG, "neutral": NEU}
    with pytest.raises(LmprobeError, match="no neutral list"):
        make_tasks({"positive": POS, "negative": NEG}, n=100)
    with pytest.raises(LmprobeError, match="levels is empty"):
        make_tasks(lists, (), n=100)
    with pytest.raises(LmprobeError, match=re.escape("levels[1] (share of neutral words) = 1.2")):
        make_tasks(lists, (0.1, 1.2), n=100)
    with pytest.raises(LmprobeError, match="test split need"):
        make_tasks(lists, n=10)
    with pytest.raises(LmprobeError, match="test_fraction"):
        make_tasks(lists, n=100, test_fraction=1.0)
