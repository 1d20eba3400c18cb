"""What every method returns: a typed ``Result`` whose ``to_dict()`` is what results.json holds and whose
``numbers()`` are its headline figures, each a ``Number`` (a value with its standard error, the degrees of
freedom behind that error and its per-item values), named as validate, sweep and the in-loop callback show
them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from scipy import stats


@dataclasses.dataclass(frozen=True)
class Number:
    """One figure: its value, standard error, the degrees of freedom behind that error (None: many examples,
    a normal error) and its per-item values on a test set every model shares (paired comparisons)."""

    value: float | None
    stderr: float | None = None
    df: int | None = None
    items: list | None = None

    def interval(self, level: float = 0.95) -> tuple[float, float] | None:
        """The two-sided ``level`` interval value +- q x stderr (q: Student's t on ``df``, else normal)."""
        if self.value is None or self.stderr is None or not math.isfinite(self.stderr):
            return None
        tail = (1 + level) / 2
        q = float(stats.t.ppf(tail, self.df) if self.df else stats.norm.ppf(tail))
        return self.value - q * self.stderr, self.value + q * self.stderr

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Number:
        return cls(**data)


NUMBER_SCHEMA = {"value": (float, None), "stderr": (float, None), "df": (int, None), "items": (list, None)}


class Result:
    """The contract of every method's result (a dataclass per method): ``to_dict()``, results.json's
    content; ``numbers()``, its headline figures by name; ``samples()``, its per-example records
    (samples.jsonl), none by default."""

    def to_dict(self) -> dict:
        raise NotImplementedError

    def numbers(self) -> dict[str, Number]:
        raise NotImplementedError

    def samples(self) -> Iterator[dict]:
        return iter(())
