"""Small-n inference on scores across models: exact permutation p-values and the critical values
they imply, trends along a ladder's known order, outliers and a robust Pearson, and which pairs of
models per-model standard errors resolve.

* ``permutation_p``: two-sided permutation test of no association (Pitman 1937): the fraction of
  orderings of y, x fixed, whose |statistic| is at least the observed one (1e-12 slack). Exact
  (all n! orderings, the observed one included) up to ``exact_up_to`` = 9 models, else Monte-Carlo
  with the observed ordering counted in, p = (1 + k) / (1 + N) (Phipson & Smyth 2010). Exact for
  the data as given, ties included. Statistics: Spearman's rho, Kendall's tau-b (Kendall 1938),
  Pearson's r.
* ``critical_value`` / ``min_p``: for n models without ties, the smallest |rho| or |tau| whose
  exact two-sided p is below alpha (None if none is: n <= 4), and the smallest attainable p,
  2 / n! (only the two monotone orderings reach |statistic| = 1). Kendall's null distribution is
  exact for any n (inversion counts, Kendall 1938); Spearman's is enumerated up to 9 models and
  estimated from 200,000 random orderings beyond. Spearman n = 6: 0.886, n = 8: 0.738; Kendall
  n = 6: 0.867 (the standard tables, e.g. Zar 1972).
* ``trend``: Kendall's tau-b of scores against a ladder's known order (0, 1, ... by default) with
  ``permutation_p``'s exact p (Mann 1945's test for trend), and whether the scores are strictly
  monotone along the order.
* ``outliers``: modified z-score 0.6745 (x - median) / MAD, flagged above 3.5 in absolute value
  (Iglewicz & Hoaglin 1993); MAD 0 flags none. ``skipped_pearson``: Pearson after removing the
  points flagged in x or y (a skipped correlation, Wilcox 2004), with the leave-one-out range of
  Pearson on all points, wide when one point drives r.
* ``resolved_pairs``: models i and j are resolved when a t test of their difference,
  t = (v_i - v_j) / sqrt(se_i^2 + se_j^2) on Welch-Satterthwaite's degrees of freedom (each error's
  own: 2 for the mean of 3 trials, infinite for a bootstrap over many examples), rejects after
  Holm's correction across the pairs of the table; with per-item scores of two models on the same
  items, a paired t test of the item differences instead. A missing standard error makes the
  pair "unknown". At 1.96 with 3-trial errors a z test would call 12% of equal pairs different.
* ``holm``: Holm's (1979) step-down adjusted p-values, which control the chance of any false
  rejection in a family at alpha.
* ``power``: the chance that the exact test of n models rejects at ``alpha`` when the models'
  two scores are bivariate normal with correlation r (seeded simulation; untied data, so the
  exact p is a function of the statistic alone).
* ``tau_interval``: a distribution-free interval for Kendall's tau from Daniels & Kendall's (1947)
  bound Var(t) <= 2 (1 - tau^2) / n, solved for tau: conservative at any n (a seeded simulation
  in the tests checks coverage at n = 4-9), unlike a percentile bootstrap over 4-9 models.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np
from scipy import stats

from lmprobe.errors import LmprobeError
from lmprobe.report.coefficients import (
    STATISTICS,
    as_pair,
    as_scores,
    batch_statistic,
    kendall,
    pearson,
    per_model,
    permuted_statistic,
    require_varying,
    spearman,
)

EXACT_UP_TO = 9  # 9! = 362,880 orderings, about 10 ms per statistic
MAX_EXACT = 10
TIE_SLACK = 1e-12
SPEARMAN_NULL_DRAWS = 200_000
OUTLIER_THRESHOLD = 3.5
MAD_CONSTANT = 0.6745  # Phi^-1(0.75): MAD / 0.6745 estimates sigma for normal data

ALTERNATIVES = ("two-sided", "greater")  # "greater": the statistic is positive under the alternative
POWER_CORRELATIONS = (0.5, 0.7, 0.9)
POWER_DRAWS = 20_000

_FUNCTIONS = {"pearson": pearson, "spearman": spearman, "kendall": kendall}


def _alternative(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise LmprobeError(f"alternative={alternative!r}: pass one of {list(ALTERNATIVES)}")
    return alternative


@functools.lru_cache(maxsize=MAX_EXACT + 1)
def all_permutations(n: int) -> np.ndarray:
    """Every ordering of 0..n-1, a read-only [n!, n] int8 array (column-major: fast columns)."""
    if not 0 <= n <= MAX_EXACT:
        raise LmprobeError(f"all_permutations({n}): enumeration is limited to 0..{MAX_EXACT} items")
    perms = np.zeros((1, 0), dtype=np.int8)
    for k in range(n):  # insert k at every position of each ordering of 0..k-1
        m = perms.shape[0]
        grown = np.empty((m * (k + 1), k + 1), dtype=np.int8)
        for position in range(k + 1):
            block = grown[position * m:(position + 1) * m]
            block[:, :position], block[:, position], block[:, position + 1:] = \
                perms[:, :position], k, perms[:, position:]
        perms = grown
    perms = np.asfortranarray(perms)
    perms.flags.writeable = False
    return perms


def _statistic_name(statistic: str) -> str:
    if statistic not in STATISTICS:
        raise LmprobeError(f"statistic={statistic!r}: pass one of {list(STATISTICS)}")
    return statistic


def _whole(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise LmprobeError(f"{name}={value!r}: pass a whole number >= {low}")
    return int(value)


def permutation_p(x, y, statistic: str = "spearman", *, exact_up_to: int = EXACT_UP_TO,
                  n_permutations: int = 20000, seed: int = 0, alternative: str = "two-sided") -> dict:
    """Permutation p-value of ``statistic`` ("spearman", "kendall" (tau-b), "pearson") between x
    and y: the fraction of orderings of y whose |statistic| >= |observed| - 1e-12 (two-sided), or
    whose statistic >= observed - 1e-12 (``alternative="greater"``: a positive association
    stated in advance).

    n <= ``exact_up_to`` (at most 10): all n! orderings, ``method`` "exact"; beyond:
    ``n_permutations`` random orderings (seeded), ``method`` "monte-carlo", p = (1 + k) / (1 + N)
    with k the count reaching the observed value. Returns ``{"p", "method", "n_permutations",
    "statistic", "estimate", "n"}``. x and y: at least 3 finite scores each, not constant.
    """
    name = _statistic_name(statistic)
    alternative = _alternative(alternative)
    exact_up_to = _whole(exact_up_to, "exact_up_to", 0)
    if exact_up_to > MAX_EXACT:
        raise LmprobeError(f"exact_up_to={exact_up_to}: enumerating more than {MAX_EXACT}! orderings needs "
                           "gigabytes; use at most 10 (Monte-Carlo beyond)")
    n_permutations = _whole(n_permutations, "n_permutations", 1)
    x, y = as_pair(x, y)
    require_varying(x, "x")
    require_varying(y, "y")
    estimate = _FUNCTIONS[name](x, y)
    n = x.size
    if n <= exact_up_to:
        orderings, method = all_permutations(n), "exact"
    else:
        draws = np.tile(np.arange(n, dtype=np.int16), (n_permutations, 1))
        orderings, method = np.asfortranarray(np.random.default_rng(seed).permuted(draws, axis=1)), "monte-carlo"
    values = permuted_statistic(name, x, y, orderings)
    if alternative == "greater":
        reached = int(np.count_nonzero(values >= estimate - TIE_SLACK))
    else:
        reached = int(np.count_nonzero(np.abs(values) >= abs(estimate) - TIE_SLACK))
    p = reached / len(orderings) if method == "exact" else (1 + reached) / (1 + len(orderings))
    return {"p": float(p), "method": method, "n_permutations": len(orderings), "statistic": name,
            "estimate": float(estimate), "n": n, "alternative": alternative}


# ---------------------------------------------------------------- null distributions without ties


@functools.lru_cache(maxsize=32)
def _kendall_null(n: int) -> tuple[np.ndarray, np.ndarray]:
    """tau's values and their exact probabilities: tau = 1 - 4 I / (n (n - 1)), I the number of
    inversions, counted by the recursion of the Mahonian numbers."""
    counts = [1]
    for k in range(1, n):  # the k-th item adds 0..k inversions
        grown = [0] * (len(counts) + k)
        for inversions, count in enumerate(counts):
            for added in range(k + 1):
                grown[inversions + added] += count
        counts = grown
    inversions = np.arange(len(counts))
    total = math.factorial(n)
    return 1.0 - 4.0 * inversions / (n * (n - 1)), np.array([c / total for c in counts])


@functools.lru_cache(maxsize=32)
def _spearman_null(n: int) -> tuple[np.ndarray, np.ndarray]:
    """rho's values 1 - 6 sum d^2 / (n^3 - n) and their probabilities: exact up to ``EXACT_UP_TO``
    models, else from ``SPEARMAN_NULL_DRAWS`` random orderings (seed 0)."""
    if n <= EXACT_UP_TO:
        orderings = all_permutations(n)
    else:
        draws = np.tile(np.arange(n), (SPEARMAN_NULL_DRAWS, 1))
        orderings = np.random.default_rng(0).permuted(draws, axis=1)
    squared = ((orderings.astype(np.int64) - np.arange(n)) ** 2).sum(axis=1)
    counts = np.bincount(squared)
    support = np.flatnonzero(counts)
    return 1.0 - 6.0 * support / (n ** 3 - n), counts[support] / len(orderings)


def _null(n, statistic: str) -> tuple[np.ndarray, np.ndarray]:
    name = _statistic_name(statistic)
    if name == "pearson":
        raise LmprobeError("statistic='pearson': Pearson's permutation distribution depends on the values, "
                           "not only on n; use permutation_p on the data")
    n = _whole(n, "n", 2)
    return _kendall_null(n) if name == "kendall" else _spearman_null(n)


def _two_sided(values: np.ndarray, probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct |values| and, for each, P(|statistic| >= it)."""
    size = np.round(np.abs(values), 12)
    levels = np.unique(size)
    p = np.array([probabilities[size >= level - TIE_SLACK].sum() for level in levels])
    return levels, p


