"""Shared fixtures of the kernels/ tests: seeded data factories and a hypothesis profile.

Tests use ``settings.get_profile("kernels")``: derandomised, bounded examples, no deadline,
so the suite is deterministic and fast. Shapes are fixed per test (values vary) so jit
compiles a handful of programs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from scipy.special import log_softmax

settings.register_profile(
    "kernels",
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def make_logits(seed: int, shape: tuple[int, ...], scale: float = 3.0, zero_fraction: float = 0.0):
    """float32 logits; a ``zero_fraction`` of entries is -inf (exact zero probability), but
    every row keeps at least one finite entry."""
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=shape) * scale).astype(np.float32)
    if zero_fraction > 0:
        zero = rng.random(shape) < zero_fraction
        zero[..., rng.integers(shape[-1])] = False
        logits[zero] = -np.inf
    return logits


def probabilities(logits) -> np.ndarray:
    """float64 softmax, with exact zeros for -inf logits."""
    return np.exp(log_softmax(np.asarray(logits, np.float64), axis=-1))


def two_class_gaussian(seed: int, n: int, mean_diff, cov_sqrt=None, tau: float = 0.5, offset=0.0):
    """x | y ~ N(y * mean_diff + offset, cov_sqrt cov_sqrt^T), P(y = +1) = tau; labels in {+1, -1}."""
    rng = np.random.default_rng(seed)
    mean_diff = np.asarray(mean_diff, np.float64)
    d = mean_diff.shape[-1]
    labels = np.where(rng.random(n) < tau, 1, -1)
    noise = rng.normal(size=(n, d))
    if cov_sqrt is not None:
        noise = noise @ np.asarray(cov_sqrt).T
    return labels[:, None] * mean_diff + offset + noise, labels


def numpy_whitening(z, y, energy=0.99, z_apply=None, y_apply=None):
    """Sec. 2.3 with numpy: np.cov + np.linalg.svd per class of (z, y), then the ZCA frame and
    the placement at +-(r d_hat / 2) u (d_hat: mean whitened intra-class distance); applied to
    (z_apply, y_apply), by default to (z, y).

    Returns (whitened rows, the paper's K-dim coordinates per class, K per class, r)."""
    z = np.asarray(z, np.float64)
    z_apply = z if z_apply is None else np.asarray(z_apply, np.float64)
    y_apply = y if y_apply is None else y_apply
    means = {c: z[y == c].mean(0) for c in (1, -1)}
    diff = means[1] - means[-1]
    d_intra = np.mean(np.linalg.norm(z - np.where((y > 0)[:, None], means[1], means[-1]), axis=1))
    r = np.linalg.norm(diff) / d_intra
    out, coords, kept, maps, spread = np.zeros_like(z_apply), {}, {}, {}, []
    for c in (1, -1):
        F, S, _ = np.linalg.svd(np.cov(z[y == c].T))
        k = int(np.argmax(np.cumsum(S) / S.sum() >= energy)) + 1
        maps[c] = F[:, :k] / np.sqrt(S[:k])  # z -> F^T S^{-1/2} (z - b)
        spread.append(np.linalg.norm((z[y == c] - means[c]) @ maps[c], axis=1))
        kept[c] = k
    d_hat = np.concatenate(spread).mean()  # mean whitened intra-class distance
    for c in (1, -1):
        rows = y_apply == c
        paper = (z_apply[rows] - means[c]) @ maps[c]
        F_k = maps[c] * np.sqrt(np.linalg.norm(maps[c], axis=0) ** -2)  # unit columns of F_K
        out[rows] = paper @ F_k.T + c * (r * d_hat / 2) * diff / np.linalg.norm(diff)
        coords[c] = paper
    return out, coords, kept, r


@pytest.fixture(scope="session")
def logits_factory():
    return make_logits


@pytest.fixture(scope="session")
def gaussian_factory():
    return two_class_gaussian
