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
  The resamples depend only on ``seed`` and the number of models. Over 4-9 models it is not a
  confidence interval (seeded simulations: coverage 0.73 at n = 4, true correlation 0.9): the
  tables do not use it.
* ``correlation_table``: how well each label-free proxy tracks each real task, one row per
  (proxy, task) with the three statistics and their exact permutation p-values (two-sided), Holm's
  adjustment of the Spearman p across the table's rows, the power of the exact Spearman test at
  the row's n, Kendall's tau with its distribution-free interval (``significance.tau_interval``,
  the only interval given: a percentile bootstrap over 4-9 models under-covers, and one that adds
  each model's noise to values that already carry it is unsound), whether n models can reach
  p < 0.05 at all, Pearson beside a skipped (outlier-free) Pearson, the outliers, and with
  standard errors the resolved pairs of each side (t tests on their degrees of freedom, Holm
  across the pairs). ``serial=True`` (checkpoints of one training run): the models are not
  exchangeable, so no permutation p is given; the statistics are descriptive.
  Sign convention, as in ``metric_correlation``: every lower-is-better entry (proxy or task; e.g.
  a loss, bits per byte, a sensitivity where less sensitive is better) is negated first, so a
  *positive* correlation always means "the proxy orders the models as the task does" (two
  lower-is-better entries: both negated, the raw correlation's sign is kept). Missing values
  (None / NaN / inf) are allowed there: each row uses the models that have both values and
  reports that count ``n``. A row that cannot be computed (n < 3, a constant side, different
  lengths) gets None estimates and a ``note`` saying why; the table never raises for the data.
* ``ladder_table``: for each ladder (one model's variants in a known order, e.g. rising weight
  noise) and each number, Kendall's tau against the order signed so that positive = moves the way
  quality should, its exact *one-sided* p in that direction (stated before the data), Holm's
  adjustment across the numbers of ``family`` on the same ladder, the power of the test at its n,
  strict monotonicity, and the adjacent steps the standard errors resolve (Holm across the
  steps). A serial ladder (checkpoints of one training run) gets no p: its points are not
  exchangeable, and a block permutation of at most 9 checkpoints has too few orderings to reach
  p < 0.05 (3 blocks: 3! = 6, smallest p 1/6).

Except in the two tables, fewer than 3 models, inputs of different lengths, non-finite scores or
a constant input raise ``LmprobeError``: a correlation with a constant vector is undefined (the
paper prints "-").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.evaluate import FALLS, RISES  # ladder_table: how quality moves along a ladder's known order
from lmprobe.report.coefficients import (
    MIN_MODELS,
    STATISTICS,
    as_pair,
    as_scores,
    average_ranks,
    batch_statistic,
    kendall,
    pearson,
    per_model,
    require_varying,
    spearman,
)
from lmprobe.report.significance import (
    POWER_CORRELATIONS,
    critical_value,
    holm,
    min_p,
    outliers,
    permutation_p,
    power,
    resolved_pairs,
    skipped_pearson,
    standard_errors,
    tau_interval,
    trend,
    unreachable_note,
)

LOWER_IS_BETTER = frozenset({"val_loss", "mdl", "sdl", "esc"})
DEGENERATE_FRACTION = 0.5  # more skipped resamples than this: BootstrapInterval.degenerate
SIGNIFICANCE = 0.05  # the tables' "reachable": can n models reach a two-sided p below this
SERIAL_NOTE = ("checkpoints of one training run are not exchangeable (each continues the last): a permutation "
               "p would be invalid, so the statistics are descriptive")


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
    row.update({"level": float(level), "p_method": None, "p_adjusted": None, "power": None,
                "critical_spearman": None, "reachable": None, "min_p": None, "pearson_robust": None,
                "outliers": None, "resolved": None, "serial": False, "note": None})
    return row


def _no_statistics() -> dict:
    out = {name: {"estimate": None, "p": None} for name in STATISTICS}
    out["kendall"].update(low=None, high=None)
    return out


def _pairs_as_models(result: dict, models: np.ndarray) -> dict:
    """``resolved_pairs``' result with positions among the used models turned into model indices."""
    out = {k: v for k, v in result.items() if k not in ("p", "p_adjusted")}
    for key in ("resolved", "unresolved", "unknown"):
        out[key] = [(int(models[i]), int(models[j])) for i, j in result[key]]
    return out


def _side_errors(side_names: Mapping[str, str], table: Mapping[str, Sequence] | None, n: int, used: np.ndarray,
                 what: str, notes: list) -> dict:
    """{side: one value per used model (NaN where unknown), or None} of ``table`` (standard errors or df)."""
    out = {}
    for side, name in side_names.items():
        out[side] = None
        if table is None or table.get(name) is None:
            continue
        try:
            values = (standard_errors(table[name], n, f"{what} of {name!r}") if what == "stderr"
                      else per_model(table[name], n, f"{what} of {name!r}"))
            out[side] = values[used]
        except LmprobeError as error:
            notes.append(f"{what} not used: {error}")
    return out


def _fill_row(row: dict, proxy_values, task_values, level: float, stderr, df, serial: bool) -> None:
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
    notes, method = [], None
    for name in STATISTICS:
        row[name]["estimate"] = _NAMED[name](p, t)
        if not serial:
            test = permutation_p(p, t, name)
            row[name]["p"], method = test["p"], test["method"]
    interval = tau_interval(p, t, level=level)
    row["kendall"].update(low=interval["low"], high=interval["high"])
    row.update(p_method=method, serial=serial,
               critical_spearman=critical_value(p.size, "spearman", SIGNIFICANCE),
               min_p=min_p(p.size), reachable=min_p(p.size) < SIGNIFICANCE,
               power={r: power(p.size, r, statistic="spearman", alternative="two-sided") for r in POWER_CORRELATIONS})
    if serial:
        notes.append(SERIAL_NOTE)
    elif not row["reachable"]:
        notes.append(unreachable_note(p.size, SIGNIFICANCE))
    models = np.asarray(row["models"])
    robust = skipped_pearson(p, t)
    row["pearson_robust"] = {"estimate": robust["estimate"], "removed": models[robust["removed"]].tolist(),
                             "leave_one_out": robust["leave_one_out"]}
    row["outliers"] = {"proxy": models[outliers(p)].tolist(), "task": models[outliers(t)].tolist()}
    sides = {"proxy": proxy, "task": task}
    errors = _side_errors(sides, stderr, row["n_models"], np.flatnonzero(both), "stderr", notes)
    dofs = _side_errors(sides, df, row["n_models"], np.flatnonzero(both), "df", notes)
    if any(e is not None for e in errors.values()):
        row["resolved"] = {side: None if errors[side] is None else _pairs_as_models(
            resolved_pairs(v, errors[side], df=dofs[side], level=1.0 - SIGNIFICANCE), models)
            for side, v in (("proxy", p), ("task", t))}
    row["note"] = "; ".join(notes) or None


def correlation_table(proxies: Mapping[str, Sequence], tasks: Mapping[str, Sequence], *,
                      lower_is_better: set[str] | frozenset[str] = frozenset(), level: float = 0.95,
                      stderr: Mapping[str, Sequence] | None = None, df: Mapping[str, Sequence] | None = None,
                      serial: bool = False) -> list[dict]:
    """How well each label-free proxy tracks each real task across models: one row per
    (proxy, task), proxies in order, tasks in order within each.

    ``proxies`` / ``tasks``: name -> one value per model, the same models in the same order in
    every sequence; None or NaN where a score does not apply to a model. ``lower_is_better``:
    names (of proxies or tasks; names in neither are ignored) whose values are negated first,
    so that a positive correlation means "the proxy orders the models as the task does".
    ``stderr``: name -> one standard error per model in the same order (None where unknown);
    ``df``: name -> the degrees of freedom behind each (absent: normal errors). ``serial``: the
    models are checkpoints of one run (not exchangeable): no p-values.

    Row fields: ``proxy``, ``task``; ``n`` (models with both values, the ones used) of
    ``n_models``, ``models`` (their indices); ``proxy_lower_is_better``, ``task_lower_is_better``;
    ``pearson``, ``spearman``, ``kendall`` (tau-b): each ``{"estimate", "p"}``, the statistic and
    its two-sided exact permutation p (``significance.permutation_p``; ``p_method`` "exact" up to
    9 models, else "monte-carlo"); ``kendall`` also ``low`` / ``high``, its distribution-free
    interval at ``level``; ``p_adjusted``: the Spearman p after Holm's correction across the
    table's rows; ``power``: {r: power of the exact Spearman test at ``n`` against bivariate
    normal scores of correlation r} for r in 0.5, 0.7, 0.9; ``critical_spearman``: the smallest
    |rho| with exact p < 0.05 for ``n`` untied models (None: unreachable), ``min_p``,
    ``reachable``; ``pearson_robust``: ``{"estimate", "removed", "leave_one_out"}``;
    ``outliers``: ``{"proxy", "task"}`` model indices with a modified z-score above 3.5;
    ``resolved`` (with ``stderr``): ``{"proxy", "task"}``, ``significance.resolved_pairs`` with
    model indices (None for a side without errors); ``serial``; ``note``: None, or why entries are
    None or cannot reach p < 0.05. All keys are always present. Never raises for the data; only
    a bad ``level`` raises ``LmprobeError``.
    """
    if not 0.0 < float(level) < 1.0:
        raise LmprobeError(f"level={level!r}: pass the interval's coverage as a fraction in (0, 1), e.g. 0.95")
    lower = frozenset(lower_is_better)
    rows = []
    for proxy, proxy_values in proxies.items():
        for task, task_values in tasks.items():
            row = _empty_row(proxy, task, lower, level)
            try:
                _fill_row(row, proxy_values, task_values, float(level), stderr, df, serial)
            except Exception as error:  # one bad row must not end a long experiment
                row.update(_no_statistics())
                row["note"] = f"could not be computed: {type(error).__name__}: {error}"
            rows.append(row)
    tested = [r["spearman"]["p"] if r["spearman"]["p"] is not None else np.nan for r in rows]
    for row, adjusted in zip(rows, holm(tested)):
        row["p_adjusted"] = None if np.isnan(adjusted) else float(adjusted)
    return rows


# ---------------------------------------------------------------- ladders: variants in a known order


def _ladder(spec, name: str) -> tuple[list[int], str, bool]:
    """(model indices in known order, direction, serial) from a (indices, direction[, serial])
    tuple or a mapping with "indices", "direction" and optionally "serial"."""
    if isinstance(spec, Mapping):
        indices, direction, serial = spec["indices"], spec["direction"], bool(spec.get("serial", False))
    else:
        indices, direction, *rest = spec
        serial = bool(rest[0]) if rest else False
    if any(int(i) < 0 for i in indices):
        raise LmprobeError(f"ladder {name!r} has indices {list(indices)}: pass model positions >= 0")
    if direction not in (FALLS, RISES):
        raise LmprobeError(f"ladder {name!r} has direction {direction!r}: pass {FALLS!r} (quality falls along "
                           f"the order, e.g. rising noise) or {RISES!r} (e.g. training steps)")
    return [int(i) for i in indices], direction, serial


def _adjacent_steps(values: np.ndarray, errors, dofs, models: list[int], items=None) -> dict:
    """Each step between neighbours along the order: resolved, unresolved or unknown (model
    indices), by t tests of the differences (paired where both have ``items``) with Holm's
    correction across the steps."""
    steps = [(i, i + 1) for i in range(len(models) - 1)]
    pairs = resolved_pairs(values, errors, df=dofs, items=items, adjust="none", level=1.0 - SIGNIFICANCE)
    raw = np.array([pairs["p"].get(k, np.nan) for k in steps])
    adjusted = holm(raw)
    out = {"resolved": [], "unresolved": [], "unknown": []}
    for (i, j), q in zip(steps, adjusted):
        key = "unknown" if np.isnan(q) else "resolved" if q <= SIGNIFICANCE else "unresolved"
        out[key].append((models[i], models[j]))
    return {**out, "n_resolved": len(out["resolved"]),
            "n_resolved_unadjusted": int(np.sum(raw[np.isfinite(raw)] <= SIGNIFICANCE)),
            "n_steps": len(steps), "adjust": "holm", "alpha": SIGNIFICANCE}


def _empty_ladder_row(ladder: str, direction: str, name: str, lower: frozenset, serial: bool = False) -> dict:
    return {"ladder": ladder, "name": name, "direction": direction, "lower_is_better": name in lower, "n": 0,
            "models": [], "tau": None, "p": None, "p_adjusted": None, "alternative": "greater",
            "family_size": None, "power": None, "power_adjusted": None, "p_method": None, "monotone": None,
            "follows": None, "reachable": None, "min_p": None, "resolved_steps": None, "serial": serial,
            "note": None}


def _ladder_row(ladder: str, indices: list[int], direction: str, serial: bool, name: str, values,
                lower: frozenset, stderr, df, items=None) -> dict:
    row = _empty_ladder_row(ladder, direction, name, lower, serial)
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
    found = trend(signed, np.flatnonzero(have).astype(float), alternative="greater")
    one_sided_min = 1.0 / math.factorial(len(models))
    row.update(tau=found["tau"], monotone=found["monotone"], follows=found["tau"] > 0, min_p=one_sided_min,
               reachable=one_sided_min < SIGNIFICANCE)
    notes = []
    if serial:
        notes.append(SERIAL_NOTE)
    else:
        row.update(p=found["p"], p_method=found["p_method"],
                   power={r: power(len(models), r) for r in POWER_CORRELATIONS})
        if not row["reachable"]:
            notes.append(f"n = {len(models)}: no ordering reaches one-sided p < {SIGNIFICANCE:g}; "
                         f"smallest p = {one_sided_min:.2g}")
    if stderr is not None and stderr.get(name) is not None:
        try:
            errors = standard_errors(stderr[name], all_values.size, f"stderr of {name!r}")[models]
            dofs = None if df is None or df.get(name) is None else per_model(df[name], all_values.size,
                                                                             f"df of {name!r}")[models]
            shared = None if items is None or items.get(name) is None else [items[name][m] for m in models]
            row["resolved_steps"] = _adjacent_steps(picked[have], errors, dofs, models, shared)
        except LmprobeError as error:
            notes.append(f"standard errors not used: {error}")
    row["note"] = "; ".join(notes) or None
    return row


def _adjust_family(rows: list[dict], family) -> None:
    """Holm's adjustment of the one-sided p of the ``family`` numbers (all: None) on one ladder, and
    each one's power at the family's strictest level, alpha / m."""
    members = [r for r in rows if r["p"] is not None and (family is None or r["name"] in family)]
    for row, adjusted in zip(members, holm([r["p"] for r in members])):
        row.update(p_adjusted=float(adjusted), family_size=len(members),
                   power_adjusted={r: power(row["n"], r, alpha=SIGNIFICANCE / len(members))
                                   for r in POWER_CORRELATIONS})


def ladder_table(ladders: Mapping[str, object], values: Mapping[str, Sequence], *,
                 lower_is_better: set[str] | frozenset[str] = frozenset(),
                 stderr: Mapping[str, Sequence] | None = None, df: Mapping[str, Sequence] | None = None,
                 items: Mapping[str, Sequence] | None = None, family=None) -> list[dict]:
    """Every number's trend along every ladder: one row per (ladder, number), ladders in order,
    numbers in order within each.

    ``ladders``: name -> (model indices in the ladder's known order, direction[, serial]), or a
    mapping with "indices", "direction" and optionally "serial"; direction ``"falls"`` when
    quality should fall along the order (e.g. rising weight noise) or ``"rises"`` (e.g. training
    steps); ``serial``: checkpoints of one run, not exchangeable (no p). ``values``: number name ->
    one value per model (None where missing: that model is left out of the ladder);
    ``lower_is_better`` names are negated first; ``stderr``: name -> one standard error per model,
    ``df`` the degrees of freedom behind each, ``items`` each model's per-item values on a test set
    they share (None where absent; steps between two models with items are tested paired);
    ``family``: the names corrected together on each ladder (the proxies; None: every number).

    Row fields: ``ladder``, ``name``, ``direction``, ``lower_is_better``, ``serial``; ``n``,
    ``models`` (the ladder's model indices with a value, in order); ``tau``: Kendall's tau-b
    against the order, signed so that positive = the number moves the way quality should
    (``follows``: tau > 0); ``p``: its exact one-sided permutation p in that direction
    (``alternative`` "greater"), ``p_adjusted``: Holm's across the family on this ladder
    (``family_size`` tests; None for numbers outside it), ``p_method``; ``power``: {r: the
    one-sided exact test's power at alpha 0.05} and ``power_adjusted`` (at alpha / family size)
    for bivariate normal correlation r in 0.5, 0.7, 0.9; ``monotone``: +1 strictly the expected
    way at every step, -1 strictly against it, 0 neither; ``min_p`` (one-sided, 1 / n!) /
    ``reachable``; ``resolved_steps`` (with ``stderr``): the adjacent steps (``resolved`` /
    ``unresolved`` / ``unknown`` model index pairs, ``n_resolved`` of ``n_steps`` after Holm
    across the steps, ``n_resolved_unadjusted``); ``note``. Never raises for the data; a
    malformed ladder raises ``LmprobeError``.
    """
    lower = frozenset(lower_is_better)
    rows = []
    for ladder, spec in ladders.items():
        indices, direction, serial = _ladder(spec, ladder)
        ladder_rows = []
        for name, number_values in values.items():
            try:
                ladder_rows.append(_ladder_row(ladder, indices, direction, serial, name, number_values, lower,
                                               stderr, df, items))
            except Exception as error:  # one bad row must not end a long experiment
                row = _empty_ladder_row(ladder, direction, name, lower, serial)
                row["note"] = f"could not be computed: {type(error).__name__}: {error}"
                ladder_rows.append(row)
        _adjust_family(ladder_rows, family)
        rows += ladder_rows
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
]
