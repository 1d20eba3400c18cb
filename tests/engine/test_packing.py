"""pack_continuations: packed rows only where a long context is shared, never a context-long pile of unrelated
sequences; short plain sequences end to end, each seeing only itself; every target predicted by the slot that
holds the token before it."""

import numpy as np
import pytest

from lmprobe.engine.packing import PACK_MIN_CONTEXT, pack_continuations
from lmprobe.errors import LmprobeError


def scored(packed, i):
    """(tokens before each target, in order as the row sees them, targets) of pair i."""
    flat = [(row, k) for row in packed.rows for k in range(len(row.targets))]
    out = []
    for row, k in flat[packed.first[i]:packed.first[i] + packed.length[i]]:
        slot = row.slots[k]  # what it sees: earlier slots of the prefix or of its own segment
        seen = (np.arange(len(row.ids)) <= slot) & ((row.segments == 0) | (row.segments == row.segments[slot]))
        out.append(([row.ids[j] for j in np.flatnonzero(seen)], int(row.targets[k])))
    return out


def test_rolling_windows_long_ones_alone_short_ones_end_to_end():
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 100, size=n).tolist() for n in (30, 200, 7, 512, 20, 60)]
    packed = pack_continuations([([0], d) for d in docs], 512)  # lm-eval's windows: one prefix token each
    long, short = packed.rows[:2], packed.rows[2:]
    assert [len(r.ids) for r in long] == [200, 512] and not any(r.packed for r in long)
    # 60, 30, 20 and 7 tokens (with their prefix token) by first fit into rows of the 60's bucket (64)
    assert [len(r.ids) for r in short] == [60, 30 + 20 + 7] and all(r.packed for r in short)
    assert short[1].segments.tolist() == [1] * 30 + [2] * 20 + [3] * 7
    assert short[1].positions.tolist() == [*range(30), *range(20), *range(7)]
    for i, doc in enumerate(docs):
        assert scored(packed, i) == [([0, *doc[:k]], t) for k, t in enumerate(doc)]


def test_long_shared_context_packs_rows_of_at_most_twice_its_length():
    context = list(range(1, PACK_MIN_CONTEXT + 5))
    answers = [[50 + i, 60 + i, 70 + i] for i in range(12)] + [[90], [91]]
    pairs = [(context, a) for a in answers] + [(context, answers[0])]
    packed = pack_continuations(pairs, 256)
    assert all(r.packed and len(r.ids) <= 2 * len(context) for r in packed.rows)
    assert sum(len(r.ids) for r in packed.rows) < 12 * (len(context) + 2)  # the context once per row
    for i, answer in enumerate(answers):
        assert scored(packed, i) == [(context + answer[:k], t) for k, t in enumerate(answer)]
    assert packed.first[-1] == packed.first[0]  # an equal request is scored once
    short = pack_continuations([(context[:3], a) for a in answers], 256)  # too short a context to pay: a row
    assert len(short.rows) == 12 and all(len(r.ids) == 5 for r in short.rows)  # for each, as in hf


def test_one_token_answers_are_read_at_the_context_end_of_one_plain_row():
    packed = pack_continuations([([1, 2, 3], [t]) for t in (7, 8, 9)], 64)
    (row,) = packed.rows
    assert row.ids == [1, 2, 3] and not row.packed and row.slots.tolist() == [2, 2, 2]
    questions = [(list(range(100 * q + 1, 100 * q + 1 + n)), [t]) for q, n in enumerate((3, 17, 4)) for t in (7, 8)]
    (row,) = pack_continuations(questions, 64).rows  # 17 + 4 + 3 tokens end to end in the 17's bucket (24)
    assert row.packed and row.slots.tolist() == [16, 16, 20, 20, 23, 23] and row.ids[:2] == [101, 102]


def test_unshared_rows_hold_one_sequence_each():
    pairs = [([0], [1, 2, 3]), ([0], [4, 5]), ([5] * 20, [6, 7]), ([5] * 20, [8, 9])]
    packed = pack_continuations(pairs, 64, shared=False)
    assert len(packed.rows) == 4 and not any(r.packed for r in packed.rows)


@pytest.mark.parametrize("pair, message", [(([1, 2], []), "request 0 has an empty continuation"),
                                           (([], [1, 2]), "request 0 has no context tokens"),
                                           (([1], list(range(70))), "continuation of 70 tokens does not fit")])
def test_bad_pairs(pair, message):
    with pytest.raises(LmprobeError, match=message):
        pack_continuations([pair], 64)
