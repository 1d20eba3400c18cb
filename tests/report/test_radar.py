"""BYOD's radar: missing metrics shown as n/a, fixed axis ranges, nothing written when nothing was computed."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.text import Text

from lmprobe.report.plots import MIN_FONT
from lmprobe.report.radar import AXES, radar, radii

KEYS = [a.key for a in AXES]
LONG_RANGE = KEYS.index("long_range")


def metrics(**scores) -> dict:
    """results.json's entry of one model: the given scores, every other radar metric failed."""
    out = {"entropy": {"score": 3.2, "stderr": 0.01, "n": 10, "skipped": {}}}
    for key in KEYS:
        value = scores.get(key)
        out[key] = ({"score": value, "stderr": 0.01, "n": 10, "skipped": {}} if value is not None else
                    {"score": None, "stderr": None, "n": 0, "error": "no tokenizer", "skipped": {}})
    return out


FULL = {"toxicity": 0.1, "negation": 0.4, "long_range": 0.2, "word_order": 0.05, "tokenization": 0.2}


def _line(fig, label):
    return next(line for line in fig.axes[0].lines if line.get_label() == label)


def _axis_labels(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_xticklabels()]


def test_a_missing_metric_has_no_point_and_its_label_says_na(drawn):
    without = {k: v for k, v in FULL.items() if k != "long_range"}
    assert radar({"full": metrics(**FULL), "partial": metrics(**without)}, "unused.png")
    (fig,) = drawn
    partial = np.asarray(_line(fig, "partial").get_ydata(), float)
    assert np.isnan(partial[LONG_RANGE]) and np.isfinite(np.delete(partial, LONG_RANGE)).all()
    assert np.isfinite(np.asarray(_line(fig, "full").get_ydata(), float)).all()
    markers = [line for line in fig.axes[0].lines if line.get_label().startswith("_")]
    spoke = np.pi / 2 - 2 * np.pi * LONG_RANGE / len(AXES)
    partial_colour = _line(fig, "partial").get_color()
    assert not any(np.isclose(line.get_xdata(), spoke).any() for line in markers if line.get_color() == partial_colour)
    labels = _axis_labels(fig)
    assert "n/a: partial" in labels[LONG_RANGE]
    assert all("n/a" not in label for i, label in enumerate(labels) if i != LONG_RANGE)


def test_a_metric_missing_for_every_model_is_na_on_its_axis(drawn):
    radar({"a": metrics(toxicity=0.2, negation=0.5)}, "unused.png")
    labels = _axis_labels(drawn[0])
    assert [("(n/a)" in label) for label in labels] == [k not in ("toxicity", "negation") for k in KEYS]


def test_toxicity_without_generation_is_not_drawn_on_the_generation_axis(drawn):
    logit_only = metrics(**FULL)
    logit_only["toxicity"]["score_kind"] = "logit"
    assert np.isnan(radii({"a": logit_only})["a"][0][KEYS.index("toxicity")])
    radar({"a": logit_only}, "unused.png")
    label = _axis_labels(drawn[0])[KEYS.index("toxicity")]
    assert "(n/a)" in label and "logit score not drawn" in label


def test_labels_say_which_way_is_better(drawn):
    radar({"a": metrics(**FULL)}, "unused.png")
    labels = dict(zip(KEYS, _axis_labels(drawn[0])))
    assert "lower is better" in labels["toxicity"] and "lower is better" in labels["tokenization"]
    assert all("higher is better" in labels[k] for k in ("negation", "long_range", "word_order"))
    assert drawn[0].get_suptitle() == "BYOD sensitivity scores"


def test_positions_are_fixed_whatever_else_is_drawn(drawn):
    a = metrics(**{**FULL, "negation": -0.08, "tokenization": 0.22})
    alone = radii({"a": a})["a"][0]
    extreme = metrics(toxicity=0.9, negation=3.0, long_range=0.01, word_order=0.6, tokenization=0.01)
    assert np.array_equal(radii({"a": a, "b": extreme, "c": metrics(**FULL)})["a"][0], alone)
    # the axes' own ranges: a negative negation score sits above the centre, 0.22 tokenization inside
    assert alone[KEYS.index("negation")] == pytest.approx(0.17 / 1.25)
    assert alone[KEYS.index("tokenization")] == pytest.approx(0.56)
    radar({"a": a}, "one.png")
    radar({"b": extreme, "a": a}, "two.png")
    assert np.allclose(_line(drawn[0], "a").get_ydata(), _line(drawn[1], "a").get_ydata())


def test_values_outside_the_range_are_clipped_and_marked(drawn):
    r, clipped = radii({"a": metrics(**{**FULL, "negation": -0.6, "word_order": 0.31})})["a"]
    assert clipped.tolist() == [k in ("negation", "word_order") for k in KEYS]
    assert r[KEYS.index("negation")] == 0 and r[KEYS.index("word_order")] == 1
    radar({"a": metrics(**{**FULL, "negation": -0.6, "word_order": 0.31})}, "unused.png")
    texts = {t.get_text() for t in drawn[0].axes[0].texts}
    assert {"-0.6", "0.31"} <= texts


def test_nothing_is_written_when_nothing_was_computed(tmp_path):
    path = tmp_path / "radar.png"
    assert radar({"a": metrics(), "b": metrics()}, str(path)) is False
    assert not path.exists()
    assert radar({"a": {"entropy": {"score": 3.0, "n": 5}}}, str(path)) is False and not path.exists()
    assert radar({"a": metrics(**FULL)}, str(path)) is True
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_every_text_is_at_least_the_minimum_font_size(drawn):
    radar({"org/model-a": metrics(**FULL), "model-b": metrics(**{**FULL, "negation": -1.0, "long_range": None})},
          "unused.png")
    texts = [t for t in drawn[0].findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert len(texts) > 30
    assert min(t.get_fontsize() for t in texts) >= MIN_FONT
