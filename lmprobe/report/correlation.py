"""Correlations across models between a real-data-free metric and real-task results.

Each input holds one score per model, models in the same order in every input. The statistics
themselves (Pearson, Spearman, Kendall tau-b, average ranks) live in ``coefficients``; exact
permutation p-values, critical values, trends, outliers and resolved pairs in ``significance``.

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
* ``bootstrap_interval``: a percentile bootstrap interval for one of them, resampling *models*
  (pairs of scores) with replacement. A resample whose x or y is constant (e.g. the same model
  drawn n times) has no correlation: it is skipped and counted, and when more than half are
  skipped the result says so (``degenerate``) instead of raising. Pearson, Spearman and Kendall
  are computed for all resamples at once; any other ``statistic(x, y)`` is called per resample.
  The resamples depend only on ``seed`` and the number of models, so one seed gives the same
  resampled model sets to every statistic. With 6-8 models a percentile bootstrap is not a valid
  interval by itself: read it beside the exact permutation p-value.
* ``two_level_interval``: the bootstrap with per-model uncertainty: each resample draws models
  with replacement *and* each drawn model's two values from N(value, stderr^2), a parametric
  stand-in for resampling examples within models; ``noise_only`` keeps the models and redraws
  only the values, which says whether the rankings themselves are resolved.
* ``correlation_table``: how well each label-free proxy tracks each real task, one row per
  (proxy, task) with the three statistics, their bootstrap intervals and exact permutation
  p-values, whether n models can reach p < 0.05 at all, Pearson beside a skipped (outlier-free)
  Pearson, the outliers, and with standard errors the two-level interval and the resolved pairs.
  Sign convention, as in ``metric_correlation``: every lower-is-better entry (proxy or task; e.g.
  a loss, bits per byte, a sensitivity where less sensitive is better) is negated first, so a
  *positive* correlation always means "the proxy orders the models as the task does" (two
  lower-is-better entries: both negated, the raw correlation's sign is kept). Missing values
  (None / NaN / inf) are allowed there: each row uses the models that have both values and
  reports that count ``n``. A row that cannot be computed (n < 3, a constant side, different
  lengths) gets None estimates and a ``note`` saying why; the table never raises for the data.
* ``ladder_table``: for each ladder (one model's variants in a known order, e.g. rising weight
  noise) and each number, Kendall's tau against the order with its exact p, signed so that
  positive = moves the way quality should, strict monotonicity, and the adjacent steps the
  standard errors resolve.

Except in the two tables, fewer than 3 models, inputs of different lengths, non-finite scores or
a constant input raise ``LmprobeError``: a correlation with a constant vector is undefined (the
paper prints "-").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.report.coefficients import (
    MIN_MODELS,
    STATISTICS,
    as_pair,
    as_scores,
    average_ranks,
    batch_statistic,
    kendall,
    pearson,
    require_varying,
    spearman,
)
from lmprobe.report.significance import (
    critical_value,
    min_p,
    outliers,
    permutation_p,
    resolved_pairs,
    skipped_pearson,
    standard_errors,
    trend,
    unreachable_note,
)

LOWER_IS_BETTER = frozenset({"val_loss", "mdl", "sdl", "esc"})
DEGENERATE_FRACTION = 0.5  # more skipped resamples than this: BootstrapInterval.degenerate
SIGNIFICANCE = 0.05  # the tables' "reachable": can n models reach a two-sided p below this
FALLS, RISES = "falls", "rises"  # ladder_table: how quality moves along a ladder's known order


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


@dataclasses.dataclass(frozen=True)
class TwoLevelInterval(BootstrapInterval):
    """``BootstrapInterval`` over resamples that draw models with replacement and each drawn
    model's values from N(value, stderr^2); ``noise_only``: the same with the models fixed (only
    the values redrawn): narrow around the estimate when the per-model errors resolve the rankings."""

    noise_only: BootstrapInterval


def rank_models(scores, *, higher_is_better: bool = True) -> np.ndarray:
    """Ranking 1 = best (Table 12 layout); ties share their average rank."""
    scores = as_scores(scores, "scores")
    return average_ranks(-scores if higher_is_better else scores)


def metric_correlation(metric, accuracy, *, higher_is_better: bool = True) -> float:
    """Pearson correlation of a real-data-free metric with real-task accuracy (Tables 1, 3, 7, 9).

    A lower-is-better metric (Val loss, MDL, SDL, eSC) is negated first (Sec. 3.2).
    """
    metric, accuracy = as_pair(metric, accuracy, "metric", "accuracy")
    signed = metric if higher_is_better else -metric
    return pearson(signed, accuracy, names=("metric", "accuracy"))


def robustness_accuracy_correlation(metric, accuracy, robustness, *,
                                    higher_is_better: bool = True) -> float:
    """Pearson correlation of the metric's ranking with the mean of the accuracy and robustness
    rankings (Sec. 3.2 "Robustness implications", A.12, Table 2); all rankings 1 = best.

    ``accuracy``: overall, STS or Transfer accuracy (Table 2's three columns); ``robustness``:
    average number of perturbed words per successful attack (Table 11), higher is better.
    """
    metric, accuracy = as_pair(metric, accuracy, "metric", "accuracy")
    _, robustness = as_pair(metric, robustness, "metric", "robustness")
    for values, name in ((metric, "metric"), (accuracy, "accuracy"), (robustness, "robustness")):
        require_varying(values, name)
    reference = (rank_models(accuracy) + rank_models(robustness)) / 2.0
    if np.all(reference == reference[0]):
        raise LmprobeError("the accuracy and robustness rankings cancel out (their mean ranks "
                           "every model the same): the correlation is undefined; compare the "
                           "metric with accuracy or robustness separately")
    ranking = rank_models(metric, higher_is_better=higher_is_better)
    return pearson(ranking, reference, names=("metric", "accuracy-robustness ranking"))


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


def _named(statistic) -> str | None:
    """"pearson" / "spearman" / "kendall" for the name or the function, else None."""
    return next((k for k, f in _NAMED.items() if statistic == k or statistic is f), None)


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
    x, y = as_pair(x, y)
    require_varying(x, "x")
    require_varying(y, "y")
    name = _named(statistic)
    if name is None and not callable(statistic):
        raise LmprobeError(f"statistic={statistic!r}: pass one of {sorted(_NAMED)} or a function f(x, y) -> float")
    estimate = (_NAMED[name] if name else statistic)(x, y)
    idx = _resample_indices(x.size, n_resamples, seed)
    idx = idx[_varying_rows(x, y, idx)]
    if name is not None:
        values = batch_statistic(name, x[idx], y[idx])
    else:
        values = np.full(idx.shape[0], np.nan)
        for i, row in enumerate(idx):
            try:
                values[i] = float(statistic(x[row], y[row]))
            except LmprobeError:
                pass
    return _interval(estimate, values, n_resamples, level, x.size)


def two_level_interval(x, y, x_stderr, y_stderr, statistic: str | Callable = "spearman", *,
                       n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> TwoLevelInterval:
    """Percentile interval of ``statistic`` ("pearson", "spearman", "kendall") that includes each
    model's own uncertainty: every resample draws models with replacement (the same model sets as
    ``bootstrap_interval`` with this seed) and each drawn model's x and y from N(value, stderr^2).
    The normal draw is a parametric stand-in for resampling the examples within each model.

    ``x_stderr`` / ``y_stderr``: one standard error per model (None, NaN or 0: that value is held
    fixed; the whole argument None: all fixed). Resamples with a constant side are skipped and
    counted as in ``bootstrap_interval``. ``noise_only``: the same with the models fixed, only
    the values redrawn: whether the ranking itself is resolved by the per-model errors.
    """
    _check_bootstrap_args(n_resamples, level)
    x, y = as_pair(x, y)
    require_varying(x, "x")
    require_varying(y, "y")
    name = _named(statistic)
    if name is None:
        raise LmprobeError(f"statistic={statistic!r}: pass one of {sorted(_NAMED)}")
    x_errors = np.nan_to_num(standard_errors(x_stderr, x.size, "x_stderr"), nan=0.0)
    y_errors = np.nan_to_num(standard_errors(y_stderr, y.size, "y_stderr"), nan=0.0)
    estimate = _NAMED[name](x, y)
    idx = _resample_indices(x.size, n_resamples, seed)
    noise = np.random.default_rng([seed, 1]).standard_normal((4, n_resamples, x.size))
    both = batch_statistic(name, x[idx] + x_errors[idx] * noise[0], y[idx] + y_errors[idx] * noise[1])
    fixed = batch_statistic(name, x + x_errors * noise[2], y + y_errors * noise[3])
    interval = _interval(estimate, both, n_resamples, level, x.size)
    return TwoLevelInterval(**dataclasses.asdict(interval),
                            noise_only=_interval(estimate, fixed, n_resamples, level, x.size))


# ---------------------------------------------------------------- proxies against real tasks


def _optional_scores(values) -> np.ndarray:
    """One float per model; None (and NaN / inf) mark models without a value: NaN."""
    array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"shape {array.shape}")
    array[~np.isfinite(array)] = np.nan
    return array


def _empty_row(proxy: str, task: str, lower: frozenset, level: float) -> dict:
    row = {"proxy": proxy, "task": task, "n": 0, "n_models": 0, "models": [],
           "proxy_lower_is_better": proxy in lower, "task_lower_is_better": task in lower}
    row.update(_no_statistics())
    row.update({"level": float(level), "n_resamples": 0, "n_skipped": 0, "degenerate": False, "p_method": None,
                "critical_spearman": None, "reachable": None, "min_p": None, "pearson_robust": None,
                "outliers": None, "resolved": None, "note": None})
    return row


def _no_statistics() -> dict:
    out = {name: {"estimate": None, "low": None, "high": None, "p": None} for name in STATISTICS}
    out["spearman"].update(low_with_noise=None, high_with_noise=None, noise_only=None)
    return out


def _pairs_as_models(result: dict, models: np.ndarray) -> dict:
    """``resolved_pairs``' result with positions among the used models turned into model indices."""
    out = dict(result)
    for key in ("resolved", "unresolved", "unknown"):
        out[key] = [(int(models[i]), int(models[j])) for i, j in result[key]]
    return out


