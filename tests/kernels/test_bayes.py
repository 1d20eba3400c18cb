"""kernels.bayes: margins (Thm 1-3 (i)-(ii)), and the SynTextBench / SynBench pipelines
against numpy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

from lmprobe import kernels as K
from tests.kernels.conftest import numpy_whitening, two_class_gaussian


def test_margins_match_formulas_and_distance_to_boundary():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 4))
    labels = np.where(rng.random(50) < 0.5, 1, -1)
    midpoint, weight, mean_diff = rng.normal(size=4), rng.normal(size=4), rng.normal(size=4)
    for tau, scaling in ((0.5, "positive_class"), (0.8, "positive_class"), (0.3, "both_classes")):
        half_q = 0.5 * math.log((1 - tau) / tau)
        score = (x - midpoint) @ weight - half_q
        centre = mean_diff @ weight
        scale = (
            abs(centre - half_q) if scaling == "positive_class" else 0.5 * (abs(centre - half_q) + abs(centre + half_q))
        )
        out = K.linear_margins(x, labels, midpoint, weight, mean_diff, tau=tau, scaling=scaling)
        np.testing.assert_array_equal(out.prediction, np.sign(score))
        np.testing.assert_array_equal(out.correct, np.sign(score) == labels)
        np.testing.assert_allclose(out.margin, np.abs(score) / np.linalg.norm(weight), rtol=1e-5)
        np.testing.assert_allclose(out.scaled_margin, np.abs(score) / scale, rtol=1e-5)
        # Thm 1(i): the margin is the l2 distance to the decision boundary
        moved = x - (np.sign(score) * np.asarray(out.margin))[:, None] * weight / np.linalg.norm(weight)
        np.testing.assert_allclose((moved - midpoint) @ weight - half_q, 0.0, atol=1e-4)
        summary = K.summarize_margins(out, labels)
        correct = np.sign(score) == labels
        np.testing.assert_allclose(summary.accuracy, correct.mean(), rtol=1e-6)
        np.testing.assert_allclose(summary.mean_scaled_margin, (np.abs(score) / scale)[correct].mean(), rtol=1e-5)


@pytest.mark.parametrize("p", [1, math.inf])
def test_lp_margin_is_the_minimal_lp_perturbation(p):
    """Thm 2(i): ||Delta||_p = |score| / ||w||_q, attained by a Hoelder-extremal delta."""
    rng = np.random.default_rng(1)
    x, weight = rng.normal(size=(20, 5)), rng.normal(size=5)
    out = K.linear_margins(x, np.ones(20, int), np.zeros(5), weight, weight, norm_ord=K.dual_exponent(p))
    score = x @ weight
    if math.isinf(p):  # move every coordinate by the margin against sign(w)
        delta = -np.sign(score)[:, None] * np.asarray(out.margin)[:, None] * np.sign(weight)
    else:  # move only the coordinate with the largest |w_i|
        i = np.argmax(np.abs(weight))
        delta = np.zeros_like(x)
        delta[:, i] = -np.sign(score) * np.asarray(out.margin) * np.sign(weight[i])
    np.testing.assert_allclose((x + delta) @ weight, 0.0, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(delta, ord=p, axis=1), out.margin, rtol=1e-6)


def test_degenerate_classifier_abstains():
    x = np.random.default_rng(2).normal(size=(30, 3))
    labels = np.repeat([1, -1], 15)
    out = K.linear_margins(x, labels, np.zeros(3), np.zeros(3), np.ones(3))
    assert np.all(np.asarray(out.prediction) == 0) and not np.asarray(out.correct).any()
    summary = K.summarize_margins(out, labels)
    assert float(summary.accuracy) == 0.0 and float(summary.mean_scaled_margin) == 0.0


def numpy_syntextbench(z_train, y_train, z_test, y_test, energy=0.99):
    """Alg. 1 lines 4-7 in numpy: whiten, Bayes classifier from whitened train means, test metrics."""
    train_hat = numpy_whitening(z_train, y_train, energy)[0]
    test_hat = numpy_whitening(z_train, y_train, energy, z_test, y_test)[0]
    mu_1, mu_2 = train_hat[y_train > 0].mean(0), train_hat[y_train < 0].mean(0)
    mu = (mu_1 - mu_2) / 2
    score = (test_hat - (mu_1 + mu_2) / 2) @ mu
    correct = np.sign(score) == y_test
    return correct.mean(), (np.abs(score) / (mu @ mu))[correct].mean()


def test_syntextbench_pipeline_matches_numpy():
    rng = np.random.default_rng(3)
    d = 10
    cov_sqrt, mean_diff = rng.normal(size=(d, d)), rng.normal(size=d) * 0.3
    z, y = two_class_gaussian(3, 800, mean_diff, cov_sqrt, offset=2.0)
    z_test, y_test = two_class_gaussian(4, 800, mean_diff, cov_sqrt, offset=2.0)
    accuracy, margin = numpy_syntextbench(z, y, z_test, y_test)
    got = K.syntextbench_accuracy_margin(z.astype(np.float32), y, z_test.astype(np.float32), y_test)
    np.testing.assert_allclose(got.accuracy, accuracy, atol=2.5e-3)  # at most two samples flip
    np.testing.assert_allclose(got.mean_scaled_margin, margin, rtol=2e-3)


def numpy_synbench(z_train, y_train, z_test, y_test, eps, eig_tol=1e-6):
    """SynBench representation side in float64 with the l2 root found by scipy brentq."""
    means = [z_train[y_train == c].mean(0) for c in (1, -1)]
    centred = np.concatenate([z_train[y_train == c] - m for c, m in zip((1, -1), means)])
    lam, F = np.linalg.eigh(centred.T @ centred / (len(z_train) - 2))
    keep = lam > eig_tol
    lam, F = lam[keep], F[:, keep]
    mu = F.T @ (means[0] - means[1]) / 2
    radius = eps
    if radius == 0:
        kappa = 0.0
    else:
        kappa = brentq(lambda k: np.linalg.norm(k * mu / (lam + k)) - radius, 1e-12, 1e12, xtol=1e-14)
    w = mu / (lam + kappa)
    score = (z_test - (means[0] + means[1]) / 2) @ F @ w
    correct = np.sign(score) == y_test
    return correct.mean(), (np.abs(score) / abs(mu @ w))[correct].mean()


def test_synbench_pipeline_matches_numpy_with_brentq():
    rng = np.random.default_rng(5)
    d = 8
    cov_sqrt = rng.normal(size=(d, d)) * np.exp(rng.normal(size=d))
    mean_diff = rng.normal(size=d)
    z, y = two_class_gaussian(5, 1000, mean_diff, cov_sqrt)
    z_test, y_test = two_class_gaussian(6, 1000, mean_diff, cov_sqrt)
    epsilons = np.array([0.0, 0.2, 0.5])
    got = K.synbench_accuracy_bound(z.astype(np.float32), y, z_test.astype(np.float32), y_test, epsilons)
    for j, eps in enumerate(epsilons):
        accuracy, bound = numpy_synbench(z, y, z_test, y_test, eps)
        np.testing.assert_allclose(got.accuracy[j], accuracy, atol=2.5e-3)
        np.testing.assert_allclose(got.mean_scaled_margin[j], bound, rtol=5e-3)
    huge = K.synbench_accuracy_bound(z, y, z_test, y_test, np.array([1e6]))
    assert float(huge.accuracy[0]) == 0.0 and float(huge.mean_scaled_margin[0]) == 0.0


@settings(settings.get_profile("kernels"), max_examples=4)
@given(seed=st.integers(0, 2**20), offset=st.floats(-5.0, 5.0), epsilon=st.sampled_from([0.0, 0.2, 0.4]))
def test_identity_representation_of_gaussian_data_scores_about_one(seed, offset, epsilon):
    """SynBench: feeding the raw Gaussian data through the identity gives score ~ 1."""
    d, n = 16, 2048
    scales = np.arange(1, 50) * 0.1  # s = 0.1, ..., 4.9 as in the paper

    def draw(first_seed):
        zs, ys = zip(
            *(
                two_class_gaussian(first_seed + i, n, s * np.ones(d) / np.sqrt(d), offset=offset)
                for i, s in enumerate(scales)
            )
        )
        return np.stack(zs).astype(np.float32), np.stack(ys)

    (z, y), (z_test, y_test) = draw(seed), draw(seed + 1000)
    rep = K.synbench_accuracy_bound(z, y, z_test, y_test, np.array([epsilon]), relative_epsilon=True)
    raw_accuracy = K.gaussian_accuracy(scales)
    raw_bound = K.expected_scaled_bound(raw_accuracy)
    np.testing.assert_allclose(rep.accuracy[:, 0], norm.cdf(scales), atol=0.04)
    for threshold in (0.6, 0.7, 0.8):
        score = K.synbench_score(rep.accuracy[:, 0], rep.mean_scaled_margin[:, 0], raw_accuracy, raw_bound, threshold)
        assert abs(float(score) - 1.0) < 0.03, (threshold, float(score))
