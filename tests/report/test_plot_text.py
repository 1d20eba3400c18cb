"""Every figure the front ends write: no text below MIN_FONT points at the saved size, no value left unmarked."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.text import Text

from lmprobe.methods.scope.metrics import METRICS
from lmprobe.report import plots, scope_plots
from lmprobe.report.plots import MIN_FONT

LEVELS = [{"p": 0.0, "accuracy": 0.92, "margin": 1.13}, {"p": 0.5, "accuracy": 0.65, "margin": 0.83}]
STB = [{"model": "minilm-l6", "score": 0.127, "a_t": 0.7, "levels": LEVELS},
       {"model": "smollm2-135m", "score": 0.05, "a_t": 0.7, "levels": [{**lv, "margin": lv["margin"] / 2}
                                                                         for lv in LEVELS]}]
GRID = np.linspace(0.5, 1.0, 51)
SYNBENCH = {"model": "minilm-l6", "curves": {
    "a": GRID.tolist(), "epsilons": [0.0, 0.4],
    "E_raw": [np.clip(2 - 2 * GRID, 0, 1).tolist()] * 2,
    "E_rep": [np.clip(1.6 - 1.8 * GRID, 0, 1).tolist(), np.clip(1.2 - 1.2 * GRID, 0, 1).tolist()]},
    "scores": [{"eps": 0.0, "a_t": 0.7, "score": 0.6}, {"eps": 0.4, "a_t": 0.7, "score": 0.3}]}


def _scope_row(value, se):
    return {**{m: value for m in METRICS}, "std_error": {m: se for m in METRICS},
            "intervals": {m: [value - se, value + se] for m in METRICS}}


SCOPE = {"reference": "smollm2-135m", "capability": "typo", "targets": {
    "smollm2-135m@bf16": _scope_row(0.9, 0.02), "smollm2-135m@drop-layer=15": {
        **_scope_row(0.6, 0.05), "soft_scope": float("nan")}}}
MATRIX = {"a": {"a": {"hard_scope": 1.0}, "b": {"hard_scope": 0.7}},
          "b": {"a": {"hard_scope": 0.8}, "b": {"hard_scope": float("nan")}}}

FIGURES = {
    "margin_accuracy": lambda path: plots.margin_accuracy(STB, path),
    "margin_accuracy_one": lambda path: plots.margin_accuracy(STB[:1], path),
    "goodness": lambda path: plots.goodness(STB, path),
    "bound_threshold": lambda path: plots.synbench_bound_threshold(SYNBENCH, path),
    "label_words": lambda path: plots.label_word_share({"LM-free": ((0, 0.5), (1.0, 0.5)),
                                                        "LM-generated": ((0, 0.5), (0.4, 0.3))}, path),
    "sentence_lengths": lambda path: plots.sentence_length_histograms({"a": [3, 5, 9], "b": [4, 70]}, path,
                                                                      note="fortunes for Wikipedia"),
    "scatter_grid": lambda path: plots.scatter_grid({"p": [1.0, 2.0, 3.0]}, {"t": [3.0, 1.0, 2.0]},
                                                    ["org/a", "b", "c"], ["enc", "dec", "dec"], path),
    "scope_bars": lambda path: scope_plots.metric_bars(SCOPE, path),
    "scope_matrix": lambda path: scope_plots.matrix_heatmap(MATRIX, "hard_scope", path),
}


def _texts(fig) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_no_text_below_the_minimum_size(drawn, name):
    FIGURES[name]("unused.png")
    (fig,) = drawn
    small = {t.get_text(): t.get_fontsize() for t in _texts(fig) if t.get_fontsize() < MIN_FONT}
    assert not small, f"{name}: text below {MIN_FONT} pt: {small}"


def test_margin_points_name_their_mixing_ratio(drawn):
    plots.margin_accuracy(STB[:1], "unused.png")
    plots.margin_accuracy(STB, "unused.png")
    one, two = drawn
    assert {t.get_text() for t in one.axes[0].texts} == {"p = 0", "p = 0.5"}
    assert len(two.axes[0].texts) == 4
    assert "score 0.127" in one.axes[0].get_legend().get_texts()[0].get_text()


def test_an_undefined_scope_metric_has_no_bar_and_reads_na(drawn):
    scope_plots.metric_bars(SCOPE, "unused.png")
    ax = drawn[0].axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert sum(np.isnan(heights)) == 1  # the drop-layer target's Soft-SCoPE: no bar, not a bar of 0
    assert [t.get_text() for t in ax.texts] == ["n/a"]
    assert ax.get_ylabel() and all("more alike" in t.get_text() for t in ax.get_xticklabels())

