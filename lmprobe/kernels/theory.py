"""Closed-form accuracy and expected scaled bound of robust Bayes classifiers (SynBench, 003).

These are the reference curves that SynBench compares representations against: what an
(epsilon-robust) Bayes classifier achieves on data that are exactly class-conditional
Gaussian. Degenerate classifiers (w = 0) follow kernels.bayes: an abstaining classifier has
accuracy 0 and expected scaled bound 0; a constant (majority-class) one under imbalance has
accuracy max(tau, 1 - tau) and scaled bound 1.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr, ndtri

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _inverse_mills(r):
    """phi(r) / Phi(r), stable for very negative r."""
    return jnp.exp(-0.5 * r * r - _LOG_SQRT_2PI - log_ndtr(r))


@jax.jit
def robust_accuracy(mean_diff: jax.Array, weight: jax.Array, cov_eigvals: jax.Array) -> jax.Array:
    """Thm 1(iii): a = Phi(mu^T w / ||w||_Sigma), ||w||_Sigma^2 = w^T Sigma w.

    All three [..., d] in the eigenbasis of Sigma (as returned by kernels.robust.robust_direction),
    so w^T Sigma w = sum_i lambda_i w_i^2. Returns 0 for w = 0 (abstaining classifier).
    """
    signal = jnp.sum(mean_diff * weight, axis=-1)
    noise = jnp.sqrt(jnp.sum(cov_eigvals * weight * weight, axis=-1))
    degenerate = noise == 0
    return jnp.where(degenerate, 0.0, ndtr(signal / jnp.where(degenerate, 1.0, noise)))


@jax.jit
def gaussian_accuracy(mean_diff_norm: jax.Array) -> jax.Array:
    """Thm 1(iii) for Sigma = I: a = Phi(||mu||); every epsilon-robust classifier coincides.

    SynBench's raw data have mu = s 1_d / sqrt(d), so a = Phi(s) for scale s.
    """
    return ndtr(jnp.asarray(mean_diff_norm, jnp.float32))


@jax.jit
def expected_scaled_bound(accuracy: jax.Array) -> jax.Array:
    """Thm 1(iv): E[||Delta-bar||_2 | f(x) = y] = 1 + phi(Phi^{-1}(a)) / (a Phi^{-1}(a)).

    Defined for 1/2 < a <= 1 (it diverges as a -> 1/2 and equals 1 at a = 1); NaN elsewhere.
    It also holds for l_p budgets (Thm 2(iv)).
    """
    a = jnp.asarray(accuracy, jnp.float32)
    inside = (a > 0.5) & (a <= 1.0)
    r = ndtri(jnp.where(inside, a, 0.75))
    bound = 1.0 + jnp.exp(-0.5 * r * r - _LOG_SQRT_2PI) / (a * r)
    return jnp.where(inside, bound, jnp.nan)


def _imbalanced(mean_diff_norm, epsilon, tau):
    """Shared quantities of Thm 3: w = mu (1 - eps/||mu||), Sigma = I."""
    norm = jnp.asarray(mean_diff_norm, jnp.float32)
    tau = jnp.asarray(tau, jnp.float32)
    w_norm = norm - jnp.asarray(epsilon, jnp.float32)  # ||w||
    degenerate = w_norm <= 0
    safe_w = jnp.where(degenerate, 1.0, w_norm)
    half_q = 0.5 * (jnp.log1p(-tau) - jnp.log(tau))
    centre = norm * safe_w  # mu^T w
    a_pos = (centre - half_q) / safe_w  # standardised distance of the y = +1 class
    a_neg = (centre + half_q) / safe_w  # ... and of the y = -1 class
    return tau, half_q, centre, safe_w, a_pos, a_neg, degenerate


def _degenerate_accuracy(tau, half_q):
    """w = 0: f = sign(-q/2) always predicts the majority class (abstains when balanced)."""
    return jnp.where(half_q < 0, tau, jnp.where(half_q > 0, 1.0 - tau, 0.0))


@jax.jit
def imbalanced_accuracy(mean_diff_norm: jax.Array, epsilon: jax.Array, tau: jax.Array) -> jax.Array:
    """Thm 3(iii): a = tau Phi((mu^T w - q/2)/||w||) + (1 - tau) Phi((mu^T w + q/2)/||w||).

    Sigma = I, w = mu (1 - eps/||mu||), q = ln((1 - tau)/tau); arguments broadcast.
    """
    tau, half_q, _, _, a_pos, a_neg, degenerate = _imbalanced(mean_diff_norm, epsilon, tau)
    accuracy = tau * ndtr(a_pos) + (1.0 - tau) * ndtr(a_neg)
    return jnp.where(degenerate, _degenerate_accuracy(tau, half_q), accuracy)


@functools.partial(jax.jit, static_argnames=("weighting",))
def imbalanced_expected_scaled_bound(
    mean_diff_norm: jax.Array,
    epsilon: jax.Array,
    tau: jax.Array,
    *,
    weighting: str = "conditional",
) -> jax.Array:
    """Thm 3(iv): expected scaled bound |t^T w - q/2| / |mu^T w - q/2| of correct samples.

    With A = (mu^T w - q/2)/||w||, B = (mu^T w + q/2)/||w|| the truncated-normal means are
    E_+ = mu^T w - q/2 + ||w|| phi(A)/Phi(A) and E_- = mu^T w + q/2 + ||w|| phi(B)/Phi(B).

    weighting="conditional" (default): E[. | f(x) = y], which weights the classes by their
    share of the correctly classified samples, tau Phi(A) / a and (1 - tau) Phi(B) / a. This is
    what the empirical mean over correct samples estimates. weighting="prior": the formula as
    printed in 003 Thm 3(iv), with weights tau and 1 - tau; it differs from the conditional
    expectation unless tau = 1/2 (then both equal Thm 1(iv)).
    """
    tau, half_q, centre, w_norm, a_pos, a_neg, degenerate = _imbalanced(mean_diff_norm, epsilon, tau)
    scale = jnp.abs(centre - half_q)
    e_pos = centre - half_q + w_norm * _inverse_mills(a_pos)
    e_neg = centre + half_q + w_norm * _inverse_mills(a_neg)
    if weighting == "conditional":
        p_pos, p_neg = tau * ndtr(a_pos), (1.0 - tau) * ndtr(a_neg)
        bound = (p_pos * e_pos + p_neg * e_neg) / ((p_pos + p_neg) * scale)
    elif weighting == "prior":
        bound = (tau * e_pos + (1.0 - tau) * e_neg) / (centre - half_q)
    else:
        raise ValueError(f"weighting must be 'conditional' or 'prior', got {weighting!r}")
    return jnp.where(degenerate, jnp.where(half_q == 0, 0.0, 1.0), bound)
