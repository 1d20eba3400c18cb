"""Do label-free proxies mean anything? The analysis across models behind ``experiments.validate``.

Each model's record (lmprobe.evaluate.measure) holds its stages' numbers. Ladders: a base model and
>= 2 variants of one kind (NAME@noise=SIGMA, quality falls as SIGMA rises; NAME@drop-layer=K, falls
with the layers dropped) or the checkpoints of one training run (quality rises with step), each
number's Kendall trend along its known order (lmprobe.report.correlation.ladder_table).
Correlations across models: one point per base model (``base_points``), proxies against real tasks
(correlation_table). Resolved pairs: which models each number's standard errors tell apart
(lmprobe.report.significance.resolved_pairs). Lower-is-better numbers are negated before
correlating, so a positive correlation always means "the proxy orders models as the task does".
"""

from __future__ import annotations

import numpy as np

from lmprobe.evaluate import RISES
from lmprobe.methods import stages as stages_lib
from lmprobe.report import correlation, plots, significance
from lmprobe.store import join
from lmprobe.text import plural

TRAINER_HELDOUT_LOSS = stages_lib.TRAINER_HELDOUT_LOSS
LOWER_IS_BETTER = stages_lib.LOWER_IS_BETTER
MIN_LADDER = 3  # members of a ladder, the base included
POOLED_WHY = ("pooled: every model, ladder variants included; they are not independent models (one model's "
              "noise or depth ladder), so p-values and intervals here overstate the evidence")


def find_ladders(records: list[dict]) -> tuple[dict, list[str]]:
    """({ladder name: {"direction", "models", "levels", "indices"}}, notes) over ``records``
    (each with "label" and "ladder": [name, level, direction] or None): a ladder's members in their
    known order (level ascending), its start model (level 0) included when measured; at least
    MIN_LADDER members with distinct levels, else a note says why it is not a ladder."""
    members = {}
    for i, r in enumerate(records):
        if r.get("ladder"):
            name, level, direction = r["ladder"]
            members.setdefault(name, {"direction": direction, "points": []})["points"].append((float(level), i))
    for name, ladder in members.items():
        start = name.rsplit(" @", 1)[0] if " @" in name else None
        for i, r in enumerate(records):
            if start is not None and r["label"] == start:
                ladder["points"].append((0.0, i))
    out, notes = {}, []
    for name, ladder in members.items():
        points = sorted(ladder["points"])
        levels = [level for level, _ in points]
        if len(points) < MIN_LADDER:
            notes.append(f"{name}: {plural(len(points), 'member')}, not a ladder (needs {MIN_LADDER})")
        elif len(set(levels)) < len(levels):
            notes.append(f"{name}: members share a level ({levels}): no known order, not a ladder")
        else:
            out[name] = {"direction": ladder["direction"], "models": [records[i]["label"] for _, i in points],
                         "levels": levels, "indices": [i for _, i in points]}
    return out, notes


def base_points(records: list[dict]) -> tuple[list[int], list[str]]:
    """(indices of one record per base model, notes): the base model itself when measured, a
    training run's last checkpoint, else the first listed variant (noted)."""
    by_base = {}
    for i, r in enumerate(records):
        by_base.setdefault(r["base"], []).append(i)
    picked, notes = [], []
    for base, indices in by_base.items():
        plain = [i for i in indices if records[i]["label"] == base]
        steps = [i for i in indices if records[i].get("ladder") and records[i]["ladder"][2] == RISES]
        if plain:
            picked.append(plain[0])
        elif steps:
            last = max(steps, key=lambda i: records[i]["ladder"][1])
            picked.append(last)
            notes.append(f"{base}: its last checkpoint {records[last]['label']} stands for the run")
        else:
            picked.append(indices[0])
            notes.append(f"{base} was not measured itself: {records[indices[0]]['label']} stands for it")
    return sorted(picked), notes


def number_names(records: list[dict]) -> tuple[list[str], list[str]]:
    """(proxy names, task names) the records hold, in first-seen order (references such as
    synbench_ceiling are neither)."""
    seen = list(dict.fromkeys(k for r in records for k in r["numbers"]))
    proxies = [k for k in seen if stages_lib.is_proxy(k)]
    tasks = [k for k in seen if not stages_lib.is_proxy(k) and not stages_lib.is_reference(k)
             and k != TRAINER_HELDOUT_LOSS] + [k for k in seen if k == TRAINER_HELDOUT_LOSS]
    return proxies, tasks


def columns(records: list[dict], names: list[str]) -> tuple[dict, dict, dict]:
    """({name: value per record}, {name: stderr per record}, {name: degrees of freedom per record})
    for ``names`` (a number without errors, or without small degrees of freedom, is left out there)."""
    values = {n: [r["numbers"].get(n) for r in records] for n in names}
    stderr = {n: [r["stderr"].get(n) for r in records] for n in names}
    df = {n: [r.get("df", {}).get(n) for r in records] for n in names}
    return (values, {n: e for n, e in stderr.items() if any(v is not None for v in e)},
            {n: d for n, d in df.items() if any(v is not None for v in d)})


