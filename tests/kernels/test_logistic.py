"""kernels.logistic against scikit-learn's LogisticRegression (lbfgs, l2, the same C, tight tol).

Features are roughly centred: on offset features sklearn's own L-BFGS stops measurably short of
the optimum, while ours centres internally (a free reparametrisation), so the reference would be
the less accurate side. Shapes repeat across tests to keep compilations few.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from lmprobe.kernels import logistic

N, D = 240, 12
CS = np.asarray([0.25, 16.0])


def blobs(seed: int, n_classes: int, separation: float, n: int = N, d: int = D):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    centres = rng.normal(size=(n_classes, d)) * separation
    return (centres[y] + rng.normal(size=(n, d))).astype(np.float32), y


def sklearn_fit(x, y, c, **kwargs):
    return LogisticRegression(C=c, tol=1e-10, max_iter=100_000, **kwargs).fit(np.asarray(x, np.float64), y)


def as_sklearn(model, n_classes):
    """(coef_, intercept_) of our model in sklearn's convention."""
    w, b = (np.asarray(a, np.float64) for a in logistic.raw_coefficients(model))
    if n_classes == 2:
        return (w[:, 1] - w[:, 0])[None], np.asarray([b[1] - b[0]])
    return w.T, b


def one(models, i):
    return logistic.LogisticModel(*(np.asarray(a)[i] for a in models))


@pytest.mark.parametrize("n_classes", [2, 3])
def test_weights_probabilities_and_accuracy_match_sklearn(n_classes):
    x, y = blobs(0, n_classes, separation=0.6)
    models = logistic.fit_many(x, y, n_classes, CS, np.ones((len(CS), N)))
    for i, c in enumerate(CS):
        ours, ref = one(models, i), sklearn_fit(x, y, c)
        coef, intercept = as_sklearn(ours, n_classes)
        weight_err = np.abs(coef - ref.coef_).max() / np.abs(ref.coef_).max()
        intercept_err = np.abs(intercept - ref.intercept_).max()
        proba_err = np.abs(np.asarray(logistic.predict_proba(ours, x)) - ref.predict_proba(x)).max()
        print(f"K={n_classes} C={c}: weights rel {weight_err:.1e}, intercepts {intercept_err:.1e}, "
              f"probabilities {proba_err:.1e}, iterations {int(ours.iterations)}")
        assert weight_err < 1e-4 and intercept_err < 1e-4 and proba_err < 1e-5
        assert np.mean(np.asarray(logistic.predict(ours, x)) == y) == ref.score(x, y)
        assert int(ours.iterations) < logistic.DEFAULT_MAX_ITER and float(ours.grad_max) < logistic.DEFAULT_TOL
    if n_classes > 2:  # sklearn's multinomial coefficients and intercepts sum to zero over classes; so do ours
        assert np.abs(np.asarray(models.intercept).sum(-1)).max() < 1e-5


def test_separable_data_where_c_matters():
    x, y = blobs(1, 2, separation=3.0)
    assert sklearn_fit(x, y, 1e6).score(x, y) == 1.0  # linearly separable
    models = logistic.fit_many(x, y, 2, CS, np.ones((len(CS), N)))
    norms = []
    for i, c in enumerate(CS):
        ours, ref = one(models, i), sklearn_fit(x, y, c)
        coef, intercept = as_sklearn(ours, 2)
        print(f"separable C={c}: weights rel {np.abs(coef - ref.coef_).max() / np.abs(ref.coef_).max():.1e}, "
              f"intercept {np.abs(intercept - ref.intercept_).max():.1e}")
        np.testing.assert_allclose(coef, ref.coef_, rtol=1e-4, atol=1e-4 * np.abs(ref.coef_).max())
        np.testing.assert_allclose(intercept, ref.intercept_, atol=1e-4)
        np.testing.assert_allclose(np.asarray(logistic.predict_proba(ours, x)), ref.predict_proba(x), atol=1e-5)
        norms.append(np.linalg.norm(coef))
    assert norms[1] > 1.5 * norms[0]  # without the penalty the separable optimum lies at infinity


