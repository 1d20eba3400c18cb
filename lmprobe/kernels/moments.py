"""First and second moments of a two-class sample, and their spectra.

Labels follow one convention across kernels/: +1 and -1 name the two classes and 0 marks
a padding row that is ignored, so that tasks of different sizes can be stacked on a
leading axis. Class index 0 is y = +1, class index 1 is y = -1.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp


class ClassMoments(NamedTuple):
    counts: jax.Array  # [..., 2]        samples per class (y = +1, y = -1)
    means: jax.Array  # [..., 2, d]      b_y
    covariances: jax.Array  # [..., 2, d, d]  unbiased: scatter / (n_y - 1)


def class_weights(labels: jax.Array) -> jax.Array:
    """[..., n] labels in {+1, -1, 0} -> [..., 2, n] float indicators of y = +1 and y = -1."""
    labels = jnp.asarray(labels)
    return jnp.stack([labels > 0, labels < 0], axis=-2).astype(jnp.float32)


def _class_means(z, labels):
    weights = class_weights(labels)  # [2, n]
    counts = weights.sum(-1)
    return weights, counts, (weights @ z) / jnp.maximum(counts, 1.0)[:, None]


@jax.jit
def class_means(z: jax.Array, labels: jax.Array) -> jax.Array:
    """Class means [..., 2, d] (b_{+1}, b_{-1}) of z [..., n, d]; labels [..., n] in {+1, -1, 0}."""
    z = jnp.asarray(z, jnp.float32)
    return jnp.vectorize(lambda z, y: _class_means(z, y)[2], signature="(n,d),(n)->(c,d)")(z, labels)


def _class_moments(z, labels):
    weights, counts, means = _class_means(z, labels)
    centred = z[None] - means[:, None]  # [2, n, d]: every row centred on both class means
    scatter = jnp.einsum("cn,cni,cnj->cij", weights, centred, centred)
    covariances = scatter / jnp.maximum(counts - 1.0, 1.0)[:, None, None]
    return counts, means, covariances


@jax.jit
def class_moments(z: jax.Array, labels: jax.Array) -> ClassMoments:
    """Per-class count, mean b_y and covariance Sigma_y (divisor n_y - 1).

    z: [..., n, d] float, labels: [..., n] in {+1, -1, 0}; leading axes are tasks.
    A class with fewer than two samples gets its scatter divided by 1.
    """
    z = jnp.asarray(z, jnp.float32)
    fn = jnp.vectorize(_class_moments, signature="(n,d),(n)->(c),(c,d),(c,d,d)")
    return ClassMoments(*fn(z, labels))


def pooled_covariance(moments: ClassMoments) -> jax.Array:
    """Within-class covariance shared by the two classes: sum_y (n_y - 1) Sigma_y / (n - 2)."""
    dof = jnp.maximum(moments.counts - 1.0, 0.0)
    total = jnp.maximum(dof.sum(-1), 1.0)
    return jnp.einsum("...c,...cij->...ij", dof, moments.covariances) / total[..., None, None]


def symmetric_eigh(x: jax.Array, vectors: bool = True):
    """(eigvals ascending [..., d], eigvecs [..., d, d] as columns) of symmetric matrices [..., d, d];
    the eigenvalues alone when not ``vectors``.

    On TPU by Jacobi rotations: jax's TPU default (QDWH divide and conquer) makes a program that
    libtpu takes minutes to compile at d = 512 and far longer at a large model's width
    (docs/performance.md); elsewhere jnp.linalg.eigh / eigvalsh (LAPACK on CPU).
    """
    def jacobi(x):
        eigvecs, eigvals = jax.lax.linalg.eigh(x, implementation=jax.lax.linalg.EighImplementation.JACOBI)
        return (eigvals, eigvecs) if vectors else eigvals

    def lapack(x):
        return tuple(jnp.linalg.eigh(x)) if vectors else jnp.linalg.eigvalsh(x)

    return jax.lax.platform_dependent(x, tpu=jacobi, default=lapack)


def in_sequence(fn, *arrays, task_axes: int):
    """``fn(*arrays)`` one task at a time (lax.map) over the ``task_axes`` leading axes every array shares;
    ``fn`` takes any leading axes. A task's temporaries, not all tasks' at once."""
    lead = arrays[0].shape[:task_axes]
    flat = [a.reshape((-1, *a.shape[task_axes:])) for a in arrays]
    out = jax.lax.map(lambda task: fn(*task), flat)
    return jax.tree.map(lambda o: o.reshape((*lead, *o.shape[1:])), out)


def in_sequence_on_tpu(fn, *arrays, task_axes: int):
    """``fn(*arrays)``, one task at a time on TPU (``in_sequence``: a chip holds one task's d x d
    eigen-decompositions of a large model's width, not all tasks'), all at once elsewhere."""
    return jax.lax.platform_dependent(*arrays, tpu=functools.partial(in_sequence, fn, task_axes=task_axes),
                                      default=fn)


def descending_eigh(cov: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Eigen-decomposition of symmetric PSD matrices [..., d, d], largest eigenvalue first.

    For a symmetric PSD matrix this is its SVD F S F^T; round-off negatives are set to 0.
    Returns (eigvals [..., d], eigvecs [..., d, d] with eigenvectors as columns).
    """
    eigvals, eigvecs = symmetric_eigh(cov)
    return jnp.maximum(eigvals[..., ::-1], 0.0), eigvecs[..., ::-1]


def numerical_support(eigvals: jax.Array, rtol: float | None = None, atol: float = 0.0) -> jax.Array:
    """Mask of eigenvalues (sorted descending) that are numerically nonzero.

    Keeps lambda > max(atol, rtol * lambda_max); the default rtol = d * eps(float32) is the
    tolerance of numpy.linalg.matrix_rank. Guards S^{-1/2} and Sigma^{-1} against the
    noise eigenvalues of rank-deficient covariances (fewer samples than dimensions).
    """
    d = eigvals.shape[-1]
    if rtol is None:
        rtol = d * float(jnp.finfo(jnp.float32).eps)
    cutoff = jnp.maximum(atol, rtol * eigvals[..., :1])
    return eigvals > cutoff
