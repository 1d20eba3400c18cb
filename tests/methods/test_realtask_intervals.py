"""realtask's per-model intervals over examples against closed forms: the binomial standard error of
per-class recalls for (balanced) accuracy, the delta method for bits per byte (a ratio of sums)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.methods import realtask


def _predictions(recalls, counts, rng) -> tuple[np.ndarray, np.ndarray]:
    """Labels with ``counts`` examples per class, each class right at exactly its recall (wrong: the next class)."""
    labels = np.repeat(np.arange(len(counts)), counts)
    predictions = labels.copy()
    for k, (recall, n) in enumerate(zip(recalls, counts)):
        wrong = rng.permutation(np.flatnonzero(labels == k))[:n - round(recall * n)]
        predictions[wrong] = (k + 1) % len(counts)
    order = rng.permutation(labels.size)
    return predictions[order], labels[order]


@pytest.mark.parametrize("recalls, counts", [((0.7, 0.7), (200, 200)), ((0.9, 0.6, 0.5), (300, 60, 140))],
                         ids=["balanced", "three-imbalanced"])
def test_accuracy_bootstrap_matches_the_binomial_closed_form(recalls, counts):
    predictions, labels = _predictions(recalls, counts, np.random.default_rng(0))
    got = realtask.accuracy_intervals(predictions, labels, len(counts), resamples=2000, seed=1)
    # resampling within each class (plug-in variance p (1 - p) / n_k per class, n_k fixed)
    p, n = np.asarray(recalls), np.asarray(counts)
    balanced_se = math.sqrt(np.sum(p * (1 - p) / n)) / len(n)
    accuracy_se = math.sqrt(np.sum(n * p * (1 - p))) / n.sum()
    if len(n) == 2:  # two balanced classes of one recall: sqrt(p (1 - p) / n) of the plain mean accuracy
        assert balanced_se == pytest.approx(math.sqrt(0.7 * 0.3 / 400))
    assert got["balanced_accuracy_stderr"] == pytest.approx(balanced_se, rel=0.08)
    assert got["accuracy_stderr"] == pytest.approx(accuracy_se, rel=0.08)
    estimate = realtask.balanced_accuracy(predictions, labels, len(counts))
    assert estimate == pytest.approx(p.mean())
    assert got["balanced_accuracy_low"] < estimate < got["balanced_accuracy_high"]
    width = got["balanced_accuracy_high"] - got["balanced_accuracy_low"]
    assert width == pytest.approx(2 * 1.96 * balanced_se, rel=0.12)  # about normal at these n
    again = realtask.accuracy_intervals(predictions, labels, len(counts), resamples=2000, seed=1)
    assert again == got  # seeded


def test_bits_per_byte_bootstrap_matches_the_delta_method():
    rng = np.random.default_rng(4)
    n_bytes = rng.integers(200, 1500, 400).astype(float)
    nll = n_bytes * rng.gamma(20.0, 0.05, 400)  # about 1 nat per byte, varying by text
    got = realtask.bits_per_byte_interval(nll, n_bytes, resamples=2000, seed=5)
    ratio = nll.sum() / n_bytes.sum()
    residual = nll - ratio * n_bytes
    delta_se = math.sqrt(residual @ residual / 399 / 400) / n_bytes.mean() / math.log(2)
    assert got["bits_per_byte_stderr"] == pytest.approx(delta_se, rel=0.08)
    assert got["bits_per_byte_low"] < ratio / math.log(2) < got["bits_per_byte_high"]


def test_too_few_examples_give_no_interval_and_bad_input_is_named():
    assert realtask.bits_per_byte_interval([1.0], [4]) == dict.fromkeys(
        ("bits_per_byte_stderr", "bits_per_byte_low", "bits_per_byte_high"))
    assert realtask.accuracy_intervals([1], [1], 2)["balanced_accuracy_stderr"] is None
    for call, match in ((lambda: realtask.accuracy_intervals([0, 1], [0], 2), "one per example"),
                        (lambda: realtask.accuracy_intervals([0, 1], [0, 2], 2), "class indices"),
                        (lambda: realtask.accuracy_intervals([0, 1], [0, 1], 2, resamples=1), "resamples"),
                        (lambda: realtask.bits_per_byte_interval([1.0, 2.0], [3, 4], level=95), "level"),
                        (lambda: realtask.bits_per_byte_interval([1.0, 2.0], [3], seed=0), "one of each")):
        with pytest.raises(LmprobeError, match=match):
            call()


def test_balanced_accuracy_items_average_to_it():
    predictions, labels = _predictions((0.9, 0.6, 0.5), (300, 60, 140), np.random.default_rng(2))
    items = realtask.balanced_accuracy_items(predictions, labels)
    assert len(items) == labels.size
    assert np.mean(items) == pytest.approx(realtask.balanced_accuracy(predictions, labels, 3))