def test_standardize_is_sklearns_standard_scaler_pipeline():
    x, y = blobs(2, 3, separation=0.6)
    x = x * np.geomspace(1e-2, 1e3, D).astype(np.float32) + 50.0  # scales as unequal as LM hidden states
    x[:, 3] = 7.0  # a constant feature: scale 1, as StandardScaler keeps it
    models = logistic.fit_many(x, y, 3, CS, np.ones((len(CS), N)), standardize=True)
    for i, c in enumerate(CS):
        ref = make_pipeline(StandardScaler(), LogisticRegression(C=c, tol=1e-10, max_iter=100_000))
        ref.fit(x.astype(np.float64), y)
        ours = one(models, i)
        np.testing.assert_allclose(np.asarray(ours.weights).T, ref[-1].coef_, rtol=1e-4,
                                   atol=1e-4 * np.abs(ref[-1].coef_).max())
        np.testing.assert_allclose(np.asarray(logistic.predict_proba(ours, x)), ref.predict_proba(x), atol=1e-5)
        np.testing.assert_allclose(np.asarray(ours.scale), ref[0].scale_, rtol=1e-5)


def test_zero_weights_drop_rows_and_their_statistics():
    x, y = blobs(3, 3, separation=0.6)
    keep = np.arange(N) % 4 != 0
    both = logistic.fit_many(x, y, 3, [1.0, 1.0], np.stack([keep, np.ones(N)]).astype(np.float32), standardize=True)
    alone = logistic.fit(x[keep], y[keep], 3, 1.0, standardize=True)
    np.testing.assert_allclose(np.asarray(logistic.predict_proba(one(both, 0), x)),
                               np.asarray(logistic.predict_proba(alone, x)), atol=1e-5)
    assert not np.allclose(np.asarray(both.weights[0]), np.asarray(both.weights[1]), atol=1e-3)


def test_stratified_folds_are_balanced_and_seeded():
    y = np.repeat([0, 1, 2], [50, 31, 7])
    folds = logistic.stratified_folds(y, 5, seed=0)
    counts = np.asarray([[np.sum((folds == f) & (y == c)) for c in range(3)] for f in range(5)])
    assert (counts.max(0) - counts.min(0) <= 1).all() and np.ptp(np.bincount(folds)) <= 1
    assert np.array_equal(folds, logistic.stratified_folds(y, 5, seed=0))
    assert not np.array_equal(folds, logistic.stratified_folds(y, 5, seed=1))


@pytest.mark.parametrize("standardize", [False])  # True: tests/methods/test_realtask_reference.py
def test_cross_validated_c_matches_grid_search_on_the_same_folds(standardize):
    x, y = blobs(9, 2, separation=0.35, n=160, d=40)  # few rows per feature: the penalty matters
    folds = logistic.stratified_folds(y, 5, seed=0)
    cv = logistic.cross_validate(x, y, 2, logistic.SENTEVAL_CS, folds, standardize=standardize)
    model = LogisticRegression(tol=1e-10, max_iter=100_000)
    estimator = make_pipeline(StandardScaler(), model) if standardize else model
    key = "logisticregression__C" if standardize else "C"
    search = GridSearchCV(estimator, {key: list(logistic.SENTEVAL_CS)}, cv=PredefinedSplit(folds),
                          scoring="accuracy").fit(x.astype(np.float64), y)
    print(f"standardize={standardize}: CV accuracy per C ours {np.round(cv.accuracy, 4)}, "
          f"sklearn {np.round(search.cv_results_['mean_test_score'], 4)}; C {cv.c} / {search.best_params_[key]}")
    np.testing.assert_allclose(cv.accuracy, search.cv_results_["mean_test_score"], atol=1e-12)
    assert len(set(np.round(cv.accuracy, 6))) > 1  # C changes the held-out accuracy here
    assert cv.c == search.best_params_[key] and cv.index == search.best_index_
    chosen = one(cv.models, cv.index)
    np.testing.assert_allclose(np.asarray(logistic.predict_proba(chosen, x)), search.predict_proba(x), atol=1e-5)
    assert logistic.cross_validated_c(x, y, 2, logistic.SENTEVAL_CS, folds, standardize=standardize) == cv.c
