"""Class-wise whitening of sentence embeddings (SynTextBench, 000 Sec. 2.3; Algorithm 1 l. 4-5).

For each class y the paper models the embeddings z_y by their mean b_y and covariance
Sigma_y = F S F^T (SVD), keeps the K leading directions with

    K = argmin_k  (s_1 + ... + s_k) / (s_1 + ... + s_n) >= energy   (energy = 0.99),

s_i the i-th largest singular value of Sigma_y (= its i-th eigenvalue, the variance along
F_i: this is the "energy" of Leskovec et al., the squared singular values of the centred data
matrix), and maps z -> F_{:,1:K}^T S_{1:K}^{-1/2} z. The two whitened classes are then placed
so that their distance reflects d_inter / d_intra, with d_inter = ||b_1 - b_-1|| and d_intra
the mean distance of a training sample to its class mean.

Choices where the paper is not explicit (the lead's issue asks us to document them):

* Centring. The map is applied to z - b_y, so each whitened class has mean 0 and identity
  covariance on its K kept directions before it is placed.
* One frame for both classes. F_y^T maps each class to its own K_y coordinates, and two
  such frames cannot be compared (different bases, possibly different K). We use the
  equivalent ZCA form F_K S_K^{-1/2} F_K^T (z - b_y), i.e. the paper's coordinates mapped back
  isometrically with F_K: distances within each class are exactly the paper's, both classes
  live in R^d, and the result does not depend on the signs of eigenvectors. Directions
  beyond K are set to 0.
* Placement. "Scale the distance between two whitened Gaussians by d_inter / d_intra, since
  we want the transformed embeddings to observe the original relative distance between two
  classes": the whitened classes keep the ratio of inter-class to intra-class distance they
  had before whitening. With r = d_inter / d_intra and d_hat the mean distance of a whitened
  training sample to its class centre (about sqrt(K)), the centres go to +-(r d_hat / 2) u,
  u = (b_1 - b_-1) / ||b_1 - b_-1||, so ||mu_1 - mu_2|| / d_hat = r. (Placing them at
  distance r itself would compare r with the unit spread of one direction instead of the
  intra-class distance, and leave every real encoder near chance on every level.) This is
  the model N(mu_1, I_K), N(mu_2, I_K) of Sec. 2.3, and the whole pipeline is invariant to
  rotations and translations of the embeddings.
* Stability. Eigenvalues that are numerically zero (moments.numerical_support) are never
  kept, even with energy = 1, so rank-deficient covariances (n_y <= d) give no NaN.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lmprobe.kernels.moments import class_moments, descending_eigh, numerical_support

DEFAULT_ENERGY = 0.99


class ClassWhitening(NamedTuple):
    """Fitted transforms T_{+1}, T_{-1}; class index 0 is y = +1, 1 is y = -1."""

    means: jax.Array  # [..., 2, d]      b_y
    matrices: jax.Array  # [..., 2, d, d]   F_K S_K^{-1/2} F_K^T (symmetric)
    num_kept: jax.Array  # [..., 2]         K_y
    centres: jax.Array  # [..., 2, d]      where each whitened class is placed: +-(r d_hat / 2) u
    separation: jax.Array  # [...]            r = d_inter / d_intra (before whitening)


def energy_rank(eigvals: jax.Array, energy: float = DEFAULT_ENERGY) -> jax.Array:
    """Smallest k with sum_{i<=k} s_i / sum_i s_i >= energy, for s sorted descending, >= 0.

    [..., d] -> [...] int32 in [0, d]; 0 only when all s_i are 0.
    """
    cumulative = jnp.cumsum(eigvals, axis=-1)
    total = cumulative[..., -1:]
    below = cumulative < energy * total
    k = jnp.sum(below, axis=-1) + 1
    return jnp.where(total[..., 0] > 0, jnp.minimum(k, eigvals.shape[-1]), 0).astype(jnp.int32)


def whitening_transform(
    cov: jax.Array, energy: float = DEFAULT_ENERGY, rtol: float | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Energy-truncated inverse square root of covariances [..., d, d].

    Returns (eigvecs F [..., d, d], inv_sqrt [..., d] = s^{-1/2} on the K kept directions and
    0 elsewhere, K [...]). The paper's map is z -> (F^T z) * inv_sqrt (first K entries).
    """
    eigvals, eigvecs = descending_eigh(cov)
    k = energy_rank(eigvals, energy)
    kept = (jnp.arange(eigvals.shape[-1]) < k[..., None]) & numerical_support(eigvals, rtol)
    inv_sqrt = jnp.where(kept, jax.lax.rsqrt(jnp.where(kept, eigvals, 1.0)), 0.0)
    return eigvecs, inv_sqrt, jnp.sum(kept, axis=-1).astype(jnp.int32)


