"""BYOD's radar chart (Jain et al., arXiv:2306.13651 Fig. 2, 12): one polygon per model over five sensitivity scores.

Every axis has a fixed range (AXES), the same whoever is drawn, oriented so that outward is better
("the more area that is covered the better", Fig. 12). A value beyond its range is drawn at the end it
passes, as a hollow marker with the value written beside it. A metric that was not computed (toxicity:
its generation score, not the next-token mass of --no_generate) has no point: the polygon breaks there,
is not filled, and the axis label says n/a. Entropy (Sec. 9) has no better direction and is not drawn,
as in the paper.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from lmprobe.report.plots import plt, save_figure, short_model_name, styled


@dataclasses.dataclass(frozen=True)
class Axis:
    """One spoke: a results.json metric, its label and its range from the worse end (centre) to the better (rim)."""

    key: str
    label: str
    centre: float
    rim: float
    kind: str | None = None  # the score_kind the range is for, where a metric has several (others are n/a)

    @property
    def direction(self) -> str:
        return "higher is better" if self.rim > self.centre else "lower is better"


# Fixed ranges, from each metric's definition (lmprobe.methods.byod) and the values the paper reports.
# The JSD metrics are in nats, bounded by ln 2 ~ 0.69; their axes span the paper's reported values instead
# of the bound, so that models differ visibly. Five equal steps per axis: the rings are shared.
AXES = (
    # generation score: share of prompts whose continuation adds a profane word (Sec. 5.1), in [0, 1] by
    # definition (x' + c contains x); lower is better: Fig. 2 puts 1 at the centre and 0 at the rim
    # (--no_generate gives the next-token mass change instead: another quantity, not drawn)
    Axis("toxicity", "Toxicity", 1.0, 0.0, kind="generation"),
    # mean change of log-perplexity under negation (Sec. 4), nats, signed: 0 = "not" changes nothing,
    # below 0 = the model prefers the negated (false) sentence; higher is better (Fig. 3: 0.2-0.8, Fig. 2
    # to 1). The range starts below 0 so that a negative score is not read as "no effect"
    Axis("negation", "Knowledge", -0.25, 1.0),
    # LRS score, mean JSD over the last sentence (Sec. 6); higher is better (Fig. 8: 0.16-0.4)
    Axis("long_range", "Long-Range", 0.0, 0.5),
    # median next-token JSD after one swap (Sec. 7); higher is better (Fig. 9: 0.025-0.14)
    Axis("word_order", "Word Order", 0.0, 0.15),
    # mean next-token JSD after chopped tokenization (Sec. 8); lower is better (Figs. 10, 22: 0.1-0.45)
    Axis("tokenization", "Tokenization", 0.5, 0.0),
)
RINGS = 5
HOLE = 0.12  # an empty disc in the middle, so that values at each axis's worse end stay on their own spoke
NOTE = ("Each axis has its own fixed scale (values along the spoke); outward is better.\n"
        "Hollow diamond: value beyond the axis, drawn at its end, value written beside it. n/a: not computed.")


def score(metrics: dict, axis: Axis) -> float | None:
    """The score ``axis`` draws from results.json's per-model entry; None when it was not computed (or is
    of another kind than the axis's)."""
    entry = metrics.get(axis.key) or {}
    value = entry.get("score")
    if value is None or not math.isfinite(value) or entry.get("score_kind", axis.kind) != axis.kind:
        return None
    return float(value)


def other_kinds(models: dict[str, dict], axis: Axis) -> list[str]:
    """The score kinds computed for ``axis``'s metric that it does not draw."""
    kinds = {(m.get(axis.key) or {}).get("score_kind") for m in models.values()}
    return sorted(k for k in kinds - {None, axis.kind} if k)


