"""SCoPE's figures (Rawal & Toneva, arXiv:2311.04166v1 Fig. 3-5, 8, 12): grouped bars of the five metrics per target
model with the paper's error bars (standard error over trials), and a reference x target heat
map for a model matrix."""

from __future__ import annotations

import numpy as np

from lmprobe.methods.scope.metrics import METRICS
from lmprobe.report.plots import plt, save_figure, styled

LABELS = {"iid_accuracy_gap": "Gap in IID acc.", "iid_agreement": "IID agreement",
          "ood_agreement": "OOD agreement", "hard_scope": "Hard-SCoPE", "soft_scope": "Soft-SCoPE"}
# every metric lies in [0, 1] (lmprobe.methods.scope.metrics); which end means the two models behave alike
DIRECTION = {m: "lower: more alike" if m == "iid_accuracy_gap" else "higher: more alike" for m in METRICS}


@styled
def metric_bars(result: dict, path: str) -> None:
    """One group of bars per metric, one bar per target; error bars +- the standard error over
    trials (Fig. 3-5), or the 95% bootstrap interval where it is undefined (one trial). A metric
    that is undefined for a target (NaN) has no bar and reads n/a."""
    targets = result["targets"]
    names = list(targets)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(2.5 + 1.6 * len(METRICS), 4.2))
    x = np.arange(len(METRICS))
    for k, name in enumerate(names):
        values = np.asarray([targets[name][m] for m in METRICS], np.float64)
        left = x + (k - (len(names) - 1) / 2) * width
        ax.bar(left, values, width, yerr=error_bars(targets[name]), capsize=2, label=name)
        for i in np.flatnonzero(~np.isfinite(values)):
            ax.text(left[i], 0.01, "n/a", ha="center", va="bottom", rotation=90, color="0.3")
    ax.set_xticks(x, [f"{LABELS[m]}\n({DIRECTION[m]})" for m in METRICS])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("value (mean over trials)")
    ax.grid(axis="y", alpha=0.3, lw=0.5)
    ax.set_title(f"SCoPE: reference {result['reference']}, capability {result['capability']}\n"
                 "error bars: standard error over trials (95% bootstrap interval with one trial)")
    ax.legend(title="target", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    save_figure(fig, path)


def error_bars(row: dict) -> np.ndarray:
    """[2, metrics] lower and upper error-bar lengths of one target's row (see metric_bars)."""
    values = np.asarray([row[m] for m in METRICS], np.float64)
    se = np.asarray([row.get("std_error", {}).get(m, np.nan) for m in METRICS], np.float64)
    low = np.asarray([row["intervals"][m][0] for m in METRICS], np.float64)
    high = np.asarray([row["intervals"][m][1] for m in METRICS], np.float64)
    bars = np.where(np.isfinite(se), np.stack([se, se]), np.stack([values - low, high - values]))
    return np.nan_to_num(bars).clip(min=0)


@styled
def matrix_heatmap(matrix: dict, metric: str, path: str) -> None:
    """metric(target | reference) for every pair of a model matrix; n/a where undefined."""
    names = list(matrix)
    grid = np.asarray([[matrix[r].get(t, {}).get(metric, np.nan) for t in names] for r in names], np.float64)
    fig, ax = plt.subplots(figsize=(2.5 + 1.1 * len(names), 2 + 0.9 * len(names)))
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, "n/a" if np.isnan(v) else f"{v:.2f}", ha="center", va="center",
                color="w" if v < 0.6 else "k")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("target")
    ax.set_ylabel("reference")
    ax.set_title(f"{LABELS.get(metric, metric)} of target given reference")
    fig.colorbar(image, ax=ax, label=f"{LABELS.get(metric, metric)} ({DIRECTION.get(metric, '')})")
    save_figure(fig, path)
