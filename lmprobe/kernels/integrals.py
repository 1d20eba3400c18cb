"""Threshold curves and their exact areas (SynTextBench goodness / score, SynBench E(a_t) / score).

Both papers average a per-task value over the tasks whose accuracy beats a threshold:

    C(a) = (1/n) sum_i v_i 1[a_i > a]

SynTextBench (000 Alg. 1 l. 10-11): v_p = delta_p (mean scaled margin), C = goodness
function s(a), score = int_{a_T}^1 s(a) da. SynBench (003 Eq. 2-3): v_i = expected scaled
bound at scale s_i, C = E(a_t), score = int_{a_t}^1 E_rep / int_{a_t}^1 E_raw.

C is piecewise constant, so its integral is exact in closed form:

    int_L^U C(a) da = (1/n) sum_i v_i max(0, min(a_i, U) - L)

(the public SynBench code uses a Riemann sum on linspace(0.6, 1, 100) instead; evaluate
``threshold_curve`` on that grid to reproduce it). ``valid`` masks padded entries out of both
the sum and n. Values of entries at or below the threshold are ignored (they may be NaN).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _count(accuracies, valid):
    if valid is None:
        return jnp.ones_like(accuracies, bool), jnp.asarray(accuracies.shape[-1], jnp.float32)
    valid = jnp.asarray(valid, bool)
    return valid, jnp.maximum(jnp.sum(valid, axis=-1), 1).astype(jnp.float32)


@jax.jit
def threshold_curve(
    thresholds: jax.Array, accuracies: jax.Array, values: jax.Array, valid: jax.Array | None = None
) -> jax.Array:
    """C(a) = (1/n) sum_i v_i 1[a_i > a] at thresholds [T]; accuracies, values [..., n] -> [..., T]."""
    accuracies = jnp.asarray(accuracies, jnp.float32)
    valid, n = _count(accuracies, valid)
    thresholds = jnp.asarray(thresholds, jnp.float32)
    above = (accuracies[..., None, :] > thresholds[:, None]) & valid[..., None, :]
    total = jnp.sum(jnp.where(above, jnp.asarray(values, jnp.float32)[..., None, :], 0.0), axis=-1)
    return total / n[..., None]


@jax.jit
def threshold_curve_area(
    accuracies: jax.Array,
    values: jax.Array,
    lower: jax.Array | float,
    upper: jax.Array | float = 1.0,
    valid: jax.Array | None = None,
) -> jax.Array:
    """Exact int_lower^upper C(a) da; accuracies, values [..., n], lower/upper broadcast -> [...]."""
    accuracies = jnp.asarray(accuracies, jnp.float32)
    valid, n = _count(accuracies, valid)
    lower = jnp.asarray(lower, jnp.float32)[..., None]
    upper = jnp.asarray(upper, jnp.float32)[..., None]
    length = jnp.clip(jnp.minimum(accuracies, upper) - lower, 0.0, None)
    counted = valid & (length > 0)
    total = jnp.sum(jnp.where(counted, jnp.asarray(values, jnp.float32) * length, 0.0), axis=-1)
    return total / n


def syntextbench_score(
    accuracies: jax.Array, margins: jax.Array, threshold: jax.Array | float, valid: jax.Array | None = None
) -> jax.Array:
    """int_{a_T}^1 s(a) da with s(a) = (1/|P|) sum_{p: a_p > a} delta_p (000 Alg. 1 l. 10-11).

    accuracies a_p and margins delta_p [..., |P|]; threshold a_T broadcasts over leading axes.
    """
    return threshold_curve_area(accuracies, margins, threshold, 1.0, valid)


def synbench_score(
    rep_accuracies: jax.Array,
    rep_bounds: jax.Array,
    raw_accuracies: jax.Array,
    raw_bounds: jax.Array,
    threshold: jax.Array | float,
    valid: jax.Array | None = None,
) -> jax.Array:
    """SynBench-Score = int_{a_t}^1 E_rep(a) da / int_{a_t}^1 E_raw(a) da (003 Eq. 3), exact.

    rep_*: accuracy and mean scaled bound of the representation per scale [..., n];
    raw_*: the same for the raw Gaussian data (theory: gaussian_accuracy, expected_scaled_bound).
    NaN when no raw scale beats the threshold (the ratio is undefined).
    """
    numerator = threshold_curve_area(rep_accuracies, rep_bounds, threshold, 1.0, valid)
    denominator = threshold_curve_area(raw_accuracies, raw_bounds, threshold, 1.0, valid)
    return jnp.where(denominator > 0, numerator / jnp.where(denominator > 0, denominator, 1.0), jnp.nan)
