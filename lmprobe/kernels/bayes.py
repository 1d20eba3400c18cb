"""Linear (robust) Bayes classifiers on class-conditional Gaussians: decisions and margins.

A classifier here is f(x) = sign(w^T (x - c) - q/2) with midpoint c = (mu_1 + mu_2)/2,
mean difference mu = (mu_1 - mu_2)/2 and q = ln((1 - tau)/tau) for the prior tau = P(y = +1)
(q = 0 for balanced classes). For a sample x it has (003 Thm 1-3, 000 Sec. 2.3 / App. A.8)

    margin         ||Delta||_p   = |w^T (x - c) - q/2| / ||w||_q         (1/p + 1/q = 1)
    scaled margin  ||Delta-bar|| = |w^T (x - c) - q/2| / |mu^T w - q/2|

(the distance to the boundary, and the same divided by the class-centre distance). A score of
exactly 0 is an abstention: prediction 0, never correct. This is how a degenerate robust
classifier (w = 0, see kernels.robust) is scored.

Two pipelines sit on top: SynTextBench's Algorithm 1 lines 4-7 (whitening, Bayes classifier
on whitened classes, accuracy and mean scaled margin) and SynBench's representation side
(class means, pooled covariance, robust classifiers for many epsilons).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lmprobe.kernels.moments import (
    class_moments,
    descending_eigh,
    in_sequence_on_tpu,
    numerical_support,
    pooled_covariance,
)
from lmprobe.kernels.robust import robust_direction
from lmprobe.kernels.whitening import DEFAULT_ENERGY, apply_class_whitening, fit_class_whitening


class LinearMargins(NamedTuple):
    prediction: jax.Array  # [..., n] int32 in {+1, -1, 0 (abstain)}
    correct: jax.Array  # [..., n] bool (False for padding rows)
    margin: jax.Array  # [..., n] ||Delta||_p
    scaled_margin: jax.Array  # [..., n] ||Delta-bar||


class MarginSummary(NamedTuple):
    accuracy: jax.Array  # [...] correct / non-padding samples
    mean_margin: jax.Array  # [...] mean ||Delta||_p over correctly classified samples (0 if none)
    mean_scaled_margin: jax.Array  # [...] mean ||Delta-bar|| over correctly classified samples


def _linear_margins(x, labels, midpoint, weight, mean_diff, tau, norm_ord, scaling):
    half_q = 0.5 * (jnp.log1p(-tau) - jnp.log(tau))
    score = (x - midpoint) @ weight - half_q
    prediction = jnp.sign(score).astype(jnp.int32)
    correct = (prediction == labels) & (labels != 0)
    centre = mean_diff @ weight
    if scaling == "positive_class":  # 003 Thm 1(ii) / Thm 3(ii): distance of the y = +1 centre
        scale = jnp.abs(centre - half_q)
    elif scaling == "both_classes":  # 000 App. A.8: mean distance of the two centres
        scale = 0.5 * (jnp.abs(centre - half_q) + jnp.abs(centre + half_q))
    else:
        raise ValueError(f"scaling must be 'positive_class' or 'both_classes', got {scaling!r}")
    size = jnp.abs(score)
    dual_norm = jnp.linalg.norm(weight, ord=norm_ord)
    margin = jnp.where(size > 0, size / jnp.where(dual_norm > 0, dual_norm, 1.0), 0.0)
    scaled = jnp.where(size > 0, size / scale, 0.0)
    return prediction, correct, margin, scaled


@functools.partial(jax.jit, static_argnames=("norm_ord", "scaling"))
def linear_margins(
    x: jax.Array,
    labels: jax.Array,
    midpoint: jax.Array,
    weight: jax.Array,
    mean_diff: jax.Array,
    *,
    tau: jax.Array | float = 0.5,
    norm_ord: float = 2.0,
    scaling: str = "positive_class",
) -> LinearMargins:
    """Decisions and margins of f(x) = sign(w^T (x - c) - q/2) for samples x [..., n, d].

    labels [..., n] in {+1, -1, 0}; midpoint c, weight w, mean_diff mu [..., d]; tau [...].
    ``norm_ord`` is the dual exponent q of an l_p budget (003 Thm 2: 2 for l2, 1 for linf,
    inf for l1). ``scaling="positive_class"`` divides by the distance of the y = +1 centre to
    the boundary (003 Thm 1(ii), 3(ii)); ``"both_classes"`` by the mean distance of the two
    centres, the imbalanced-class scaling of SynTextBench App. A.8. Equal when tau = 1/2.
    """
    fn = jnp.vectorize(
        functools.partial(_linear_margins, norm_ord=norm_ord, scaling=scaling),
        signature="(n,d),(n),(d),(d),(d),()->(n),(n),(n),(n)",
    )
    x = jnp.asarray(x, jnp.float32)
    return LinearMargins(*fn(x, labels, midpoint, weight, mean_diff, jnp.asarray(tau, jnp.float32)))


@jax.jit
def summarize_margins(margins: LinearMargins, labels: jax.Array) -> MarginSummary:
    """Accuracy over non-padding samples and mean margins over the correctly classified ones."""
    valid = jnp.sum(jnp.asarray(labels) != 0, axis=-1)
    correct = margins.correct.astype(jnp.float32)
    num_correct = correct.sum(-1)
    denominator = jnp.maximum(num_correct, 1.0)
    return MarginSummary(
        accuracy=num_correct / jnp.maximum(valid, 1),
        mean_margin=jnp.sum(correct * margins.margin, -1) / denominator,
        mean_scaled_margin=jnp.sum(correct * margins.scaled_margin, -1) / denominator,
    )


# --------------------------------------------------------------------------------------
# SynTextBench (000 Algorithm 1, lines 4-7)
# --------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("energy", "rtol"))
def syntextbench_accuracy_margin(
    z_train: jax.Array,
    labels_train: jax.Array,
    z_test: jax.Array,
    labels_test: jax.Array,
    *,
    energy: float = DEFAULT_ENERGY,
    rtol: float | None = None,
) -> MarginSummary:
    """(a_p, delta_p) of one synthetic task, batched over leading task axes.

    Fits the class-wise whitening T_y on the training split (kernels.whitening), whitens the
    test split with the transform of each sample's class (line 5), takes the Bayes classifier
    sign(mu^T (z_hat - (mu_1 + mu_2)/2)) with mu = (mu_1 - mu_2)/2 from the whitened training
    means (line 6; they are exactly the class centres of the whitening), and returns its test
    accuracy and the mean scaled margin |(z_hat - c)^T mu| / ||mu||^2 over correctly
    classified test samples (line 7). z_*: [..., n, d], labels_*: [..., n] in {+1, -1, 0}.
    """
    def tasks(z_train, labels_train, z_test, labels_test):
        params = fit_class_whitening(z_train, labels_train, energy=energy, rtol=rtol)
        z_hat = apply_class_whitening(params, z_test, labels_test)
        mu_1, mu_2 = params.centres[..., 0, :], params.centres[..., 1, :]
        mean_diff = 0.5 * (mu_1 - mu_2)
        margins = linear_margins(z_hat, labels_test, 0.5 * (mu_1 + mu_2), mean_diff, mean_diff)
        return summarize_margins(margins, labels_test)

    return in_sequence_on_tpu(tasks, z_train, labels_train, z_test, labels_test, task_axes=z_train.ndim - 2)


# --------------------------------------------------------------------------------------
# SynBench, representation side (003 Sec. 3.2.2)
# --------------------------------------------------------------------------------------


class GaussianClassModel(NamedTuple):
    """N(mu_1, Sigma), N(mu_2, Sigma) fitted to a labelled sample, in Sigma's eigenbasis."""

    midpoint: jax.Array  # [..., d]    (mu_1 + mu_2) / 2
    mean_diff: jax.Array  # [..., d]    F^T (mu_1 - mu_2) / 2, 0 outside the support
    eigvecs: jax.Array  # [..., d, d] F (columns, largest eigenvalue first)
    eigvals: jax.Array  # [..., d]    eigenvalues of the pooled covariance, 0 outside the support


