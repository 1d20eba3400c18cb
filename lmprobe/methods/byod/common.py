"""What every BYOD metric shares: the typed result, its statistics, example sampling and chunking.

A metric is two steps: build (x, x') pairs from text (model-free but for the tokenizer, with a
count of the sentences skipped and why), then score the pairs through the engine in chunks.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import numpy as np

from lmprobe.errors import LmprobeError

CHUNK = 512  # pairs per engine call: bounds host memory, drives the progress bars; few partial batches
BOOTSTRAP_RESAMPLES = 1000


def no_progress(iterable, **_):
    return iterable


@dataclasses.dataclass
class MetricResult:
    """One metric on one model: the paper's aggregate with its standard error, the examples
    behind it and the sentences that could not be used (reason -> count)."""

    name: str
    score: float | None
    stderr: float | None
    n: int
    skipped: dict[str, int]
    records: list[dict]
    extra: dict = dataclasses.field(default_factory=dict)  # the metric's other numbers
    # its cache entry's JSON (to_cache; lmprobe.store.json_problem)
    SCHEMA: ClassVar[dict] = {"name": str, "score": (float, None), "stderr": (float, None), "n": int,
                              "skipped": {str: int}, "records": [dict], "extra": dict}

    def to_dict(self) -> dict:
        """The summary (no per-example records): what results.json holds."""
        return {"score": self.score, "stderr": self.stderr, "n": self.n, **self.extra,
                "skipped": dict(self.skipped)}

    def to_cache(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_cache(cls, data: dict) -> MetricResult:
        return cls(**data)


@dataclasses.dataclass
class Built:
    """Examples made from a corpus: one dict per example, plus skip reasons and counts."""

    examples: list[dict]
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1


def mean_stderr(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and its standard error (sample std / sqrt(n)); None where undefined."""
    x = np.asarray(values, np.float64)
    if x.size == 0:
        return None, None
    return float(x.mean()), (float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else None)


def ratio_of_means(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float | None, float | None]:
    """R = sum(y) / sum(x) over paired examples and its delta-method standard error,
    sqrt(sum((y_i - R x_i)^2) / (n - 1) / n) / mean(x); None where undefined (no example, a zero
    denominator; the stderr needs two examples)."""
    y, x = np.asarray(numerators, np.float64), np.asarray(denominators, np.float64)
    if y.shape != x.shape:
        raise LmprobeError(f"ratio_of_means needs one denominator per numerator: got {x.size} for {y.size}")
    if y.size == 0 or x.sum() == 0:
        return None, None
    ratio = float(y.sum() / x.sum())
    if y.size == 1:
        return ratio, None
    residual = y - ratio * x
    return ratio, float(math.sqrt(residual @ residual / (y.size - 1) / y.size) / abs(x.mean()))


def median_stderr(values: Sequence[float], seed: int) -> tuple[float | None, float | None]:
    """Median and its bootstrap standard error (seeded resamples)."""
    x = np.asarray(values, np.float64)
    if x.size == 0:
        return None, None
    if x.size == 1:
        return float(x[0]), None
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(BOOTSTRAP_RESAMPLES, x.size))], axis=1)
    return float(np.median(x)), float(medians.std(ddof=1))


def result(name: str, values: Sequence[float], built: Built, records: list[dict], **extra) -> MetricResult:
    """A MetricResult whose score is the mean of ``values`` (an empty list gives n = 0)."""
    score, stderr = mean_stderr(values)
    return MetricResult(name, score, stderr, len(values), dict(built.skipped), records, extra)


def take(candidates: Iterable, limit: int | None, build: Callable[[object, Built], dict | None],
         built: Built | None = None) -> Built:
    """Examples from ``candidates`` in order until ``limit`` are made; ``build`` returns None
    (after calling ``built.skip(reason)``) for a candidate it cannot use."""
    built = built or Built([])
    for candidate in candidates:
        if limit is not None and len(built.examples) >= limit:
            break
        example = build(candidate, built)
        if example is not None:
            built.examples.append(example)
    return built


def shuffled(items: Sequence, seed: int) -> list:
    """``items`` in a seeded random order: the sample a metric draws from a corpus."""
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order]


def chunks(items: Sequence, progress=no_progress, desc: str = "", size: int = CHUNK):
    """``items`` in slices of ``size`` (with a progress bar over the slices)."""
    starts = list(range(0, len(items), size))
    for start in progress(starts, desc=desc):
        yield start, items[start:start + size]


def paired_stats(scorer, pairs: Sequence[tuple], progress=no_progress, desc: str = "", **kwargs) -> list[dict]:
    """``scorer.next_token_stats`` over (a, a_positions, b, b_positions) pairs, per pair a dict of
    per-position arrays, in input order. Pairs go to the engine in chunks of similar position
    counts (sorted), so the positions axis of a chunk is padded little."""
    if getattr(scorer, "is_encoder_decoder", False):
        raise LmprobeError(f"{desc or 'this metric'} compares next-token distributions after a text, which only "
                           "a causal LM defines; an encoder-decoder (T5) runs BYOD's negation and toxicity "
                           "(generation) metrics: use a decoder checkpoint for the others")
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][1]))
    out = [None] * len(pairs)
    for _, idx in chunks(order, progress, desc):
        a, a_pos, b, b_pos = zip(*(pairs[i] for i in idx))
        stats = scorer.next_token_stats(list(a), list(a_pos), list(b), list(b_pos), **kwargs)
        for row, i in enumerate(idx):
            out[i] = {key: values[row] for key, values in stats.items()}
    return out


def example_rng(seed: int, index: int) -> np.random.Generator:
    """The random stream of example ``index``: the same whatever the chunking or batch size."""
    return np.random.default_rng([seed, index])