def _add_uncertainty(row: dict, p: np.ndarray, t: np.ndarray, errors: dict, n_resamples: int, level: float,
                     seed: int) -> None:
    """The two-level Spearman interval and each side's resolved pairs, from per-model standard errors."""
    models = np.asarray(row["models"])
    row["resolved"] = {side: None if e is None else _pairs_as_models(resolved_pairs(v, e, level=level), models)
                       for side, v, e in (("proxy", p, errors["proxy"]), ("task", t, errors["task"]))}
    if n_resamples:
        noisy = two_level_interval(p, t, errors["proxy"], errors["task"], "spearman", n_resamples=n_resamples,
                                   level=level, seed=seed)
        noise = noisy.noise_only
        row["spearman"].update(low_with_noise=noisy.low, high_with_noise=noisy.high,
                               noise_only=None if noise.low is None else [noise.low, noise.high])


def _row_errors(row: dict, stderr: Mapping[str, Sequence] | None, used: np.ndarray, notes: list) -> dict | None:
    """{"proxy": errors or None, "task": ...} for the used models; None without ``stderr``."""
    if stderr is None:
        return None
    errors = {}
    for side in ("proxy", "task"):
        name = row[side]
        try:
            errors[side] = standard_errors(stderr[name], row["n_models"], f"stderr of {name!r}")[used] \
                if stderr.get(name) is not None else None
        except LmprobeError as error:
            notes.append(f"standard errors not used: {error}")
            errors[side] = None
    return errors if any(e is not None for e in errors.values()) else None


