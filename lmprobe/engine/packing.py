"""Packers: pairs of sequences, or a context's continuations, in one row each, the shared start computed once.

A pair a = p + sa, b = p + sb (p their longest common prefix) becomes the row [p | sa | sb]:
sb's tokens take the positions that follow p and see p and themselves, never sa. The pair costs
|p| + |sa| + |sb| token passes, not 2|p| + |sa| + |sb| (x and x + trigger: |x| + |trigger|; x
and its negation: everything up to "is" once). Pairs with no common prefix are packed the same
way (two sequences in one row); a pair whose row would be longer than ``limit`` (the context)
gets one row per sequence, and an input given as None (its states are known) gets none.

``pack_continuations`` packs lm-eval's (context, continuation) requests the same way where it pays:
continuations of one long context share a row of at most about twice one sequence, the context run
once; the rest (rolling windows, short contexts) are plain causal sequences, batched by length, and
the short ones among them laid end to end in rows of their own (each sequence a segment that sees only
itself), so that a row of short sequences is filled rather than padded.

``shared=False`` (a model without packed rows, Family.packing) gives every sequence a row of its
own: the same results from the unpacked steps (lmprobe.engine.steps, ``packed=False``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lmprobe.engine.batching import LENGTH_BUCKETS, bucket_length
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


PACK_MIN_CONTEXT = 16  # context tokens below which a context's continuations get plain rows of their own
# Plain sequences of at most this many tokens share rows (``end_to_end``): a row of them runs dense attention
# over its [T, T] visibility, cheap at this length; longer ones keep rows of their own (causal, tiled from 256).
SHORT_SEQUENCE = 128


@dataclasses.dataclass(frozen=True)
class ContinuationRow:
    """A context and some of its continuations in one row: the context (PREFIX), then for each
    continuation of two or more tokens (segment 1, 2, ...) its tokens but the last, at the positions
    that follow the context. Slot ``slots[k]`` predicts ``targets[k]``, the continuations' tokens
    one after another (a continuation's first token: the context's last slot, shared by all).
    ``packed``: the row runs under its segments' mask (two segments or more, or a row of ``joined``'s short
    sequences, which may hold one); else it is one causal sequence."""

    ids: list[int]
    segments: np.ndarray
    positions: np.ndarray
    slots: np.ndarray
    targets: np.ndarray
    packed: bool

    @classmethod
    def of(cls, context: tuple[int, ...], continuations: list[tuple[int, ...]]) -> ContinuationRow:
        last = len(context) - 1
        ids, segments, positions, slots = list(context), [PREFIX] * len(context), list(range(len(context))), []
        segment = 0
        for continuation in continuations:
            slots += [last, *range(len(ids), len(ids) + len(continuation) - 1)]
            if len(continuation) > 1:
                segment += 1
                ids += continuation[:-1]
                segments += [segment] * (len(continuation) - 1)
                positions += range(len(context), len(context) + len(continuation) - 1)
        targets = [t for continuation in continuations for t in continuation]
        return cls(ids, np.asarray(segments, np.int32), np.asarray(positions, np.int32), np.asarray(slots, np.int32),
                   np.asarray(targets, np.int32), segment > 1)

    @classmethod
    def joined(cls, rows: Sequence[ContinuationRow]) -> ContinuationRow:
        """Plain rows (``packed`` False) end to end in one packed row: row k becomes segment k + 1, which
        sees only itself, at its own positions; its targets follow row k - 1's. (A row of one keeps the packed
        rows' batches: with the others of its length, not a batch of its own.)"""
        starts = np.cumsum([0] + [len(row.ids) for row in rows])
        return cls([t for row in rows for t in row.ids],
                   np.concatenate([np.full(len(row.ids), k + 1, np.int32) for k, row in enumerate(rows)]),
                   np.concatenate([row.positions for row in rows]),
                   np.concatenate([row.slots + start for row, start in zip(rows, starts)]).astype(np.int32),
                   np.concatenate([row.targets for row in rows]), True)


@dataclasses.dataclass(frozen=True)
class Continuations:
    """Rows to run for (context, continuation) pairs; pair i's continuation is scored by targets
    ``first[i] .. first[i] + length[i]`` of the rows' targets laid end to end (row 0's, then row 1's, ...)."""

    rows: list[ContinuationRow]
    first: np.ndarray
    length: np.ndarray


