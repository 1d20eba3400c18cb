"""Correlations across models between a real-data-free metric and real-task results.

Each input holds one score per model, models in the same order in every input.

* ``metric_correlation``: Pearson correlation of a metric with real-task accuracy (Tables 1, 3,
  7, 9). Val loss, MDL, SDL and eSC are lower-is-better, and "we add a negative sign in front
  of them when calculating the Pearson correlation coefficient" (Sec. 3.2): pass
  ``higher_is_better=False`` (``LOWER_IS_BETTER`` lists them); SynTextBench is higher-is-better.
* ``robustness_accuracy_correlation``: the rank aggregation of Sec. 3.2 "Robustness
  implications" and Appendix A.12 (Table 2). Models are ranked 1 = best by accuracy (R_1) and by
  robustness, the average number of words a PWWS attack perturbs, more = more robust (R_2);
  R_ref = (R_1 + R_2) / 2, the mean aggregation, *not* ranked again (A.12's worked example
  correlates "(row 'Overall accuracy' + row 'Robustness') / 2" directly with the metric's
  ranking). The result is the Pearson correlation of R_ref with the metric's ranking R, also
  1 = best, so a lower-is-better metric is ranked with its smallest value first: the same
  sign convention as the Pearson correlations above. (Table 12 of the paper prints the baselines'
  rankings the other way round, largest value first; only the convention used here gives the
  positive MDL / SDL correlations printed in Table 2.)
* ``over_runs``: the paper correlates every trial separately and reports mean +- std over
  trials (A.12: "we always infer the correlation in individual runs before we take an
  average"). The std's degrees of freedom are not stated; population std (ddof = 0) is used.
* ``pearson``, ``spearman``, ``kendall``: the plain statistics (Kendall's tau-b, which corrects
  for ties in either input, as ``scipy.stats.kendalltau``'s default).
* ``bootstrap_interval``: a percentile bootstrap interval for one of them, resampling *models*
  (pairs of scores) with replacement. A resample whose x or y is constant (e.g. the same model
  drawn n times) has no correlation: it is skipped and counted, and when more than half are
  skipped the result says so (``degenerate``) instead of raising. Pearson, Spearman and Kendall
  are computed for all resamples at once; any other ``statistic(x, y)`` is called per resample.
  The resamples depend only on ``seed`` and the number of models, so one seed gives the same
  resampled model sets to every statistic.
* ``correlation_table``: how well each label-free proxy tracks each real task, one row per
  (proxy, task) with the three statistics and their bootstrap intervals. Sign convention, as in
  ``metric_correlation``: every lower-is-better entry (proxy or task; e.g. a loss, bits per
  byte, a sensitivity where less sensitive is better) is negated first, so a *positive*
  correlation always means "the proxy orders the models as the task does" (two lower-is-better
  entries: both negated, the raw correlation's sign is kept). Missing values (None / NaN / inf)
  are allowed there: each row uses the models that have both values and reports that count ``n``.
  A row that cannot be computed (n < 3, a constant side, different lengths) gets None estimates
  and a ``note`` saying why; the table never raises for the data it is given.

Ties get the average of the ranks they span (Spearman, and rankings with equal scores).
Except in ``correlation_table``, fewer than 3 models, inputs of different lengths, non-finite
scores or a constant input raise ``LmprobeError``: a correlation with a constant vector is
undefined (the paper prints "-").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from lmprobe.errors import LmprobeError

MIN_MODELS = 3
LOWER_IS_BETTER = frozenset({"val_loss", "mdl", "sdl", "esc"})
DEGENERATE_FRACTION = 0.5  # more skipped resamples than this: BootstrapInterval.degenerate
STATISTICS = ("pearson", "spearman", "kendall")  # correlation_table's columns, in order


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """Mean and population std of per-trial correlations, as in the paper's "0.939 +- 0.008"."""

    mean: float
    std: float
    values: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class BootstrapInterval:
    """A statistic on all ``n`` models and its percentile bootstrap interval.

    ``low`` / ``high``: the (1 - level) / 2 and (1 + level) / 2 quantiles of the statistic over
    the ``n_resamples`` resamples used (None if none could be used); ``n_skipped``: resamples
    left out because x or y was constant in them (requested = n_resamples + n_skipped);
    ``degenerate``: more than ``DEGENERATE_FRACTION`` of them were skipped, so the interval
    describes only the non-constant resamples and is unreliable (typical with 3-4 models or
    heavy ties).
    """

    estimate: float
    low: float | None
    high: float | None
    level: float
    n: int
    n_resamples: int
    n_skipped: int
    degenerate: bool


