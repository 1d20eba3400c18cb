"""Multinomial logistic regression with an L2 penalty: SentEval's linear probe, in JAX.

The objective is scikit-learn's (``LogisticRegression(C=c)``, lbfgs, l2), so sklearn is a valid
reference for every number here:

    C * sum_i s_i CE(softmax(x_i W + b), y_i) + 0.5 * ||W||^2        (intercept b unpenalized)

with 0/1 sample weights s_i marking the rows a fit sees (cross-validation folds share one x).
Two classes are sklearn's binary model: one weight vector v for the logit of class 1 minus that
of class 0, penalized 0.5 ||v||^2. We keep the symmetric parametrisation W = [-v/2, v/2] for
every K; its penalty 0.5 ||W||^2 = 0.25 ||v||^2 is half sklearn's, so K = 2 fits double the
penalty internally and the optimum is exactly sklearn's (v = W[:, 1] - W[:, 0]). At the optimum
the columns of W and the intercepts sum to zero over classes.

``standardize=True`` fits on features standardized with the statistics (mean, population std;
zero-variance features keep scale 1) of the rows each fit sees: sklearn's
``make_pipeline(StandardScaler(), LogisticRegression(C=c))``, so a cross-validation fold never
sees its held-out rows. The model keeps (mean, scale) and applies them itself. Without it,
features are still centred inside the solver: a free reparametrisation, since b is unpenalized.

Solver: L-BFGS from zero with a near-exact line search (the logits move linearly along a search
direction, so the 1-D problem costs no matmul), on the per-row mean of the objective, in float64
(``dtype``; by default float32 on TPUs, which lack float64), until the max-abs gradient is
below ``tol`` (by default DEFAULT_TOL in float64, FLOAT32_TOL in float32). All (fold, C)
problems run in one jitted call, vmapped over a shared x. Models come back in float32.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

SENTEVAL_CS = tuple(2.0**k for k in range(-2, 5))  # SentEval's sklearn grid, 2^-2 .. 2^4
DEFAULT_TOL = 1e-8  # max-abs gradient of the per-row mean objective (float64)
FLOAT32_TOL = 1e-5  # the same where the solver runs in float32 (tol=None picks by dtype)
DEFAULT_MAX_ITER = 1000
MEMORY = 10  # L-BFGS curvature pairs
LINE_SEARCH_STEPS = 30  # at most, per line search
LINE_SEARCH_TOL = 0.01  # the line search stops at |f'(t)| <= this |f'(0)|: nearly exact


class LogisticModel(NamedTuple):
    """A fitted probe; leading axes (if any) are problems. logits = ((x - mean) / scale) @ W + b."""

    weights: jax.Array  # [..., d, K]
    intercept: jax.Array  # [..., K]
    mean: jax.Array  # [..., d] subtracted from x first
    scale: jax.Array  # [..., d] x divided by it next (ones without standardization)
    iterations: jax.Array  # [...] L-BFGS steps taken (max_iter: not converged)
    grad_max: jax.Array  # [...] final max-abs gradient of the per-row mean objective


class CrossValidation(NamedTuple):
    """Inner k-fold selection of C (``cross_validate``)."""

    c: float  # the chosen C: highest mean held-out accuracy, the smallest C on ties (as GridSearchCV)
    index: int  # its index in cs
    accuracy: np.ndarray  # [len(cs)] mean over folds of the held-out accuracy
    fold_accuracy: np.ndarray  # [folds, len(cs)]
    models: LogisticModel  # [len(cs)] refits on all rows, one per C (index ``index``: the chosen one)


def logits(model: LogisticModel, x) -> jax.Array:
    """[..., n, K] class scores of x [n, d] (for every leading problem axis of ``model``)."""
    z = (jnp.asarray(x, jnp.float32) - model.mean[..., None, :]) / model.scale[..., None, :]
    return z @ model.weights + model.intercept[..., None, :]


def predict_proba(model: LogisticModel, x) -> jax.Array:
    """[..., n, K] class probabilities."""
    return jax.nn.softmax(logits(model, x), axis=-1)


def predict(model: LogisticModel, x) -> jax.Array:
    """[..., n] int32 predicted classes (the first of tied classes)."""
    return jnp.argmax(logits(model, x), axis=-1).astype(jnp.int32)


def raw_coefficients(model: LogisticModel) -> tuple[jax.Array, jax.Array]:
    """(W [..., d, K], b [..., K]) acting on x itself: logits = x @ W + b. sklearn's coef_ and
    intercept_ are W.T and b for K > 2 (both centred over classes), W[:, 1] - W[:, 0] and
    b[1] - b[0] for K = 2."""
    weights = model.weights / model.scale[..., :, None]
    return weights, model.intercept - jnp.einsum("...d,...dk->...k", model.mean, weights)


def fit(x, y, n_classes: int, c: float, *, standardize: bool = False, tol: float | None = None,
        max_iter: int = DEFAULT_MAX_ITER, dtype=None) -> LogisticModel:
    """The probe of penalty ``c`` on x [n, d] (float), y [n] (int classes 0..n_classes-1)."""
    models = fit_many(x, y, n_classes, np.asarray([c]), np.ones((1, len(y))), standardize=standardize, tol=tol,
                      max_iter=max_iter, dtype=dtype)
    return jax.tree.map(lambda a: a[0], models)


def fit_many(x, y, n_classes: int, cs, sample_weights, *, standardize: bool = False, tol: float | None = None,
             max_iter: int = DEFAULT_MAX_ITER, dtype=None) -> LogisticModel:
    """P problems in one jitted call: problem p fits the rows with sample_weights[p] > 0 (weights
    [P, n]: 0/1 in sklearn's sense, other values weight the rows' losses) with penalty cs[p].
    Returns a LogisticModel with leading axis P (float32 and int32). ``dtype``: the solver's
    precision (module docstring)."""
    if dtype is None:
        dtype = jnp.float32 if jax.default_backend() == "tpu" else jnp.float64
    dtype = jnp.dtype(dtype)
    tol = tol if tol is not None else DEFAULT_TOL if dtype == jnp.float64 else FLOAT32_TOL
    with jax.enable_x64(dtype == jnp.float64):
        model = _fit_many(jnp.asarray(x, dtype), jnp.asarray(y, jnp.int32), jnp.asarray(cs, dtype),
                          jnp.asarray(sample_weights, dtype), n_classes=n_classes, standardize=standardize,
                          tol=tol, max_iter=max_iter)
        return jax.tree.map(lambda a: a.astype(jnp.float32 if jnp.issubdtype(a.dtype, jnp.floating) else jnp.int32),
                            model)


@functools.partial(jax.jit, static_argnames=("n_classes", "standardize", "max_iter"))
def _fit_many(x, y, cs, sample_weights, *, n_classes, standardize, tol, max_iter):
    d, k = x.shape[-1], n_classes
    onehot = jax.nn.one_hot(y, k, dtype=x.dtype)
    m0 = x.mean(0)  # a global standardization first (conditioning), each problem's own on top
    s0 = _safe_scale(x.var(0)) if standardize else jnp.ones(d, x.dtype)
    z = (x - m0) / s0
    binary = 2.0 if k == 2 else 1.0  # the symmetric parametrisation of sklearn's binary model
    theta0 = jnp.zeros(d * k + k, x.dtype)  # W [d, K] row-major, then b [K]

    def one(w, c):
        n_w = jnp.maximum(w.sum(), 1e-12)
        mu = (w @ z) / n_w
        sd = _safe_scale((w @ (z * z)) / n_w - mu * mu) if standardize else jnp.ones(d, x.dtype)

        def scores(theta):  # linear in theta: [n, K] logits of the rows standardized for this problem
            weights = theta[:d * k].reshape(d, k) / sd[:, None]
            return z @ weights + (theta[d * k:] - mu @ weights)

        transpose = jax.linear_transpose(scores, theta0)
        penalty = jnp.concatenate([jnp.full(d * k, binary / (c * n_w)), jnp.zeros(k)]).astype(x.dtype)
        theta, steps, grad_max = _lbfgs(scores, lambda r: transpose(r)[0], penalty, w / n_w, onehot, theta0, tol,
                                        max_iter)
        return LogisticModel(theta[:d * k].reshape(d, k), theta[d * k:], m0 + s0 * mu, s0 * sd, steps, grad_max)

    return jax.vmap(one)(sample_weights, cs)


def _safe_scale(var):
    return jnp.where(var > 1e-12, jnp.sqrt(jnp.maximum(var, 0.0)), 1.0)


def _lbfgs(scores, transpose, penalty, row_weights, onehot, theta, tol, max_iter):
    """Minimise f(theta) = sum_i r_i CE(scores(theta)_i, y_i) + 0.5 sum_j penalty_j theta_j^2
    (``scores`` linear, ``transpose`` its transpose) by L-BFGS. Along a direction p the logits
    are S + t scores(p), so the line search, safeguarded Newton on the convex f(t), needs no
    matmul: an iteration costs one ``scores`` and one ``transpose``. (theta, steps, max-abs grad)."""
    m = MEMORY

    def gradient(theta, s):
        return transpose(row_weights[:, None] * (jax.nn.softmax(s) - onehot)) + penalty * theta

    def line_search(theta, p, s, sp, slope0):
        """t > 0 with |f'(t)| <= LINE_SEARCH_TOL |f'(0)|: safeguarded Newton on the convex f'(t)
        from t = 1 (a bracket [lo, hi] with f'(lo) < 0 < f'(hi), bisected when Newton leaves it)."""
        pp, tp = jnp.sum(penalty * p * p), jnp.sum(penalty * theta * p)

        def slope(t):
            prob = jax.nn.softmax(s + t * sp)
            mean_sp = (prob * sp).sum(-1)
            d1 = row_weights @ (mean_sp - (onehot * sp).sum(-1)) + tp + t * pp
            d2 = row_weights @ ((prob * sp * sp).sum(-1) - mean_sp**2) + pp
            return d1, d2

        def newton(state):
            t, lo, hi, d1, d2, i = state
            lo, hi = jnp.where(d1 < 0, t, lo), jnp.where(d1 < 0, hi, t)
            step = t - d1 / jnp.maximum(d2, 1e-300)
            fallback = jnp.where(jnp.isfinite(hi), 0.5 * (lo + hi), 2.0 * t)
            t = jnp.where((step > lo) & (step < hi), step, fallback)
            return (t, lo, hi, *slope(t), i + 1)

        one = jnp.ones((), theta.dtype)
        target = LINE_SEARCH_TOL * jnp.abs(slope0)
        state = (one, 0.0 * one, jnp.inf * one, *slope(one), 0)
        state = jax.lax.while_loop(lambda st: (jnp.abs(st[3]) > target) & (st[5] < LINE_SEARCH_STEPS), newton, state)
        return state[0]

    def direction(g, mem_s, mem_y, rho, stored):
        """-H g by the two-loop recursion; unfilled slots (rho = 0) change nothing."""
        newest = (stored - 1) % m

        def back(i, carry):
            q, a = carry
            j = (newest - i) % m
            a = a.at[j].set(rho[j] * (mem_s[j] @ q))
            return q - a[j] * mem_y[j], a

        q, a = jax.lax.fori_loop(0, m, back, (g, jnp.zeros(m, g.dtype)))
        yy = mem_y[newest] @ mem_y[newest]
        q = q * jnp.where((stored > 0) & (yy > 0), 1.0 / (rho[newest] * jnp.maximum(yy, 1e-300)), 1.0)

        def forward(i, q):
            j = (newest + 1 + i) % m  # oldest first
            return q + mem_s[j] * (a[j] - rho[j] * (mem_y[j] @ q))

        return -jax.lax.fori_loop(0, m, forward, q)

    def step(state):
        theta, s, g, mem_s, mem_y, rho, stored, count, done = state
        p = direction(g, mem_s, mem_y, rho, stored)
        p = jnp.where(g @ p < 0, p, -g)  # not a descent direction: steepest descent
        sp = scores(p)
        t = line_search(theta, p, s, sp, g @ p)
        new_theta, new_s = theta + t * p, s + t * sp
        new_g = gradient(new_theta, new_s)
        ds, dy = new_theta - theta, new_g - g
        sy = ds @ dy
        keep = sy > 1e-12 * jnp.sqrt((ds @ ds) * (dy @ dy))  # a curvature pair worth remembering
        slot = stored % m
        mem_s = jnp.where(keep, mem_s.at[slot].set(ds), mem_s)
        mem_y = jnp.where(keep, mem_y.at[slot].set(dy), mem_y)
        rho = jnp.where(keep, rho.at[slot].set(1.0 / jnp.where(keep, sy, 1.0)), rho)
        new = (new_theta, new_s, new_g, mem_s, mem_y, rho, stored + keep, count + 1,
               jnp.max(jnp.abs(new_g)) < tol)
        return jax.tree.map(lambda old, value: jnp.where(done, old, value), state, new)  # vmapped: done ones wait

    s0 = scores(theta)
    g0 = gradient(theta, s0)
    memory = jnp.zeros((m, theta.shape[0]), theta.dtype)
    state = (theta, s0, g0, memory, memory, jnp.zeros(m, theta.dtype), jnp.array(0), jnp.array(0),
             jnp.max(jnp.abs(g0)) < tol)
    state = jax.lax.while_loop(lambda st: ~st[-1] & (st[-2] < max_iter), step, state)
    return state[0], state[-2], jnp.max(jnp.abs(state[2]))


def stratified_folds(y, folds: int, seed: int = 0) -> np.ndarray:
    """[n] fold index per row: each class's rows shuffled (seeded) and dealt round-robin, so every
    fold holds each class's count divided by ``folds``, give or take one."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    out = np.zeros(len(y), np.int32)
    offset = 0
    for label in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == label))
        out[rows] = (offset + np.arange(len(rows))) % folds
        offset += len(rows)  # the next class continues the deal: fold sizes stay within one
    return out


