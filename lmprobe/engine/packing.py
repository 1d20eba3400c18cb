"""Packers: pairs of sequences, or a context's continuations, in one row each, the shared start computed once.

A pair a = p + sa, b = p + sb (p their longest common prefix) becomes the row [p | sa | sb]:
sb's tokens take the positions that follow p and see p and themselves, never sa. The pair costs
|p| + |sa| + |sb| token passes, not 2|p| + |sa| + |sb| (x and x + trigger: |x| + |trigger|; x
and its negation: everything up to "is" once). Pairs with no common prefix are packed the same
way (two sequences in one row); a pair whose row would be longer than ``limit`` (the context)
gets one row per sequence, and an input given as None (its states are known) gets none.

``pack_continuations`` packs lm-eval's (context, continuation) requests the same way: every
continuation of one context shares a row with the context, which runs once.

``shared=False`` (a model without packed rows, Family.packing) gives every sequence a row of its
own: the same results from the unpacked steps (lmprobe.engine.steps, ``packed=False``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lmprobe.errors import LmprobeError

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


def pack_pairs(a: Sequence[Sequence[int] | None], b: Sequence[Sequence[int] | None], limit: int, *,
               shared: bool = True) -> Packed:
    """Rows for pairs (a[i], b[i]) of token id lists; a None needs no row (its ``row`` is -1).
    Not ``shared``: one row per sequence."""
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
        if x is None or y is None or len(x) + len(y) - c > limit or not shared:
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


@dataclasses.dataclass(frozen=True)
class ContinuationRow:
    """A context and some of its continuations in one row: the context but its last token
    (PREFIX), then for each continuation (segment 1, 2, ...) the context's last token and the
    continuation but its last token, at the positions that follow the context. Slot
    ``start + k`` predicts ``targets[k]``, the continuations' tokens one after another."""

    ids: list[int]
    segments: np.ndarray
    positions: np.ndarray
    targets: np.ndarray
    start: int

    @classmethod
    def of(cls, context: tuple[int, ...], continuations: list[tuple[int, ...]]) -> ContinuationRow:
        start = len(context) - 1  # the context's last token opens every segment: one target per slot
        ids, segments, positions = list(context[:-1]), [PREFIX] * start, list(range(start))
        for segment, continuation in enumerate(continuations, 1):
            ids += [context[-1], *continuation[:-1]]
            segments += [segment] * len(continuation)
            positions += range(start, start + len(continuation))
        targets = [t for continuation in continuations for t in continuation]
        return cls(ids, np.asarray(segments, np.int32), np.asarray(positions, np.int32),
                   np.asarray(targets, np.int32), start)


@dataclasses.dataclass(frozen=True)
class Continuations:
    """Rows to run for (context, continuation) pairs; pair i's continuation is scored by targets
    ``offset[i] .. offset[i] + length[i]`` of row ``row[i]`` (an empty continuation: row -1)."""

    rows: list[ContinuationRow]
    row: np.ndarray
    offset: np.ndarray
    length: np.ndarray


def pack_continuations(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], limit: int, *,
                       shared: bool = True) -> Continuations:
    """Rows for (context ids, continuation ids) pairs, as lm-eval's HF backend reads them: context
    + continuation cut on the left to ``limit`` + 1 tokens. The distinct continuations of one
    context share rows of at most ``limit`` tokens, in order (not ``shared``: a row each)."""
    keys, groups = [], {}
    for context, continuation in pairs:
        if len(continuation) > limit:
            raise LmprobeError(f"a continuation of {len(continuation)} tokens does not fit the context of "
                               f"{limit}: shorten the task's targets or raise max_length")
        whole = (list(context) + list(continuation))[-(limit + 1):]
        key = (tuple(whole[:len(whole) - len(continuation)]), tuple(continuation))
        groups.setdefault(key[0], {})[key[1]] = None  # distinct continuations, in order
        keys.append(key)
    rows, where = [], {}
    for context, continuations in groups.items():  # as many continuations per row as fit ``limit``
        chunks, size = [[]], len(context) - 1
        for continuation in filter(None, continuations):
            if chunks[-1] and (size + len(continuation) > limit or not shared):
                chunks.append([])
                size = len(context) - 1
            chunks[-1].append(continuation)
            size += len(continuation)
        for chunk in filter(None, chunks):
            offset = 0
            for continuation in chunk:
                where[context, continuation] = (len(rows), offset)
                offset += len(continuation)
            rows.append(ContinuationRow.of(context, chunk))
    placed = [where.get(key, (-1, 0)) for key in keys]
    return Continuations(rows, np.asarray([r for r, _ in placed], np.int64), np.asarray([o for _, o in placed],
                         np.int64), np.asarray([len(c) for _, c in keys], np.int64))


def padded(values: list[np.ndarray], indices, shape, fill) -> np.ndarray:
    """Per-row arrays of the rows ``indices`` in a [rows, length] array (right padding)."""
    out = np.full(shape, fill, np.int32)
    for r, i in enumerate(indices):
        out[r, :len(values[i])] = values[i]
    return out


def packed_rows(segments: list[np.ndarray], positions: list[np.ndarray], batch) -> tuple[np.ndarray, np.ndarray]:
    """The segments and positions of a batch's packed rows (a batching.Batch of rows), padded to its
    shape: padding slots are PADDING, at position 0."""
    return (padded(segments, batch.indices, batch.shape, PADDING), padded(positions, batch.indices, batch.shape, 0))


def visibility(segments):
    """[B, T, T] which key slot each query slot may see: earlier (or the same) slots of the prefix
    or of its own segment; padding sees nothing and is never seen (causality is the model's)."""
    q, k = segments[:, :, None], segments[:, None, :]
    return (k != PADDING) & (q != PADDING) & ((k == PREFIX) | (k == q))
