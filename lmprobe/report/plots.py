"""Figures for results.json files: SynTextBench's margin-accuracy curve and goodness s(a), SynBench's
bound-threshold plot, label-free proxies against real tasks across models (``scatter_grid``) and a
sweep's numbers against training step (``against_step``); ``draw``: a front end's call of any of them, whose
failure is a warning once the results are written."""

from __future__ import annotations

import inspect
import io
import os
from collections.abc import Callable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lmprobe import (
    kernels,  # noqa: E402
    store,  # noqa: E402
)
from lmprobe import log as _logging  # noqa: E402
from lmprobe.data.sentence_stats import length_histogram  # noqa: E402
from lmprobe.engine.runtime import is_main  # noqa: E402
from lmprobe.errors import LmprobeError  # noqa: E402
from lmprobe.report.coefficients import per_model  # noqa: E402
from lmprobe.report.correlation import MIN_MODELS, correlation_table  # noqa: E402

# Font sizes in points at the saved size (figures are saved unscaled): nothing smaller than MIN_FONT.
MIN_FONT = 9
STYLE = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": MIN_FONT,
         "ytick.labelsize": MIN_FONT, "legend.fontsize": MIN_FONT, "legend.title_fontsize": MIN_FONT,
         "figure.titlesize": 12}
MAX_POINT_LABELS = 3  # margin_accuracy labels each point with its p for this many models at most


def styled(function):
    """Run a plotting function (figure made and saved inside it) under STYLE's font sizes."""
    return plt.rc_context(STYLE)(function)


