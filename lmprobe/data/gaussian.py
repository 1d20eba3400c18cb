"""Class-conditional Gaussian inputs of SynBench (Ko et al., arXiv:2210.02989 Sec. 3.1, 3.3, App. D, App. F).

    x | y ~ N(offset + y * s * 1_d / sqrt(d), Sigma),   P(y = +1) = tau,   d = prod(input_shape)

for a grid of scales s (Sec. 3.3: s ~ U{0.1, ..., 5}, so that the Bayes accuracy Phi(s) runs
from 55% to almost 100%). ``offset`` is the paper's translation vector mu_bar (the public code
draws images around 0.5 before the model's normalisation). Sigma is

* ``identity``: I_d (the paper's main experiments);
* ``band``: App. F's block-diagonal covariance with one pentadiagonal Toeplitz block per channel
  (channels independent; inside a channel, positions in C order, i.e. raster order of an image
  or token order of a sequence). It is sampled exactly and without any d x d array as a moving
  average of white noise, x_t = b_0 e_{t+2} + b_1 e_{t+1} + b_2 e_t over a channel's L + 2
  innovations, whose covariance is Toeplitz with autocovariance (c_0, c_1, c_2) =
  (sum b_j^2, b_0 b_1 + b_1 b_2, b_0 b_2) and 0 beyond lag 2. The taps are the minimum-phase
  spectral factor of the requested autocovariance (``band_taps``). * The paper gives no band
  values; DEFAULT_BAND = (1, 0.5, 0.25) keeps unit variance with correlations 0.5 and 0.25.

Every sample is drawn from its own key, fold_in(seed, split, scale, index), on device: the
same seed gives the same data whatever the batch size.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe.errors import LmprobeError

PAPER_SCALES = tuple(round(0.1 * i, 1) for i in range(1, 51))  # U{0.1, ..., 5} (Sec. 3.3)
REFERENCE_SCALES = PAPER_SCALES[:-1]  # the public code's 0.1, ..., 4.9 (49 scales)
SCALE_GRIDS = {"paper": PAPER_SCALES, "reference": REFERENCE_SCALES}
DEFAULT_BAND = (1.0, 0.5, 0.25)
COVARIANCES = ("identity", "band")
SPLITS = {"train": 0, "test": 1}


def band_taps(band: tuple[float, ...]) -> tuple[float, ...]:
    """Moving-average taps b with sum_j b_j b_{j+k} = band[k] (minimum-phase spectral factor).

    ``band`` = (c_0, c_1, ..., c_m) must be a valid autocovariance: its spectral density
    c_0 + 2 sum_k c_k cos(k w) may not be negative anywhere (Fejer-Riesz), else LmprobeError.
    """
    c = np.asarray(band, np.float64)
    if c.ndim != 1 or len(c) < 1 or c[0] <= 0 or not np.all(np.isfinite(c)):
        raise LmprobeError(f"band covariance {tuple(band)} must be finite (c_0, c_1, ...) with variance c_0 > 0")
    w = np.linspace(0.0, np.pi, 4097)
    density = c[0] + 2.0 * np.sum(c[1:, None] * np.cos(np.arange(1, len(c))[:, None] * w), axis=0)
    if density.min() < -1e-9 * c[0]:
        raise LmprobeError(f"band covariance {tuple(band)} is not positive semi-definite (its spectral "
                           f"density reaches {density.min():.3g} < 0): lower the off-diagonal entries")
    while len(c) > 1 and c[-1] == 0:
        c = c[:-1]
    m = len(c) - 1
    if m == 0:
        return (math.sqrt(c[0]),)
    roots = np.roots(np.concatenate([c[::-1], c[1:]]))  # z^m C(z): roots come in pairs (r, 1/r)
    roots = roots[np.argsort(-np.abs(roots))][:m]  # the m roots outside (or on) the unit circle
    taps = np.real(np.poly(roots))[::-1]  # prod (z - r) -> coefficients b_0 .. b_m (up to scale)
    taps *= math.sqrt(c[0] / np.sum(taps**2))
    got = np.array([np.dot(taps[: len(taps) - k], taps[k:]) for k in range(m + 1)])
    if not np.allclose(got, c, rtol=1e-6, atol=1e-6 * c[0]):
        raise LmprobeError(f"band covariance {tuple(band)} has no real moving-average factor; "
                           "choose a strictly positive spectral density")
    return tuple(float(t) for t in taps)


@dataclasses.dataclass(frozen=True)
class GaussianSpec:
    """What one synthetic input looks like: shape, covariance, class prior, translation."""

    input_shape: tuple[int, ...]  # one sample: (C, H, W), (H, W, C), (T, D), (d,) ...
    covariance: str = "identity"
    band: tuple[float, ...] = DEFAULT_BAND  # autocovariance along a channel (covariance="band")
    channel_axis: int | None = None  # independent channels of the band covariance; None: one channel
    prior: float = 0.5  # tau = P(y = +1) (App. D)
    offset: float = 0.0  # mu_bar

    def check(self) -> None:
        if not self.input_shape or any(int(n) < 1 for n in self.input_shape):
            raise LmprobeError(f"input shape {self.input_shape} must be non-empty with positive sizes")
        if self.covariance not in COVARIANCES:
            raise LmprobeError(f"covariance {self.covariance!r} is not one of {', '.join(COVARIANCES)}")
        if not 0 < self.prior < 1:
            raise LmprobeError(f"class prior tau={self.prior} must lie in (0, 1)")
        if self.channel_axis is not None and not -len(self.input_shape) <= self.channel_axis < len(self.input_shape):
            raise LmprobeError(f"channel_axis={self.channel_axis} is not an axis of input shape {self.input_shape}")
        if self.covariance == "band":
            band_taps(self.band)

    @property
    def dim(self) -> int:
        return math.prod(self.input_shape)

    @property
    def channels(self) -> int:
        """Number of independent band blocks C (each of length dim / C)."""
        return 1 if self.channel_axis is None else int(self.input_shape[self.channel_axis])


def scale_code(scale: float) -> int:
    """The integer a scale contributes to the sample keys (micro-units, so 0.1 and 0.10 agree)."""
    return round(float(scale) * 1e6) & 0xFFFFFFFF


def _noise(spec: GaussianSpec, key: jax.Array) -> jax.Array:
    if spec.covariance == "identity":
        return jax.random.normal(key, spec.input_shape, jnp.float32)
    taps = band_taps(spec.band)
    axis = 0 if spec.channel_axis is None else spec.channel_axis % len(spec.input_shape)
    shape = spec.input_shape if spec.channel_axis is not None else (1, *spec.input_shape)
    c, rest = shape[axis], tuple(n for i, n in enumerate(shape) if i != axis)
    length, m = math.prod(rest), len(taps) - 1
    e = jax.random.normal(key, (c, length + m), jnp.float32)
    x = sum(b * e[:, m - j: m - j + length] for j, b in enumerate(taps))  # x_t = sum_j b_j e_{t+m-j}
    x = jnp.moveaxis(x.reshape(c, *rest), 0, axis)
    return x if spec.channel_axis is not None else x[0]


@functools.partial(jax.jit, static_argnames=("spec", "count"))
def _draw(spec: GaussianSpec, key: jax.Array, scale: jax.Array, start: jax.Array, count: int):
    shift = scale / math.sqrt(spec.dim)

    def one(index):
        label_key, noise_key = jax.random.split(jax.random.fold_in(key, index))
        y = jnp.where(jax.random.bernoulli(label_key, spec.prior), 1, -1).astype(jnp.int32)
        return spec.offset + y * shift + _noise(spec, noise_key), y

    return jax.vmap(one)(start + jnp.arange(count, dtype=jnp.uint32))


def sample(spec: GaussianSpec, scale: float, *, seed: int, split: str, start: int, count: int):
    """Samples start .. start + count - 1 of (scale, split): x [count, *input_shape], labels [count]."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), SPLITS[split]), scale_code(scale))
    return _draw(spec, key, jnp.float32(scale), jnp.uint32(start), count)


def batches(spec: GaussianSpec, scale: float, *, seed: int, split: str, n: int, batch_size: int,
            normalize: Callable[[jax.Array], jax.Array] | None = None) -> Iterator[tuple[jax.Array, jax.Array]]:
    """(x, labels) for samples 0 .. n - 1 in batches (the last one cut short), on device.

    ``normalize`` is the model's own input normalisation (e.g. (x - mean) / std per channel),
    applied to every batch. Batches always have ``batch_size`` rows before the cut, so one
    compiled program serves them all.
    """
    spec.check()
    for start in range(0, n, batch_size):
        x, y = sample(spec, scale, seed=seed, split=split, start=start, count=batch_size)
        take = min(batch_size, n - start)
        x, y = x[:take], y[:take]
        yield (normalize(x) if normalize is not None else x), y
