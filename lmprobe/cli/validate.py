"""Do the label-free scores mean anything? Each proxy's ranking of models against real tasks,
ladders of known order kept apart from independent models.

    python -m experiments.validate --models=minilm-l6,mpnet-base,nomic-embed-v1.5,smollm2-135m,gemma3-270m
    python -m experiments.validate --models=smollm2-135m,smollm2-135m@noise=0.05,smollm2-135m@noise=0.1 \\
        --proxies=syntextbench,synbench,byod --output_dir=runs/validate
    python -m experiments.validate --models=smollm2-135m,gemma3-270m,qwen2.5-coder-0.5b \\
        --ladder_checkpoints=runs/train/checkpoints

Every model gets every proxy and every real task that applies (lmprobe.evaluate.measure, over the
stages of lmprobe.methods.stages: SynTextBench, mean and standard error over --syntextbench_trials;
SynBench-Score at a_t = 0.7, eps = 0 plug-in and bias-corrected, and 0.2, beside the identity's
score at the same width and n; each BYOD metric, decoders only; SentEval-style probes on
rt-polarity and tweets-sentiment; for decoders zero-shot accuracy on both and held-out loss and
bits per byte on held-out movie reviews).

Then, per family group (encoders, decoders; lmprobe.report.validation): ladders (a base model and
>= 2 variants NAME@noise=SIGMA or NAME@drop-layer=K, or a training run's checkpoints with
--ladder_checkpoints, the run's own held-out loss as a task) with every number's Kendall trend
against the known order, exact one-sided p Holm-adjusted across the proxies (a training run's
trends descriptive); correlations across base models (variants dropped; Spearman and Kendall with
exact p, Holm across the table, power, Kendall's interval, robust Pearson; --pooled adds the table
over every model, labelled as pooling); and the pairs of models each number resolves (t tests on
the errors' degrees of freedom, Holm across the pairs). Lower-is-better numbers (BYOD tokenization,
held-out loss, bits per byte) are negated before correlating. One scatter grid per group and
OUTPUT_DIR/results.json with all of it; each (model, stage) is cached under OUTPUT_DIR/models, so
a rerun, or a run with more models, computes only what is new. docs/findings.md: the statistics.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import resource
import time

from lmprobe.cli import common
from lmprobe.cli.common import main_guard, output_dir, progress, say
from lmprobe.errors import LmprobeError
from lmprobe.evaluate import measure as measure_lib
from lmprobe.methods import stages as stages_lib
from lmprobe.report import correlation, plots, validation
from lmprobe.store import join
from lmprobe.text import estimate, number, plural

PROXIES, TASKS = stages_lib.PROXIES, stages_lib.TASKS
RISES = correlation.RISES


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    models: tuple[str, ...] = ()  # models and variants (NAME@noise=SIGMA, @drop-layer=K, @int8), 3+ base models a group
    ladder_checkpoints: str | None = None  # a training run's checkpoints (directory or glob): a ladder by step
    proxies: tuple[str, ...] = PROXIES  # label-free scores to check: syntextbench, synbench, byod (or one BYOD metric)
    tasks: tuple[str, ...] = TASKS  # real tasks: probes (all models); zero_shot, heldout (decoders)
    output_dir: str = "runs/validate"  # results.json, scatter plots, per-model caches
    pooled: bool = False  # also correlate over every model, ladder variants included (labelled as pooling)


def build_parser():
    p = common.parser(__doc__, "validate")
    common.front_end(p, FrontEnd)
    common.stage_settings(p, defaults={"syntextbench_trials": 3})
    return p


def chosen(args) -> tuple[str, ...]:
    """The stages --proxies and --tasks name."""
    stages = stages_lib.expand(args.proxies, "proxies")
    if [t for t in args.tasks if t not in TASKS]:
        raise LmprobeError(f"`tasks={','.join(args.tasks)}`: choose from {', '.join(TASKS)}")
    if [s for s in stages if not stages_lib.STAGES[s].proxy]:
        raise LmprobeError(f"`proxies={','.join(args.proxies)}`: choose from {', '.join(PROXIES)} or one BYOD metric "
                           f"({', '.join(stages_lib.BYOD)}); real tasks go in `tasks`")
    return (*stages, *args.tasks)


# --- the summary -------------------------------------------------------------------------------


def _p(p) -> str:
    return "n/a" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def model_lines(rows: list[dict], group: str, resolved_pairs: dict) -> list[str]:
    """One line per number: its value ± standard error on every model, and the pairs resolved."""
    labels = [plots.short_model_name(r["label"]) for r in rows]
    names = list(dict.fromkeys(k for r in rows for k in r["numbers"]))
    width = max(15, *(len(label) for label in labels))
    sizes = ", ".join(dict.fromkeys(f"{r['width']}" + (f" (SynBench n {r['synbench_n']})" if r.get("synbench_n")
                                                         else "") for r in rows))
    lines = [f"== {group}: per-model numbers (value±standard error where the method gives one; widths {sizes})",
             "number".ljust(28) + " ".join(label[:width].rjust(width) for label in labels)]
    lines += [name[:28].ljust(28) + " ".join(estimate(r["numbers"].get(name), r["stderr"].get(name), ".4f").rjust(width)
                                             for r in rows) for name in names]
    lines.append(f"== {group}: pairs of models each number resolves (t test of each difference on its errors' "
                 "degrees of freedom, paired over the shared test items where a number has them, Holm-adjusted "
                 "across the number's pairs at 0.05; unadjusted count in brackets; pairs without a standard error "
                 "unknown)")
    for name, got in resolved_pairs.items():
        text = f"{got['n_resolved']} of {got['n_pairs']} ({got.get('n_resolved_unadjusted', got['n_resolved'])})"
        if len(got["unknown"]) == got["n_pairs"]:
            text = "no standard error"
        elif got["unknown"]:
            text += f" ({len(got['unknown'])} unknown: no standard error)"
        elif got["unresolved"]:
            shown = ", ".join(f"{plots.short_model_name(a)} ~ {plots.short_model_name(b)}"
                              for a, b in got["unresolved"][:3])
            text += f"; not resolved: {shown}" + (f" and {len(got['unresolved']) - 3} more (results.json)"
                                                  if len(got["unresolved"]) > 3 else "")
        lines.append(f"{name[:28]:<28} {text}")
    return lines


MONOTONE = {1: "monotone", -1: "monotone against", 0: "not monotone"}


def ladder_lines(group: str, trends: dict) -> list[str]:
    """Per ladder: its known order, then each number's signed Kendall trend along it (and, for a
    training run, each proxy against held-out loss across the run's checkpoints)."""
    lines = []
    for name, ladder in trends["ladders"].items():
        order = " < ".join(plots.short_model_name(m) for m in ladder["models"])
        lines.append(f"== {group}: ladder {name} (known order: {order}; quality {ladder['direction']} along it)")
        lines.append("   Kendall tau against the order, signed: + = moves the way quality does (lower-is-better "
                     "numbers reversed); exact one-sided p in that direction, Holm-adjusted across the proxies "
                     "(p_Holm); power of the test at tau's n for correlations 0.5 / 0.7 / 0.9; monotone = at "
                     "every step; steps resolved by the standard errors (t tests, Holm across the steps)")
        if ladder["direction"] == RISES:
            lines.append(f"   {correlation.SERIAL_NOTE}")
        for row in trends["rows"]:
            if row["ladder"] != name or not row.get("n"):
                continue  # a number not measured on this ladder's models
            if row.get("tau") is None:
                lines.append(f"   {row['name'][:28]:<28} {row.get('note') or 'n/a'}")
                continue
            steps = row.get("resolved_steps")
            way = "follows" if row["tau"] > 0 else "against" if row["tau"] < 0 else "flat"
            text = f"   {row['name'][:28]:<28} tau {row['tau']:+.2f}  "
            if row.get("p") is not None:
                text += f"p {_p(row['p'])}"
                text += f" p_Holm {_p(row['p_adjusted'])}" if row.get("p_adjusted") is not None else ""
                text += f" power {'/'.join(f'{v:.2f}' for v in row['power'].values())}  "
            text += f"{way}, {MONOTONE[row['monotone']]}"
            if steps and not steps["unknown"]:
                text += f"; steps resolved {steps['n_resolved']} of {steps['n_steps']}"
            lines.append(text)
        rows = trends["rows"]
        unreachable = next((r for r in rows if r["ladder"] == name and r.get("reachable") is False), None)
        if unreachable is not None:
            lines.append(f"   n = {unreachable['n']}: no order reaches one-sided p < 0.05 (smallest p "
                         f"{_p(unreachable['min_p'])})")
        family = next((r for r in rows if r["ladder"] == name and r.get("family_size")), None)
        if family is not None:
            strictest = 0.05 / family["family_size"]
            size = plural(family["family_size"], "proxy", "proxies")
            lines.append(f"   {size} on this ladder: Holm's strictest step needs p <= {strictest:.4f}"
                         + (f", below the smallest p at n = {family['n']}: no proxy can pass"
                            if family["min_p"] > strictest else ""))
        if name in trends["training"]:
            lines.append("   across the run's checkpoints, each proxy against held-out loss and bits per byte:")
            lines += ["   " + line for line in correlation_lines(trends["training"][name])]
    lines += [f"== {group}: {note}" for note in trends["notes"]]
    return lines


