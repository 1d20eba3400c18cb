"""SynBench's closed forms: the raw-data reference (Thm 1-3), the score's integration (Eq. 2-3), and the
Bayes classifier at a squared Mahalanobis distance (the bias-corrected score's model)."""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
from scipy.linalg import solveh_banded
from scipy.optimize import brentq

from lmprobe import kernels
from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError
from lmprobe.methods.synbench.config import (
    Config,
)

# --------------------------------------------------------------------------------------
# Raw-data reference (Thm 1-3)
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Reference:
    accuracy: np.ndarray  # [S, E]
    bound: np.ndarray  # [S, E] expected scaled bound of correctly classified samples


def _band_statistics(band, length: int, rho: float) -> tuple[float, float]:
    """(u^T w, ||w||_Sigma) for unit-scale u = 1_L / sqrt(L), w = (T + kappa I)^{-1} u with
    kappa chosen so that ||kappa w|| = rho ||u|| (T: one Toeplitz band block of length L)."""
    c = np.asarray(band, np.float64)
    m = len(c) - 1
    ab = np.zeros((m + 1, length))
    for k in range(m + 1):  # upper banded storage of solveh_banded
        ab[m - k, k:] = c[k]
    ones = np.ones(length) / math.sqrt(length)

    def solve(kappa):
        shifted = ab.copy()
        shifted[m] += kappa
        return solveh_banded(shifted, ones, overwrite_ab=True, check_finite=False)

    # ||kappa w(kappa)|| grows from 0 to ||u|| = 1: Brent's root find on ln kappa
    gap = lambda t: math.exp(t) * np.linalg.norm(solve(math.exp(t))) - rho
    kappa = math.exp(brentq(gap, -40.0, 40.0, xtol=1e-10)) if rho > 0 else 0.0
    w = solve(kappa)
    tw = c[0] * w
    for k in range(1, m + 1):
        tw[k:] += c[k] * w[:-k]
        tw[:-k] += c[k] * w[k:]
    return float(ones @ w), float(math.sqrt(max(w @ tw, 0.0)))


def raw_reference(config: Config, spec: gaussian.GaussianSpec) -> Reference:
    """Accuracy and expected scaled bound of the eps-robust Bayes classifier on the raw data.

    Identity covariance, l_p budget: z_Sigma is the projection of the constant vector mu onto
    the l_p ball, again constant, so w = mu (1 - e/s) with e = eps * s (relative) or
    min(s, eps d^{1/2 - 1/p}) (absolute): Thm 1 / Thm 3 with ||w|| = s - e. Band covariance:
    banded solves (see _band_statistics). Balanced classes give Thm 1 (iii)-(iv) exactly.
    """
    s = np.asarray(config.scales, np.float64)[:, None]
    eps = np.asarray(config.epsilons, np.float64)[None, :]
    if config.covariance == "identity":
        e = eps * s if config.relative_epsilon else eps * spec.dim ** (0.5 - 1.0 / config.norm) + 0.0 * s
        noise = np.maximum(s - e, 0.0)
        signal = s * noise
    else:
        length = spec.dim // spec.channels
        signal, noise = np.zeros((len(s), eps.shape[1])), np.zeros((len(s), eps.shape[1]))
        memo = {}
        for i, scale in enumerate(s[:, 0]):
            for j, budget in enumerate(eps[0]):
                rho = budget if config.relative_epsilon else budget / scale
                if rho >= 1:
                    continue  # degenerate: w = 0
                key = round(rho, 12)
                if key not in memo:
                    memo[key] = _band_statistics(config.band, length, rho)
                uw, unorm = memo[key]
                signal[i, j], noise[i, j] = scale * scale * uw, scale * unorm
    degenerate = noise <= 0
    safe = np.where(degenerate, 1.0, noise)
    norm_equiv = np.where(degenerate, 0.0, signal / safe)  # Thm 3 with ||mu|| -> mu^T w / ||w||_Sigma
    eps_equiv = np.where(degenerate, 1.0, norm_equiv - noise)
    accuracy = kernels.imbalanced_accuracy(norm_equiv, eps_equiv, config.prior)
    bound = kernels.imbalanced_expected_scaled_bound(norm_equiv, eps_equiv, config.prior)
    return Reference(np.asarray(accuracy, np.float64), np.asarray(bound, np.float64))


# --------------------------------------------------------------------------------------
# Scores (Eq. 2-3)
# --------------------------------------------------------------------------------------


