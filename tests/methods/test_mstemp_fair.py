"""MSTemp's fair comparison (baseline on the contributing seeds, draws stratified by seed) and the
greedy adversarial attack (SCoPE's search with the objective "flip the target's prediction")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.methods import mstemp
from lmprobe.methods.mstemp import accuracy, adversarial
from lmprobe.methods.mstemp.run import compare


@pytest.mark.parametrize("capacity, k", [([5, 1, 3, 7], 10), ([5, 1, 3, 7], 11), ([2, 2, 2], 4), ([4, 9], 13),
                                         ([1, 1, 6, 2, 8], 3), ([3], 2)])
def test_stratified_counts_are_as_equal_as_the_capacities_allow(capacity, k):
    for seed in range(5):
        counts = accuracy.stratified_counts(capacity, k, np.random.default_rng(seed))
        assert counts.sum() == min(k, sum(capacity)) and (counts <= capacity).all()
        # a group gets 2 or more fewer than another only when it has no more to give
        assert all(counts[i] >= counts[j] - 1 or counts[i] == capacity[i]
                   for i in range(len(counts)) for j in range(len(counts)))
    assert list(accuracy.stratified_counts([5, 1, 3, 7], 10, np.random.default_rng(0))) == [3, 1, 3, 3]


def test_stratified_draw_picks_distinct_items_per_group():
    groups = np.array([0] * 9 + [1] * 2 + [2] * 5)
    rng = np.random.default_rng(0)
    for k in (3, 7, 16):
        picked = accuracy.stratified_draw(groups, k, rng)
        assert len(picked) == len(set(picked.tolist())) == k
        per_group, size = np.bincount(groups[picked], minlength=3), np.bincount(groups)
        assert all(per_group[i] >= per_group[j] - 1 or per_group[i] == size[i] for i in range(3) for j in range(3))
    assert np.bincount(groups[accuracy.stratified_draw(groups, 3, rng)]).tolist() == [1, 1, 1]


def test_stratified_accuracy_weighs_seeds_equally():
    correct = np.r_[np.ones(9), 0, 0]  # one seed with 9 right samples, two seeds with one wrong each
    groups = np.r_[np.zeros(9), 1, 2]
    rng = np.random.default_rng(0)
    assert accuracy.stratified_accuracy(correct, groups, 20, rng) == pytest.approx((1 / 3, 0.0), abs=1e-12)
    assert accuracy.seed_weighted_accuracy(correct, groups) == pytest.approx(1 / 3)
    assert accuracy.fair_accuracy(correct, 3, 400, rng)[0] == pytest.approx(9 / 11, abs=0.05)  # by sample


def _rows(seed_counts: dict[int, list[bool]], labels):
    rows, correct = [], []
    for seed, outcomes in seed_counts.items():
        for ok in outcomes:
            rows.append({"evaluator": "e", "seed_index": seed, "label": int(labels[seed])})
            correct.append(ok)
    gen_pred = [r["label"] if ok else 1 - r["label"] for r, ok in zip(rows, correct)]
    return rows, gen_pred


def test_fair_and_biased_baselines_differ_when_a_wrong_seed_has_no_samples():
    labels = np.array([1, 0, 1, 0])
    seed_pred = np.array([1, 0, 1, 1])  # the target gets seed 3 wrong; seed 3 has no generated sample
    rows, gen_pred = _rows({0: [True] * 8, 1: [False], 2: [False]}, labels)
    config = mstemp.Config(repeats=50)
    out = compare(seed_pred, labels, rows, gen_pred, ["e"], {"e": {"samples": len(rows)}}, config)
    assert out["baseline_accuracy"] == 0.75 and out["fair_baseline_accuracy"] == 1.0
    assert out["contributing_seeds"] == 3 and out["per_evaluator"]["e"]["contributing_seeds"] == 3
    # unstratified draws of N = 4 of the 10 samples follow the 8 right samples of seed 0 (~0.8)
    assert out["generated_accuracy"] == pytest.approx(0.8, abs=0.1)
    assert out["fair_generated_accuracy"] == pytest.approx(1 / 3)  # one sample per seed: 1, 0, 0
    assert out["per_evaluator"]["e"]["accuracy_stratified_std"] == pytest.approx(0.0, abs=1e-12)
    assert out["fair_drop"] == pytest.approx(2 / 3) and out["drop"] < 0.05  # the bias hides the drop
    assert out["fair_relative_drop"] == pytest.approx(2 / 3)
    assert out["per_evaluator"]["e"]["drop_fair"] == pytest.approx(2 / 3)


class KeywordTarget:
    """A sentiment classifier: (positive words - negative words) in the text, ties negative."""

    unknown_token = "UNK"
    POSITIVE, NEGATIVE = {"loved", "wonderful", "great"}, {"boring", "terrible", "wasted"}

    def __init__(self):
        self.calls = 0

    def log_probs(self, texts):
        self.calls += 1
        score = np.asarray([sum((w in self.POSITIVE) - (w in self.NEGATIVE) for w in t.lower().strip(".").split())
                            for t in texts], np.float32)
        return jax.nn.log_softmax(jnp.stack([-score, score], axis=1) * 2.0, axis=-1)


TEXTS = ["Mary loved the wonderful garden.",  # two positive words: one typo does not flip, two do
         "John saw a great film.",  # one typo of 'great' flips it
         "The film was boring.",  # labelled positive: the target is already wrong
         "The cat sat."]  # negative (a tie), nothing eligible to edit
LABELS = [1, 1, 1, 0]


def test_greedy_attack_accumulates_edits_until_the_prediction_flips():
    one = adversarial.greedy_attack(KeywordTarget(), TEXTS, LABELS, "greedy-typo", strength=1)
    two = adversarial.greedy_attack(KeywordTarget(), TEXTS, LABELS, "greedy-typo", strength=2)
    assert one.attacked.tolist() == two.attacked.tolist() == [True, True, False, True]
    assert one.success.tolist() == [False, True, False, False]  # one word cannot flip text 0
    assert two.success.tolist() == [True, True, False, False]
    assert one.texts[0] == TEXTS[0]  # a failed attack keeps the sample unedited
    assert two.texts[2:] == TEXTS[2:] and "great" not in two.texts[1]
    assert "loved" not in two.texts[0] and "wonderful" not in two.texts[0] and len(two.words[0]) == 2
    after = np.argmax(np.asarray(KeywordTarget().log_probs(two.texts)), axis=1)
    assert ((after != np.asarray(LABELS)) == (two.success | ~two.attacked)).all()
    assert two.stats["flipped"] == 2 and two.stats["already_wrong"] == 1 and two.stats["attacked"] == 3


def test_greedy_attack_beats_random_noise_on_the_keyword_target():
    rng = np.random.default_rng(0)
    noisy = [adversarial.random_attack(t, "random-typo", 2, rng) for t in TEXTS]
    noisy_right = np.argmax(np.asarray(KeywordTarget().log_probs(noisy)), axis=1) == np.asarray(LABELS)
    greedy = adversarial.greedy_attack(KeywordTarget(), TEXTS, LABELS, "greedy-typo", strength=2)
    greedy_right = np.argmax(np.asarray(KeywordTarget().log_probs(greedy.texts)), axis=1) == np.asarray(LABELS)
    assert greedy_right.sum() <= noisy_right.sum() and greedy_right.sum() == 1


def test_attack_names():
    assert adversarial.canonical("typo") == "random-typo" and adversarial.canonical("synonym") == "random-synonym"
    with pytest.raises(LmprobeError, match="not a greedy attack"):
        adversarial.greedy_attack(KeywordTarget(), TEXTS, LABELS, "random-typo")
    assert adversarial.random_attack(TEXTS[1], "greedy-typo", 3, np.random.default_rng(0)) == TEXTS[1]
