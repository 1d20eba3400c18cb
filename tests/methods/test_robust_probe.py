"""Epsilon-robust linear probing: PGD-l2 finds the worst case, adversarial training buys
robustness, the suggested eps is SynBench's argmax."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
    standard = robust_probe.train_robust_probe(z, y, robust_probe.ProbeConfig(epsilon=0.0, steps=400))
    robust = robust_probe.train_robust_probe(z, y, robust_probe.ProbeConfig(epsilon=0.5, steps=400))
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
        z, labels, robust_probe.ProbeConfig(epsilon=0.5, relative_epsilon=True, steps=50)
    )
    assert probe.radius == pytest.approx(0.5 * robust_probe.class_radius(z, labels))
    assert probe.classes.tolist() == ["neg", "pos"]
    assert robust_probe.evaluate_probe(probe, z, labels)["accuracy"] > 0.9


def test_encoder_moves_the_attack_to_the_input():
    z, y = _two_feature_data(400)
    scale = jnp.asarray([1.0, 10.0])
    probe = robust_probe.train_robust_probe(
        z, y, robust_probe.ProbeConfig(epsilon=0.2, steps=100), encoder=lambda x: x * scale
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
        robust_probe.train_robust_probe(z, y, robust_probe.ProbeConfig(epsilon=-1))
