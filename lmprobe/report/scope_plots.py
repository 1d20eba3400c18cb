"""SCoPE's figures (../seeds/002 Fig. 3-5, 8, 12): grouped bars of the five metrics per target
model with the paper's error bars (standard error over trials), and a reference x target heat
map for a model matrix."""

from __future__ import annotations

import numpy as np

from lmprobe.methods.scope.metrics import METRICS
from lmprobe.report.plots import save_figure

LABELS = {"iid_accuracy_gap": "Gap in IID acc.", "iid_agreement": "IID agreement",
          "ood_agreement": "OOD agreement", "hard_scope": "Hard-SCoPE", "soft_scope": "Soft-SCoPE"}


def metric_bars(result: dict, path: str) -> None:
    """One group of bars per metric, one bar per target; error bars +- the standard error over
    trials (Fig. 3-5), or the 95% bootstrap interval where it is undefined (one trial)."""
    import matplotlib.pyplot as plt

    targets = result["targets"]
    names = list(targets)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(METRICS), 3.6))
    x = np.arange(len(METRICS))
    for k, name in enumerate(names):
        ax.bar(x + (k - (len(names) - 1) / 2) * width, np.nan_to_num([targets[name][m] for m in METRICS]), width,
               yerr=error_bars(targets[name]), capsize=2, label=name)
    ax.set_xticks(x, [LABELS[m] for m in METRICS])
    ax.set_ylim(0, 1.05)
    ax.set_title(f"reference {result['reference']}, capability {result['capability']}; "
                 f"error bars: standard error over trials", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def error_bars(row: dict) -> np.ndarray:
    """[2, metrics] lower and upper error-bar lengths of one target's row (see metric_bars)."""
    values = np.asarray([row[m] for m in METRICS], np.float64)
    se = np.asarray([row.get("std_error", {}).get(m, np.nan) for m in METRICS], np.float64)
    low = np.asarray([row["intervals"][m][0] for m in METRICS], np.float64)
    high = np.asarray([row["intervals"][m][1] for m in METRICS], np.float64)
    bars = np.where(np.isfinite(se), np.stack([se, se]), np.stack([values - low, high - values]))
    return np.nan_to_num(bars).clip(min=0)


def matrix_heatmap(matrix: dict, metric: str, path: str) -> None:
    """metric(target | reference) for every pair of a model matrix."""
    import matplotlib.pyplot as plt

    names = list(matrix)
    grid = np.asarray([[matrix[r].get(t, {}).get(metric, np.nan) for t in names] for r in names], np.float64)
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(names), 1.2 + 0.9 * len(names)))
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_xlabel("target")
    ax.set_ylabel("reference")
    ax.set_title(LABELS.get(metric, metric), fontsize=9)
    fig.colorbar(image, ax=ax)
    save_figure(fig, path)
