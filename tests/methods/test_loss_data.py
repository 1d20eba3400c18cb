"""lmprobe.methods.loss_data: the metric formulas on hand-made curves, the paper's grid, the
probe on Gaussian data with a known Bayes cross-entropy, vmapped jobs against unbatched ones,
and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.methods import loss_data as LD

SEP = 3.0  # class-mean separation along the first axis


def gaussian_data(n=2000, d=16, seed=0):
    """x | y ~ N((2y - 1) SEP/2 e_1, I), y ~ Bernoulli(1/2); Bayes logit is SEP * x_1."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, d))
    x[:, 0] += (2 * y - 1) * SEP / 2
    return x.astype(np.float32), y


def bayes_cross_entropy(x, y):
    """Mean cross-entropy (nats) of the Bayes posterior on the rows (x, y)."""
    return float(np.mean(np.logaddexp(0.0, -(2 * y - 1) * SEP * x[:, 0])))


SMALL = dict(n_points=6, seeds=2, steps=300, batch_size=64, lr=1e-3, hidden=(64, 64))


@pytest.fixture(scope="module")
def gaussian_curve():
    x, y = gaussian_data()
    return LD.loss_data_curves(x, y, **SMALL), x, y


def hand_curve():
    sizes = np.array([10, 20, 40, 100])
    losses = np.array([[3.0, 2.0], [1.4, 1.6], [0.9, 0.7], [0.25, 0.35]])  # [P, S]
    return LD.LossDataResult(sizes, losses, n_train=100, n_val=12, num_classes=2)


def test_metrics_equal_their_formulas_on_a_hand_made_curve():
    m = LD.loss_data_metrics(hand_curve(), eps=1.0)
    # seed means 2.5, 1.5, 0.8, 0.3; increments 10, 10, 20, 60
    assert m["val_loss"] == pytest.approx(0.3)
    assert m["mdl"] == pytest.approx(10 * 2.5 + 10 * 1.5 + 20 * 0.8 + 60 * 0.3)
    assert m["sdl"] == pytest.approx(10 * 1.5 + 10 * 0.5)
    assert m["sdl_is_lower_bound"] is False
    assert m["esc"] == 40 and m["esc_text"] == "40"
    assert m["units"] == "nats" and m["max_n"] == 100


def test_unreached_eps_gives_no_esc_and_a_lower_bound_sdl():
    m = LD.loss_data_metrics(hand_curve(), eps=0.1)
    assert m["esc"] is None and m["esc_text"] == "> 100"
    assert m["sdl_is_lower_bound"] is True
    assert m["sdl"] == pytest.approx(10 * 2.4 + 10 * 1.4 + 20 * 0.7 + 60 * 0.2)
    assert LD.esc([10, 20], [0.5, 0.1], eps=0.5) == 10  # L <= eps counts


def test_paper_defaults_reproduce_the_tables_esc_and_mdl_minus_sdl():
    # 000 Table 7: eSC_1 = floor(0.9 N) and MDL - SDL_1 = 1912 at N = 4096 (Val loss ~ 1e-6)
    for n, expected in ((4096, 3686), (8192, 7372), (16384, 14745), (32768, 29491)):
        sizes = LD.training_sizes(math.floor(0.9 * n))
        assert len(sizes) == LD.PAPER_N_POINTS and sizes[-1] == expected
    sizes = LD.training_sizes(3686)
    losses = np.r_[np.full(9, 5.0), 1e-6]
    diff = LD.mdl(sizes, losses) - LD.sdl(sizes, losses, LD.PAPER_EPS)
    assert round(diff) == 1912
    assert LD.esc(sizes, losses) == 3686


def test_training_sizes_are_increasing_and_within_the_training_set():
    sizes = LD.training_sizes(18)
    assert sizes[0] == 10 and sizes[-1] == 18 and np.all(np.diff(sizes) > 0)


def test_validation_loss_falls_with_size_towards_the_bayes_cross_entropy(gaussian_curve):
    result, x, y = gaussian_curve
    assert result.n_train == 1800 and result.n_val == 200 and result.losses.shape == (6, 2)
    curve = result.mean_losses
    assert curve[-1] < 0.5 * curve[0]
    assert np.all(np.diff(curve) < 0.02)  # non-increasing up to seed noise
    bayes = bayes_cross_entropy(x[result.n_train:], y[result.n_train:])
    assert 0.9 * bayes <= curve[-1] <= 1.5 * bayes


def test_vmapped_jobs_equal_each_job_trained_alone():
    x, y = gaussian_data(n=400, d=8, seed=1)
    config = LD.MLPProbeConfig(hidden=(32, 32), num_classes=2, steps=120, batch_size=32, lr=1e-3)
    keys = np.tile(np.asarray(LD.seed_keys(3, 2)), (3, 1))  # (k0, 10) (k1, 10) (k0, 12) ... (k1, 300)
    sizes = np.array([10, 10, 12, 12, 300, 300])  # 10 and 12: one program on the first 12 rows
    args = (x[:360], y[:360], x[360:], y[360:], config)
    together = LD.train_jobs(keys, sizes, *args)
    # alone, each on its drawn rows: the jobs of short prefixes, trained on the first 12 rows weighted by their
    # draws, take the same steps up to float rounding
    alone = LD.train_jobs(keys[[0, 3, 4]], sizes[[0, 3, 4]], *args, batched=False)
    np.testing.assert_allclose(alone, together[[0, 3, 4]], atol=1e-5)
    assert len(set(np.round(together, 6))) == 6  # the jobs really differ


def test_curves_are_reproducible_and_labels_may_be_any_integers():
    x, y = gaussian_data(n=200, d=4, seed=2)
    kwargs = dict(n_points=3, seeds=1, steps=40, batch_size=16, lr=1e-3, hidden=(8,))
    a = LD.loss_data_curves(x, y, **kwargs)
    b = LD.loss_data_curves(x, np.where(y == 1, 7, -3), **kwargs)
    np.testing.assert_array_equal(a.losses, b.losses)
    assert a.num_classes == 2 and list(a.sizes) == [10, 43, 180]


@pytest.mark.parametrize(
    "x, y, kwargs, match",
    [
        (np.zeros((19, 4)), np.arange(19) % 2, {}, "at least 20"),
        (np.zeros((40, 4)), np.ones(40, int), {}, "single class"),
        (np.zeros((40, 4)), np.arange(40) % 2 + 0.5, {}, "integer label"),
        (np.zeros(40), np.arange(40) % 2, {}, r"\[N, D\]"),
        (np.full((40, 4), np.nan), np.arange(40) % 2, {}, "NaN"),
        (np.zeros((40, 4)), np.arange(40) % 2, {"val_fraction": 0.0}, "val_fraction"),
        (np.zeros((40, 4)), np.arange(40) % 2, {"steps": 0}, "steps"),
        (np.zeros((40, 4)), np.arange(40) % 2, {"lr": -1.0}, "lr"),
    ],
)
def test_bad_input_raises_one_clear_error(x, y, kwargs, match):
    with pytest.raises(LmprobeError, match=match):
        LD.loss_data_curves(x, y, **kwargs)


def test_bad_curve_or_eps_raises():
    with pytest.raises(LmprobeError, match="strictly increasing"):
        LD.mdl([10, 10], [1.0, 0.5])
    with pytest.raises(LmprobeError, match="eps"):
        LD.loss_data_metrics(hand_curve(), eps=-1.0)
