"""kernels.robust against scipy.optimize, and the closed-form edge cases (eps = 0, eps >= ||mu||)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from lmprobe import kernels as K

PROFILE = settings.get_profile("kernels")
D = 6


def spectrum(seed, d=D, spread=1.5):
    rng = np.random.default_rng(seed)
    return np.exp(rng.normal(size=d) * spread), rng.normal(size=d)


def scipy_robust(mean_diff, precision, eps, p=2):
    """argmin_{||z||_p <= eps} (mu - z)^T A (mu - z) with scipy.optimize in float64, using
    smooth forms of the budget: ||z||^2 <= eps^2 (p = 2), box bounds (p = inf), and
    z = u - v with u, v >= 0, sum(u + v) <= eps (p = 1)."""
    d = mean_diff.shape[0]
    objective = lambda z: (mean_diff - z) @ precision @ (mean_diff - z)
    gradient = lambda z: -2.0 * precision @ (mean_diff - z)
    options = {"ftol": 1e-15, "maxiter": 1000}
    if math.isinf(p):
        return minimize(objective, np.zeros(d), jac=gradient, bounds=[(-eps, eps)] * d,
                        method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12}).x
    if p == 1:
        split = lambda uv: uv[:d] - uv[d:]
        result = minimize(
            lambda uv: objective(split(uv)),
            np.zeros(2 * d),
            jac=lambda uv: np.concatenate([gradient(split(uv)), -gradient(split(uv))]),
            bounds=[(0.0, None)] * (2 * d),
            constraints=[{"type": "ineq", "fun": lambda uv: eps - uv.sum(), "jac": lambda uv: -np.ones(2 * d)}],
            method="SLSQP",
            options=options,
        )
        return split(result.x)
    constraint = {"type": "ineq", "fun": lambda z: eps**2 - z @ z, "jac": lambda z: -2.0 * z}
    return minimize(objective, np.zeros(d), jac=gradient, constraints=[constraint], method="SLSQP",
                    options=options).x


def test_l2_matches_scipy_for_a_grid_of_scales_and_epsilons():
    lam, direction = spectrum(0)
    scales = np.array([0.3, 1.0, 2.5])
    epsilons = np.array([0.0, 0.1, 0.4, 0.8])
    mean_diffs = scales[:, None] * direction
    out = K.robust_direction(mean_diffs[:, None, :], lam, epsilons)  # one vectorised call
    assert out.perturbation.shape == (3, 4, D)
    for i, mu in enumerate(mean_diffs):
        for j, eps in enumerate(epsilons):
            z = scipy_robust(mu, np.diag(1.0 / lam), eps)
            if eps >= np.linalg.norm(mu):
                assert bool(out.degenerate[i, j])
            np.testing.assert_allclose(out.perturbation[i, j], z, atol=2e-5 * max(1.0, np.abs(z).max()))
            np.testing.assert_allclose(out.weight[i, j], (mu - z) / lam, rtol=2e-3, atol=1e-5)


def test_closed_form_edge_cases():
    lam, mu = spectrum(1)
    plain = K.robust_direction(mu, lam, 0.0)
    np.testing.assert_allclose(plain.weight, mu / lam, rtol=1e-6)  # eps = 0: Bayes, Sigma^{-1} mu
    assert np.all(np.asarray(plain.perturbation) == 0.0) and not bool(plain.degenerate)
    norm = np.linalg.norm(mu)
    for eps in (norm, 2 * norm, np.inf):
        big = K.robust_direction(mu, lam, eps)
        assert bool(big.degenerate)
        assert np.all(np.asarray(big.weight) == 0.0)
        np.testing.assert_allclose(big.perturbation, mu, rtol=1e-6)
    inside = K.robust_direction(mu, lam, 0.5 * norm)
    np.testing.assert_allclose(np.linalg.norm(inside.perturbation), 0.5 * norm, rtol=1e-5)
    epsilons = np.array([0.0, 0.2, 0.5, 5.0])
    mapped = jax.vmap(lambda eps: K.robust_direction(mu, lam, eps).weight)(epsilons)
    np.testing.assert_allclose(mapped, K.robust_direction(mu, lam, epsilons).weight, rtol=1e-6)
    relative = K.robust_direction(mu, lam, 0.5, relative_epsilon=True)
    np.testing.assert_allclose(relative.weight, inside.weight, rtol=1e-5)
    zero = K.robust_direction(np.zeros(D), lam, 0.1)
    assert bool(zero.degenerate) and np.all(np.asarray(zero.weight) == 0.0)


def test_directions_outside_the_support_are_dropped():
    lam, mu = spectrum(2)
    lam[3:] = 0.0  # rank-deficient covariance
    out = K.robust_direction(mu, lam, 0.3)
    assert np.isfinite(np.asarray(out.weight)).all()
    assert np.all(np.asarray(out.weight)[3:] == 0.0) and np.all(np.asarray(out.perturbation)[3:] == 0.0)
    reduced = K.robust_direction(mu[:3], lam[:3], 0.3)
    np.testing.assert_allclose(out.weight[:3], reduced.weight, rtol=1e-6)


def test_isotropic_covariance_keeps_the_bayes_direction():
    """000 App. A.8 Result A.1: mu in one eigenspace => all robust classifiers coincide."""
    _, mu = spectrum(3)
    out = K.robust_direction(mu, np.full(D, 2.5), np.linspace(0.0, 0.9 * np.linalg.norm(mu), 7))
    unit = np.asarray(out.weight) / np.linalg.norm(out.weight, axis=-1, keepdims=True)
    np.testing.assert_allclose(unit, np.broadcast_to(mu / np.linalg.norm(mu), unit.shape), atol=1e-6)


@pytest.mark.parametrize("p", [1, 2, math.inf])
def test_lp_budget_matches_scipy(p):
    rng = np.random.default_rng(4)
    lam, mu = spectrum(4, spread=0.5)
    q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    precision = q @ np.diag(1.0 / lam) @ q.T
    epsilons = np.array([0.0, 0.3, 0.8])
    out = K.robust_direction_lp(mu, precision, epsilons, p=p, num_iters=2000)
    objective = lambda z: (mu - z) @ precision @ (mu - z)
    for j, eps in enumerate(epsilons):
        z = np.asarray(out.perturbation[j], np.float64)
        assert np.linalg.norm(z, ord=p) <= eps * (1 + 1e-5) + 1e-6
        reference = scipy_robust(mu, precision, eps, p)
        assert objective(z) <= objective(reference) * (1 + 1e-4) + 1e-6
        np.testing.assert_allclose(z, reference, atol=1e-3)
    if p == 2:  # the general solver agrees with the closed form
        closed = K.robust_direction(q.T @ mu, lam, epsilons)
        np.testing.assert_allclose(out.perturbation, np.asarray(closed.perturbation) @ q.T, atol=1e-4)
    assert bool(K.robust_direction_lp(mu, precision, 1e3, p=p).degenerate)


def test_ball_projections():
    v = np.array([3.0, -1.0, 0.5, 0.0], np.float32)
    np.testing.assert_allclose(K.project_onto_ball(v, 2.0, 1), [2.0, 0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(K.project_onto_ball(v, 3.0, 1), [2.5, -0.5, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(K.project_onto_ball(v, 10.0, 1), v)
    np.testing.assert_allclose(K.project_onto_ball(v, 0.7, math.inf), [0.7, -0.7, 0.5, 0.0])
    np.testing.assert_allclose(
        np.linalg.norm(K.project_onto_ball(v, 1.0, 2)), 1.0, rtol=1e-6
    )
    assert K.dual_exponent(1) == math.inf and K.dual_exponent(math.inf) == 1.0
    assert K.dual_exponent(2) == 2.0
    with pytest.raises(ValueError):
        K.project_onto_ball(v, 1.0, 3)


@PROFILE
@given(seed=st.integers(0, 2**31 - 1), spread=st.floats(0.0, 4.0))
def test_perturbation_grows_with_epsilon_and_bayes_accuracy_is_best(seed, spread):
    lam, mu = spectrum(seed, spread=spread)
    epsilons = np.linspace(0.0, 1.2, 13) * np.linalg.norm(mu)
    out = K.robust_direction(mu, lam, epsilons)
    norms = np.linalg.norm(np.asarray(out.perturbation, np.float64), axis=-1)
    np.testing.assert_allclose(norms, np.minimum(epsilons, np.linalg.norm(mu)), rtol=1e-4, atol=1e-6)
    accuracy = np.asarray(K.robust_accuracy(mu, out.weight, lam))
    assert np.all(accuracy[1:] <= accuracy[0] + 1e-6)  # eps = 0 is the Bayes classifier
    assert np.all(accuracy[np.asarray(out.degenerate)] == 0.0)