def _fill_row(row: dict, proxy_values, task_values, n_resamples: int, level: float, seed: int,
              stderr: Mapping[str, Sequence] | None) -> None:
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
    row["n_models"], row["n"], row["models"] = int(p.size), int(both.sum()), np.flatnonzero(both).tolist()
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
    notes = []
    idx = _resample_indices(p.size, n_resamples, seed)
    idx = idx[_varying_rows(p, t, idx)]
    for name in STATISTICS:
        interval = _interval(_NAMED[name](p, t), batch_statistic(name, p[idx], t[idx]), n_resamples, level, p.size)
        test = permutation_p(p, t, name, seed=seed)
        row[name].update(estimate=interval.estimate, low=interval.low, high=interval.high, p=test["p"])
    row.update(n_resamples=interval.n_resamples, n_skipped=interval.n_skipped, degenerate=interval.degenerate,
               p_method=test["method"], critical_spearman=critical_value(p.size, "spearman", SIGNIFICANCE),
               min_p=min_p(p.size), reachable=min_p(p.size) < SIGNIFICANCE)
    if not row["reachable"]:
        notes.append(unreachable_note(p.size, SIGNIFICANCE))
    models = np.asarray(row["models"])
    robust = skipped_pearson(p, t)
    row["pearson_robust"] = {"estimate": robust["estimate"], "removed": models[robust["removed"]].tolist(),
                             "leave_one_out": robust["leave_one_out"]}
    row["outliers"] = {"proxy": models[outliers(p)].tolist(), "task": models[outliers(t)].tolist()}
    if interval.degenerate:
        notes.append(f"{interval.n_skipped} of {n_resamples} bootstrap resamples had a constant side and were "
                     f"skipped: the intervals are unreliable with {row['n']} models")
    errors = _row_errors(row, stderr, np.flatnonzero(both), notes)
    if errors is not None:
        _add_uncertainty(row, p, t, errors, n_resamples, level, seed)
    row["note"] = "; ".join(notes) or None