def correlation_lines(rows: list[dict]) -> list[str]:
    """One line per (proxy, task): Spearman with exact p (Holm-adjusted across the table) and power,
    Kendall with exact p and its distribution-free interval, Pearson only beside the outlier-free
    Pearson, outliers named; a last line when n cannot reach p < 0.05. Serial rows (one run's
    checkpoints) have no p."""
    lines = []
    for row in rows:
        rho, tau = row["spearman"], row["kendall"]
        head = f"{row['proxy'][:26]:<26} {row['task'][:22]:<22} n={row['n']}"
        if rho.get("estimate") is None:
            lines.append(f"{head}: {row.get('note') or '-'}")
            continue
        if row.get("serial"):
            text = f"{head}  rho {rho['estimate']:+.2f}  tau {tau['estimate']:+.2f} (descriptive)"
        else:
            text = (f"{head}  rho {rho['estimate']:+.2f} p {_p(rho['p'])} p_Holm {_p(row['p_adjusted'])} power "
                    f"{'/'.join(f'{v:.2f}' for v in row['power'].values())}  tau {tau['estimate']:+.2f} "
                    f"p {_p(tau['p'])}")
        if tau.get("low") is not None:
            text += f"  tau 95% [{tau['low']:+.2f}, {tau['high']:+.2f}]"
        robust = row.get("pearson_robust") or {}
        text += (f"  r {number(row['pearson']['estimate'], '+.2f')}, without outliers "
                 f"{number(robust.get('estimate'), '+.2f')}")
        named = row.get("outlier_models") or {}
        flagged = list(dict.fromkeys([*named.get("proxy", []), *named.get("task", [])]))
        if flagged:
            text += f" (outliers: {', '.join(plots.short_model_name(m) for m in flagged)})"
        lines.append(text)
    short = next((r for r in rows if r.get("reachable") is False and not r.get("serial")), None)
    if short is not None:
        lines.append(f"   n = {short['n']} cannot reach p < 0.05 (smallest p {_p(short['min_p'])}, every ordering "
                     "considered): no correlation here can be significant")
    for n in sorted({r["n"] for r in rows if r.get("reachable") and r.get("critical_spearman") is not None}):
        critical = next(r["critical_spearman"] for r in rows if r["n"] == n and r.get("critical_spearman"))
        lines.append(f"   n = {n}: p < 0.05 needs |rho| >= {critical:.3f} (exact, no ties)")
    return lines