@functools.partial(jax.jit, static_argnames=("eig_atol", "rtol"))
def fit_gaussian_classes(
    z: jax.Array, labels: jax.Array, *, eig_atol: float = 1e-6, rtol: float | None = None
) -> GaussianClassModel:
    """Class means and pooled covariance, eigendecomposed; eigenvalues <= max(eig_atol,
    rtol * lambda_max) are dropped (the public SynBench code drops those <= 1e-6)."""
    moments = class_moments(z, labels)
    eigvals, eigvecs = descending_eigh(pooled_covariance(moments))
    support = numerical_support(eigvals, rtol, eig_atol)
    mu_1, mu_2 = moments.means[..., 0, :], moments.means[..., 1, :]
    mean_diff = jnp.einsum("...ij,...i->...j", eigvecs, 0.5 * (mu_1 - mu_2))
    return GaussianClassModel(
        midpoint=0.5 * (mu_1 + mu_2),
        mean_diff=jnp.where(support, mean_diff, 0.0),
        eigvecs=eigvecs,
        eigvals=jnp.where(support, eigvals, 0.0),
    )


@functools.partial(
    jax.jit, static_argnames=("relative_epsilon", "eig_atol", "rtol", "num_iters")
)
def synbench_accuracy_bound(
    z_train: jax.Array,
    labels_train: jax.Array,
    z_test: jax.Array,
    labels_test: jax.Array,
    epsilons: jax.Array,
    *,
    tau: jax.Array | float = 0.5,
    relative_epsilon: bool = False,
    eig_atol: float = 1e-6,
    rtol: float | None = None,
    num_iters: int = 60,
) -> MarginSummary:
    """Accuracy and mean scaled bound (003 Thm 1(ii)) of the epsilon-robust Bayes classifiers.

    Fits the Gaussian class model on the training split, solves z_Sigma for every epsilon
    (kernels.robust.robust_direction) and scores the test split in the eigenbasis.
    z_*: [..., n, d] (leading axes e.g. the 49 SynBench scales), labels_* [..., n],
    epsilons [E] -> summaries of shape [..., E]. ``tau`` = P(y = +1) shifts the decision
    threshold by q/2 (003 Thm 3, Eq. 5); 1/2 is the balanced classifier of Thm 1.
    """
    model = fit_gaussian_classes(z_train, labels_train, eig_atol=eig_atol, rtol=rtol)
    robust = robust_direction(
        model.mean_diff[..., None, :],
        model.eigvals[..., None, :],
        jnp.asarray(epsilons, jnp.float32),
        relative_epsilon=relative_epsilon,
        num_iters=num_iters,
    )
    centred = jnp.asarray(z_test, jnp.float32) - model.midpoint[..., None, :]
    projected = centred @ model.eigvecs  # test samples in the eigenbasis
    margins = linear_margins(
        projected[..., None, :, :],
        labels_test[..., None, :],
        jnp.zeros_like(model.mean_diff)[..., None, :],
        robust.weight,
        model.mean_diff[..., None, :],
        tau=tau,
    )
    return summarize_margins(margins, labels_test[..., None, :])
