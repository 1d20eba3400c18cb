"""Length-bucketed batching: few shapes, so jit compiles a handful of programs, not one per input.

Sequences are grouped by bucket length (the smallest bucket that holds them), longest first,
cut into batches, and padded to the bucket length and to one of a few batch sizes. Batch sizes
and token budgets are per device of the mesh's 'data' axis: a batch holds ``batch_size`` rows for
each of the ``data_parallel`` shards. ``restore`` puts per-sequence results back in input order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lmprobe.errors import LmprobeError

# Powers of two and 1.5 times them: at most a third of a batch's positions are padding.
LENGTH_BUCKETS = tuple(sorted({8 << i for i in range(13)} | {12 << i for i in range(12)}))
# A partial batch that would carry this many padding tokens is cut into power-of-two pieces instead
# (5 rows -> 4 + 1): another compiled shape costs about as much as running that many tokens
# (docs/performance.md, "Batching").
SPLIT_PADDING_TOKENS = 2048
# Finer buckets, powers of two times 1, 1.25, 1.5 and 1.75 (all multiples of 4): at most a fifth of a
# batch's positions are padding (sequences of 13 tokens or more), for twice the compiled shapes
# (Scorer.embed_geometry uses them).
FINE_LENGTH_BUCKETS = tuple(sorted({8 << i for i in range(13)} | {12 << i for i in range(12)}
                                   | {10 << i for i in range(1, 12)} | {14 << i for i in range(1, 12)}))
# A batch's widest activation ([tokens, width] in the compute dtype) on CPU: batches that keep it
# within a core's share of the cache run faster per token than larger ones, which stream every
# elementwise pass through memory (docs/performance.md, "Embedding on CPU").
CPU_ACTIVATION_BYTES = 4 << 20
MIN_CPU_TOKENS = 128  # fewer tokens a batch would read each weight for too little work


@dataclasses.dataclass(frozen=True)
class Batch:
    """Rows ``0 .. len(indices)-1`` hold the input sequences ``indices``; later rows are padding."""

    indices: np.ndarray  # [n] positions in the input list
    ids: np.ndarray  # [batch, length] int32
    mask: np.ndarray  # [batch, length] int32, 1 on real tokens
    lengths: np.ndarray  # [n] real lengths

    @property
    def shape(self) -> tuple[int, int]:
        return self.ids.shape


def bucket_length(n: int, buckets: Sequence[int] = LENGTH_BUCKETS) -> int:
    """The smallest bucket >= n (beyond the largest: the next multiple of it)."""
    for b in buckets:
        if n <= b:
            return b
    return -(-n // buckets[-1]) * buckets[-1]


def cpu_token_budget(width: int, itemsize: int = 4) -> int:
    """Tokens per batch (per data shard) on CPU for a model whose widest activation has ``width``
    features of ``itemsize`` bytes: the largest power of two whose [tokens, width] activation fits
    ``CPU_ACTIVATION_BYTES``, at least ``MIN_CPU_TOKENS``."""
    fits = max(1, CPU_ACTIVATION_BYTES // (width * itemsize))
    return max(MIN_CPU_TOKENS, 1 << (fits.bit_length() - 1))


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def batch_size_for(length: int, batch_size: int, max_tokens: int | None, data_parallel: int = 1) -> int:
    """Rows of a full batch at ``length``: ``batch_size`` per data shard, capped at ``max_tokens``
    tokens per data shard (at least one row each), times the ``data_parallel`` shards."""
    rows = batch_size if max_tokens is None else min(batch_size, max(1, max_tokens // length))
    return max(1, rows) * data_parallel


def make_batches(seqs: Sequence[Sequence[int]], *, batch_size: int, max_tokens: int | None = None,
                 buckets: Sequence[int] = LENGTH_BUCKETS, pad_id: int = 0, left_pad: bool = False,
                 data_parallel: int = 1, split: bool = True, fill: bool = False) -> list[Batch]:
    """Bucketed, padded batches covering every sequence once, longest bucket first.

    ``batch_size`` and ``max_tokens`` are per shard of the mesh's 'data' axis (``data_parallel``
    shards): a full batch has ``batch_size_for(...)`` rows, ``batch_size`` x ``data_parallel`` when
    no token budget binds. The last, partial batch of a bucket has a power of two rows per shard
    that holds it or, with ``split`` and at least ``SPLIT_PADDING_TOKENS`` of padding, is cut into
    power-of-two pieces; with ``fill`` it is padded to a full batch instead (one compiled shape per
    bucket). ``left_pad`` puts padding first (generation); otherwise padding goes last.
    """
    d = data_parallel
    lengths = np.asarray([len(s) for s in seqs], dtype=np.int64)
    if len(lengths) and lengths.min() == 0:
        empty = int(np.argmin(lengths))
        raise LmprobeError(f"input {empty} is empty (no tokens): drop empty texts or let the "
                           "tokenizer add special tokens")
    by_bucket: dict[int, list[int]] = {}
    for i in np.argsort(-lengths, kind="stable"):
        by_bucket.setdefault(bucket_length(int(lengths[i]), buckets), []).append(int(i))
    batches = []
    for length in sorted(by_bucket, reverse=True):
        members = by_bucket[length]
        rows = batch_size_for(length, batch_size, max_tokens, d)
        for start in range(0, len(members), rows):
            chunk = members[start:start + rows]
            for size in [rows] if fill else piece_rows(len(chunk), rows, length, d, split):
                batches.append(_pad(seqs, chunk[:size], size, length, pad_id, left_pad))
                chunk = chunk[size:]
    return batches


def piece_rows(n: int, full: int, length: int, data_parallel: int = 1, split: bool = True) -> list[int]:
    """Row counts of the batches holding ``n`` of a bucket's sequences (at most ``full``, a full batch):
    a power of two per shard, or, where that pads ``SPLIT_PADDING_TOKENS`` or more and ``split``, the
    powers of two that sum to the rows per shard, largest first."""
    d = data_parallel
    if n == full:
        return [full]
    per_shard = -(-n // d)
    size = min(full, d * pow2_at_least(per_shard))
    if not split or (size - n) * length < SPLIT_PADDING_TOKENS:
        return [size]
    return [d << b for b in reversed(range(per_shard.bit_length())) if per_shard >> b & 1]


def _pad(seqs, chunk, rows, length, pad_id, left_pad) -> Batch:
    ids = np.full((rows, length), pad_id, np.int32)
    mask = np.zeros((rows, length), np.int32)
    for row, i in enumerate(chunk):
        s = np.asarray(seqs[i], np.int32)
        where = slice(length - len(s), length) if left_pad else slice(0, len(s))
        ids[row, where], mask[row, where] = s, 1
    return Batch(np.asarray(chunk), ids, mask, np.asarray([len(seqs[i]) for i in chunk]))


def restore(batches: Sequence[Batch], per_batch: Sequence[Sequence], n: int) -> list:
    """Results of each batch's real rows, back in input order (a list of length n)."""
    out = [None] * n
    for batch, results in zip(batches, per_batch):
        for row, i in enumerate(batch.indices):
            out[i] = results[row]
    return out