def critical_value(n: int, statistic: str = "spearman", alpha: float = 0.05) -> float | None:
    """The smallest |rho| ("spearman") or |tau| ("kendall") whose two-sided p under no association
    is below ``alpha``, for n models without ties; None when no ordering reaches it."""
    if not 0.0 < float(alpha) < 1.0:
        raise LmprobeError(f"alpha={alpha!r}: pass a significance level in (0, 1), e.g. 0.05")
    levels, p = _two_sided(*_null(n, statistic))
    below = levels[p < alpha]
    return float(below.min()) if below.size else None


def min_p(n: int, statistic: str = "spearman") -> float:
    """The smallest two-sided p any ordering of n models without ties can reach: 2 / n!."""
    _statistic_name(statistic)
    if statistic == "pearson":
        _null(n, statistic)  # raises: depends on the values
    n = _whole(n, "n", 2)
    return 2.0 / math.factorial(n)


def unreachable_note(n: int, alpha: float = 0.05) -> str | None:
    """A sentence when no ordering of n models reaches two-sided p < alpha, else None."""
    smallest = min_p(n)
    if smallest < alpha:
        return None
    return f"n = {n}: no ordering reaches p < {alpha:g}; smallest p = {smallest:.2g}"


# ---------------------------------------------------------------- trends along a known order


