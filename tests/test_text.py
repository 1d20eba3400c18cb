"""Counts, undefined numbers and stage times as the summaries print them."""

import math

from lmprobe import text


def test_plural_and_undefined_numbers():
    assert [text.plural(n, "level") for n in (0, 1, 2)] == ["0 levels", "1 level", "2 levels"]
    assert text.plural(1, "entry", "entries") == "1 entry" and text.plural(3, "entry", "entries") == "3 entries"
    assert [text.number(x) for x in (0.5, math.nan, None, math.inf)] == ["0.500", "n/a", "n/a", "n/a"]
    assert text.estimate(1.0, math.nan) == "1.000" and text.estimate(0.5, 0.02) == "0.500±0.020"


def test_timings_say_which_stages_a_cache_served():
    line = text.timings({"embedding": 0.0004, "scoring": 7.06}, {"embedding": {"hits": 4, "entries": 4},
                                                                   "scoring": {"hits": 0, "entries": 0}})
    assert line == "embedding 0.0 s (4 of 4 from cache), scoring 7.1 s"
    assert text.timings({"a": 1.0}) == "a 1.0 s"
