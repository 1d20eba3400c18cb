"""lmprobe.report.plots.scatter_grid: the proxy-against-task grid of experiments/validate.py."""

from __future__ import annotations

import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.report import plots

MODELS = ["org/enc-small", "org/enc-base", "org/enc-large", "dec-125m", "dec-350m", "dec-1b"]
GROUPS = ["encoders"] * 3 + ["decoders"] * 3
PROXIES = {
    "syntextbench": [0.31, 0.42, 0.55, 0.20, 0.33, 0.47],
    "byod_sensitivity": [0.9, 0.7, None, 0.8, float("nan"), 0.4],  # lower is better, partly missing
}
TASKS = {
    "rt_polarity": [0.71, 0.78, 0.84, 0.66, 0.74, 0.80],
    "bits_per_byte": [None, None, None, 1.21, 1.05, 0.93],  # decoders only: lower is better
    "zero_shot": [0.5, None, None, None, 0.6, 0.7],  # two models with a byod value: too few
}
LOWER = {"byod_sensitivity", "bits_per_byte"}


def test_writes_a_png_including_missing_values(tmp_path):
    path = tmp_path / "figs" / "validate_scatter.png"
    rows = plots.scatter_grid(PROXIES, TASKS, MODELS, GROUPS, str(path), lower_is_better=LOWER)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert [(r["proxy"], r["task"]) for r in rows][:2] == [("syntextbench", "rt_polarity"),
                                                          ("syntextbench", "bits_per_byte")]
    assert [r["n"] for r in rows] == [6, 3, 3, 4, 2, 2]
    # a single group and no groups at all also plot
    plots.scatter_grid({"p": [1.0, 2.0, 3.0]}, {"t": [3.0, 1.0, 2.0]}, ["a", "b", "c"], None, str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_panels_axes_and_titles(monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    rows = plots.scatter_grid(PROXIES, TASKS, MODELS, GROUPS, str(tmp_path / "x.png"), lower_is_better=LOWER)
    (fig,) = figures
    try:
        axes = np.array(fig.axes).reshape(2, 3)  # proxies as rows, tasks as columns
        assert axes[1, 1].get_xlabel() == "bits_per_byte\n(lower is better)"
        assert axes[1, 0].get_ylabel() == "byod_sensitivity\n(lower is better)"
        assert axes[0, 0].get_ylabel() == "syntextbench" and axes[1, 0].get_xlabel() == "rt_polarity"
        # raw values on the axes, each model annotated with its short name
        texts = {t.get_text(): t.xy for t in axes[0, 1].texts}
        assert texts == {"dec-125m": (1.21, 0.20), "dec-350m": (1.05, 0.33), "dec-1b": (0.93, 0.47)}
        assert {t.get_text() for t in axes[0, 0].texts} == {"enc-small", "enc-base", "enc-large", "dec-125m",
                                                            "dec-350m", "dec-1b"}
        # lower-is-better bits per byte falls as syntextbench rises: a positive, sign-adjusted correlation
        assert rows[1]["spearman"]["estimate"] == pytest.approx(1.0)
        assert "+1.00" in axes[0, 1].get_title() and "n = 3" in axes[0, 1].get_title()
        assert axes[1, 2].get_title() == "n = 2: too few models"
        assert [t.get_text() for t in axes[0, 0].get_legend().get_texts()] == ["encoders", "decoders"]
    finally:
        plots.plt.close(fig)


def test_inputs_that_do_not_match_the_models_are_refused(tmp_path):
    with pytest.raises(LmprobeError, match="'p' has shape \\(2,\\) but there are 3 models"):
        plots.scatter_grid({"p": [1.0, 2.0]}, {"t": [1.0, 2.0, 3.0]}, ["a", "b", "c"], None, str(tmp_path / "x.png"))
    with pytest.raises(LmprobeError, match="2 groups"):
        plots.scatter_grid({"p": [1.0, 2.0, 3.0]}, {"t": [1.0, 2.0, 3.0]}, ["a", "b", "c"], ["x", "y"],
                           str(tmp_path / "x.png"))
    assert not (tmp_path / "x.png").exists()


def test_standard_errors_are_drawn_as_95_percent_bars(monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    stderr = {"syntextbench": [0.01, 0.02, None, 0.01, 0.01, 0.03], "rt_polarity": [0.02] * 6}
    plots.scatter_grid(PROXIES, TASKS, MODELS, GROUPS, str(tmp_path / "x.png"), lower_is_better=LOWER, stderr=stderr)
    (fig,) = figures
    try:
        axes = np.array(fig.axes).reshape(2, 3)
        bars = [c for c in axes[0, 0].containers if c.has_yerr]  # one bar container per group
        segments = [seg for c in bars for lines in c.lines[2] for seg in lines.get_segments()]
        vertical = [seg for seg in segments if len(seg) == 2 and np.isfinite(seg).all() and seg[0][0] == seg[1][0]]
        half = sorted(round(abs(seg[1][1] - seg[0][1]) / 2, 4) for seg in vertical)
        assert half == sorted(round(1.959964 * e, 4) for e in (0.01, 0.02, 0.01, 0.01, 0.03))  # None: no bar
        assert not [c for c in axes[1, 1].containers if c.has_yerr or c.has_xerr]  # no errors for these names
    finally:
        plots.plt.close(fig)


@pytest.mark.parametrize("labels, prefix", [
    (["train@step=16", "train@step=128", "train@step=1000"], "train@step="),
    (["minilm-l6", "minilm-l6@noise=0.02", "minilm-l6@noise=0.1"], ""),  # the base would lose its whole label
    (["m@noise=0.1", "m@noise=0.2"], "m@noise="),
    (["enc-small", "enc-base"], ""),  # no "=" or "@" in the shared part
    (["only@step=1"], ""),
])
def test_a_label_prefix_every_point_shares_moves_to_the_title(labels, prefix):
    assert plots.shared_label_prefix(labels) == prefix


def test_only_counted_points_enter_the_panel_statistics(tmp_path):
    proxies, tasks = {"p": [1.0, 2.0, 3.0, 9.0]}, {"t": [1.0, 2.0, 3.0, 0.0]}  # the 4th point reverses the order
    every = plots.scatter_grid(proxies, tasks, list("abcd"), None, str(tmp_path / "a.png"))
    bases = plots.scatter_grid(proxies, tasks, list("abcd"), None, str(tmp_path / "b.png"),
                               counted=[True, True, True, False])
    assert every[0]["n"] == 4 and every[0]["spearman"]["estimate"] < 1
    assert bases[0]["n"] == 3 and bases[0]["spearman"]["estimate"] == pytest.approx(1.0)
    with pytest.raises(LmprobeError, match="counted flags"):
        plots.scatter_grid(proxies, tasks, list("abcd"), None, str(tmp_path / "c.png"), counted=[True])