def correlation_table(proxies: Mapping[str, Sequence], tasks: Mapping[str, Sequence], *,
                      lower_is_better: set[str] | frozenset[str] = frozenset(), n_resamples: int = 2000,
                      level: float = 0.95, seed: int = 0, stderr: Mapping[str, Sequence] | None = None) -> list[dict]:
    """How well each label-free proxy tracks each real task across models: one row per
    (proxy, task), proxies in order, tasks in order within each.

    ``proxies`` / ``tasks``: name -> one value per model, the same models in the same order in
    every sequence; None or NaN where a score does not apply to a model. ``lower_is_better``:
    names (of proxies or tasks; names in neither are ignored) whose values are negated first,
    so that a positive correlation means "the proxy orders the models as the task does".
    ``stderr``: name -> one standard error per model in the same order (None where unknown);
    names without one are held fixed.

    Row fields: ``proxy``, ``task``; ``n`` (models with both values, the ones used) of
    ``n_models``, ``models`` (their indices); ``proxy_lower_is_better``, ``task_lower_is_better``;
    ``pearson``, ``spearman``, ``kendall`` (tau-b): each ``{"estimate", "low", "high", "p"}``,
    the statistic, its percentile bootstrap interval at ``level`` (the three share the same
    resampled model sets; low / high None with ``n_resamples=0``) and its two-sided permutation
    p-value (``significance.permutation_p``; ``p_method`` "exact" up to 9 models, else
    "monte-carlo"); ``critical_spearman``: the smallest |rho| with exact p < 0.05 for ``n``
    untied models (None: unreachable), ``min_p`` the smallest p any ordering reaches,
    ``reachable`` whether it is below 0.05; ``pearson_robust``: ``{"estimate", "removed",
    "leave_one_out"}``, Pearson without the outliers of either side (model indices removed) and
    the range of Pearson leaving one model out; ``outliers``: ``{"proxy", "task"}`` model
    indices with a modified z-score above 3.5. With ``stderr`` for the proxy or the task:
    ``spearman`` also has ``low_with_noise`` / ``high_with_noise`` (``two_level_interval``) and
    ``noise_only`` ([low, high], models fixed), and ``resolved`` = ``{"proxy", "task"}``:
    ``significance.resolved_pairs`` with model indices (None for a side without errors).
    ``level``, ``n_resamples`` (used), ``n_skipped``, ``degenerate`` as in
    ``BootstrapInterval``; ``note``: None, or why entries are None, unreliable, or cannot reach
    p < 0.05. All keys are always present (None when not computed). Never raises for the data;
    only bad ``n_resamples`` / ``level`` arguments raise ``LmprobeError``.
    """
    _check_bootstrap_args(n_resamples, level)
    lower = frozenset(lower_is_better)
    rows = []
    for proxy, proxy_values in proxies.items():
        for task, task_values in tasks.items():
            row = _empty_row(proxy, task, lower, level)
            try:
                _fill_row(row, proxy_values, task_values, n_resamples, float(level), seed, stderr)
            except Exception as error:  # one bad row must not end a long experiment
                row.update(_no_statistics())
                row["note"] = f"could not be computed: {type(error).__name__}: {error}"
            rows.append(row)
    return rows


