"""lmprobe.report.significance (and coefficients.permuted_statistic): permutation p-values against
scipy.stats (its exact Kendall test and permutation_test over all pairings), critical values
against the standard tables (Spearman n = 6: 0.886, n = 8: 0.738; Kendall n = 6: 0.867) and
against enumeration, outliers and resolved pairs against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lmprobe.errors import LmprobeError
from lmprobe.report.coefficients import batch_ranks, batch_statistic, kendall, pearson, permuted_statistic, spearman
from lmprobe.report.significance import (
    all_permutations,
    critical_value,
    holm,
    min_p,
    outliers,
    permutation_p,
    power,
    resolved_pairs,
    skipped_pearson,
    tau_interval,
    trend,
    unreachable_note,
    welch_df,
)

FUNCTIONS = {"pearson": pearson, "spearman": spearman, "kendall": kendall}


def test_all_permutations_lists_every_ordering_once():
    for n in range(0, 10):
        perms = all_permutations(n)
        assert perms.shape == (math.factorial(n), n) and not perms.flags.writeable
        assert np.all(np.sort(perms, axis=1) == np.arange(n))  # each row is an ordering
        if n < 9:  # all distinct (9: too slow to check; built by the same insertion)
            codes = perms.astype(np.int64) @ (n ** np.arange(n))
            assert np.unique(codes).size == perms.shape[0]
    with pytest.raises(LmprobeError, match="limited to 0..10"):
        all_permutations(11)


def test_batch_ranks_match_scipy_row_by_row():
    rng = np.random.default_rng(8)
    rows = np.concatenate([rng.integers(0, 4, (50, 9)), rng.normal(size=(50, 9))]).astype(float)
    np.testing.assert_array_equal(batch_ranks(rows), stats.rankdata(rows, axis=1))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_permuted_statistic_equals_the_statistic_of_each_permuted_pair(name):
    rng = np.random.default_rng(5)
    for ties in (False, True):
        x = rng.integers(0, 3, 7).astype(float) if ties else rng.normal(size=7)
        y = rng.integers(0, 4, 7).astype(float) if ties else x + rng.normal(size=7)
        perms = np.array([rng.permutation(7) for _ in range(300)])
        fast = permuted_statistic(name, x, y, perms)
        np.testing.assert_allclose(fast, batch_statistic(name, x, y[perms]), atol=1e-12)
        for row in perms[:20]:
            assert fast[perms.tolist().index(row.tolist())] == pytest.approx(FUNCTIONS[name](x, y[row]), abs=1e-12)
    # constant side: NaN, as batch_statistic
    assert np.isnan(permuted_statistic(name, [1.0, 1.0, 1.0], [1.0, 2.0, 3.0], all_permutations(3))).all()


def scipy_exact_p(x, y, name):
    """scipy.stats.permutation_test over all n! pairings of |statistic| (one-sided on |.|, which is
    this module's two-sided p), |statistic| rounded to 10 decimals so that equal values compare equal."""
    def absolute(a, axis=-1):
        if name == "pearson":
            value = stats.pearsonr(np.broadcast_to(x, a.shape), a, axis=axis).statistic
        elif name == "spearman":
            rx = stats.rankdata(np.broadcast_to(x, a.shape), axis=axis)
            value = stats.pearsonr(rx, stats.rankdata(a, axis=axis), axis=axis).statistic
        else:
            value = np.array([stats.kendalltau(x, row).statistic for row in np.reshape(a, (-1, len(x)))])
        return np.round(np.abs(value), 10)

    return stats.permutation_test((y,), absolute, permutation_type="pairings", vectorized=True,
                                  n_resamples=np.inf, alternative="greater").pvalue


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_exact_p_matches_scipy_permutation_test_with_and_without_ties(name):
    rng = np.random.default_rng(11)
    for trial in range(6):
        n = 4 + trial % 2 + (trial == 4 and name != "kendall")  # scipy's Kendall is one call per ordering
        if trial % 2:
            x, y = rng.integers(0, 3, n).astype(float), rng.integers(0, 3, n).astype(float)
            if np.ptp(x) == 0 or np.ptp(y) == 0:
                continue
        else:
            x = rng.normal(size=n)
            y = 0.6 * x + rng.normal(size=n)
        got = permutation_p(x, y, name)
        assert (got["method"], got["n_permutations"], got["statistic"], got["n"]) == (
            "exact", math.factorial(n), name, n)
        assert got["estimate"] == pytest.approx(FUNCTIONS[name](x, y), abs=1e-12)
        assert got["p"] == pytest.approx(scipy_exact_p(x, y, name), abs=1e-12)


def test_exact_p_at_eight_and_nine_models_matches_scipy():
    rng = np.random.default_rng(3)
    x = rng.normal(size=9)
    y = 0.5 * x + rng.normal(size=9)
    tau = permutation_p(x, y, "kendall")
    assert tau["p"] == pytest.approx(stats.kendalltau(x, y, method="exact").pvalue, abs=1e-12)
    assert tau["n_permutations"] == 362880
    assert permutation_p(x[:8], y[:8], "spearman")["p"] == pytest.approx(scipy_exact_p(x[:8], y[:8], "spearman"),
                                                                         abs=1e-12)


def test_monte_carlo_p_counts_the_observed_ordering_and_agrees_with_the_exact_test():
    x = np.arange(12.0)
    perfect = permutation_p(x, x ** 2, "spearman", n_permutations=5000)
    assert perfect["method"] == "monte-carlo" and perfect["p"] == pytest.approx(1 / 5001)  # only itself reaches 1
    rng = np.random.default_rng(2)
    y = 0.3 * x + rng.normal(size=12) * 3
    got = permutation_p(x, y, "kendall", n_permutations=20000, seed=4)
    exact = stats.kendalltau(x, y, method="exact").pvalue
    assert abs(got["p"] - exact) < 4 * math.sqrt(exact * (1 - exact) / 20000) + 1e-4
    assert permutation_p(x, y, "kendall", seed=4) == got  # deterministic
    # exact_up_to moves the switch
    assert permutation_p(x[:6], y[:6], exact_up_to=5)["method"] == "monte-carlo"


@pytest.mark.parametrize("call, words", [
    (lambda: permutation_p([1, 2, 3], [1, 3, 2], "tau"), ["statistic='tau'"]),
    (lambda: permutation_p([1, 2, 3], [1, 3, 2], exact_up_to=11), ["exact_up_to=11", "at most 10"]),
    (lambda: permutation_p([1, 2, 3], [1, 3, 2], n_permutations=0), ["n_permutations=0"]),
    (lambda: permutation_p([1, 2, 3], [2, 2, 2]), ["y is constant"]),
    (lambda: permutation_p([1, 2], [2, 1]), ["at least 3"]),
    (lambda: critical_value(6, "pearson"), ["depends on the values"]),
    (lambda: min_p(6, "pearson"), ["depends on the values"]),
    (lambda: critical_value(6, alpha=5), ["alpha=5"]),
    (lambda: critical_value(1), ["n=1"]),
    (lambda: trend([1, 2, 3], [0, 1, 2, 3]), ["order has 4 positions"]),
    (lambda: outliers([1, 2, 3], threshold=0), ["threshold=0"]),
    (lambda: resolved_pairs([1, 2, 3], [0.1, -0.1, 0.1]), ["negative or infinite", "[1]"]),
    (lambda: resolved_pairs([1, 2, 3], [0.1, 0.1]), ["stderr has shape (2,)", "3 models"]),
    (lambda: resolved_pairs([1, 2, 3], [0.1] * 3, level=95), ["level=95"]),
])
def test_bad_input_gets_one_clear_error(call, words):
    with pytest.raises(LmprobeError) as error:
        call()
    for word in words:
        assert word in str(error.value)


# ---------------------------------------------------------------- critical values


def test_critical_values_match_the_standard_tables():
    assert critical_value(6) == pytest.approx(0.886, abs=5e-4)
    assert critical_value(8) == pytest.approx(0.738, abs=5e-4)
    assert critical_value(6, "kendall") == pytest.approx(0.867, abs=5e-4)
    assert critical_value(3) is None and critical_value(4) is None and critical_value(4, "kendall") is None
    assert min_p(3) == pytest.approx(1 / 3) and min_p(8, "kendall") == pytest.approx(2 / 40320)
    assert critical_value(10) == pytest.approx(0.648, abs=0.01)  # 200,000 random orderings
    assert critical_value(8, alpha=0.01) == pytest.approx(0.881, abs=5e-4)
    assert unreachable_note(3) == "n = 3: no ordering reaches p < 0.05; smallest p = 0.33"
    assert unreachable_note(5) is None


@pytest.mark.parametrize("name", ["spearman", "kendall"])
def test_critical_value_and_min_p_agree_with_enumerated_p_values(name):
    for n in (5, 6, 7):
        x = np.arange(n, dtype=float)
        perms = all_permutations(n)
        values = np.round(permuted_statistic(name, x, x, perms), 12)
        p = {v: permutation_p(x, x[perms[np.flatnonzero(values == v)[0]]], name)["p"]
             for v in np.unique(np.abs(values)) if v > 0}
        significant = [v for v, q in p.items() if q < 0.05]
        assert critical_value(n, name) == pytest.approx(min(significant))
        assert all(q >= 0.05 for v, q in p.items() if v < min(significant))
        assert min_p(n, name) == pytest.approx(min(p.values()))


def test_kendall_null_by_inversion_counts_equals_enumeration():
    # critical_value's Kendall path (inversion counts) against counting all 8! orderings
    x = np.arange(8.0)
    tau = np.abs(permuted_statistic("kendall", x, x, all_permutations(8)))
    for alpha in (0.01, 0.05, 0.1):
        levels = np.unique(np.round(tau, 12))
        p = np.array([np.mean(tau >= level - 1e-12) for level in levels])
        assert critical_value(8, "kendall", alpha) == pytest.approx(levels[p < alpha].min())


# ---------------------------------------------------------------- trends


def test_trend_along_a_ladder():
    falling = trend([0.9, 0.8, 0.6, 0.5, 0.2])
    assert falling == {"tau": pytest.approx(-1.0), "p": pytest.approx(2 / 120), "p_method": "exact", "n": 5,
                       "monotone": -1, "alternative": "two-sided"}
    # one-sided in the direction stated in advance: half the two-sided p, or near 1 against it
    assert trend([0.2, 0.5, 0.6, 0.8, 0.9], alternative="greater")["p"] == pytest.approx(1 / 120)
    assert trend([0.9, 0.8, 0.6, 0.5, 0.2], alternative="greater")["p"] == pytest.approx(1.0)
    assert trend([0.1, 0.3, 0.2, 0.4])["monotone"] == 0
    # known order given as noise levels, models not sorted by it
    noise = [0.1, 0.0, 0.4, 0.05, 0.2, 0.3]
    score = [0.52, 0.70, 0.31, 0.55, 0.49, 0.40]
    got = trend(score, noise)
    assert got["tau"] == pytest.approx(stats.kendalltau(noise, score).statistic)
    assert got["p"] == pytest.approx(stats.kendalltau(noise, score, method="exact").pvalue)
    assert got["monotone"] == -1 and got["tau"] == pytest.approx(-1.0)
    score[1] = 0.50  # the base model now below the 0.05 variant: not monotone, tau < 1
    assert trend(score, noise)["monotone"] == 0 and -1 < trend(score, noise)["tau"] < 0


# ---------------------------------------------------------------- outliers and robust Pearson


def test_one_destroyed_model_is_flagged_and_drives_pearson():
    bits_per_byte = [1.1, 1.3, 1.2, 1.6, 1.4, 1.5, 6.5]  # the noise-0.4 decoder at 6.5
    word_order = [0.30, 0.28, 0.35, 0.31, 0.27, 0.33, 0.05]
    assert outliers(bits_per_byte) == [6] and outliers(word_order) == [6]
    got = skipped_pearson(bits_per_byte, word_order)
    assert got["pearson"] == pytest.approx(stats.pearsonr(bits_per_byte, word_order).statistic)
    assert got["pearson"] < -0.95
    assert (got["removed"], got["n"], got["note"]) == ([6], 6, None)
    assert got["estimate"] == pytest.approx(stats.pearsonr(bits_per_byte[:6], word_order[:6]).statistic)
    assert abs(got["estimate"]) < 0.6
    low, high = got["leave_one_out"]
    assert low == pytest.approx(min(stats.pearsonr(np.delete(bits_per_byte, i), np.delete(word_order, i)).statistic
                                    for i in range(7)))
    assert high == pytest.approx(got["estimate"])  # leaving the destroyed model out moves r the most


def test_outliers_use_the_modified_z_score():
    values = [10.0, 10.5, 9.5, 10.2, 9.8, 13.0]  # median 10, MAD 0.35: z(13) = 0.6745 * 3 / 0.35 = 5.8
    assert outliers(values) == [5]
    assert outliers(values, threshold=6.0) == []
    assert outliers([1.0, 1.0, 1.0, 1.0, 5.0]) == []  # MAD 0: none flagged
    assert outliers([1.0, 2.0, 3.0, 4.0, 5.0]) == []
    flat = skipped_pearson([1.0, 2.0, 3.0], [1.0, 3.0, 2.0])
    assert flat["removed"] == [] and flat["leave_one_out"] is None


# ---------------------------------------------------------------- resolved pairs


def test_resolved_pairs_by_t_tests_with_holm_across_the_pairs():
    values = [0.0, 1.0, 3.0, 3.1]
    stderr = [0.3, 0.4, None, 0.05]
    got = resolved_pairs(values, stderr)  # normal errors (df None): z tests
    raw = {(0, 1): 2 * stats.norm.sf(1.0 / 0.5), (0, 3): 2 * stats.norm.sf(3.1 / np.hypot(0.3, 0.05)),
           (1, 3): 2 * stats.norm.sf(2.1 / np.hypot(0.4, 0.05))}
    assert got["p"] == pytest.approx(raw)
    # Holm: the smallest p times 3, the next times 2, the largest times 1 (kept monotone)
    assert got["p_adjusted"] == pytest.approx({(0, 3): 3 * raw[0, 3], (1, 3): 2 * raw[1, 3], (0, 1): raw[0, 1]})
    assert got["resolved"] == [(0, 1), (0, 3), (1, 3)]  # p(0, 1) = 0.0455, the largest: compared with 0.05
    assert got["unknown"] == [(0, 2), (1, 2), (2, 3)] and got["unresolved"] == []
    assert (got["n_resolved"], got["n_pairs"], got["fraction"], got["adjust"]) == (3, 6, 0.5, "holm")
    strict = resolved_pairs(values, stderr, level=0.99)
    assert strict["unresolved"] == [(0, 1)] and strict["n_resolved"] == 2
    assert resolved_pairs([1.0, 2.0], [0.0, 0.0])["resolved"] == [(0, 1)]
    assert resolved_pairs([1.0, 2.0], None)["unknown"] == [(0, 1)]
    # 3-trial errors (2 degrees of freedom each): t on Welch-Satterthwaite's df, here 4
    three = resolved_pairs([0.0, 1.0], [0.3, 0.4], df=[2, 2])
    assert welch_df(0.3, 2, 0.4, 2) == pytest.approx(0.25 ** 2 / (0.3 ** 4 / 2 + 0.4 ** 4 / 2))
    assert three["p"][0, 1] == pytest.approx(2 * stats.t.sf(2.0, welch_df(0.3, 2, 0.4, 2)))
    assert three["unresolved"] == [(0, 1)]  # z would resolve it (p 0.046); t on ~3.9 df does not (p 0.12)
    assert welch_df(0.3, np.inf, 0.4, np.inf) == np.inf and welch_df(0.0, 2, 0.0, 2) == np.inf


def test_holm_matches_the_step_down_procedure():
    p = [0.01, 0.04, 0.03, np.nan, 0.005]
    adjusted = holm(p)
    assert np.isnan(adjusted[3])
    np.testing.assert_allclose(adjusted[[4, 0, 2, 1]], [4 * 0.005, 3 * 0.01, 2 * 0.03 * 1.0, 0.06])


def test_paired_resolution_from_items_scored_by_both_models():
    rng = np.random.default_rng(0)
    shared = rng.normal(0.0, 1.0, 200)  # item difficulty, common to both models: cancels when paired
    a, b = shared + 0.10 + rng.normal(0, 0.05, 200), shared + rng.normal(0, 0.05, 200)
    se = [a.std(ddof=1) / np.sqrt(200), b.std(ddof=1) / np.sqrt(200)]
    unpaired = resolved_pairs([a.mean(), b.mean()], se)
    paired = resolved_pairs([a.mean(), b.mean()], se, items=[a, b])
    assert unpaired["unresolved"] == [(0, 1)] and paired["resolved"] == [(0, 1)]
    assert paired["p"][0, 1] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    with pytest.raises(LmprobeError, match="same items"):
        resolved_pairs([0.0, 1.0], None, items=[[1.0, 2.0], [1.0, 2.0, 3.0]])


def test_pair_resolution_keeps_its_false_positive_rate_under_equal_models():
    """Equal models, errors from 3 trials each: the chance that a table claims any pair resolved is
    at most 0.05 (a z test at 1.96 without correction: 0.84 for 9 models)."""
    rng = np.random.default_rng(0)
    for n_models in (4, 9):
        trials = rng.normal(0.0, 1.0, (400, n_models, 3))
        means, errors = trials.mean(-1), trials.std(-1, ddof=1) / np.sqrt(3)
        any_false = [resolved_pairs(m, e, df=[2] * n_models)["n_resolved"] > 0 for m, e in zip(means, errors)]
        naive = [resolved_pairs(m, e, adjust="none")["n_resolved"] > 0 for m, e in zip(means, errors)]
        assert np.mean(any_false) <= 0.05
        assert np.mean(naive) > 0.3  # the old rule's rate, for contrast


def test_power_of_the_exact_kendall_test_matches_scipy_by_simulation():
    rng = np.random.default_rng(3)
    for n, r in ((5, 0.9), (9, 0.5)):
        hits = []
        for _ in range(1500):
            x = rng.standard_normal(n)
            y = r * x + np.sqrt(1 - r * r) * rng.standard_normal(n)
            hits.append(stats.kendalltau(x, y, method="exact").pvalue <= 0.05)
        assert power(n, r, alternative="two-sided") == pytest.approx(np.mean(hits), abs=0.04)
    assert power(4, 0.9, alternative="two-sided") == 0.0  # n = 4 cannot reach 0.05
    assert power(5, 0.9) > power(5, 0.9, alternative="two-sided")  # one-sided is stronger
    assert power(5, 0.9, alpha=0.05 / 7) == 0.0  # 1 / 5! = 0.0083 > 0.05 / 7


def test_tau_interval_covers_at_least_its_level_for_4_to_9_models():
    """Seeded simulation: bivariate normal scores with correlation 0-0.9, each model observed with
    noise; the interval's coverage of the tau of the observed scores is at least 0.93 at 0.95."""
    rng = np.random.default_rng(0)
    for n in range(4, 10):
        for r in (0.0, 0.5, 0.9):
            noisy_r = r / (1 + 0.3 ** 2)  # the correlation of the observed scores (noise sd 0.3)
            target = 2 / np.pi * np.arcsin(noisy_r)
            covered = []
            for _ in range(300):
                x = rng.standard_normal(n)
                y = r * x + np.sqrt(1 - r * r) * rng.standard_normal(n)
                x, y = x + 0.3 * rng.standard_normal(n), y + 0.3 * rng.standard_normal(n)
                got = tau_interval(x, y)
                covered.append(got["low"] <= target <= got["high"])
            assert np.mean(covered) >= 0.93, (n, r, np.mean(covered))
    exact = tau_interval([1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert exact["estimate"] == 1.0 and exact["high"] == 1.0 and exact["low"] < 0.5  # 5 models: wide
