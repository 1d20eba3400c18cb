"""Figures for results.json files: SynTextBench's margin-accuracy curve and goodness s(a)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import kernels  # noqa: E402


def _save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def margin_accuracy(results: list[dict], path: str) -> None:
    """Average scaled margin delta_p against accuracy a_p, one curve per model (paper Fig. 1)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for r in results:
        acc = [level["accuracy"] for level in r["levels"]]
        margin = [level["margin"] for level in r["levels"]]
        ax.plot(acc, margin, "o-", ms=3, label=f"{r['model']} ({r['score']:.3f})")
    ax.set(xlabel="accuracy $a_p$", ylabel=r"average scaled margin $\delta_p$",
           title="SynTextBench margin-accuracy")
    ax.legend(fontsize=8)
    _save(fig, path)


def goodness(results: list[dict], path: str) -> None:
    """Goodness s(a) on [0.5, 1] per model; the score is its area right of a_T (paper Fig. 7)."""
    grid = np.linspace(0.5, 1.0, 501)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for r in results:
        acc = np.asarray([level["accuracy"] for level in r["levels"]])
        margin = np.asarray([level["margin"] for level in r["levels"]])
        ax.step(grid, np.asarray(kernels.threshold_curve(grid, acc, margin)), where="post",
                label=f"{r['model']} ({r['score']:.3f})")
    ax.axvline(results[0]["a_t"], color="gray", ls="--", lw=1, label=f"$a_T$ = {results[0]['a_t']}")
    ax.set(xlabel="accuracy threshold a", ylabel="s(a)", title="SynTextBench goodness function")
    ax.legend(fontsize=8)
    _save(fig, path)
