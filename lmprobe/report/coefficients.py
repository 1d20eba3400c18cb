"""Pearson, Spearman and Kendall tau-b across models: one score vector pair at a time (checked
input, clear errors), or for many rows at once (bootstrap resamples, permutations) in numpy.

Ties get the average of the ranks they span; Kendall's tau-b corrects for ties in either input
(``scipy.stats.kendalltau``'s default). Fewer than 3 models, inputs of different lengths,
non-finite scores or a constant input raise ``LmprobeError``.
"""

from __future__ import annotations

import numpy as np

from lmprobe.errors import LmprobeError

MIN_MODELS = 3
STATISTICS = ("pearson", "spearman", "kendall")


def as_scores(values, name: str) -> np.ndarray:
    """One finite float per model, at least ``MIN_MODELS`` of them; ``LmprobeError`` naming ``name`` otherwise."""
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


def per_model(values, n: int, name: str) -> np.ndarray:
    """One float per model, NaN where a value is None; ``LmprobeError`` naming ``name`` for values
    that are not numbers or not ``n`` of them."""
    try:
        array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise LmprobeError(f"{name} could not be read as one number (or None) per model: {error}") from None
    if array.shape != (n,):
        raise LmprobeError(f"{name} has shape {array.shape} but there are {n} models: pass one value per "
                           "model, in the models' order (None where it does not apply)")
    return array


