"""Pairs of sequences packed into one row each, their shared prefix computed once.

A pair a = p + sa, b = p + sb (p their longest common prefix) becomes the row [p | sa | sb]:
sb's tokens take the positions that follow p and see p and themselves, never sa. The pair costs
|p| + |sa| + |sb| token passes, not 2|p| + |sa| + |sb| (x and x + trigger: |x| + |trigger|; x
and its negation: everything up to "is" once). Pairs with no common prefix are packed the same
way (two sequences in one row); a pair whose row would be longer than ``limit`` (the context)
gets one row per sequence, and an input given as None (its states are known) gets none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

PREFIX, FIRST, SECOND, PADDING = 0, 1, 2, -1


@dataclasses.dataclass(frozen=True)
class Packed:
    """Rows to run and, for input sequence i (the a's, then the b's), ``row[i]`` and the slot of
    each of its tokens ``slots[i]``."""

    rows: list[list[int]]
    segments: list[np.ndarray]  # per row: PREFIX / FIRST / SECOND per token
    positions: list[np.ndarray]  # per row: position id of each token
    row: np.ndarray
    slots: list[np.ndarray]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def pack_pairs(a: Sequence[Sequence[int] | None], b: Sequence[Sequence[int] | None], limit: int) -> Packed:
    """Rows for pairs (a[i], b[i]) of token id lists; a None needs no row (its ``row`` is -1)."""
    rows, segments, positions = [], [], []
    placed_a, placed_b = [], []

    def alone(x):
        if x is None:
            return -1, np.zeros(0, np.int64)
        rows.append(list(x))
        segments.append(np.full(len(x), PREFIX, np.int32))
        positions.append(np.arange(len(x), dtype=np.int32))
        return len(rows) - 1, np.arange(len(x))

    for x, y in zip(a, b):
        c = 0 if x is None or y is None else common_prefix(x, y)
        if x is None or y is None or len(x) + len(y) - c > limit:
            placed_a.append(alone(x))
            placed_b.append(alone(y))
            continue
        rows.append(list(x) + list(y[c:]))
        segments.append(np.asarray([PREFIX] * c + [FIRST] * (len(x) - c) + [SECOND] * (len(y) - c), np.int32))
        positions.append(np.asarray(list(range(len(x))) + list(range(c, len(y))), np.int32))
        placed_a.append((len(rows) - 1, np.arange(len(x))))
        placed_b.append((len(rows) - 1, np.concatenate([np.arange(c), len(x) + np.arange(len(y) - c)])))
    placed = placed_a + placed_b
    return Packed(rows, segments, positions, np.asarray([r for r, _ in placed], np.int64),
                  [s for _, s in placed])


def padded(values: list[np.ndarray], indices, shape, fill) -> np.ndarray:
    """Per-row arrays of the rows ``indices`` in a [rows, length] array (right padding)."""
    out = np.full(shape, fill, np.int32)
    for r, i in enumerate(indices):
        out[r, :len(values[i])] = values[i]
    return out


def visibility(segments):
    """[B, T, T] which key slot each query slot may see: earlier (or the same) slots of the prefix
    or of its own segment; padding sees nothing and is never seen (causality is the model's)."""
    q, k = segments[:, :, None], segments[:, None, :]
    return (k != PADDING) & (q != PADDING) & ((k == PREFIX) | (k == q))