def trend(values, order=None, *, alternative: str = "two-sided") -> dict:
    """Kendall's tau-b of ``values`` against ``order`` (the ladder's known positions, 0, 1, ...,
    n - 1 by default), its exact permutation p (two-sided, or ``alternative="greater"``: values
    rising along the order, the direction stated in advance), and ``monotone``: +1 if the values
    rise strictly along the order (every pair of distinct positions), -1 if they fall strictly,
    else 0. Returns ``{"tau", "p", "p_method", "alternative", "n", "monotone"}``.
    """
    values = as_scores(values, "values")
    order = np.arange(values.size, dtype=np.float64) if order is None else as_scores(order, "order")
    if order.size != values.size:
        raise LmprobeError(f"order has {order.size} positions but values has {values.size}: pass one "
                           "position per model")
    require_varying(order, "order")
    require_varying(values, "values")
    test = permutation_p(order, values, "kendall", alternative=alternative)
    first, second = np.triu_indices(values.size, k=1)
    distinct = order[first] != order[second]
    agree = np.sign(order[second] - order[first]) * np.sign(values[second] - values[first])
    monotone = 1 if np.all(agree[distinct] > 0) else -1 if np.all(agree[distinct] < 0) else 0
    return {"tau": test["estimate"], "p": test["p"], "p_method": test["method"], "alternative": alternative,
            "n": int(values.size), "monotone": monotone}


