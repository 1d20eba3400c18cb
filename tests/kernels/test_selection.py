"""kernels.selection: best valid candidate per example against a plain Python loop."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lmprobe import kernels as K

PROFILE = settings.get_profile("kernels")


def loop_reference(objectives, valid, maximize, baseline):
    index, value = -1, -math.inf if maximize else math.inf
    for i, (objective, ok) in enumerate(zip(objectives, valid)):
        if not ok or np.isnan(objective):
            continue
        if baseline is not None and not (objective > baseline if maximize else objective < baseline):
            continue
        if index < 0 or (objective > value if maximize else objective < value):
            index, value = i, objective
    return index, value


@PROFILE
@given(
    seed=st.integers(0, 2**31 - 1),
    maximize=st.booleans(),
    with_baseline=st.booleans(),
    valid_fraction=st.sampled_from([0.0, 0.2, 0.7, 1.0]),
)
def test_matches_loop_reference(seed, maximize, with_baseline, valid_fraction):
    rng = np.random.default_rng(seed)
    objectives = rng.integers(0, 5, size=(16, 9)).astype(np.float32)  # many ties
    objectives[rng.random(objectives.shape) < 0.1] = np.nan
    valid = rng.random(objectives.shape) < valid_fraction
    baseline = rng.integers(0, 5, size=16).astype(np.float32) if with_baseline else None
    out = K.select_best_candidate(objectives, valid, maximize=maximize, baseline=baseline)
    for row in range(16):
        index, value = loop_reference(
            objectives[row], valid[row], maximize, None if baseline is None else baseline[row]
        )
        assert int(out.index[row]) == index
        assert bool(out.found[row]) == (index >= 0)
        assert float(out.value[row]) == value


def test_edge_cases():
    objectives = np.array([[-np.inf, 1.0, 3.0], [2.0, 2.0, 2.0], [np.nan, 5.0, 4.0]], np.float32)
    valid = np.array([[True, False, False], [False, True, True], [True, True, False]])
    out = K.select_best_candidate(objectives, valid)
    np.testing.assert_array_equal(out.index, [0, 1, 1])  # a valid -inf still counts; ties -> lowest
    np.testing.assert_array_equal(out.found, [True, True, True])
    none = K.select_best_candidate(objectives, np.zeros_like(valid), maximize=False)
    np.testing.assert_array_equal(none.index, [-1, -1, -1])
    assert np.all(np.isposinf(np.asarray(none.value))) and not np.asarray(none.found).any()
    stalled = K.select_best_candidate(objectives, valid, maximize=False, baseline=np.array([0.0, 2.0, 9.0]))
    np.testing.assert_array_equal(stalled.index, [0, -1, 1])