def summary(records: list[dict], correlations: dict, trends: dict, resolved_pairs: dict) -> str:
    lines = []
    for group, table in correlations.items():
        rows = [r for r in records if r["group"] == group]
        lines += model_lines(rows, group, resolved_pairs.get(group, {}))
        lines += ladder_lines(group, trends[group])
        lines.append(f"== {group}: proxy vs real task across base models ({plural(len(table['models']), 'point')}: "
                     f"{', '.join(plots.short_model_name(m) for m in table['models'])}"
                     + (f"; variants dropped: {', '.join(plots.short_model_name(m) for m in table['dropped'])}"
                        if table["dropped"] else "") + ")")
        lines += [f"   {note}" for note in table["notes"]]
        lines += [f"   {table['note']}"] if table["note"] else correlation_lines(table["rows"])
        if "pooled" in table:
            lines.append(f"== {group}: {table['pooled']['why']}")
            lines += correlation_lines(table["pooled"]["rows"])
    return "\n".join(lines)


@main_guard
def main(argv=None):
    run = common.Run(argv)
    args = run.parse(build_parser())
    stages = chosen(args)
    settings = stages_lib.Settings.of(args)
    settings.check()
    if not args.models and not args.ladder_checkpoints:
        raise LmprobeError("give the models to compare: --models=a,b,c (3 or more base models per family group), "
                           "or a training run's checkpoints: --ladder_checkpoints=DIR")
    todo = measure_lib.entries(args.models, args.ladder_checkpoints)
    started = time.perf_counter()
    run_dir = output_dir(args.output_dir)
    inputs = stages_lib.load_inputs(stages, settings,  # every labelled set and corpus, before the models load
                                    load_model=lambda name: run.loaded(name, common.load_scorer(args, name)))
    records, widths = [], {}
    with common.one_model_at_a_time():
        for entry in todo:
            start = time.perf_counter()
            scorer = run.loaded(entry.model, common.load_scorer(args, entry.model))
            records.append(measure_lib.measure(entry, scorer, stages, settings, inputs, run_dir, widths,
                                               load_s=time.perf_counter() - start, progress=progress))
            del scorer
            gc.collect()  # the model's weights go before the next one loads
    correlations = validation.correlate(records, pooled=args.pooled)
    trends, resolved_pairs = validation.ladder_trends(records), validation.resolved(records)
    validation.scatter_plots(records, run_dir)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    run.write(join(run_dir, "results.json"),
              {"method": "validate", "models": records, "correlations": correlations, "ladders": trends,
               "resolved": resolved_pairs, "lower_is_better": sorted(stages_lib.LOWER_IS_BETTER),
               "wall_s": time.perf_counter() - started, "peak_rss_gb": peak_gb})
    say(summary(records, correlations, trends, resolved_pairs))
    say(f"\n{plural(len(records), 'model')} in {time.perf_counter() - started:.0f} s, peak RSS {peak_gb:.1f} GB; "
        f"results in {os.path.abspath(run_dir) if '://' not in run_dir else run_dir}")