def as_pair(x, y, x_name: str = "x", y_name: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """``as_scores`` of both, and the same number of models in each."""
    x, y = as_scores(x, x_name), as_scores(y, y_name)
    if x.size != y.size:
        raise LmprobeError(f"{x_name} has {x.size} scores but {y_name} has {y.size}: pass one "
                           "score per model, the same models in the same order")
    return x, y


def require_varying(values: np.ndarray, name: str) -> None:
    """``LmprobeError`` if every score is the same: a correlation with it is undefined."""
    if np.all(values == values[0]):
        raise LmprobeError(f"{name} is constant ({values.size} equal values {values[0]:g}): its "
                           "correlation is undefined; leave it out of the comparison (the paper "
                           "prints '-')")


def average_ranks(values) -> np.ndarray:
    """Ranks 1..n in ascending order; tied values share the mean of the ranks they span."""
    return batch_ranks(np.asarray(values, dtype=np.float64)[None])[0]


def _checked(x, y, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    x, y = as_pair(x, y, *names)
    require_varying(x, names[0])
    require_varying(y, names[1])
    return x, y


def pearson(x, y, *, names: tuple[str, str] = ("x", "y")) -> float:
    """Pearson correlation coefficient of two score vectors (one score per model); ``names`` name
    the inputs in errors."""
    x, y = _checked(x, y, names)
    return float(batch_statistic("pearson", x, y)[0])


def spearman(x, y, *, names: tuple[str, str] = ("x", "y")) -> float:
    """Spearman rank correlation: Pearson of the average ranks (ties handled)."""
    x, y = _checked(x, y, names)
    return float(batch_statistic("pearson", average_ranks(x), average_ranks(y))[0])


def kendall(x, y, *, names: tuple[str, str] = ("x", "y")) -> float:
    """Kendall's tau-b rank correlation (ties in x or y handled; scipy's default variant)."""
    x, y = _checked(x, y, names)
    return float(batch_statistic("kendall", x, y)[0])


# ---------------------------------------------------------------- many rows at once


def _batch_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    da = a - a.mean(axis=-1, keepdims=True)
    db = b - b.mean(axis=-1, keepdims=True)
    num = np.einsum("...i,...i->...", da, db)
    den = np.sqrt(np.einsum("...i,...i->...", da, da) * np.einsum("...i,...i->...", db, db))
    return np.clip(num / den, -1.0, 1.0)


def batch_ranks(rows) -> np.ndarray:
    """``average_ranks`` of each row of a [B, n] array, all at once, O(B n log n)."""
    rows = np.asarray(rows, dtype=np.float64)
    order = np.argsort(rows, axis=1, kind="stable")
    ordered = np.take_along_axis(rows, order, axis=1)
    position = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
    new = np.ones(rows.shape, dtype=bool)  # a tie group starts here (in sorted order)
    new[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    last = np.ones(rows.shape, dtype=bool)  # a tie group ends here
    last[:, :-1] = new[:, 1:]
    first_of_group = np.maximum.accumulate(np.where(new, position, 0), axis=1)
    last_of_group = np.minimum.accumulate(np.where(last, position, rows.shape[1])[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(rows.shape)
    np.put_along_axis(ranks, order, (first_of_group + last_of_group) / 2.0 + 1.0, axis=1)
    return ranks


_CHUNK = 1 << 22  # pair signs per chunk and side: 4 MiB of int8


def _batch_kendall(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """tau-b of each row: (concordant - discordant pairs) / sqrt(pairs untied in a * pairs untied in b)."""
    first, second = np.triu_indices(a.shape[-1], k=1)
    out = np.empty(a.shape[0])
    step = max(1, _CHUNK // max(1, first.size))
    for i in range(0, a.shape[0], step):
        sa = np.sign(a[i:i + step, first] - a[i:i + step, second]).astype(np.int8)
        sb = np.sign(b[i:i + step, first] - b[i:i + step, second]).astype(np.int8)
        concordance = np.einsum("ij,ij->i", sa, sb, dtype=np.int64)
        untied = np.count_nonzero(sa, axis=1) * np.count_nonzero(sb, axis=1)
        out[i:i + step] = concordance / np.sqrt(untied.astype(np.float64))
    return np.clip(out, -1.0, 1.0)


def batch_statistic(name: str, xs, ys) -> np.ndarray:
    """``name`` ("pearson", "spearman" or "kendall") of each row pair of [B, n] arrays, all at once
    (a flat [n] input is used for every row); NaN where a row of either is constant. Unchecked:
    finite values expected."""
    xs, ys = np.broadcast_arrays(np.atleast_2d(np.asarray(xs, dtype=np.float64)),
                                 np.atleast_2d(np.asarray(ys, dtype=np.float64)))
    if xs.ndim != 2:
        raise LmprobeError(f"batch_statistic takes [rows, models] arrays, got shape {xs.shape}")
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "pearson":
            return _batch_pearson(xs, ys)
        if name == "spearman":
            return _batch_pearson(batch_ranks(xs), batch_ranks(ys))
        if name == "kendall":
            return _batch_kendall(xs, ys)
    raise LmprobeError(f"statistic={name!r}: pass one of {list(STATISTICS)}")


def permuted_statistic(name: str, x, y, permutations) -> np.ndarray:
    """``name`` of (x, y[perm]) for each row ``perm`` of the [B, n] index array ``permutations``,
    fast: permuting y leaves every denominator unchanged, so only the numerator is recomputed
    (a product with x's centred scores, or with x's pair signs for Kendall). NaN if x or y is
    constant. Unchecked: finite values expected."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    columns = np.asarray(permutations).T  # column i: which y each permutation puts beside x[i]
    if name == "spearman":
        x, y, name = average_ranks(x), average_ranks(y), "pearson"
    if name == "pearson":
        a, b = x - x.mean(), y - y.mean()
        numerator = sum(a[i] * b[columns[i]] for i in range(x.size))
        denominator = np.sqrt(np.dot(a, a) * np.dot(b, b))
    elif name == "kendall":
        codes = np.unique(y, return_inverse=True)[1].reshape(y.shape).astype(np.int32)
        first, second = np.triu_indices(x.size, k=1)
        x_signs = np.sign(x[first] - x[second]).astype(np.int64)
        y_codes = [codes[column] for column in columns]
        numerator = np.zeros(columns.shape[1], dtype=np.int64)
        for i, j, sign in zip(first, second, x_signs):
            if sign:
                numerator += sign * np.sign(y_codes[i] - y_codes[j])
        untied_y = np.count_nonzero(codes[first] != codes[second])
        denominator = np.sqrt(float(np.count_nonzero(x_signs) * untied_y))
    else:
        raise LmprobeError(f"statistic={name!r}: pass one of {list(STATISTICS)}")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(numerator / denominator, -1.0, 1.0)


__all__ = [
    "MIN_MODELS",
    "STATISTICS",
    "as_pair",
    "as_scores",
    "average_ranks",
    "batch_ranks",
    "batch_statistic",
    "kendall",
    "pearson",
    "permuted_statistic",
    "require_varying",
    "spearman",
]
