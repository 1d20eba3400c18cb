"""SynBench's Gaussian inputs: reproducible per sample, right means, prior and band covariance."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import toeplitz

from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError


def _all(spec, scale, n, batch_size, seed=0, split="train", normalize=None):
    parts = list(gaussian.batches(spec, scale, seed=seed, split=split, n=n, batch_size=batch_size, normalize=normalize))
    return np.concatenate([np.asarray(x) for x, _ in parts]), np.concatenate([np.asarray(y) for _, y in parts])


def test_same_seed_same_data_whatever_the_batch_size():
    spec = gaussian.GaussianSpec((2, 3, 4), covariance="band", channel_axis=0)
    x3, y3 = _all(spec, 1.5, 10, 3)
    x8, y8 = _all(spec, 1.5, 10, 8)
    np.testing.assert_array_equal(x3, x8)
    np.testing.assert_array_equal(y3, y8)
    assert not np.allclose(x3, _all(spec, 1.5, 10, 3, seed=1)[0])
    assert not np.allclose(x3, _all(spec, 1.5, 10, 3, split="test")[0])
    assert not np.allclose(x3, _all(spec, 1.6, 10, 3)[0])


def test_class_means_prior_offset_and_normalisation_hook():
    spec = gaussian.GaussianSpec((4, 2), prior=0.3, offset=0.5)
    x, y = _all(spec, 2.0, 20000, 4096, normalize=lambda v: 2.0 * v)
    assert np.mean(y == 1) == pytest.approx(0.3, abs=0.015)
    shift = 2.0 / math.sqrt(8)  # s / sqrt(d)
    np.testing.assert_allclose(x[y == 1].mean(0) / 2.0, 0.5 + shift, atol=0.06)
    np.testing.assert_allclose(x[y == -1].mean(0) / 2.0, 0.5 - shift, atol=0.06)
    np.testing.assert_allclose(np.cov((x[y == -1] / 2.0).reshape(-1, 8).T), np.eye(8), atol=0.06)


def test_band_sampling_matches_its_target_covariance():
    band = (1.0, 0.5, 0.25)
    spec = gaussian.GaussianSpec((5, 6, 2), covariance="band", band=band, channel_axis=-1)  # H x W x C
    x, _ = _all(spec, 1e-9, 20000, 4096)
    per_channel = [x[..., c].reshape(len(x), -1) for c in range(2)]  # raster order inside a channel
    target = toeplitz(np.r_[band, np.zeros(30 - 3)])
    for z in per_channel:
        np.testing.assert_allclose(np.cov(z.T), target, atol=0.05)
    cross = np.cov(np.concatenate(per_channel, 1).T)[:30, 30:]
    assert np.abs(cross).max() < 0.05  # channels are independent


def test_band_taps_factor_the_autocovariance_and_reject_invalid_bands():
    for band in ((1.0, 0.5, 0.25), (2.0, -0.3, 0.4), (1.0, 0.4, 0.0)):
        b = np.asarray(gaussian.band_taps(band))
        auto = [np.dot(b[: len(b) - k], b[k:]) for k in range(len(b))]
        np.testing.assert_allclose(auto, np.asarray(band)[: len(b)], atol=1e-9)
    with pytest.raises(LmprobeError, match="not positive semi-definite"):
        gaussian.band_taps((1.0, 0.9, 0.9))


def test_bad_specs_are_named():
    for spec, match in ((gaussian.GaussianSpec((3, 0)), "input shape"),
                        (gaussian.GaussianSpec((3,), prior=1.0), "tau=1.0"),
                        (gaussian.GaussianSpec((3,), covariance="toeplitz"), "toeplitz"),
                        (gaussian.GaussianSpec((3,), channel_axis=2), "channel_axis=2")):
        with pytest.raises(LmprobeError, match=match):
            spec.check()


def test_scale_grids():
    assert len(gaussian.PAPER_SCALES) == 50 and gaussian.PAPER_SCALES[-1] == 5.0
    assert len(gaussian.REFERENCE_SCALES) == 49 and gaussian.REFERENCE_SCALES[-1] == 4.9
    assert jnp.asarray(gaussian.PAPER_SCALES).min() == pytest.approx(0.1)