def draw(plot: Callable, *args, **kwargs):
    """``plot(*args, **kwargs)``, a figure writer of lmprobe.report (its ``path`` among the arguments), as
    a front end draws once its results are written and shown: a figure that fails (a full disk, values
    that cannot be drawn) is one warning naming its file, and the run goes on. What ``plot`` returns;
    None when it failed."""
    try:
        return plot(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - a figure is an extra: whatever drawing raises, the results stand
        path = inspect.signature(plot).bind(*args, **kwargs).arguments.get("path", f"the {plot.__name__} figure")
        first = (str(e).strip().splitlines() or [""])[0]
        _logging.get(__name__).warning(f"{path} was not drawn ({type(e).__name__}: {first}); the results "
                                       "are written and shown")
        return None


def save_figure(fig, path) -> None:
    """Write ``fig`` to ``path`` (local or epath URL; the format follows its suffix), atomically,
    by process 0 only; the figure is closed either way. Text outside the axes is kept (tight bbox)."""
    try:
        if is_main():
            if fig.get_layout_engine() is None:
                fig.tight_layout()
            buffer = io.BytesIO()
            fig.savefig(buffer, dpi=120, bbox_inches="tight", pad_inches=0.1,
                        format=os.path.splitext(str(path))[1].lstrip(".").lower() or "png")
            store.write_bytes(path, buffer.getvalue())
    finally:
        plt.close(fig)


@styled
def margin_accuracy(results: list[dict], path: str) -> None:
    """Average scaled margin delta_p against accuracy a_p, one curve per model (paper Fig. 1); one point per
    mixing ratio p, labelled with p for up to MAX_POINT_LABELS models."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in results:
        acc = [level["accuracy"] for level in r["levels"]]
        margin = [level["margin"] for level in r["levels"]]
        line, = ax.plot(acc, margin, "o-", ms=4, label=f"{r['model']} (score {r['score']:.3f})")
        if len(results) <= MAX_POINT_LABELS:
            for level in r["levels"]:
                ax.annotate(f"p = {level['p']:g}", (level["accuracy"], level["margin"]), xytext=(5, 5),
                            textcoords="offset points", color=line.get_color())
    ax.margins(0.12)  # room for the point labels
    ax.set(xlabel="accuracy $a_p$ of the Bayes classifier", ylabel=r"average scaled margin $\delta_p$",
           title="SynTextBench: margin against accuracy (one point per mixing ratio p)")
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(loc="best")
    save_figure(fig, path)


@styled
def goodness(results: list[dict], path: str) -> None:
    """Goodness s(a) on [0.5, 1] per model; the score is its area right of a_T (shaded; paper Fig. 7)."""
    grid = np.linspace(0.5, 1.0, 501)
    a_t = results[0]["a_t"]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in results:
        acc = np.asarray([level["accuracy"] for level in r["levels"]])
        margin = np.asarray([level["margin"] for level in r["levels"]])
        curve = np.asarray(kernels.threshold_curve(grid, acc, margin))
        line, = ax.step(grid, curve, where="post", label=f"{r['model']} (score {r['score']:.3f})")
        ax.fill_between(grid, 0, curve, where=grid >= a_t, step="post", color=line.get_color(),
                        alpha=0.25 / len(results), lw=0)
    ax.axvline(a_t, color="gray", ls="--", lw=1, label=f"$a_T$ = {a_t:g}")
    ax.set(xlabel="accuracy threshold a", ylabel="goodness s(a)",
           title="SynTextBench goodness: score = shaded area right of $a_T$")
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(loc="best")
    save_figure(fig, path)


@styled
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
    fig, axes = plt.subplots(1, 1 + len(picks), figsize=(5.0 * (1 + len(picks)), 4.3), squeeze=False, sharey=True)
    ax = axes[0, 0]
    same_raw = np.allclose(e_raw, e_raw[:1])
    for j, e in enumerate(eps):
        line, = ax.step(grid, e_rep[j], where="post", label=rf"representation, $\epsilon$ = {e}")
        if not same_raw:
            ax.step(grid, e_raw[j], where="post", ls=":", color=line.get_color())
    ax.step(grid, e_raw[0], where="post", color="k", lw=2, label="raw data (Thm 1)" if same_raw else
            rf"raw data, $\epsilon$ = {eps[0]} (dotted: other $\epsilon$)")
    ax.set(xlabel="threshold accuracy $a_t$", ylabel="expected scaled bound $E(a_t)$", title=r"every $\epsilon$")
    ax.legend(loc="best")
    for ax, e in zip(axes[0, 1:], picks):
        j = eps.index(e)
        right = grid >= a_t
        ax.fill_between(grid[right], 0, e_rep[j][right], step="post", alpha=0.5, label="area B (representation)")
        ax.fill_between(grid[right], e_rep[j][right], np.maximum(e_raw[j][right], e_rep[j][right]), step="post",
                        alpha=0.3, color="gray", label="area A (raw data above it)")
        ax.step(grid, e_raw[j], where="post", color="k", lw=1, label="raw data")
        score = next(s["score"] for s in result["scores"] if s["eps"] == e and s["a_t"] == a_t)
        ax.set(xlabel="threshold accuracy $a_t$",
               title=rf"$\epsilon$ = {e}: score B/(A+B) = {score:.3f} at $a_t$ = {a_t}")
        ax.legend(loc="best")
    for ax in axes[0]:
        ax.grid(alpha=0.3, lw=0.5)
    fig.suptitle(f"SynBench: {result['model']}, expected scaled bound against threshold accuracy")
    save_figure(fig, path)


def short_model_name(model: str) -> str:
    """A point label: the last path component of a model name ("google/gemma-2b" -> "gemma-2b")."""
    return str(model).rstrip("/").rsplit("/", 1)[-1]


def shared_label_prefix(labels: Sequence[str]) -> str:
    """The prefix every label shares, cut after its last "=" or "@" ("train@step=16", "train@step=32"
    -> "train@step="); "" when there is none or it would leave a label empty."""
    prefix = os.path.commonprefix(list(labels)) if len(labels) > 1 else ""
    prefix = prefix[:max(prefix.rfind("="), prefix.rfind("@")) + 1]
    return prefix if prefix and all(len(label) > len(prefix) for label in labels) else ""


def _panel_values(values, name: str, n: int) -> np.ndarray:
    array = per_model(values, n, repr(name))
    array[~np.isfinite(array)] = np.nan
    return array


def _panel_title(row: dict) -> str:
    if row["spearman"]["estimate"] is None:
        why = ("too few models" if row["n"] < MIN_MODELS
               else "constant, undefined" if "constant" in (row["note"] or "") else "undefined")
        return f"n = {row['n']}: {why}"
    rho, tau = row["spearman"]["estimate"], row["kendall"]["estimate"]
    return rf"$\rho$ = {rho:+.2f}   $\tau$ = {tau:+.2f}   (n = {row['n']})"


@styled
def scatter_grid(proxies: Mapping[str, Sequence], tasks: Mapping[str, Sequence], models: Sequence[str],
                 groups: Sequence[str] | None, path, *, lower_is_better: set[str] | frozenset[str] = frozenset(),
                 labels: Sequence[str] | None = None, stderr: Mapping[str, Sequence] | None = None,
                 title: str = "label-free proxies against real tasks",
                 counted: Sequence[bool] | None = None) -> list[dict]:
    """One scatter panel per (proxy, task): proxies as rows (y axis), tasks as columns (x axis).

    ``proxies`` / ``tasks``: name -> one value per model, in the order of ``models``; None or NaN
    where a score does not apply (that model is left out of the panel). Each model is a point
    labelled ``labels[i]`` (default: ``short_model_name``), coloured by ``groups[i]`` (e.g.
    "encoders" / "decoders"; None: one group, no legend). Axes show the raw values; a name in
    ``lower_is_better`` gets "(lower is better)" on its axis. Panel titles: Spearman rho and
    Kendall tau over the models with both values, signed as in ``correlation_table`` (a
    lower-is-better side negated: positive = the proxy orders the models as the task does).
    ``stderr``: name (proxy or task) -> one standard error per model (None where unknown), drawn
    as +-1.96 standard-error bars on that axis. ``counted``: per model, whether it enters the
    panels' rho and tau (default: every model); the others are drawn hollow (e.g. ladder variants
    beside one point per base model). Returns ``correlation_table``'s rows (estimates only, no
    intervals), one per panel.
    """
    names = [str(m) for m in models]
    n = len(names)
    labels = [short_model_name(m) for m in names] if labels is None else [str(label) for label in labels]
    prefix = shared_label_prefix(labels)
    labels = [label[len(prefix):] for label in labels]
    groups = [""] * n if groups is None else [str(g) for g in groups]
    if len(labels) != n or len(groups) != n:
        raise LmprobeError(f"{n} models but {len(labels)} labels and {len(groups)} groups: pass one per model")
    if not proxies or not tasks:
        raise LmprobeError(f"{len(proxies)} proxies and {len(tasks)} tasks: nothing to plot")
    proxy_values = {name: _panel_values(v, name, n) for name, v in proxies.items()}
    task_values = {name: _panel_values(v, name, n) for name, v in tasks.items()}
    errors = {name: 1.959964 * _panel_values(v, f"stderr of {name}", n) for name, v in (stderr or {}).items()
              if name in proxies or name in tasks}
    lower = frozenset(lower_is_better)
    counted = np.ones(n, bool) if counted is None else np.asarray(counted, bool)
    if counted.shape != (n,):
        raise LmprobeError(f"{n} models but {counted.size} counted flags: pass one per model")
    rows = correlation_table({k: np.where(counted, v, np.nan) for k, v in proxy_values.items()},
                             {k: np.where(counted, v, np.nan) for k, v in task_values.items()},
                             lower_is_better=lower)
    order = list(dict.fromkeys(groups))
    colours = {g: f"C{i % 10}" for i, g in enumerate(order)}
    group_of = np.asarray(groups, dtype=object)

    def axis_label(name: str) -> str:
        return f"{name}\n(lower is better)" if name in lower else name

    fig, axes = plt.subplots(len(proxies), len(tasks), figsize=(3.2 * len(tasks), 2.8 * len(proxies) + 0.5),
                             squeeze=False, sharex="col", sharey="row", layout="constrained")
    for i, (proxy, p) in enumerate(proxy_values.items()):
        for j, (task, t) in enumerate(task_values.items()):
            ax = axes[i, j]
            both = np.isfinite(p) & np.isfinite(t)
            for g in order:
                pick = both & (group_of == g)
                if pick.any():
                    for filled in (True, False):
                        own = pick & (counted == filled)
                        ax.scatter(t[own], p[own], s=16, zorder=2, color=colours[g],
                                   **({} if filled else {"facecolors": "none"}))
                    xerr, yerr = (errors[name][pick] if name in errors else None for name in (task, proxy))
                    if xerr is not None or yerr is not None:
                        ax.errorbar(t[pick], p[pick], xerr=xerr, yerr=yerr, fmt="none", ecolor=colours[g],
                                    elinewidth=0.8, alpha=0.6, zorder=1)
            for k in np.flatnonzero(both):
                ax.annotate(labels[k], (t[k], p[k]), xytext=(3, 2), textcoords="offset points",
                            color=colours[groups[k]], fontsize=MIN_FONT)
            ax.set_title(_panel_title(rows[i * len(tasks) + j]), fontsize=10)
            ax.grid(alpha=0.3, lw=0.5)
            ax.margins(x=0.25, y=0.12)  # room for the labels of the outermost points
            if i == len(proxies) - 1:
                ax.set_xlabel(axis_label(task))
            if j == 0:
                ax.set_ylabel(axis_label(proxy))
    if any(order):
        handles = [plt.Line2D([], [], ls="", marker="o", ms=4, color=colours[g]) for g in order]
        axes[0, 0].legend(handles, [g or "other" for g in order], loc="best")
    points = f"; points: {prefix}..." if prefix else ""
    fig.suptitle(title + points + "\n" + r"$\rho$: Spearman, $\tau$: Kendall; positive = the proxy orders models as "
                 "the task does (lower-is-better sides negated)", fontsize=11)
    save_figure(fig, path)
    return rows


@styled
def label_word_share(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: str) -> None:
    """SynTextBench Fig. 3: the average percentage of label-class words (positive words in
    positive sentences, negative in negative) per sentence against the mixing ratio p, one line
    per source of the sentences ({"LM-free": (levels, fractions), "<generator>": ...}; fractions
    in [0, 1], from ``lmprobe.data.sentence_stats``). The dotted line is LM-free's expectation 1 - p."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    grid = np.linspace(0.0, 1.0, 11)
    ax.plot(grid, 100 * (1 - grid), ":", color="gray", lw=1.2, label="1 - p (LM-free expectation)")
    for name, (levels, fractions) in curves.items():
        ax.plot(levels, 100 * np.asarray(fractions, np.float64), "o-", ms=4, label=name)
    ax.set(xlabel="mixing ratio p", ylabel="label-class words per sentence (%)", ylim=(-2, 102),
           title="SynTextBench: label-class words in labelled sentences")
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(loc="upper right")
    save_figure(fig, path)