# ---------------------------------------------------------------- ladders: variants in a known order


def _ladder(spec, name: str) -> tuple[list[int], str]:
    """(model indices in known order, direction) from a (indices, direction) pair or a mapping
    with "indices" and "direction"."""
    indices, direction = (spec["indices"], spec["direction"]) if isinstance(spec, Mapping) else spec
    if any(int(i) < 0 for i in indices):
        raise LmprobeError(f"ladder {name!r} has indices {list(indices)}: pass model positions >= 0")
    if direction not in (FALLS, RISES):
        raise LmprobeError(f"ladder {name!r} has direction {direction!r}: pass {FALLS!r} (quality falls along "
                           f"the order, e.g. rising noise) or {RISES!r} (e.g. training steps)")
    return [int(i) for i in indices], direction


def _adjacent_steps(values: np.ndarray, errors, models: list[int]) -> dict:
    """Each step between neighbours along the order: resolved, unresolved or unknown (model indices)."""
    result = resolved_pairs(values, errors)
    steps = {key: [(models[i], models[j]) for i, j in result[key] if j == i + 1]
             for key in ("resolved", "unresolved", "unknown")}
    return {**steps, "n_resolved": len(steps["resolved"]), "n_steps": len(models) - 1, "z": result["z"],
            "level": result["level"]}


def _empty_ladder_row(ladder: str, direction: str, name: str, lower: frozenset) -> dict:
    return {"ladder": ladder, "name": name, "direction": direction, "lower_is_better": name in lower, "n": 0,
            "models": [], "tau": None, "p": None, "p_method": None, "monotone": None, "follows": None,
            "reachable": None, "min_p": None, "resolved_steps": None, "note": None}