def _separation(z, labels, means):
    """r = d_inter / d_intra and the unit direction u from b_-1 to b_+1 (Sec. 2.3)."""
    diff = means[0] - means[1]
    d_inter = jnp.linalg.norm(diff)
    own_mean = jnp.where((labels > 0)[:, None], means[0], means[1])
    valid = labels != 0
    dist = jnp.where(valid, jnp.linalg.norm(z - own_mean, axis=-1), 0.0)
    d_intra = dist.sum() / jnp.maximum(valid.sum(), 1)
    r = jnp.where(d_intra > 0, d_inter / jnp.where(d_intra > 0, d_intra, 1.0), 0.0)
    u = jnp.where(d_inter > 0, diff / jnp.where(d_inter > 0, d_inter, 1.0), 0.0)
    return r, u


@functools.partial(jax.jit, static_argnames=("energy", "rtol"))
def fit_class_whitening(
    z: jax.Array, labels: jax.Array, *, energy: float = DEFAULT_ENERGY, rtol: float | None = None
) -> ClassWhitening:
    """Fits T_{+1}, T_{-1} on training embeddings z [..., n, d] with labels [..., n] in {+1,-1,0}.

    Leading axes are independent tasks (e.g. the 20 difficulty levels of SynTextBench).
    """
    z = jnp.asarray(z, jnp.float32)
    moments = class_moments(z, labels)
    eigvecs, inv_sqrt, k = whitening_transform(moments.covariances, energy, rtol)
    matrices = jnp.einsum("...ik,...k,...jk->...ij", eigvecs, inv_sqrt, eigvecs)
    r, u = jnp.vectorize(_separation, signature="(n,d),(n),(c,d)->(),(d)")(z, labels, moments.means)
    whitened = _whiten(moments.means, matrices, z, labels)  # centred at 0 per class
    valid = labels != 0
    d_hat = jnp.sum(jnp.where(valid, jnp.linalg.norm(whitened, axis=-1), 0.0), axis=-1) / jnp.maximum(
        jnp.sum(valid, axis=-1), 1)
    centres = jnp.stack([u, -u], axis=-2) * (r * d_hat)[..., None, None] / 2
    return ClassWhitening(moments.means, matrices, k, centres, r)


def _whiten(means, matrices, z, labels):
    """(z - b_y) F_K S_K^{-1/2} F_K^T for each row's own class y; padding rows (label 0) -> 0."""
    def one_class(c):
        return (z - means[..., c, None, :]) @ matrices[..., c, :, :]

    out = jnp.where((labels > 0)[..., None], one_class(0), one_class(1))
    return jnp.where((labels != 0)[..., None], out, 0.0)


@jax.jit
def apply_class_whitening(params: ClassWhitening, z: jax.Array, labels: jax.Array) -> jax.Array:
    """z_hat = T_y(z): each row whitened by the transform of its own class (Alg. 1 line 5).

    z [..., m, d], labels [..., m] in {+1, -1, 0}; padding rows (label 0) come out as 0.
    """
    z = jnp.asarray(z, jnp.float32)
    labels = jnp.asarray(labels)
    centres = jnp.where((labels > 0)[..., None], params.centres[..., 0, None, :], params.centres[..., 1, None, :])
    return _whiten(params.means, params.matrices, z, labels) + jnp.where((labels != 0)[..., None], centres, 0.0)