def power(n: int, correlation: float, *, statistic: str = "kendall", alpha: float = 0.05,
          alternative: str = "greater", draws: int = POWER_DRAWS, seed: int = 0) -> float:
    """The chance that the exact test of ``statistic`` ("kendall" or "spearman") over ``n`` models
    rejects at ``alpha`` when each model's two scores are bivariate normal with Pearson correlation
    ``correlation``: the fraction of ``draws`` seeded samples whose exact p (a function of the
    statistic for untied data) is at most ``alpha``."""
    name = _statistic_name(statistic)
    alternative = _alternative(alternative)
    if not -1.0 <= float(correlation) <= 1.0 or not 0.0 < float(alpha) < 1.0:
        raise LmprobeError(f"correlation={correlation!r}, alpha={alpha!r}: pass a correlation in [-1, 1] and "
                           "a level in (0, 1)")
    support, probabilities = _null(n, name)
    if alternative == "greater":
        levels = support
        tail = np.array([probabilities[support >= v - TIE_SLACK].sum() for v in support])
    else:
        levels, tail = _two_sided(support, probabilities)
    rejecting = levels[tail <= alpha + TIE_SLACK]
    if not rejecting.size:
        return 0.0
    threshold = rejecting.min()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((draws, n))
    y = correlation * x + math.sqrt(1.0 - correlation ** 2) * rng.standard_normal((draws, n))
    values = batch_statistic(name, x, y)
    observed = values if alternative == "greater" else np.abs(values)
    return float(np.mean(observed >= threshold - TIE_SLACK))


def tau_interval(x, y, *, level: float = 0.95) -> dict:
    """Kendall's tau-b of x and y with a distribution-free interval at ``level``: the taus for which
    (t - tau)^2 <= z^2 * 2 (1 - tau^2) / n, Daniels & Kendall's (1947) bound on the variance of t.
    Returns ``{"estimate", "low", "high", "level", "n"}``. Conservative: it covers the tau of the
    scores as observed (measurement noise shrinks that toward 0, never away from it)."""
    if not 0.0 < float(level) < 1.0:
        raise LmprobeError(f"level={level!r}: pass the coverage as a fraction in (0, 1), e.g. 0.95")
    x, y = as_pair(x, y)
    t = kendall(x, y)
    c = 2.0 * NormalDist().inv_cdf((1.0 + float(level)) / 2.0) ** 2 / x.size
    spread = math.sqrt(max(t * t - (1.0 + c) * (t * t - c), 0.0))
    low, high = ((t - spread) / (1.0 + c), (t + spread) / (1.0 + c))
    return {"estimate": float(t), "low": max(-1.0, low), "high": min(1.0, high), "level": float(level),
            "n": int(x.size)}


# ---------------------------------------------------------------- outliers and a robust Pearson


def outliers(values, threshold: float = OUTLIER_THRESHOLD) -> list[int]:
    """Indices whose modified z-score 0.6745 |x - median| / MAD exceeds ``threshold``
    (Iglewicz & Hoaglin 1993); none when the MAD is 0."""
    if not float(threshold) > 0.0:
        raise LmprobeError(f"threshold={threshold!r}: pass a positive modified z-score, e.g. 3.5")
    values = as_scores(values, "values")
    deviation = np.abs(values - np.median(values))
    mad = np.median(deviation)
    if mad == 0.0:
        return []
    return np.flatnonzero(MAD_CONSTANT * deviation / mad > threshold).tolist()


