"""Do the label-free scores mean anything? Each proxy's ranking of models against real tasks,
ladders of known order kept apart from independent models.

    python -m experiments.validate --models=minilm-l6,mpnet-base,nomic-embed-v1.5,smollm2-135m,gemma3-270m
    python -m experiments.validate --models=smollm2-135m,smollm2-135m@noise=0.05,smollm2-135m@noise=0.1 \\
        --proxies=syntextbench,synbench,byod --output_dir=runs/validate
    python -m experiments.validate --models=smollm2-135m,gemma3-270m,qwen2.5-coder-0.5b \\
        --ladder_checkpoints=runs/train/checkpoints

Every model gets every proxy (lmprobe.methods.proxies: SynTextBench, mean and standard error over
--syntextbench_trials; SynBench-Score at a_t = 0.7, eps = 0 plug-in and bias-corrected, and 0.2,
at n = --synbench_n_per_width x the model's width, beside the identity's score at that width and n;
BYOD negation (raw and normalised), long-range, word-order (raw, net of its null perturbation and
per unit of entropy) and tokenization sensitivity, decoders only) and every real task that applies
(lmprobe.methods.realtask: SentEval-style probes on rt-polarity and tweets-sentiment for all models;
for decoders zero-shot label-word accuracy on both and bits per byte on held-out movie reviews),
each number with its standard error where the method gives one.

Then, per family group (encoders, decoders):
* ladders: a base model and >= 2 of its variants of one kind (NAME@noise=SIGMA, quality falls as
  SIGMA rises; NAME@drop-layer=K, falls with the layers dropped) or the checkpoints of one training
  run (--ladder_checkpoints, quality rises with step; the run's own held-out loss from each Orbax
  step's metadata as a task). Per ladder, every number's Kendall trend against the known order
  with its exact one-sided p in the direction fixed in advance, Holm-adjusted across the proxies,
  its power, and whether it is monotone; a training run's checkpoints are not exchangeable, so
  its trends and its proxies against held-out loss and bits per byte are descriptive (no p).
* correlations across models: one point per base model (the model itself; a run's last
  checkpoint), variants dropped, since a ladder's members are not independent models. Spearman
  and Kendall with exact permutation p (enumeration up to 9 models), Spearman's p Holm-adjusted
  across the table and the test's power, whether n can reach p < 0.05, Kendall's distribution-free
  interval, Pearson only beside a robust Pearson with the outliers named. Fewer than 3 base
  models: no correlation, said so.
  --pooled adds the table over every model, labelled as pooling.
* resolved pairs: which models each number tells apart given the standard errors (t tests on
  the errors' degrees of freedom, Holm across the pairs).
One scatter grid per group and OUTPUT_DIR/results.json with all of it.

Signs: a lower-is-better number (BYOD tokenization sensitivity, bits per byte, held-out loss) is
negated before correlating, so a positive correlation always means "the proxy orders models as
the task does". BYOD's other sensitivities count as higher-is-better, as in the paper.

Each (model, stage) result is cached under OUTPUT_DIR/models, keyed by the model's identity and the
stage's settings: a rerun, or a run with more models, computes only what is new.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import resource
import time

import numpy as np

from experiments import cli, flags
from experiments.cli import log, main_guard, output_dir, progress, say
from lmprobe.checkpoints import discover as discover_lib
from lmprobe.checkpoints import orbax_io, variants
from lmprobe.data import gaussian
from lmprobe.data.labelled import load_labelled
from lmprobe.errors import LmprobeError
from lmprobe.methods import proxies as proxies_lib
from lmprobe.methods import realtask
from lmprobe.report import correlation, plots, significance
from lmprobe.store import join
from lmprobe.text import number, plural

PROXIES, BYOD_METRICS, STDERR = proxies_lib.PROXIES, proxies_lib.BYOD_METRICS, proxies_lib.STDERR
ITEMS = proxies_lib.ITEMS
TASKS = ("probes", "zero_shot", "prose")  # zero_shot and prose: decoders only
TASK_PREFIXES = ("probe_", "zero_shot_", "prose_")
HELDOUT = "heldout_loss"  # a training run's own held-out loss (nats per token), from each Orbax step's metadata
LOWER_IS_BETTER = proxies_lib.LOWER_IS_BETTER | {"prose_bits_per_byte", HELDOUT}
FALLS, RISES = correlation.FALLS, correlation.RISES  # quality along a ladder's known order
MIN_LADDER = 3  # members of a ladder, the base included
POOLED_WHY = ("pooled: every model, ladder variants included; they are not independent models (one model's "
              "noise or depth ladder), so p-values and intervals here overstate the evidence")


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    models: tuple[str, ...] = ()  # models and variants (NAME@noise=SIGMA, @drop-layer=K, @int8), 3+ base models a group
    ladder_checkpoints: str | None = None  # a training run's checkpoints (directory or glob): a ladder by step
    proxies: tuple[str, ...] = PROXIES  # label-free scores to check: syntextbench, synbench, byod
    tasks: tuple[str, ...] = TASKS  # real tasks: probes (all models); zero_shot, prose (decoders)
    output_dir: str = "runs/validate"  # results.json, scatter plots, per-model caches
    pooled: bool = False  # also correlate over every model, ladder variants included (labelled as pooling)
    syntextbench_n: int = 1024  # SynTextBench sentences per level (train and test)
    syntextbench_levels: tuple[float, ...] = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9)  # SynTextBench levels p
    syntextbench_trials: int = 3  # SynTextBench repeats (seeds seed, seed+1, ...): mean and standard error
    synbench_n: int | None = None  # SynBench samples per scale and split for every model (then widths must match)
    synbench_n_per_width: int = 20  # SynBench n = this x each model's width: the same n / width for every model
    synbench_scales: tuple[float, ...] = gaussian.PAPER_SCALES  # SynBench class-mean scales (the paper's 50)
    synbench_input_scales: tuple[float, ...] = ()  # also SynBench at these factors on its inputs, e.g. 0.25,0.5,1,2
    byod_examples: int = 200  # BYOD examples per metric
    probe_train: int = 1000  # probe training sentences per dataset (a fixed sample of the train split)
    probe_test: int = 800  # probe test sentences per dataset (a fixed sample of the test split)
    zero_shot_examples: int = 400  # zero-shot test sentences per dataset (decoders)
    zero_shot_chars: int = 0  # cut each zero-shot text to this many characters (0: whole; short-context models)
    prose_texts: int = 60  # held-out reviews (rt-reviews test split) for bits per byte (decoders)
    prose_chars: int = 1500  # characters of each review, cut at a word boundary
    tweets_min_confidence: float = 0.0  # keep tweets whose annotator confidence is at least this


def build_parser():
    p = cli.parser(__doc__, "validate")
    counts = ("byod_examples", "probe_train", "probe_test", "zero_shot_examples", "prose_texts", "prose_chars",
              "syntextbench_trials")
    cli.front_end(p, FrontEnd, convert={**dict.fromkeys(counts, flags.bounded(1)), "synbench_n": flags.bounded(8),
                                        "synbench_n_per_width": flags.bounded(2), "zero_shot_chars": flags.bounded(0),
                                        "synbench_scales": flags.bounded(0, base=float, strict=True),
                                        "synbench_input_scales": flags.bounded(0, base=float, strict=True),
                                        "tweets_min_confidence": flags.bounded(0, 1, base=float)})
    return p


def _sample(data, k: int, seed: int):
    """A fixed random subset of ``k`` examples (all when fewer), in file order."""
    if k >= len(data):
        return data
    return data.subset(np.sort(np.random.default_rng(seed).permutation(len(data))[:k]))


@dataclasses.dataclass
class Data:
    probes: dict  # task name -> (train, test) LabelledData
    prose: list[str]
    inputs: proxies_lib.Inputs  # the proxies' synthetic tasks and corpora, built once


def load_data(args) -> Data:
    """Every labelled set and corpus, before any model loads (a missing one fails now)."""
    tweets = f"tweets-sentiment@{args.tweets_min_confidence}" if args.tweets_min_confidence else "tweets-sentiment"
    probes = {}
    for task, spec in (("rt_polarity", "rt-polarity"), ("tweets", tweets)):
        train, test = (load_labelled(spec, split=s) for s in ("train", "test"))
        probes[task] = (_sample(train, args.probe_train, args.seed), _sample(test, args.probe_test, args.seed))
    reviews = _sample(load_labelled("rt-reviews", split="test"), args.prose_texts, args.seed)
    return Data(probes, list(reviews.texts), proxies_lib.load_inputs(args.proxies, proxies_lib.Settings.of(args)))


# --- which models are ladders ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Entry:
    """One model to measure: what loads (``model``), how it is shown, and where it sits."""

    model: str  # a name or variant for Scorer.load, or a checkpoint path
    label: str  # shown in tables: the name, or RUN@step=N
    base: str  # the base model (one point per base in cross-model correlations), or the run
    ladder: tuple | None = None  # (ladder name, level, direction) or None (a base model, @int8, @bf16)
    heldout_loss: float | None = None  # a run's own held-out loss at this step (Orbax metadata)


def model_entry(name: str) -> Entry:
    """A --models entry: its base (lmprobe.checkpoints.variants.split_name) and, for a noise or
    drop-layer variant, its place on the ladder that starts at the model without that variant."""
    base, _ = variants.split_name(name)
    position = variants.ladder_position(name)
    if position is None:
        return Entry(name, name, base)
    start, kind, level = position
    return Entry(name, name, base, (f"{start} @{kind}", level, FALLS))


def run_name(spec: str) -> str:
    """A training run's short name: its checkpoint directory's (a glob's directory), or the parent's
    when that is a generic name such as 'checkpoints'."""
    path = os.path.normpath(os.path.expanduser(spec))
    if any(c in spec for c in "*?["):
        path = os.path.dirname(path)
    name = os.path.basename(path)
    if name in ("checkpoints", "checkpoint", "ckpt"):
        name = os.path.basename(os.path.dirname(path)) or name
    return name


def checkpoint_entries(spec: str) -> list[Entry]:
    """The checkpoints of one training run (lmprobe.checkpoints.discover), a ladder by step: quality
    rises with training; each lmprobe Orbax step's own held-out loss is kept."""
    run = run_name(spec)
    out = []
    for found in discover_lib.discover(spec):
        loss = None
        if found.format == discover_lib.ORBAX:
            step = orbax_io.find(found.path)
            loss = ((step.meta.get("metadata") or {}) if step else {}).get(HELDOUT)
        out.append(Entry(found.path, f"{run}@step={found.step}", run, (f"{run} training steps", found.step, RISES),
                         loss))
    return out


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


# --- one model ---------------------------------------------------------------------------------


def _stages(args, decoder: bool) -> dict:
    """stage name -> its settings (the cache key's content)."""
    out = proxies_lib.stages(args.proxies, proxies_lib.Settings.of(args), decoder)
    if "probes" in args.tasks:
        out["probes"] = dict(train=args.probe_train, test=args.probe_test, conf=args.tweets_min_confidence,
                             seed=args.seed, stderr=True, items=True)
    if "zero_shot" in args.tasks and decoder:
        out["zero_shot"] = dict(n=args.zero_shot_examples, conf=args.tweets_min_confidence, seed=args.seed,
                                stderr=True, items=True, **({"chars": args.zero_shot_chars} if args.zero_shot_chars
                                                            else {}))
    if "prose" in args.tasks and decoder:
        out["prose"] = dict(texts=args.prose_texts, chars=args.prose_chars, seed=args.seed, start="separator",
                            stderr=True)
    return out


def _run_stage(stage: str, scorer, name: str, args, data: Data, cache_dir: str) -> dict:
    """{number name: value (and name_stderr)} of one stage on one model."""
    if stage in PROXIES:
        return proxies_lib.run_stage(stage, scorer, name, proxies_lib.Settings.of(args), data.inputs, cache_dir,
                                     progress=progress)
    out = {}
    if stage == "probes":
        for task, (train, test) in data.probes.items():
            r = realtask.probe(scorer, train, test, seed=args.seed, progress=progress)
            out[f"probe_{task}"], out[f"probe_{task}{STDERR}"] = r["balanced_accuracy"], r.get(
                "balanced_accuracy_stderr")
            out[f"probe_{task}{ITEMS}"] = r.get("balanced_accuracy_items")
        return out
    if stage == "zero_shot":
        for task, (_, test) in data.probes.items():
            r = realtask.zero_shot(scorer, _sample(test, args.zero_shot_examples, args.seed), progress=progress,
                                   template=realtask.TEMPLATES["tweet" if task == "tweets" else "review"],
                                   max_chars=args.zero_shot_chars or None, seed=args.seed)
            out[f"zero_shot_{task}"], out[f"zero_shot_{task}{STDERR}"] = r["balanced_accuracy"], r.get(
                "balanced_accuracy_stderr")
            out[f"zero_shot_{task}{ITEMS}"] = r.get("balanced_accuracy_items")
        return out
    if stage == "prose":
        r = realtask.perplexity(scorer, data.prose, max_chars=args.prose_chars, progress=progress)
        return {"prose_bits_per_byte": r["bits_per_byte"],
                f"prose_bits_per_byte{STDERR}": r.get("bits_per_byte_stderr")}
    raise LmprobeError(f"unknown stage {stage!r}")


def check_synbench_widths(widths: dict, group: str, args) -> None:
    """A fixed --synbench_n must give every model of a group the same n / width (SynBench's
    finite-sample bias depends on it): one error naming the models and widths otherwise."""
    if args.synbench_n is None or "synbench" not in args.proxies or len(set(widths.values())) < 2:
        return
    shown = ", ".join(f"{m} (width {w}, n / width {args.synbench_n / w:.1f})" for m, w in widths.items())
    raise LmprobeError(f"--synbench_n={args.synbench_n} gives the {group} different n / width: {shown}. SynBench's "
                       "plug-in score falls as width / n grows, so it would rank widths, not models: drop "
                       f"--synbench_n (n = --synbench_n_per_width={args.synbench_n_per_width} x each width)")


def measure(entry: Entry, args, data: Data, run_dir: str, run: cli.Run, widths: dict) -> dict:
    """Every stage on one model (cached per stage); ``widths``: group -> {label: width} so far."""
    start = time.perf_counter()
    scorer = run.loaded(entry.model, cli.load_scorer(args, entry.model))
    decoder = bool(scorer.is_decoder)
    group = "decoders" if decoder else "encoders"
    width = int(scorer.config.hidden_size)
    widths.setdefault(group, {})[entry.label] = width
    check_synbench_widths(widths[group], group, args)
    record = {"model": entry.model, "label": entry.label, "base": entry.base,
              "ladder": list(entry.ladder) if entry.ladder else None, "group": group, "width": width,
              "synbench_n": proxies_lib.synbench_n(proxies_lib.Settings.of(args), width)
              if "synbench" in args.proxies else None,
              "numbers": {}, "stderr": {}, "df": {}, "items": {}, "seconds": {}, "load_s": time.perf_counter() - start}
    if entry.heldout_loss is not None:
        record["numbers"][HELDOUT] = float(entry.heldout_loss)
    cache_dir = join(run_dir, "cache")
    for stage, settings in _stages(args, decoder).items():
        t = time.perf_counter()
        found = proxies_lib.cached_stage(
            run_dir, stage, settings, scorer,
            lambda stage=stage: _run_stage(stage, scorer, entry.model, args, data, cache_dir))
        numbers, stderr = proxies_lib.split_stderr(found)
        record["numbers"].update(numbers)
        record["stderr"].update({k: v for k, v in stderr.items() if v is not None})
        record["df"].update(proxies_lib.degrees_of_freedom(found, proxies_lib.Settings.of(args)))
        record["items"].update(proxies_lib.items(found))
        record["seconds"][stage] = time.perf_counter() - t
        log.info(f"{entry.label}: {stage} in {record['seconds'][stage]:.1f} s")
    return record


# --- across models -----------------------------------------------------------------------------


def number_names(records: list[dict]) -> tuple[list[str], list[str]]:
    """(proxy names, task names) the records hold, in first-seen order (references such as
    synbench_ceiling are neither)."""
    seen = list(dict.fromkeys(k for r in records for k in r["numbers"]))
    proxies = [k for k in seen if k.startswith(PROXIES) and not proxies_lib.is_reference(k)]
    tasks = [k for k in seen if k.startswith(TASK_PREFIXES)] + [k for k in seen if k == HELDOUT]
    return proxies, tasks


def _columns(records: list[dict], names: list[str]) -> tuple[dict, dict, dict]:
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
    values, stderr, df = _columns(records, proxies + tasks)
    rows = correlation.correlation_table({p: values[p] for p in proxies}, {t: values[t] for t in tasks},
                                         lower_is_better=LOWER_IS_BETTER, stderr=stderr, df=df, serial=serial)
    labels = [r["label"] for r in records]
    for row in rows:  # outliers named by model, not index
        row["outlier_models"] = {side: [labels[i] for i in found]
                                 for side, found in (row.get("outliers") or {}).items()}
    return rows


def correlate(records: list[dict], args) -> dict:
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
            entry["rows"] = _table(points, [t for t in number_names(points)[1] if t != HELDOUT])
        if args.pooled:
            entry["pooled"] = {"models": [r["label"] for r in rows], "why": POOLED_WHY,
                               "rows": _table(rows, [t for t in number_names(rows)[1] if t != HELDOUT])}
        out[group] = entry
    return out


def ladder_trends(records: list[dict], args) -> dict:
    """Per group: its ladders (``find_ladders``), every number's Kendall trend along each
    (lmprobe.report.correlation.ladder_table), and for a training run each proxy against held-out
    loss and bits per byte across its checkpoints."""
    out = {}
    for group in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == group]
        ladders, notes = find_ladders(rows)
        proxies, tasks = number_names(rows)
        values, stderr, df = _columns(rows, proxies + tasks)
        table = correlation.ladder_table({name: (ladder["indices"], ladder["direction"], ladder["direction"] == RISES)
                                          for name, ladder in ladders.items()}, values,
                                         lower_is_better=LOWER_IS_BETTER, stderr=stderr, df=df,
                                         items={n: [r.get("items", {}).get(n) for r in rows] for n in values},
                                         family=proxies) if ladders else []
        runs = {}
        for name, ladder in ladders.items():
            members = [rows[i] for i in ladder["indices"]]
            if ladder["direction"] == RISES and len(members) >= correlation.MIN_MODELS:
                runs[name] = _table(members, [t for t in (HELDOUT, "prose_bits_per_byte")
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
        values, stderr, df = _columns(rows, proxies + tasks)
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


# --- the summary -------------------------------------------------------------------------------


def _value(v, se) -> str:
    return number(v, ".4f") if se is None else f"{number(v, '.4f')}±{number(se, '.4f')}"


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
    lines += [name[:28].ljust(28) + " ".join(_value(r["numbers"].get(name), r["stderr"].get(name)).rjust(width)
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


def entries(args) -> list[Entry]:
    """Every model to measure: --models (names checked) and --ladder_checkpoints' checkpoints."""
    out = [model_entry(name) for name in args.models]  # bad variant names fail before any work
    if args.ladder_checkpoints:
        out += checkpoint_entries(args.ladder_checkpoints)
    return out


def scatter_plots(records: list[dict], run_dir: str) -> None:
    """scatter-GROUP.png per group: every proxy against every task, one point per model."""
    for group in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == group]
        proxies, tasks = number_names(rows)
        if proxies and tasks:
            values, stderr, _ = _columns(rows, proxies + tasks)
            picked = base_points(rows)[0]
            pooled = len(picked) < correlation.MIN_MODELS
            why = ("panels pool every point (fewer than 3 base models: ladder points are not independent)" if pooled
                   else "panels: one point per base model (filled); ladder variants hollow, not counted")
            plots.scatter_grid({p: values[p] for p in proxies}, {t: values[t] for t in tasks},
                               [r["label"] for r in rows], [group] * len(rows), join(run_dir, f"scatter-{group}.png"),
                               lower_is_better=LOWER_IS_BETTER, stderr=stderr,
                               title=f"label-free proxies against real tasks\n{why}",
                               counted=None if pooled else [i in picked for i in range(len(rows))])


@main_guard
def main(argv=None):
    run = cli.Run(argv)
    args = run.parse(build_parser())
    for flag, given, known in (("proxies", args.proxies, PROXIES), ("tasks", args.tasks, TASKS)):
        if [v for v in given if v not in known]:
            raise LmprobeError(f"--{flag}={','.join(given)}: choose from {', '.join(known)}")
    if not args.models and not args.ladder_checkpoints:
        raise LmprobeError("give the models to compare: --models=a,b,c (3 or more base models per family group), "
                           "or a training run's checkpoints: --ladder_checkpoints=DIR")
    todo = entries(args)
    started = time.perf_counter()
    run_dir = output_dir(args.output_dir)
    data = load_data(args)
    records, widths = [], {}
    for entry in todo:
        records.append(measure(entry, args, data, run_dir, run, widths))
        gc.collect()  # the model's weights go before the next one loads
    correlations, trends, resolved_pairs = correlate(records, args), ladder_trends(records, args), resolved(records)
    scatter_plots(records, run_dir)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    run.write(join(run_dir, "results.json"),
              {"method": "validate", "models": records, "correlations": correlations, "ladders": trends,
               "resolved": resolved_pairs, "lower_is_better": sorted(LOWER_IS_BETTER),
               "wall_s": time.perf_counter() - started, "peak_rss_gb": peak_gb})
    say(summary(records, correlations, trends, resolved_pairs))
    say(f"\n{plural(len(records), 'model')} in {time.perf_counter() - started:.0f} s, peak RSS {peak_gb:.1f} GB; "
        f"results in {os.path.abspath(run_dir) if '://' not in run_dir else run_dir}")


if __name__ == "__main__":
    main()