def chunked(context: tuple[int, ...], continuations: list[tuple[int, ...]], limit: int, shared: bool) -> list[list]:
    """The continuations of one context, in rows. Several continuations of two or more tokens share a
    row only when the context is long enough to pay for the segment mask (``PACK_MIN_CONTEXT``), and
    then a row's continuation tokens stay within the context's length (or one continuation's): a row is
    at most about twice one sequence, never a context-long pile of unrelated ones. Otherwise each such
    continuation is a plain causal sequence. One-token continuations ride on the first row: they are
    all predicted at the context's last slot."""
    multi = [c for c in continuations if len(c) > 1]
    pack = shared and len(context) >= PACK_MIN_CONTEXT and len(multi) > 1
    room = max([len(context), *map(len, multi)])
    chunks, size = [[]], 0
    for continuation in multi:
        grows = len(continuation) - 1
        if chunks[-1] and (not pack or size + grows > room or len(context) + size + grows > limit):
            chunks.append([])
            size = 0
        chunks[-1].append(continuation)
        size += grows
    chunks[0] += [c for c in continuations if len(c) == 1]
    return chunks


def end_to_end(rows: Sequence[ContinuationRow], buckets: Sequence[int] = LENGTH_BUCKETS) -> tuple[list, list]:
    """Which ``rows`` keep a row of their own (indices) and which share rows (lists of indices): where two or
    more plain rows have at most ``SHORT_SEQUENCE`` tokens, those share, first fit by decreasing length, rows
    as long as the longest one's bucket (``buckets``), so a row costs no more attention than that sequence."""
    short = [i for i, row in enumerate(rows) if not row.packed and len(row.ids) <= SHORT_SEQUENCE]
    if len(short) < 2:
        return list(range(len(rows))), []
    short.sort(key=lambda i: -len(rows[i].ids))
    room = bucket_length(len(rows[short[0]].ids), buckets)
    bins, free = [], []
    for i in short:
        n = len(rows[i].ids)
        k = next((k for k, left in enumerate(free) if n <= left), len(bins))
        if k == len(bins):
            bins.append([])
            free.append(room)
        bins[k].append(i)
        free[k] -= n
    return sorted(set(range(len(rows))) - set(short)), bins


def pack_continuations(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], limit: int, *,
                       shared: bool = True, buckets: Sequence[int] = LENGTH_BUCKETS) -> Continuations:
    """Rows for (context ids, continuation ids) pairs, as lm-eval's HF backend reads them: context
    + continuation cut on the left to ``limit`` + 1 tokens. Equal pairs are scored once; the distinct
    continuations of one context go in rows by ``chunked``, and short plain rows share rows by
    ``end_to_end`` (the batches' length ``buckets``). Not ``shared``: no row holds two segments."""
    keys, groups = [], {}
    for i, (context, continuation) in enumerate(pairs):
        if not len(continuation):
            raise LmprobeError(f"request {i} has an empty continuation (nothing to score; lm-eval's hf backend "
                               "fails on it with an assertion): give every choice or target some text")
        if len(continuation) > limit:
            raise LmprobeError(f"request {i}: a continuation of {len(continuation)} tokens does not fit the context "
                               f"of {limit}: shorten the task's targets or raise max_length")
        if not len(context):
            raise LmprobeError(f"request {i} has no context tokens: start it with the prefix token (lm-eval's "
                               "TemplateLM does for an empty context)")
        whole = (list(context) + list(continuation))[-(limit + 1):]
        key = (tuple(whole[:len(whole) - len(continuation)]), tuple(continuation))
        groups.setdefault(key[0], {})[key[1]] = None  # distinct continuations, in order
        keys.append(key)
    units = [(context, chunk) for context, continuations in groups.items()
             for chunk in chunked(context, list(continuations), limit, shared)]
    alone = [ContinuationRow.of(context, chunk) for context, chunk in units]
    own, shared_rows = end_to_end(alone, buckets) if shared else (range(len(units)), [])
    rows, where, base = [], {}, 0
    for members in [[i] for i in own] + shared_rows:
        for context, chunk in (units[i] for i in members):
            for continuation in chunk:
                where[context, continuation] = base
                base += len(continuation)
        sharing = len(rows) >= len(own)  # the rows of their own come first
        rows.append(ContinuationRow.joined([alone[i] for i in members]) if sharing else alone[members[0]])
    return Continuations(rows, np.asarray([where[key] for key in keys], np.int64),
                         np.asarray([len(c) for _, c in keys], np.int64))


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