def _ladder_row(ladder: str, indices: list[int], direction: str, name: str, values, lower: frozenset,
                stderr: Mapping[str, Sequence] | None) -> dict:
    row = _empty_ladder_row(ladder, direction, name, lower)
    try:
        all_values = _optional_scores(values)
        picked = all_values[indices]
    except (TypeError, ValueError, IndexError) as error:
        row["note"] = f"{name!r} could not be read at the ladder's models {indices} ({error})"
        return row
    have = np.isfinite(picked)
    models = [m for m, ok in zip(indices, have) if ok]
    row.update(n=len(models), models=models)
    if len(models) < MIN_MODELS:
        row["note"] = f"{name!r} has {len(models)} of the ladder's {len(indices)} models: a trend needs {MIN_MODELS}"
        return row
    signed = picked[have] if direction == RISES else -picked[have]  # positive tau: moves the way quality should
    signed = -signed if name in lower else signed
    if np.all(signed == signed[0]):
        row["note"] = f"{name!r} is constant ({picked[have][0]:g}) along the ladder: no trend"
        return row
    found = trend(signed, np.flatnonzero(have).astype(float))
    notes = [unreachable_note(len(models), SIGNIFICANCE)]
    row.update(tau=found["tau"], p=found["p"], p_method=found["p_method"], monotone=found["monotone"],
               follows=found["tau"] > 0, min_p=min_p(len(models)), reachable=min_p(len(models)) < SIGNIFICANCE)
    if stderr is not None and stderr.get(name) is not None:
        try:
            errors = standard_errors(stderr[name], all_values.size, f"stderr of {name!r}")[models]
            row["resolved_steps"] = _adjacent_steps(picked[have], errors, models)
        except LmprobeError as error:
            notes.append(f"standard errors not used: {error}")
    row["note"] = "; ".join(n for n in notes if n) or None
    return row


def ladder_table(ladders: Mapping[str, object], values: Mapping[str, Sequence], *,
                 lower_is_better: set[str] | frozenset[str] = frozenset(),
                 stderr: Mapping[str, Sequence] | None = None) -> list[dict]:
    """Every number's trend along every ladder: one row per (ladder, number), ladders in order,
    numbers in order within each.

    ``ladders``: name -> (model indices in the ladder's known order, direction), or a mapping
    with "indices" and "direction"; direction ``"falls"`` when quality should fall along the
    order (e.g. rising weight noise) or ``"rises"`` (e.g. training steps). ``values``: number
    name -> one value per model (None where missing: that model is left out of the ladder);
    ``lower_is_better`` names are negated first; ``stderr``: name -> one standard error per model.

    Row fields: ``ladder``, ``name``, ``direction``, ``lower_is_better``; ``n``, ``models``
    (the ladder's model indices with a value, in order); ``tau``: Kendall's tau-b against the
    order, signed so that positive = the number moves the way quality should (``follows``:
    tau > 0); ``p``, ``p_method``: its exact two-sided permutation p; ``monotone``: +1 strictly
    the expected way at every step, -1 strictly against it, 0 neither; ``min_p`` / ``reachable``
    as in ``correlation_table``; ``resolved_steps`` (with ``stderr``): the adjacent steps
    (``resolved`` / ``unresolved`` / ``unknown`` model index pairs, ``n_resolved`` of
    ``n_steps``); ``note``. Never raises for the data; a malformed ladder raises ``LmprobeError``.
    """
    lower = frozenset(lower_is_better)
    rows = []
    for ladder, spec in ladders.items():
        indices, direction = _ladder(spec, ladder)
        for name, number_values in values.items():
            try:
                rows.append(_ladder_row(ladder, indices, direction, name, number_values, lower, stderr))
            except Exception as error:  # one bad row must not end a long experiment
                row = _empty_ladder_row(ladder, direction, name, lower)
                row["note"] = f"could not be computed: {type(error).__name__}: {error}"
                rows.append(row)
    return rows


__all__ = [
    "DEGENERATE_FRACTION",
    "FALLS",
    "LOWER_IS_BETTER",
    "MIN_MODELS",
    "RISES",
    "STATISTICS",
    "BootstrapInterval",
    "RunSummary",
    "TwoLevelInterval",
    "average_ranks",
    "bootstrap_interval",
    "correlation_table",
    "kendall",
    "ladder_table",
    "metric_correlation",
    "over_runs",
    "pearson",
    "rank_models",
    "robustness_accuracy_correlation",
    "spearman",
    "two_level_interval",
]
