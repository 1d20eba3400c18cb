"""kernels.whitening against a numpy SVD whitening; rank deficiency, batching, invariances."""

from __future__ import annotations

import jax
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ortho_group

from lmprobe import kernels as K
from tests.kernels.conftest import numpy_whitening, two_class_gaussian

PROFILE = settings.get_profile("kernels")


def anisotropic_task(seed, n=600, d=12):
    rng = np.random.default_rng(seed)
    cov_sqrt = rng.normal(size=(d, d)) * np.exp(rng.normal(size=d))  # ill-conditioned
    z, y = two_class_gaussian(seed, n, rng.normal(size=d), cov_sqrt, offset=rng.normal(size=d) * 5)
    return z.astype(np.float32), y


def test_energy_rank_matches_cumulative_energy_definition():
    rng = np.random.default_rng(0)
    s = np.sort(rng.exponential(size=(50, 30)), axis=-1)[:, ::-1]
    for energy in (0.5, 0.9, 0.99):
        expected = np.argmax(np.cumsum(s, -1) / s.sum(-1, keepdims=True) >= energy, axis=-1) + 1
        np.testing.assert_array_equal(K.energy_rank(s.astype(np.float32), energy), expected)
    np.testing.assert_array_equal(K.energy_rank(np.zeros((2, 4), np.float32)), [0, 0])


def test_matches_numpy_svd_whitening():
    z, y = anisotropic_task(1)
    expected, coords, kept, r = numpy_whitening(z, y)
    params = K.fit_class_whitening(z, y)
    got = np.asarray(K.apply_class_whitening(params, z, y))
    np.testing.assert_array_equal(params.num_kept, [kept[1], kept[-1]])
    np.testing.assert_allclose(params.separation, r, rtol=1e-5)
    np.testing.assert_allclose(got, expected, atol=2e-3, rtol=1e-3)
    # the ZCA frame is an isometric copy of the paper's K-dimensional coordinates
    centres = np.asarray(params.centres)
    for c, index in ((1, 0), (-1, 1)):
        np.testing.assert_allclose(
            np.linalg.norm(got[y == c] - centres[index], axis=1),
            np.linalg.norm(coords[c], axis=1),
            rtol=2e-3,
        )


def test_whitened_training_classes_are_isotropic_at_distance_r():
    z, y = anisotropic_task(2)
    params = K.fit_class_whitening(z, y)
    z_hat = np.asarray(K.apply_class_whitening(params, z, y), np.float64)
    centres = np.asarray(params.centres, np.float64)
    np.testing.assert_allclose(K.class_means(z_hat, y), centres, atol=1e-4)
    d_hat = np.mean(np.linalg.norm(z_hat - np.where((y > 0)[:, None], centres[0], centres[1]), axis=1))
    # the whitened classes keep the ratio of inter- to intra-class distance of the raw embeddings
    np.testing.assert_allclose(np.linalg.norm(centres[0] - centres[1]) / d_hat, params.separation, rtol=1e-4)
    for c, index in ((1, 0), (-1, 1)):
        eig = np.sort(np.linalg.eigvalsh(np.cov(z_hat[y == c].T)))[::-1]
        k = int(params.num_kept[index])
        np.testing.assert_allclose(eig[:k], 1.0, atol=2e-3)
        np.testing.assert_allclose(eig[k:], 0.0, atol=2e-3)


def test_rank_deficient_covariance_gives_finite_output():
    rng = np.random.default_rng(3)
    d, n = 40, 20  # ten samples per class in 40 dimensions
    z = rng.normal(size=(n, d)).astype(np.float32)
    y = np.repeat([1, -1], n // 2)
    for energy in (0.99, 1.0):
        params = K.fit_class_whitening(z, y, energy=energy)
        z_hat = np.asarray(K.apply_class_whitening(params, z, y))
        assert np.isfinite(z_hat).all() and np.isfinite(np.asarray(params.matrices)).all()
        assert np.all(np.asarray(params.num_kept) <= n // 2 - 1)
        summary = K.syntextbench_accuracy_margin(z, y, z, y, energy=energy)
        assert np.isfinite(summary.accuracy) and np.isfinite(summary.mean_scaled_margin)


def test_batched_tasks_equal_one_by_one_and_padding_is_ignored():
    tasks = [anisotropic_task(seed, n=300, d=8) for seed in (4, 5, 6)]
    z = np.stack([t[0] for t in tasks])
    y = np.stack([t[1] for t in tasks])
    batched = K.syntextbench_accuracy_margin(z, y, z, y)
    for i in range(3):
        single = K.syntextbench_accuracy_margin(z[i], y[i], z[i], y[i])
        np.testing.assert_allclose(batched.accuracy[i], single.accuracy, rtol=1e-6)
        np.testing.assert_allclose(batched.mean_scaled_margin[i], single.mean_scaled_margin, rtol=1e-4)
    mapped = jax.vmap(K.syntextbench_accuracy_margin)(z, y, z, y)
    np.testing.assert_allclose(mapped.accuracy, batched.accuracy, rtol=1e-6)
    np.testing.assert_allclose(mapped.mean_scaled_margin, batched.mean_scaled_margin, rtol=1e-4)
    padded_z = np.concatenate([z, np.full((3, 50, 8), 1e3, np.float32)], axis=1)
    padded_y = np.concatenate([y, np.zeros((3, 50), int)], axis=1)
    padded = K.syntextbench_accuracy_margin(padded_z, padded_y, padded_z, padded_y)
    np.testing.assert_allclose(padded.accuracy, batched.accuracy, rtol=1e-6)
    np.testing.assert_allclose(padded.mean_scaled_margin, batched.mean_scaled_margin, rtol=1e-4)


@PROFILE
@given(seed=st.integers(0, 2**31 - 1), shift=st.floats(-100.0, 100.0))
def test_whitened_classifier_invariant_to_rotation_and_translation(seed, shift):
    rng = np.random.default_rng(seed)
    d = 8
    cov_sqrt, mean_diff = rng.normal(size=(d, d)), rng.normal(size=d) * 0.5
    z, y = two_class_gaussian(seed, 400, mean_diff, cov_sqrt)
    z_test, y_test = two_class_gaussian(seed + 1, 400, mean_diff, cov_sqrt)
    rotation = ortho_group.rvs(d, random_state=seed % 2**32)
    before = K.syntextbench_accuracy_margin(z, y, z_test, y_test)
    moved = [np.asarray(a @ rotation.T + shift, np.float32) for a in (z, z_test)]
    after = K.syntextbench_accuracy_margin(moved[0], y, moved[1], y_test)
    np.testing.assert_allclose(after.accuracy, before.accuracy, atol=2.5e-3)  # one sample
    np.testing.assert_allclose(after.mean_scaled_margin, before.mean_scaled_margin, rtol=5e-3)