def _table(records: list[dict], tasks: list[str] | None = None, *, serial: bool = False) -> list[dict]:
    proxies, all_tasks = number_names(records)
    tasks = all_tasks if tasks is None else tasks
    values, stderr, df = columns(records, proxies + tasks)
    rows = correlation.correlation_table({p: values[p] for p in proxies}, {t: values[t] for t in tasks},
                                         lower_is_better=LOWER_IS_BETTER, stderr=stderr, df=df, serial=serial)
    labels = [r["label"] for r in records]
    for row in rows:  # outliers named by model, not index
        row["outlier_models"] = {side: [labels[i] for i in found]
                                 for side, found in (row.get("outliers") or {}).items()}
    return rows


def correlate(records: list[dict], *, pooled: bool = False) -> dict:
    """Per group: one point per base model, the proxy x task correlation rows
    (lmprobe.report.correlation.correlation_table), or a note when there are fewer than 3;
    with --pooled also the rows over every model, labelled as pooling."""
    out = {}
    for group in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == group]
        picked, notes = base_points(rows)
        points = [rows[i] for i in picked]
        entry = {"models": [r["label"] for r in points],
                 "dropped": [r["label"] for i, r in enumerate(rows) if i not in picked], "notes": notes,
                 "rows": [], "note": None}
        if len(points) < correlation.MIN_MODELS:
            entry["note"] = (f"{plural(len(points), 'base model')} ({', '.join(entry['models'])}): a correlation "
                             f"across models needs {correlation.MIN_MODELS} or more; none computed")
        else:
            entry["rows"] = _table(points, [t for t in number_names(points)[1] if t != TRAINER_HELDOUT_LOSS])
        if pooled:
            entry["pooled"] = {"models": [r["label"] for r in rows], "why": POOLED_WHY,
                               "rows": _table(rows, [t for t in number_names(rows)[1] if t != TRAINER_HELDOUT_LOSS])}
        out[group] = entry
    return out


def ladder_trends(records: list[dict]) -> dict:
    """Per group: its ladders (``find_ladders``), every number's Kendall trend along each
    (lmprobe.report.correlation.ladder_table), and for a training run each proxy against held-out
    loss and bits per byte across its checkpoints."""
    out = {}
    for group in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == group]
        ladders, notes = find_ladders(rows)
        proxies, tasks = number_names(rows)
        values, stderr, df = columns(rows, proxies + tasks)
        table = correlation.ladder_table({name: (ladder["indices"], ladder["direction"], ladder["direction"] == RISES)
                                          for name, ladder in ladders.items()}, values,
                                         lower_is_better=LOWER_IS_BETTER, stderr=stderr, df=df,
                                         items={n: [r.get("items", {}).get(n) for r in rows] for n in values},
                                         family=proxies) if ladders else []
        runs = {}
        for name, ladder in ladders.items():
            members = [rows[i] for i in ladder["indices"]]
            if ladder["direction"] == RISES and len(members) >= correlation.MIN_MODELS:
                runs[name] = _table(members, [t for t in (TRAINER_HELDOUT_LOSS, "heldout_loss", "heldout_bits_per_byte")
                                              if any(t in r["numbers"] for r in members)], serial=True)
        out[group] = {"ladders": ladders, "notes": notes, "rows": table, "training": runs}
    return out


def resolved(records: list[dict]) -> dict:
    """Per group, per number: which pairs of models its standard errors resolve
    (lmprobe.report.significance.resolved_pairs), the pairs named by model."""
    out = {}
    for group in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == group]
        proxies, tasks = number_names(rows)
        values, stderr, df = columns(rows, proxies + tasks)
        out[group] = {}
        for name in proxies + tasks:
            have = [i for i, v in enumerate(values[name]) if v is not None and np.isfinite(v)]
            if len(have) < 2:
                continue
            errors, dofs = stderr.get(name), df.get(name)
            got = significance.resolved_pairs([values[name][i] for i in have],
                                              None if errors is None else [errors[i] for i in have],
                                              df=None if dofs is None else [dofs[i] for i in have],
                                              items=[rows[i].get("items", {}).get(name) for i in have])
            labels = [rows[i]["label"] for i in have]
            out[group][name] = {"n_resolved": got["n_resolved"], "n_resolved_unadjusted": got["n_resolved_unadjusted"],
                                "n_pairs": got["n_pairs"], "level": got["level"], "adjust": got["adjust"],
                                **{k: [[labels[i], labels[j]] for i, j in got[k]]
                                   for k in ("resolved", "unresolved", "unknown")}}
    return out


def scatter_plots(records: list[dict], run_dir: str) -> None:
    """scatter-GROUP.png per group: every proxy against every task, one point per model."""
    for group in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == group]
        proxies, tasks = number_names(rows)
        if proxies and tasks:
            values, stderr, _ = columns(rows, proxies + tasks)
            picked = base_points(rows)[0]
            pooled = len(picked) < correlation.MIN_MODELS
            why = ("panels pool every point (fewer than 3 base models: ladder points are not independent)" if pooled
                   else "panels: one point per base model (filled); ladder variants hollow, not counted")
            plots.scatter_grid({p: values[p] for p in proxies}, {t: values[t] for t in tasks},
                               [r["label"] for r in rows], [group] * len(rows), join(run_dir, f"scatter-{group}.png"),
                               lower_is_better=LOWER_IS_BETTER, stderr=stderr,
                               title=f"label-free proxies against real tasks\n{why}",
                               counted=None if pooled else [i in picked for i in range(len(rows))])


