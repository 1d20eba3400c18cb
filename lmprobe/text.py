"""How counts and numbers read in summaries and messages: '1 level', '3 levels'; 'n/a' for a
number that is not defined (a standard error of one trial, an accuracy over no sample)."""

from __future__ import annotations

import math

NOT_AVAILABLE = "n/a"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """'1 level', '2 levels' (``many``: the plural when it is not noun + 's')."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def number(value, spec: str = ".3f") -> str:
    """``value`` formatted with ``spec``, or 'n/a' when it is None, NaN or infinite."""
    if value is None or not math.isfinite(value):
        return NOT_AVAILABLE
    return format(value, spec)


def estimate(mean, spread, spec: str = ".3f", sep: str = "±") -> str:
    """'0.500±0.020'; the mean alone where its spread is not defined (one trial), 'n/a' without a mean."""
    head, tail = number(mean, spec), number(spread, spec)
    return head if NOT_AVAILABLE in (head, tail) else f"{head}{sep}{tail}"


def timings(seconds: dict, cached: dict | None = None) -> str:
    """'embedding 12.3 s, scoring 0.0 s (4 of 4 from cache)': each stage's time, and what of it a cache served."""
    parts = []
    for stage, value in seconds.items():
        use = (cached or {}).get(stage) or {}
        note = f" ({use['hits']} of {use['entries']} from cache)" if use.get("hits") else ""
        parts.append(f"{stage} {number(value, '.1f')} s{note}")
    return ", ".join(parts)