def skipped_pearson(x, y, *, threshold: float = OUTLIER_THRESHOLD) -> dict:
    """Pearson's r after removing the points ``outliers`` flags in x or in y, beside r on all points.

    Returns ``{"estimate", "removed", "n", "pearson", "leave_one_out", "note"}``: ``estimate`` on
    the ``n`` points kept (None, with a ``note``, if fewer than 3 are left or one side is constant
    on them), ``removed`` their indices, ``pearson`` r on all points, ``leave_one_out`` [min, max]
    of r over the subsets missing one point (None below 4 points).
    """
    x, y = as_pair(x, y)
    full = pearson(x, y)
    removed = sorted(set(outliers(x, threshold)) | set(outliers(y, threshold)))
    keep = np.setdiff1d(np.arange(x.size), removed)
    estimate, note = None, None
    if keep.size < 3:
        note = f"only {keep.size} points left after removing outliers {removed}: no correlation"
    elif np.ptp(x[keep]) == 0 or np.ptp(y[keep]) == 0:
        note = f"a side is constant after removing outliers {removed}: no correlation"
    else:
        estimate = pearson(x[keep], y[keep])
    leave_one_out = None
    if x.size >= 4:
        subsets = np.array([np.delete(np.arange(x.size), i) for i in range(x.size)])
        r = batch_statistic("pearson", x[subsets], y[subsets])
        r = r[np.isfinite(r)]  # a subset with a constant side has no r
        leave_one_out = [float(r.min()), float(r.max())] if r.size else None
    return {"estimate": estimate, "removed": removed, "n": int(keep.size), "pearson": full,
            "leave_one_out": leave_one_out, "note": note}


# ---------------------------------------------------------------- per-model uncertainty


def standard_errors(stderr, n: int, name: str) -> np.ndarray:
    """One standard error per model as floats, NaN where unknown (None / NaN); None: all unknown.
    ``LmprobeError`` for a wrong length or a negative or infinite error."""
    if stderr is None:
        return np.full(n, np.nan)
    errors = per_model(stderr, n, name)
    bad = np.flatnonzero(np.isinf(errors) | (errors < 0))
    if bad.size:
        raise LmprobeError(f"{name} has negative or infinite standard errors at positions {bad.tolist()}: "
                           "pass standard errors >= 0, or None where unknown")
    return errors


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family): reject
    where the adjusted p is at most alpha, and the chance of any false rejection is at most alpha."""
    p = np.asarray(pvalues, dtype=np.float64)
    adjusted = np.full(p.shape, np.nan)
    known = np.flatnonzero(np.isfinite(p))
    order = known[np.argsort(p[known], kind="stable")]
    m = order.size
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def welch_df(se_i: float, df_i: float, se_j: float, df_j: float) -> float:
    """Welch-Satterthwaite degrees of freedom of (se_i^2 + se_j^2); inf where both errors are."""
    a, b = se_i ** 2, se_j ** 2
    if a + b == 0.0:
        return math.inf
    denominator = (a * a / df_i if math.isfinite(df_i) else 0.0) + (b * b / df_j if math.isfinite(df_j) else 0.0)
    return math.inf if denominator == 0.0 else (a + b) ** 2 / denominator


def _difference_p(difference: float, se: float, df: float) -> float:
    if se == 0.0:
        return 0.0 if difference != 0.0 else 1.0
    statistic = abs(difference) / se
    return float(2.0 * (stats.norm.sf(statistic) if math.isinf(df) else stats.t.sf(statistic, df)))


def _paired(a, b) -> tuple[float, float, float]:
    """(mean difference, its standard error, degrees of freedom) of two models' scores on the same items."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), float(d.size - 1)