def _scores(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise LmprobeError(f"{name} has shape {array.shape}: pass one score per model, a flat "
                           "sequence of numbers")
    if array.size < MIN_MODELS:
        raise LmprobeError(f"{name} has {array.size} score(s): a correlation across models needs "
                           f"at least {MIN_MODELS} models; evaluate more models")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise LmprobeError(f"{name} has non-finite scores at positions {bad.tolist()}: drop those "
                           "models from every input or rerun their evaluation")
    return array


def _pair(x, y, x_name: str, y_name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = _scores(x, x_name), _scores(y, y_name)
    if x.size != y.size:
        raise LmprobeError(f"{x_name} has {x.size} scores but {y_name} has {y.size}: pass one "
                           "score per model, the same models in the same order")
    return x, y


def _require_varying(values: np.ndarray, name: str) -> None:
    if np.all(values == values[0]):
        raise LmprobeError(f"{name} is constant ({values.size} equal values {values[0]:g}): its "
                           "correlation is undefined; leave it out of the comparison (the paper "
                           "prints '-')")


def _pearson(x: np.ndarray, y: np.ndarray, x_name: str, y_name: str) -> float:
    _require_varying(x, x_name)
    _require_varying(y, y_name)
    dx, dy = x - x.mean(), y - y.mean()
    r = np.dot(dx, dy) / (np.linalg.norm(dx) * np.linalg.norm(dy))
    return float(np.clip(r, -1.0, 1.0))


def average_ranks(values) -> np.ndarray:
    """Ranks 1..n in ascending order; tied values share the mean of the ranks they span."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts_group = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    starts = np.flatnonzero(starts_group)
    ends = np.append(starts[1:], values.size)  # exclusive; the group holds ranks starts+1 .. ends
    ranks = np.empty(values.size)
    ranks[order] = ((starts + 1 + ends) / 2.0)[np.cumsum(starts_group) - 1]
    return ranks


def pearson(x, y) -> float:
    """Pearson correlation coefficient of two score vectors (one score per model)."""
    return _pearson(*_pair(x, y, "x", "y"), "x", "y")


def spearman(x, y) -> float:
    """Spearman rank correlation: Pearson of the average ranks (ties handled)."""
    x, y = _pair(x, y, "x", "y")
    _require_varying(x, "x")
    _require_varying(y, "y")
    return _pearson(average_ranks(x), average_ranks(y), "x", "y")


def _codes(values: np.ndarray) -> np.ndarray:
    """Integer codes 0..k-1 that order (and tie) exactly as ``values`` do."""
    return np.unique(values, return_inverse=True)[1].reshape(values.shape)


def _kendall_codes(cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
    """Kendall tau-b of each row of [..., n] codes: (concordant - discordant) pairs over
    sqrt(pairs untied in x * pairs untied in y); NaN where a row is constant."""
    sx = np.sign(cx[..., :, None].astype(np.int32) - cx[..., None, :]).astype(np.int8)
    sy = np.sign(cy[..., :, None].astype(np.int32) - cy[..., None, :]).astype(np.int8)
    # every pair is counted twice, (i, j) and (j, i), in the numerator and in both counts
    concordance = np.einsum("...ij,...ij->...", sx, sy, dtype=np.int64)
    untied = np.count_nonzero(sx, axis=(-2, -1)) * np.count_nonzero(sy, axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(concordance / np.sqrt(untied.astype(np.float64)), -1.0, 1.0)


def kendall(x, y) -> float:
    """Kendall's tau-b rank correlation (ties in x or y handled; scipy's default variant)."""
    x, y = _pair(x, y, "x", "y")
    _require_varying(x, "x")
    _require_varying(y, "y")
    return float(_kendall_codes(_codes(x), _codes(y)))


def rank_models(scores, *, higher_is_better: bool = True) -> np.ndarray:
    """Ranking 1 = best (Table 12 layout); ties share their average rank."""
    scores = _scores(scores, "scores")
    return average_ranks(-scores if higher_is_better else scores)


def metric_correlation(metric, accuracy, *, higher_is_better: bool = True) -> float:
    """Pearson correlation of a real-data-free metric with real-task accuracy (Tables 1, 3, 7, 9).

    A lower-is-better metric (Val loss, MDL, SDL, eSC) is negated first (Sec. 3.2).
    """
    metric, accuracy = _pair(metric, accuracy, "metric", "accuracy")
    signed = metric if higher_is_better else -metric
    return _pearson(signed, accuracy, "metric", "accuracy")


def robustness_accuracy_correlation(metric, accuracy, robustness, *,
                                    higher_is_better: bool = True) -> float:
    """Pearson correlation of the metric's ranking with the mean of the accuracy and robustness
    rankings (Sec. 3.2 "Robustness implications", A.12, Table 2); all rankings 1 = best.

    ``accuracy``: overall, STS or Transfer accuracy (Table 2's three columns); ``robustness``:
    average number of perturbed words per successful attack (Table 11), higher is better.
    """
    metric, accuracy = _pair(metric, accuracy, "metric", "accuracy")
    _, robustness = _pair(metric, robustness, "metric", "robustness")
    for values, name in ((metric, "metric"), (accuracy, "accuracy"), (robustness, "robustness")):
        _require_varying(values, name)
    reference = (rank_models(accuracy) + rank_models(robustness)) / 2.0
    if np.all(reference == reference[0]):
        raise LmprobeError("the accuracy and robustness rankings cancel out (their mean ranks "
                           "every model the same): the correlation is undefined; compare the "
                           "metric with accuracy or robustness separately")
    ranking = rank_models(metric, higher_is_better=higher_is_better)
    return _pearson(ranking, reference, "metric", "accuracy-robustness ranking")


def over_runs(metric_runs, correlate: Callable[[np.ndarray], float]) -> RunSummary:
    """Correlate each trial's metric row separately, then mean and population std (A.12).

    ``metric_runs``: [trials, models]; ``correlate``: e.g.
    ``lambda m: metric_correlation(m, accuracy, higher_is_better=False)``.
    """
    runs = np.asarray(metric_runs, dtype=np.float64)
    if runs.ndim != 2 or runs.shape[0] < 1:
        raise LmprobeError(f"metric_runs has shape {runs.shape}: pass a [trials, models] array "
                           "with one row per trial")
    values = tuple(float(correlate(row)) for row in runs)
    return RunSummary(float(np.mean(values)), float(np.std(values)), values)


# ---------------------------------------------------------------- bootstrap intervals


def _batch_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row pair of [B, n] arrays (rows must not be constant)."""
    da = a - a.mean(axis=1, keepdims=True)
    db = b - b.mean(axis=1, keepdims=True)
    num = np.einsum("ij,ij->i", da, db)
    den = np.sqrt(np.einsum("ij,ij->i", da, da) * np.einsum("ij,ij->i", db, db))
    return np.clip(num / den, -1.0, 1.0)


def _batch_average_ranks(codes: np.ndarray) -> np.ndarray:
    """Average ranks 1..n of each row of [B, n] codes (codes order as the values do), O(B n)."""
    rows = codes.shape[0]
    k = int(codes.max()) + 1 if codes.size else 1
    flat = (codes + k * np.arange(rows)[:, None]).ravel()
    counts = np.bincount(flat, minlength=rows * k).reshape(rows, k)
    below = np.cumsum(counts, axis=1) - counts  # the group of code c holds ranks below+1..below+count
    return np.take_along_axis(below + (counts + 1) / 2.0, codes, axis=1)


_KENDALL_CHUNK = 1 << 22  # sign-matrix entries per chunk: about 4 MiB each for x and y


def _batch_statistic(name: str, x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``name`` over the models ``idx`` [B, n] of each resample, all resamples at once."""
    if name == "pearson":
        return _batch_pearson(x[idx], y[idx])
    cx, cy = _codes(x)[idx], _codes(y)[idx]
    if name == "spearman":
        return _batch_pearson(_batch_average_ranks(cx), _batch_average_ranks(cy))
    step = max(1, _KENDALL_CHUNK // max(1, idx.shape[1] ** 2))
    parts = [_kendall_codes(cx[i:i + step], cy[i:i + step]) for i in range(0, idx.shape[0], step)]
    return np.concatenate(parts) if parts else np.empty(0)


def _resample_indices(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """[n_resamples, n] model indices drawn with replacement; depends only on (n, n_resamples, seed)."""
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))


def _check_bootstrap_args(n_resamples, level) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 0:
        raise LmprobeError(f"n_resamples={n_resamples!r}: pass a whole number >= 0 (0: no interval)")
    if not 0.0 < float(level) < 1.0:
        raise LmprobeError(f"level={level!r}: pass the interval's coverage as a fraction in (0, 1), e.g. 0.95")


def _interval(estimate: float, values: np.ndarray, requested: int, level: float, n: int) -> BootstrapInterval:
    """Percentile interval from the finite ``values`` of the resamples that could be used."""
    values = values[np.isfinite(values)]
    skipped = requested - values.size
    low = high = None
    if values.size:
        low, high = (float(q) for q in np.quantile(values, [(1.0 - level) / 2.0, (1.0 + level) / 2.0]))
    degenerate = requested > 0 and skipped > DEGENERATE_FRACTION * requested
    return BootstrapInterval(float(estimate), low, high, float(level), int(n), int(values.size), int(skipped),
                             bool(degenerate))


def _varying_rows(x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Which resamples have neither x nor y constant."""
    xs, ys = x[idx], y[idx]
    return (xs.min(axis=1) != xs.max(axis=1)) & (ys.min(axis=1) != ys.max(axis=1))


_NAMED = {"pearson": pearson, "spearman": spearman, "kendall": kendall}


def bootstrap_interval(x, y, statistic: str | Callable = "spearman", *, n_resamples: int = 2000,
                       level: float = 0.95, seed: int = 0) -> BootstrapInterval:
    """Percentile bootstrap interval of ``statistic(x, y)``, resampling models (pairs) with
    replacement.

    ``statistic``: "pearson", "spearman", "kendall" or one of those functions (all resamples
    computed at once), or any ``f(x, y) -> float`` (called per resample; a resample where it
    raises ``LmprobeError`` or returns a non-finite value is skipped like a constant one).
    Resamples in which x or y is constant are skipped and counted (``n_skipped``); no interval
    (``low`` = ``high`` = None) if none is left. ``x`` and ``y`` themselves must be valid input
    for the statistic (at least 3 models, finite, neither constant): ``LmprobeError`` otherwise.
    Deterministic for a given ``seed``.
    """
    _check_bootstrap_args(n_resamples, level)
    x, y = _pair(x, y, "x", "y")
    _require_varying(x, "x")
    _require_varying(y, "y")
    name = next((k for k, f in _NAMED.items() if statistic == k or statistic is f), None)
    if name is None and not callable(statistic):
        raise LmprobeError(f"statistic={statistic!r}: pass one of {sorted(_NAMED)} or a function f(x, y) -> float")
    estimate = (_NAMED[name] if name else statistic)(x, y)
    idx = _resample_indices(x.size, n_resamples, seed)
    idx = idx[_varying_rows(x, y, idx)]
    if name is not None:
        values = _batch_statistic(name, x, y, idx)
    else:
        values = np.full(idx.shape[0], np.nan)
        for i, row in enumerate(idx):
            try:
                values[i] = float(statistic(x[row], y[row]))
            except LmprobeError:
                pass
    return _interval(estimate, values, n_resamples, level, x.size)


# ---------------------------------------------------------------- proxies against real tasks


def _optional_scores(values) -> np.ndarray:
    """One float per model; None (and NaN / inf) mark models without a value: NaN."""
    array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"shape {array.shape}")
    array[~np.isfinite(array)] = np.nan
    return array


def _empty_row(proxy: str, task: str, lower: frozenset, level: float) -> dict:
    row = {"proxy": proxy, "task": task, "n": 0, "n_models": 0,
           "proxy_lower_is_better": proxy in lower, "task_lower_is_better": task in lower}
    for name in STATISTICS:
        row[name] = {"estimate": None, "low": None, "high": None}
    row.update({"level": float(level), "n_resamples": 0, "n_skipped": 0, "degenerate": False, "note": None})
    return row


def _fill_row(row: dict, proxy_values, task_values, n_resamples: int, level: float, seed: int) -> None:
    proxy, task = row["proxy"], row["task"]
    try:
        p, t = _optional_scores(proxy_values), _optional_scores(task_values)
    except (TypeError, ValueError) as error:
        row["note"] = (f"{proxy!r} or {task!r} could not be read as one number (or None) per model "
                       f"({error}): pass flat sequences")
        return
    if p.size != t.size:
        row["note"] = (f"{proxy!r} has {p.size} values but {task!r} has {t.size}: pass one value per "
                       "model, the same models in the same order (None where one does not apply)")
        return
    both = np.isfinite(p) & np.isfinite(t)
    row["n_models"], row["n"] = int(p.size), int(both.sum())
    if row["n"] < MIN_MODELS:
        row["note"] = (f"only {row['n']} of {p.size} models have both {proxy!r} and {task!r}: a correlation "
                       f"needs at least {MIN_MODELS}")
        return
    p, t = p[both], t[both]
    for values, name in ((p, proxy), (t, task)):
        if np.all(values == values[0]):
            row["note"] = (f"{name!r} is constant ({values[0]:g}) over the {row['n']} models that have "
                           "both values: its correlation is undefined")
            return
    # lower-is-better entries negated: a positive correlation means the proxy orders models as the task does
    p = -p if row["proxy_lower_is_better"] else p
    t = -t if row["task_lower_is_better"] else t
    idx = _resample_indices(p.size, n_resamples, seed)
    idx = idx[_varying_rows(p, t, idx)]
    for name in STATISTICS:
        interval = _interval(_NAMED[name](p, t), _batch_statistic(name, p, t, idx), n_resamples, level, p.size)
        row[name] = {"estimate": interval.estimate, "low": interval.low, "high": interval.high}
    row.update(n_resamples=interval.n_resamples, n_skipped=interval.n_skipped, degenerate=interval.degenerate)
    if interval.degenerate:
        row["note"] = (f"{interval.n_skipped} of {n_resamples} bootstrap resamples had a constant side and were "
                       f"skipped: the intervals are unreliable with {row['n']} models")


def correlation_table(proxies: Mapping[str, Sequence], tasks: Mapping[str, Sequence], *,
                      lower_is_better: set[str] | frozenset[str] = frozenset(), n_resamples: int = 2000,
                      level: float = 0.95, seed: int = 0) -> list[dict]:
    """How well each label-free proxy tracks each real task across models: one row per
    (proxy, task), proxies in order, tasks in order within each.

    ``proxies`` / ``tasks``: name -> one value per model, the same models in the same order in
    every sequence; None or NaN where a score does not apply to a model. ``lower_is_better``:
    names (of proxies or tasks; names in neither are ignored) whose values are negated first,
    so that a positive correlation means "the proxy orders the models as the task does".

    Row fields: ``proxy``, ``task``; ``n`` (models with both values, the ones used) of
    ``n_models``; ``proxy_lower_is_better``, ``task_lower_is_better``; ``pearson``,
    ``spearman``, ``kendall`` (tau-b): each ``{"estimate", "low", "high"}``, the statistic and
    its percentile bootstrap interval at ``level`` (the three share the same resampled model
    sets; all None when undefined, low / high None with ``n_resamples=0``);
    ``level``, ``n_resamples`` (used), ``n_skipped``, ``degenerate`` as in
    ``BootstrapInterval``; ``note``: None, or why the estimates / intervals are None or
    unreliable. ``n_resamples=0``: estimates only. Never raises for the data; only bad
    ``n_resamples`` / ``level`` arguments raise ``LmprobeError``.
    """
    _check_bootstrap_args(n_resamples, level)
    lower = frozenset(lower_is_better)
    rows = []
    for proxy, proxy_values in proxies.items():
        for task, task_values in tasks.items():
            row = _empty_row(proxy, task, lower, level)
            try:
                _fill_row(row, proxy_values, task_values, n_resamples, float(level), seed)
            except Exception as error:  # one bad row must not end a long experiment
                for name in STATISTICS:
                    row[name] = {"estimate": None, "low": None, "high": None}
                row["note"] = f"could not be computed: {type(error).__name__}: {error}"
            rows.append(row)
    return rows


__all__ = [
    "DEGENERATE_FRACTION",
    "LOWER_IS_BETTER",
    "MIN_MODELS",
    "STATISTICS",
    "BootstrapInterval",
    "RunSummary",
    "average_ranks",
    "bootstrap_interval",
    "correlation_table",
    "kendall",
    "metric_correlation",
    "over_runs",
    "pearson",
    "rank_models",
    "robustness_accuracy_correlation",
    "spearman",
]
