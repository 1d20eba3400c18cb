"""kernels.integrals: threshold curves against direct sums, exact areas against brute-force
numerical integration, and the two scores."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from lmprobe import kernels as K

PROFILE = settings.get_profile("kernels")


def curve_reference(a, accuracies, values):
    return np.mean(np.where(accuracies > a, values, 0.0))


def test_threshold_curve_is_the_goodness_function():
    rng = np.random.default_rng(0)
    accuracies, margins = rng.uniform(0.5, 1.0, 20), rng.exponential(size=20)
    grid = np.linspace(0.0, 1.0, 101)
    expected = [curve_reference(a, accuracies, margins) for a in grid]
    np.testing.assert_allclose(K.threshold_curve(grid, accuracies, margins), expected, rtol=1e-6)
    # strict inequality a_p > a at the jumps
    at_jump = K.threshold_curve(accuracies[:1], accuracies, margins)
    np.testing.assert_allclose(at_jump, [curve_reference(accuracies[0], accuracies, margins)], rtol=1e-6)


def test_area_matches_numerical_integration():
    rng = np.random.default_rng(1)
    accuracies, values = rng.uniform(0.4, 1.0, 30), rng.exponential(size=30)
    for lower, upper in ((0.6, 1.0), (0.75, 0.9), (0.0, 1.0), (0.95, 1.0)):
        breakpoints = np.sort(accuracies[(accuracies > lower) & (accuracies < upper)])
        brute = quad(curve_reference, lower, upper, args=(accuracies, values), points=breakpoints, limit=200)[0]
        midpoint_grid = lower + (np.arange(200_000) + 0.5) * (upper - lower) / 200_000
        riemann = np.mean((accuracies[None, :] > midpoint_grid[:, None]) @ values) / len(values) * (upper - lower)
        got = float(K.threshold_curve_area(accuracies, values, lower, upper))
        np.testing.assert_allclose(got, brute, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got, riemann, rtol=1e-4, atol=1e-6)


def test_syntextbench_score_closed_form_and_batching():
    accuracies = np.array([[0.95, 0.9, 0.7, 0.55], [1.0, 1.0, 1.0, 1.0]])
    margins = np.array([[1.0, 1.2, 2.0, 5.0], [1.0, 1.0, 1.0, 1.0]])
    got = np.asarray(K.syntextbench_score(accuracies, margins, 0.6))
    np.testing.assert_allclose(got, [(0.35 * 1.0 + 0.3 * 1.2 + 0.1 * 2.0) / 4, 0.4], rtol=1e-6)
    per_threshold = np.asarray(K.syntextbench_score(accuracies[0], margins[0], np.array([0.6, 0.9, 1.0])))
    np.testing.assert_allclose(per_threshold, [got[0], 0.05 / 4, 0.0], rtol=1e-5, atol=1e-8)


def test_valid_mask_drops_entries_and_nan_below_threshold_is_ignored():
    accuracies = np.array([0.9, 0.8, 0.3, 0.7])
    values = np.array([1.5, 2.0, np.nan, 3.0])  # Thm 1(iv) is NaN for accuracy <= 1/2
    valid = np.array([True, True, True, False])
    got = float(K.threshold_curve_area(accuracies, values, 0.6, valid=valid))
    np.testing.assert_allclose(got, (0.3 * 1.5 + 0.2 * 2.0) / 3, rtol=1e-6)
    curve = np.asarray(K.threshold_curve(np.array([0.6]), accuracies, values, valid))
    np.testing.assert_allclose(curve, [(1.5 + 2.0) / 3], rtol=1e-6)


def test_synbench_score_is_a_ratio_of_areas():
    scales = np.arange(1, 50) * 0.1
    raw_accuracy = K.gaussian_accuracy(scales)
    raw_bound = K.expected_scaled_bound(raw_accuracy)
    np.testing.assert_allclose(K.synbench_score(raw_accuracy, raw_bound, raw_accuracy, raw_bound, 0.7), 1.0, rtol=1e-6)
    half = K.synbench_score(raw_accuracy, 0.5 * np.asarray(raw_bound), raw_accuracy, raw_bound, 0.7)
    np.testing.assert_allclose(half, 0.5, rtol=1e-6)
    assert np.isnan(float(K.synbench_score(raw_accuracy, raw_bound, np.full(49, 0.5), raw_bound, 0.7)))


@PROFILE
@given(seed=st.integers(0, 2**31 - 1), lower=st.floats(0.0, 0.9), split=st.floats(0.0, 1.0))
def test_curve_is_decreasing_and_area_is_additive(seed, lower, split):
    rng = np.random.default_rng(seed)
    accuracies, values = rng.uniform(0.3, 1.0, 20), rng.exponential(size=20)
    grid = np.linspace(0.0, 1.0, 64)
    curve = np.asarray(K.threshold_curve(grid, accuracies, values))
    assert np.all(np.diff(curve) <= 1e-6)
    middle = lower + split * (1.0 - lower)
    whole = float(K.threshold_curve_area(accuracies, values, lower))
    parts = float(K.threshold_curve_area(accuracies, values, lower, middle)) + float(
        K.threshold_curve_area(accuracies, values, middle)
    )
    np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-7)
    assert whole <= (1.0 - lower) * curve[0] + 1e-6