def resolved_pairs(values, stderr, *, df=None, items=None, level: float = 0.95, adjust: str = "holm") -> dict:
    """Which pairs of models the per-model uncertainty resolves, by a t test of each difference and
    Holm's correction across all the pairs (``adjust="none"``: each pair alone).

    ``stderr``: one standard error per model (None where unknown); ``df``: the degrees of freedom
    behind each (e.g. trials - 1; None or inf: a normal error, as from a bootstrap over many
    examples); the pair's test has Welch-Satterthwaite's degrees of freedom. ``items``: per model,
    its scores on the same items (None where not given): a pair with both is tested by a paired
    t test of the item differences instead (their shared items' variation cancels).

    Returns ``{"resolved", "unresolved", "unknown"}`` (lists of index pairs (i, j), i < j),
    ``p`` and ``p_adjusted`` ({(i, j): p}), ``n_resolved`` (after adjustment),
    ``n_resolved_unadjusted``, ``n_pairs``, ``fraction``, ``level``, ``alpha`` (1 - level),
    ``adjust``.
    """
    if not 0.0 < float(level) < 1.0:
        raise LmprobeError(f"level={level!r}: pass the coverage as a fraction in (0, 1), e.g. 0.95")
    if adjust not in ("holm", "none"):
        raise LmprobeError(f"adjust={adjust!r}: pass 'holm' (across the pairs) or 'none'")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size < 2 or not np.all(np.isfinite(values)):
        raise LmprobeError(f"values must be at least 2 finite numbers, one per model; got {values.tolist()}")
    errors = standard_errors(stderr, values.size, "stderr")
    dofs = np.full(values.size, np.inf) if df is None else np.nan_to_num(per_model(df, values.size, "df"), nan=np.inf)
    if np.any(dofs <= 0):
        raise LmprobeError(f"df has values <= 0 at positions {np.flatnonzero(dofs <= 0).tolist()}: pass the "
                           "degrees of freedom behind each standard error (trials - 1), or None for a normal error")
    per_item = [None] * values.size if items is None else list(items)
    if len(per_item) != values.size:
        raise LmprobeError(f"items has {len(per_item)} entries but there are {values.size} models: pass one "
                           "array of item scores per model (None where not given)")
    pairs = [(int(i), int(j)) for i, j in zip(*np.triu_indices(values.size, k=1))]
    p = {}
    for i, j in pairs:
        if per_item[i] is not None and per_item[j] is not None:
            if len(per_item[i]) != len(per_item[j]) or len(per_item[i]) < 2:
                raise LmprobeError(f"items of models {i} and {j} have {len(per_item[i])} and {len(per_item[j])} "
                                   "scores: a paired test needs the same items (2 or more) for both")
            p[(i, j)] = _difference_p(*_paired(per_item[i], per_item[j]))
        elif not (np.isnan(errors[i]) or np.isnan(errors[j])):
            p[(i, j)] = _difference_p(values[i] - values[j], math.hypot(errors[i], errors[j]),
                                      welch_df(errors[i], dofs[i], errors[j], dofs[j]))
    tested = list(p)
    adjusted = dict(zip(tested, holm([p[k] for k in tested]) if adjust == "holm" else [p[k] for k in tested]))
    alpha = 1.0 - float(level)
    result = {"resolved": [k for k in pairs if k in p and adjusted[k] <= alpha],
              "unresolved": [k for k in pairs if k in p and adjusted[k] > alpha],
              "unknown": [k for k in pairs if k not in p]}
    n_pairs = len(pairs)
    result.update(p=p, p_adjusted=adjusted, n_resolved=len(result["resolved"]),
                  n_resolved_unadjusted=sum(v <= alpha for v in p.values()), n_pairs=n_pairs,
                  fraction=len(result["resolved"]) / n_pairs, level=float(level), alpha=alpha, adjust=adjust)
    return result


__all__ = [
    "ALTERNATIVES",
    "EXACT_UP_TO",
    "OUTLIER_THRESHOLD",
    "POWER_CORRELATIONS",
    "all_permutations",
    "critical_value",
    "holm",
    "min_p",
    "outliers",
    "permutation_p",
    "power",
    "resolved_pairs",
    "skipped_pearson",
    "standard_errors",
    "tau_interval",
    "trend",
    "unreachable_note",
    "welch_df",
]