def fold_weights(fold_ids, folds: int) -> np.ndarray:
    """[folds + 1, n] 0/1 training rows: fold f trains on the rows outside fold f; the last row is
    all ones (the refit on every row)."""
    fold_ids = np.asarray(fold_ids)
    held_out = fold_ids[None, :] == np.arange(folds)[:, None]
    return np.concatenate([~held_out, np.ones((1, len(fold_ids)), bool)]).astype(np.float32)


def cross_validate(x, y, n_classes: int, cs=SENTEVAL_CS, folds=5, seed: int = 0, *, standardize: bool = False,
                   tol: float | None = None, max_iter: int = DEFAULT_MAX_ITER, dtype=None) -> CrossValidation:
    """Choose C by k-fold cross-validation accuracy and refit on all rows, in one jitted call
    (every fold x C, plus the refits for every C). ``folds``: a number of stratified folds
    (seeded by ``seed``), or an [n] array of fold indices 0..k-1."""
    y = np.asarray(y, np.int32)
    fold_ids = stratified_folds(y, folds, seed) if np.ndim(folds) == 0 else np.asarray(folds, np.int32)
    k = int(fold_ids.max()) + 1
    cs = np.asarray(cs, np.float64)
    weights = np.repeat(fold_weights(fold_ids, k), len(cs), axis=0)  # problem (f, j) at f * len(cs) + j
    models = fit_many(x, y, n_classes, np.tile(cs, k + 1), weights, standardize=standardize, tol=tol,
                      max_iter=max_iter, dtype=dtype)
    cv_models = jax.tree.map(lambda a: a[:k * len(cs)], models)
    correct = np.asarray(predict(cv_models, x) == y).reshape(k, len(cs), -1)
    held_out = fold_ids[None, :] == np.arange(k)[:, None]  # [k, n]
    fold_accuracy = (correct & held_out[:, None]).sum(-1) / np.maximum(held_out.sum(-1), 1)[:, None]
    accuracy = fold_accuracy.mean(0)
    index = int(np.argmax(accuracy))  # the first maximum: the smallest C among ties
    refits = jax.tree.map(lambda a: a[k * len(cs):], models)
    return CrossValidation(float(cs[index]), index, accuracy, fold_accuracy, refits)


def cross_validated_c(x, y, n_classes: int, cs=SENTEVAL_CS, folds=5, seed: int = 0, **kwargs) -> float:
    """The C that ``cross_validate`` chooses."""
    return cross_validate(x, y, n_classes, cs, folds, seed, **kwargs).c
