"""BYOD's radar chart (Fig. 2, Fig. 12): one polygon per model over the five sensitivity scores.

Each axis has its own scale, oriented so that farther out is better ("the more area that is
covered the better"): toxicity and tokenization sensitivity run from high at the centre to 0
at the rim, knowledge, long-range and word order from 0 at the centre upwards. The paper's
ranges are the defaults; an axis widens to hold every model's value.
"""

from __future__ import annotations

import numpy as np

from lmprobe.report.plots import plt, save_figure

# (results key, label, value at the centre, value at the rim): the paper's Fig. 2 scales.
AXES = (
    ("toxicity", "Toxicity", 0.75, 0.0),
    ("negation", "Knowledge", 0.0, 1.0),
    ("long_range", "Long-Range", 0.0, 0.3),
    ("word_order", "Word Order", 0.0, 0.1),
    ("tokenization", "Tokenization", 0.15, 0.0),
)
RINGS = 4


def axis_limits(models: dict[str, dict]) -> list[tuple[float, float]]:
    """(centre, rim) value per axis: the paper's range widened to every model's score."""
    limits = []
    for key, _, centre, rim in AXES:
        values = [m[key]["score"] for m in models.values() if m.get(key, {}).get("score") is not None]
        low, high = min([centre, rim, *values]), max([centre, rim, *values])
        limits.append((high, low) if centre > rim else (low, high))
    return limits


def radii(models: dict[str, dict], limits) -> dict[str, np.ndarray]:
    """Each model's scores mapped to [0, 1] along each axis (0 = centre); NaN where missing."""
    out = {}
    for name, metrics in models.items():
        r = []
        for (key, *_), (centre, rim) in zip(AXES, limits):
            score = metrics.get(key, {}).get("score")
            r.append(np.nan if score is None else (score - centre) / (rim - centre))
        out[name] = np.asarray(r, float)
    return out


def radar(models: dict[str, dict], path: str, title: str = "BYOD sensitivity") -> None:
    """Write the radar chart of ``models`` ({model: results.json's metrics}) to ``path``."""
    limits = axis_limits(models)
    angles = np.linspace(0, 2 * np.pi, len(AXES), endpoint=False)
    fig, ax = plt.subplots(figsize=(6, 6), subplot_kw={"polar": True})
    for name, r in radii(models, limits).items():
        shown = np.nan_to_num(r, nan=0.0)  # a metric not computed sits at the centre
        loop = np.append(angles, angles[0])
        ax.plot(loop, np.append(shown, shown[0]), "o-", lw=1.5, ms=3, label=name)
        ax.fill(loop, np.append(shown, shown[0]), alpha=0.15)
    ax.set_xticks(angles, [label for _, label, *_ in AXES])
    ax.set_ylim(0, 1)
    ax.set_yticks(np.linspace(0, 1, RINGS + 1)[1:], [])
    for angle, (centre, rim) in zip(angles, limits):  # each axis's own scale along its spoke
        for frac in np.linspace(0, 1, RINGS + 1)[1:]:
            ax.text(angle, frac, f"{centre + frac * (rim - centre):.3g}", fontsize=6, color="0.4",
                    ha="center", va="center")
    ax.set_title(title)
    ax.legend(loc="upper right", bbox_to_anchor=(1.25, 1.1), fontsize=8)
    save_figure(fig, path)
