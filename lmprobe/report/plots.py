"""Figures for results.json files: SynTextBench's margin-accuracy curve and goodness s(a)."""

from __future__ import annotations

import io
import os

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import kernels  # noqa: E402
from lmprobe.engine.runtime import is_main  # noqa: E402
from lmprobe.report import artifacts  # noqa: E402


def save_figure(fig, path) -> None:
    """Write ``fig`` to ``path`` (local or epath URL; the format follows its suffix), atomically,
    by process 0 only; the figure is closed either way."""
    try:
        if is_main():
            fig.tight_layout()
            buffer = io.BytesIO()
            fig.savefig(buffer, dpi=120, format=os.path.splitext(str(path))[1].lstrip(".").lower() or "png")
            artifacts.write_bytes(path, buffer.getvalue())
    finally:
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
    save_figure(fig, path)


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
    save_figure(fig, path)


def synbench_bound_threshold(result: dict, path: str, area_epsilons: tuple[float, ...] | None = None) -> None:
    """SynBench's expected bound-threshold accuracy plot (003 Fig. 3).

    Left: E(a_t) of the raw data and E_{theta,eps}(a_t) of the representations for every eps.
    Then one panel per eps in ``area_epsilons`` (default: the first and the last eps) with
    area B under the representation curve and area A between it and the raw reference, right
    of the smallest a_t: SynBench-Score = B / (A + B).
    """
    curves = result["curves"]
    grid, eps = np.asarray(curves["a"]), list(curves["epsilons"])
    e_raw, e_rep = np.asarray(curves["E_raw"]), np.asarray(curves["E_rep"])
    picks = [e for e in (area_epsilons or sorted({eps[0], eps[-1]})) if e in eps]
    a_t = min(s["a_t"] for s in result["scores"])
    fig, axes = plt.subplots(1, 1 + len(picks), figsize=(5.0 * (1 + len(picks)), 4), squeeze=False)
    ax = axes[0, 0]
    same_raw = np.allclose(e_raw, e_raw[:1])
    for j, e in enumerate(eps):
        line, = ax.step(grid, e_rep[j], where="post", label=rf"representation, $\epsilon$ = {e}")
        if not same_raw:
            ax.step(grid, e_raw[j], where="post", ls=":", color=line.get_color())
    ax.step(grid, e_raw[0], where="post", color="k", lw=2, label="raw data (Thm 1)" if same_raw else
            rf"raw data, $\epsilon$ = {eps[0]} (dotted: other $\epsilon$)")
    ax.set(xlabel="threshold accuracy $a_t$", ylabel="expected scaled bound $E(a_t)$",
           title=f"SynBench: {result['model']}")
    ax.legend(fontsize=7)
    for ax, e in zip(axes[0, 1:], picks):
        j = eps.index(e)
        right = grid >= a_t
        ax.fill_between(grid[right], 0, e_rep[j][right], step="post", alpha=0.5, label="area B (representation)")
        ax.fill_between(grid[right], e_rep[j][right], np.maximum(e_raw[j][right], e_rep[j][right]), step="post",
                        alpha=0.3, color="gray", label="area A")
        ax.step(grid, e_raw[j], where="post", color="k", lw=1)
        score = next(s["score"] for s in result["scores"] if s["eps"] == e and s["a_t"] == a_t)
        ax.set(
            xlabel="threshold accuracy $a_t$", title=rf"$\epsilon$ = {e}: score B/(A+B) = {score:.3f} at $a_t$ = {a_t}"
        )
        ax.legend(fontsize=7)
    save_figure(fig, path)
