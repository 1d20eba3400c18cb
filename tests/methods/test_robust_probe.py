"""Epsilon-robust linear probing: PGD-l2 finds the worst case, adversarial training buys
robustness, the suggested eps is SynBench's argmax."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from lmprobe.errors import LmprobeError
from lmprobe.methods import robust_probe


def _two_feature_data(n=2000, seed=0):
    """Feature 0: robust but noisy (y * 2 + N(0, 1)); feature 1: tiny but clean (y * 0.1)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = 2 * y - 1
    return np.stack([2 * s + rng.normal(size=n), 0.1 * s + 0.01 * rng.normal(size=n)], 1).astype(np.float32), y


def test_pgd_reaches_the_closed_form_worst_case_of_a_linear_head():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, 5)).astype(np.float32)
    w = jnp.asarray(rng.normal(size=(5, 2)), jnp.float32)
    b = jnp.asarray([0.1, -0.2], jnp.float32)
    labels = jnp.asarray(rng.integers(0, 2, 500), jnp.int32)
    radius = 0.7
    delta = robust_probe.pgd_l2((w, b), jnp.asarray(z), labels, jnp.float32(radius), jax.random.PRNGKey(0))
    assert float(jnp.max(jnp.linalg.norm(delta, axis=1))) <= radius * (1 + 1e-5)
    # two classes: the attack lowers the true-class logit gap by radius * ||w_y - w_other||
    gap = (z @ w + b)[np.arange(500), labels] - (z @ w + b)[np.arange(500), 1 - labels]
    worst = gap - radius * float(jnp.linalg.norm(w[:, 1] - w[:, 0]))
    probe = robust_probe.LinearProbe(w, b, radius, np.array([0, 1]))
    got = robust_probe.evaluate_probe(probe, z, np.asarray(labels))
    assert got["accuracy"] == pytest.approx(float(jnp.mean(gap > 0)))
    assert got["robust_accuracy"] == pytest.approx(float(jnp.mean(worst > 0)), abs=2 / 500)


def test_adversarial_training_buys_robustness():
    z, y = _two_feature_data()
    absolute = {"relative_epsilon": False, "steps": 400}
    standard = robust_probe.train_robust_probe(z, y, robust_probe.RobustProbeConfig(epsilon=0.0, **absolute))
    robust = robust_probe.train_robust_probe(z, y, robust_probe.RobustProbeConfig(epsilon=0.5, **absolute))
    plain = robust_probe.evaluate_probe(standard, z, y, radius=0.5)
    hard = robust_probe.evaluate_probe(robust, z, y, radius=0.5)
    assert plain["accuracy"] > 0.97 and hard["accuracy"] > 0.95
    assert hard["robust_accuracy"] > plain["robust_accuracy"] + 0.03
    # the robust head leans on the robust feature
    assert abs(float(robust.weight[1, 1] - robust.weight[1, 0])) < abs(
        float(standard.weight[1, 1] - standard.weight[1, 0])
    )


def test_relative_budget_and_label_mapping():
    z, y = _two_feature_data(400)
    labels = np.where(y == 1, "pos", "neg")
    probe = robust_probe.train_robust_probe(
        z, labels, robust_probe.RobustProbeConfig(epsilon=0.5, relative_epsilon=True, steps=50)
    )
    assert probe.radius == pytest.approx(0.5 * robust_probe.class_radius(z, labels))
    assert probe.classes.tolist() == ["neg", "pos"]
    assert robust_probe.evaluate_probe(probe, z, labels)["accuracy"] > 0.9


def test_encoder_moves_the_attack_to_the_input():
    z, y = _two_feature_data(400)
    scale = jnp.asarray([1.0, 10.0])
    probe = robust_probe.train_robust_probe(
        z, y, robust_probe.RobustProbeConfig(epsilon=0.2, steps=100), encoder=lambda x: x * scale
    )
    assert probe.weight.shape == (2, 2)
    got = robust_probe.evaluate_probe(probe, z, y, encoder=lambda x: x * scale)
    assert 0 < got["robust_accuracy"] <= got["accuracy"]


def test_suggested_epsilon_is_the_argmax_of_the_score():
    scores = [
        {"eps": e, "a_t": a, "score": s}
        for a, row in ((0.7, (0.33, 0.37, 0.32)), (0.9, (0.02, 0.04, 0.04)))
        for e, s in zip((0.0, 0.2, 0.4), row)
    ]  # Table 3, ViT-B/16
    assert robust_probe.suggest_epsilon(scores, 0.7) == 0.2
    assert robust_probe.suggest_epsilon(scores, 0.9) == 0.2  # ties: the smallest eps
    with pytest.raises(LmprobeError, match="a_t=0.8"):
        robust_probe.suggest_epsilon(scores, 0.8)


def test_bad_probe_input():
    z, y = _two_feature_data(50)
    with pytest.raises(LmprobeError, match="two classes"):
        robust_probe.train_robust_probe(z, np.zeros(50))
    with pytest.raises(LmprobeError, match="NaN"):
        robust_probe.train_robust_probe(np.full_like(z, np.nan), y)
    with pytest.raises(LmprobeError, match="epsilon=-1"):
        robust_probe.train_robust_probe(z, y, robust_probe.RobustProbeConfig(epsilon=-1))
    with pytest.raises(LmprobeError, match="must be < 1"):
        robust_probe.train_robust_probe(z, y, robust_probe.RobustProbeConfig(epsilon=1.0))
    with pytest.raises(LmprobeError, match="attack='pixels'"):
        robust_probe.train_robust_probe(z, y, robust_probe.RobustProbeConfig(attack="pixels"))