def radii(models: dict[str, dict]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per model, its radial positions in [0, 1] along AXES (0: the worse end; NaN: not computed) and
    which of them were clipped to the range. A model's positions do not depend on the other models."""
    out = {}
    for name, metrics in models.items():
        raw = np.asarray([np.nan if (v := score(metrics, a)) is None else (v - a.centre) / (a.rim - a.centre)
                          for a in AXES], float)
        clipped = np.isfinite(raw) & ((raw < 0) | (raw > 1))
        out[name] = (np.clip(raw, 0, 1), clipped)
    return out


def labels(models: dict[str, dict], names: dict[str, str]) -> list[str]:
    """Axis labels: name, which way is better, and n/a (with the models, when only some lack it)."""
    out = []
    for a in AXES:
        missing = [names[m] for m, metrics in models.items() if score(metrics, a) is None]
        label = f"{a.label} (n/a)" if len(missing) == len(models) else a.label
        label += f"\n{a.direction}"
        if missing and len(missing) < len(models):
            shown = ", ".join(missing[:2]) + (f" +{len(missing) - 2}" if len(missing) > 2 else "")
            label += f"\nn/a: {shown}"
        if other_kinds(models, a):
            label += f"\n({', '.join(other_kinds(models, a))} score not drawn)"
        out.append(label)
    return out


def display_names(models) -> dict[str, str]:
    """Legend names: the last path component where that keeps them distinct, else the full names."""
    short = {m: short_model_name(m) for m in models}
    return short if len(set(short.values())) == len(short) else {m: str(m) for m in models}


def _spoke_scales(ax, angles) -> None:
    """Each axis's values at the rings, written beside its spoke (to the spoke's left, looking outwards)."""
    for angle, a in zip(angles, AXES):
        left, radial = np.array([-np.sin(angle), np.cos(angle)]), np.array([np.cos(angle), np.sin(angle)])
        for frac in np.linspace(0, 1, RINGS + 1)[1:]:
            offset = 11 * left - (9 * radial if frac == 1 else 0)  # the rim's inside the frame
            ax.annotate(f"{a.centre + frac * (a.rim - a.centre):.3g}", (angle, frac), xytext=tuple(offset),
                        textcoords="offset points", color="0.3", ha="center", va="center", zorder=1.5,
                        bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.7})


def _model(ax, angles, r, clipped, label: str, colour: str, alpha: float) -> None:
    """A model's polygon: broken (and not filled) where a metric is missing, clipped values hollow."""
    loop, closed = np.append(angles, angles[0]), np.append(r, r[0])
    ax.plot(loop, closed, "-", lw=1.8, color=colour, label=label)
    inside = np.isfinite(r) & ~clipped
    ax.plot(angles[inside], r[inside], "o", ms=5, color=colour)
    ax.plot(angles[clipped], r[clipped], "D", ms=8, mfc="white", mew=1.8, color=colour, zorder=3)
    if np.isfinite(r).all():
        ax.fill(loop, closed, color=colour, alpha=alpha)


def _clipped_values(ax, angles, models, positions, colours) -> None:
    """The true value of each clipped point, to the right of its spoke and towards the axis's middle,
    one line per model where several are clipped at the same end."""
    stacked = {}
    for name, (r, clipped) in positions.items():
        for i in np.flatnonzero(clipped):
            j = stacked[i, r[i]] = stacked.get((i, r[i]), -1) + 1
            inward = -1 if r[i] > 0.5 else 1  # towards the middle of the axis
            radial = np.array([np.cos(angles[i]), np.sin(angles[i])]) * inward
            right = np.array([np.sin(angles[i]), -np.cos(angles[i])])
            offset = 14 * right + (12 + 12 * j) * radial
            ax.annotate(f"{score(models[name], AXES[i]):.3g}", (angles[i], r[i]), xytext=tuple(offset),
                        textcoords="offset points", ha="center", va="center", color=colours[name],
                        fontweight="bold", zorder=4, bbox={"boxstyle": "square,pad=0.1", "fc": "white",
                                                           "ec": "none", "alpha": 0.8})


@styled
def radar_figure(models: dict[str, dict], title: str = "BYOD sensitivity scores"):
    """The radar of ``models`` ({model: results.json's metrics}), or None when no model has a score on any axis."""
    if not any(score(m, a) is not None for m in models.values() for a in AXES):
        return None
    names = display_names(models)
    angles = np.pi / 2 - np.linspace(0, 2 * np.pi, len(AXES), endpoint=False)  # first axis on top, clockwise
    fig, ax = plt.subplots(figsize=(7.5, 8), subplot_kw={"polar": True}, layout="constrained")
    ax.set_rorigin(-HOLE)
    ax.set_ylim(0, 1)
    ax.set_yticks(np.linspace(0, 1, RINGS + 1), [])
    ax.set_xticks(angles % (2 * np.pi), labels(models, names))
    ax.tick_params(axis="x", pad=30, labelsize=10)
    _spoke_scales(ax, angles)
    positions, colours = radii(models), {name: f"C{k % 10}" for k, name in enumerate(models)}
    for name, (r, clipped) in positions.items():
        _model(ax, angles, r, clipped, names[name], colours[name], alpha=min(0.12, 0.3 / len(models)))
    _clipped_values(ax, angles, models, positions, colours)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=min(len(models), 3), frameon=False)
    fig.suptitle(title, fontweight="bold")
    fig.supxlabel(NOTE, fontsize=9, color="0.3")
    return fig


@styled
def radar(models: dict[str, dict], path: str, title: str = "BYOD sensitivity scores") -> bool:
    """Write the radar of ``models`` to ``path``; False (nothing written) when no metric on its axes was computed."""
    fig = radar_figure(models, title)
    if fig is None:
        return False
    save_figure(fig, path)
    return True
