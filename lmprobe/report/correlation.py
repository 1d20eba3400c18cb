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

Ties get the average of the ranks they span (Spearman, and rankings with equal scores).
Fewer than 3 models, inputs of different lengths, non-finite scores or a constant input raise
``LmprobeError``: a correlation with a constant vector is undefined (the paper prints "-").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from lmprobe.errors import LmprobeError

MIN_MODELS = 3
LOWER_IS_BETTER = frozenset({"val_loss", "mdl", "sdl", "esc"})


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """Mean and population std of per-trial correlations, as in the paper's "0.939 +- 0.008"."""

    mean: float
    std: float
    values: tuple[float, ...]


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


__all__ = [
    "LOWER_IS_BETTER",
    "MIN_MODELS",
    "RunSummary",
    "average_ranks",
    "metric_correlation",
    "over_runs",
    "pearson",
    "rank_models",
    "robustness_accuracy_correlation",
    "spearman",
]