def _gaussian_task(n, d=8, s=1.2, seed=0):
    """x | y ~ N(y s u, I_d), u = 1_d / sqrt(d), y in {-1, +1}: ||mu|| = s."""
    rng = np.random.default_rng(seed)
    y = rng.choice([-1, 1], n)
    x = y[:, None] * s * np.ones(d) / np.sqrt(d) + rng.normal(size=(n, d))
    return x.astype(np.float32), y


def test_isotropic_gaussian_probes_reach_the_closed_form():
    """Isotropic classes: the Bayes direction mu is already the eps-robust one, so both probes
    score Phi(s) clean and Phi(s - r) under an l2 attack of radius r; relative eps: r = eps s."""
    s, eps = 1.2, 0.3
    x_train, y_train = _gaussian_task(4000, s=s)
    x_test, y_test = _gaussian_task(20000, s=s, seed=1)
    config = robust_probe.RobustProbeConfig(epsilon=eps, steps=300)
    got = robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, config)
    assert got["relative_epsilon"] and got["attack"] == "input"
    assert got["mu_norm"] == pytest.approx(s, abs=0.02)  # plug-in ||mu||, + O(d / n)
    assert got["radius"] == pytest.approx(eps * got["mu_norm"])
    for probe in ("standard", "robust"):
        assert got[probe]["accuracy"] == pytest.approx(norm.cdf(s), abs=0.012)
        assert got[probe]["robust_accuracy"] == pytest.approx(norm.cdf(s * (1 - eps)), abs=0.012)
    # the same budget as an absolute radius gives the same probes and numbers
    absolute = robust_probe.RobustProbeConfig(epsilon=got["radius"], relative_epsilon=False, steps=300)
    again = robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, absolute)
    assert again["radius"] == pytest.approx(got["radius"])
    assert again["robust"] == pytest.approx(got["robust"])
    # an absolute eps of 0.3 is a smaller budget (0.3 < 0.3 s): Phi(s - 0.3)
    small = robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test,
                                               dataclasses.replace(absolute, epsilon=eps))
    assert small["robust"]["robust_accuracy"] == pytest.approx(norm.cdf(s - eps), abs=0.012)


def test_relative_eps_does_not_depend_on_the_units_of_the_representation():
    """z = 10 x: a relative budget attacks the representation with 10 x the input radius, the
    same attack for a linear head; an absolute budget does not move with the units."""
    x_train, y_train = _gaussian_task(2000)
    x_test, y_test = _gaussian_task(4000, seed=1)
    encoder = lambda x: 10.0 * x  # noqa: E731
    config = robust_probe.RobustProbeConfig(epsilon=0.4, steps=200)
    on_input = robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, config, encoder=encoder)
    on_rep = robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test,
                                                dataclasses.replace(config, attack="representation"), encoder=encoder)
    assert on_rep["radius"] == pytest.approx(10 * on_input["radius"], rel=1e-5)
    assert on_rep["mu_norm"] == pytest.approx(10 * on_input["mu_norm"], rel=1e-5)
    for probe in ("standard", "robust"):
        assert on_rep[probe]["robust_accuracy"] == pytest.approx(on_input[probe]["robust_accuracy"], abs=0.01)
        assert on_rep[probe]["robust_accuracy"] == pytest.approx(norm.cdf(1.2 * 0.6), abs=0.025)
    absolute = dataclasses.replace(config, relative_epsilon=False, attack="representation")
    units = robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, absolute, encoder=encoder)
    assert units["radius"] == 0.4  # 0.04 in input units: almost no attack
    assert units["standard"]["robust_accuracy"] == pytest.approx(norm.cdf(1.2 - 0.04), abs=0.025)


def test_input_attack_through_an_encoder_is_the_closed_form_worst_case():
    """f(x) = x A: the head's logit gap on the input is x A (w_y - w_o) + b_y - b_o, so the worst
    l2 perturbation of radius r lowers it by exactly r ||A (w_y - w_o)||."""
    rng = np.random.default_rng(3)
    x, y = _gaussian_task(1000, s=1.5)
    a = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    encoder = lambda v: v @ a  # noqa: E731
    config = robust_probe.RobustProbeConfig(epsilon=0.2, steps=200)
    probe = robust_probe.train_robust_probe(x, y, config, encoder=encoder)
    assert probe.weight.shape == (3, 2) and probe.radius == pytest.approx(0.2 * robust_probe.class_radius(x, y))
    w = np.asarray(a @ probe.weight, np.float64)  # [8, 2] on the input
    index = (y > 0).astype(int)
    gap = (x @ w + np.asarray(probe.bias))[np.arange(len(y)), index] - (x @ w + np.asarray(probe.bias))[
        np.arange(len(y)), 1 - index]
    worst = gap - probe.radius * np.linalg.norm(w[:, 1] - w[:, 0])
    got = robust_probe.evaluate_probe(probe, x, y, encoder=encoder, batch_size=300)  # batches of the evaluation
    assert got["accuracy"] == pytest.approx(np.mean(gap > 0))
    # PGD can only miss the worst case (its random start leaves a little off the gradient line)
    assert np.mean(worst > 0) - 1e-9 <= got["robust_accuracy"] <= np.mean(worst > 0) + 6 / len(y)
    assert got["robust_accuracy"] < got["accuracy"] - 0.02