def synbench_scores(rep_acc, rep_bound, raw: Reference, config: Config) -> np.ndarray:
    """SynBench-Score [A, E] for every threshold a_t and epsilon, exact areas."""
    t = jnp.asarray(config.a_t, jnp.float32)[:, None]
    score = kernels.synbench_score(jnp.asarray(rep_acc).T, jnp.asarray(rep_bound).T,
                                   jnp.asarray(raw.accuracy).T, jnp.asarray(raw.bound).T, t)
    return np.asarray(score, np.float64)


def unbiased_squared_distance(d2, n1, n2, k) -> np.ndarray:
    """D_u^2 = (n - k - 3) / (n - 2) D^2 - k (1/n1 + 1/n2), clipped at 0; NaN where n - k - 3 <= 0.

    D^2 = (m_1 - m_2)^T S^{-1} (m_1 - m_2) is the plug-in squared Mahalanobis distance of class
    means m_y over n_y samples with the pooled covariance S (divisor n - 2, n = n1 + n2) in k
    dimensions. For Gaussian classes, (n - 2) S ~ Wishart_k(n - 2, Sigma) independent of
    m_1 - m_2 ~ N(delta, (1/n1 + 1/n2) Sigma), so E[S^{-1}] = (n - 2) / (n - k - 3) Sigma^{-1} and
    E[D^2] = (n - 2) / (n - k - 3) (Delta^2 + k (1/n1 + 1/n2)) (McLachlan, Discriminant Analysis
    and Statistical Pattern Recognition, Sec. 10.4; Lachenbruch & Mickey): D_u^2 is unbiased for
    Delta^2 before the clip. Arguments broadcast.
    """
    d2, n1, n2, k = (np.asarray(v, np.float64) for v in (d2, n1, n2, k))
    n = n1 + n2
    defined = (n - k - 3 > 0) & (n1 > 0) & (n2 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (n - k - 3) / (n - 2) * d2 - k * (1.0 / n1 + 1.0 / n2)
    return np.where(defined, np.maximum(value, 0.0), np.nan)


def bayes_accuracy_bound(distance2, prior: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """(accuracy, expected scaled bound of correct samples) of the eps = 0 Bayes classifier of
    two Gaussian classes at squared Mahalanobis distance ``distance2`` between their means: the
    raw reference's formulas (Thm 3 (iii)-(iv); Phi(Delta / 2) and Thm 1(iv) at prior 1/2) with
    ||mu||_Sigma = Delta / 2. NaN stays NaN."""
    half = 0.5 * jnp.sqrt(jnp.asarray(distance2, jnp.float32))
    return (np.asarray(kernels.imbalanced_accuracy(half, 0.0, prior), np.float64),
            np.asarray(kernels.imbalanced_expected_scaled_bound(half, 0.0, prior), np.float64))


def eps0_scores(accuracy, bound, raw: Reference, config: Config) -> np.ndarray:
    """SynBench-Score [A] at eps = 0 of per-scale accuracies and expected bounds [S] against the
    raw reference's eps = 0 column: the plug-in score's integration (``synbench_scores``)."""
    j = next(j for j, e in enumerate(config.epsilons) if e == 0)
    column = Reference(raw.accuracy[:, j:j + 1], raw.bound[:, j:j + 1])
    one = dataclasses.replace(config, epsilons=(0.0,))
    return synbench_scores(np.asarray(accuracy)[:, None], np.asarray(bound)[:, None], column, one)[:, 0]


def population_scores(half_distances, config: Config, spec: gaussian.GaussianSpec | None = None) -> np.ndarray:
    """True SynBench-Score [A] at eps = 0 of a representation whose classes are Gaussian with
    Mahalanobis half-distance ``half_distances`` [S] (Delta / 2 per scale; the identity: the raw
    data's own) against the raw reference of ``spec`` (default: identity covariance)."""
    spec = spec or gaussian.GaussianSpec((1,), config.covariance, tuple(config.band), None, config.prior)
    zero = dataclasses.replace(config, epsilons=(0.0,))
    accuracy, bound = bayes_accuracy_bound(4.0 * np.square(np.asarray(half_distances, np.float64)), config.prior)
    return eps0_scores(accuracy, bound, raw_reference(zero, spec), zero)


def check_reference(raw: Reference, config: Config) -> None:
    """Every a_t needs raw scales above it, else the score's denominator is 0."""
    best = raw.accuracy.max(axis=0)
    if max(config.a_t) >= best.min():
        raise LmprobeError(f"a_t={max(config.a_t)} is not below the best raw-data accuracy {best.min():.6f} "
                           f"of the scale grid (largest s={max(config.scales)}): lower a_t or add larger scales")
