"""SCoPE's bar chart: error bars are the paper's standard errors over trials."""

import numpy as np

from lmprobe.methods.scope.metrics import METRICS
from lmprobe.report import scope_plots


def _row(value, se, interval):
    return {**{m: value for m in METRICS}, "std_error": {m: se for m in METRICS},
            "intervals": {m: interval for m in METRICS}}


def test_error_bars_are_standard_errors_and_bootstrap_only_without_them():
    assert np.allclose(scope_plots.error_bars(_row(0.6, 0.05, [0.4, 0.9])), 0.05)
    single_trial = scope_plots.error_bars(_row(0.6, float("nan"), [0.4, 0.9]))
    assert np.allclose(single_trial[0], 0.2) and np.allclose(single_trial[1], 0.3)


def test_metric_bars_writes_a_figure(tmp_path):
    result = {"reference": "a", "capability": "typo", "targets": {"b": _row(0.5, 0.1, [0.3, 0.7]),
                                                                  "c": _row(0.8, float("nan"), [0.7, 0.9])}}
    scope_plots.metric_bars(result, str(tmp_path / "metrics.png"))
    assert (tmp_path / "metrics.png").stat().st_size > 0