@styled
def sentence_length_histograms(lengths: Mapping[str, Sequence[int]], path: str, *, max_length: int = 60,
                               note: str = "") -> None:
    """SynTextBench Fig. 5 (App. A.5): shares of sentences of each length (in words; the last
    bin holds max_length or more), one step curve per corpus, e.g. {"English prose, stop words
    removed": ..., "synthetic positive": ..., "synthetic negative": ...}. The paper's reference
    corpus is English Wikipedia, which is not available offline: ``note`` (shown under the
    title) says what stands in for it."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name, values in lengths.items():
        values = np.asarray(values)
        shares, bins = length_histogram(values, max_length)
        mean = f", mean {values.mean():.1f}" if values.size else ""
        ax.step(bins, shares, where="mid", label=f"{name} (n={values.size}{mean})")
    ax.set(xlabel=f"sentence length in words (the last bin: {max_length} or more)", ylabel="share of sentences")
    ax.set_title("SynTextBench: sentence lengths" + (f"\n{note}" if note else ""), fontsize=10)
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(loc="upper right")
    save_figure(fig, path)


@styled
def against_step(steps: Sequence[int], values: Sequence, path, *, name: str, low: Sequence | None = None,
                 high: Sequence | None = None, lower_is_better: bool = False) -> None:
    """One number of a checkpoint sweep against training step: a line through the steps' values
    (None or NaN left out), and the shaded interval [low, high] where one is given."""
    x = np.asarray(steps, np.float64)
    y = _panel_values(values, name, len(x))
    fig, ax = plt.subplots(figsize=(6, 4))
    if low is not None and high is not None:
        lo, hi = _panel_values(low, name, len(x)), _panel_values(high, name, len(x))
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ax.fill_between(x[ok], lo[ok], hi[ok], alpha=0.25, lw=0, label="95% interval")
    ok = np.isfinite(y)
    ax.plot(x[ok], y[ok], "o-", ms=4, label=name)
    ax.set(xlabel="training step", ylabel=f"{name} (lower is better)" if lower_is_better else name,
           title=f"{name} across checkpoints")
    positive = x[x > 0]
    if len(positive) and positive.max() > 8 * positive.min():  # log-spaced checkpoints: a log axis, step 0 kept
        ax.set_xscale("symlog", linthresh=positive.min())
        if len(x) <= 12:  # the checkpoints' own steps as ticks
            ax.set_xticks(x, [f"{int(s):,}" for s in x], fontsize=7)
            ax.minorticks_off()
        ax.set_xlabel("training step (log scale above the first step)")
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(loc="best")
    save_figure(fig, path)
