"""BYOD: self-supervised sensitivity scores of language models on your own text.

    python -m experiments.byod --model=NAME [--model=NAME2 ...] [--corpus=PATH_OR_SPEC
        --metrics=negation,toxicity,long_range,word_order,tokenization,entropy
        --examples=word_order:5000,negation:1000 --max_examples=N --seed=0 --output_dir=runs/byod
        --k_long_range=2 --n_swaps=1 --chop=5 --trigger=' Fuck Fuck' --trigger_counts=1,2,3
        --topic_sentences --profanity=PATH --benign=wordnet-examples]
    lmprobe byod --model=smollm2-135m,pythia-70m --corpus=notes.txt --metrics=negation,word_order

Examples per metric: the paper's by default (1000; word order 5000); --max_examples=N sets every
metric's, --examples=METRIC:N (or METRIC:all) one metric's, over both. --k_long_range, --n_swaps,
--chop and --trigger_counts (F-bombs appended, App. A.2 Fig. 16) take lists for the paper's
ablations (the first value is the headline score). --topic_sentences runs negation on the first
sentence of each document (the paper: Wikipedia topic sentences). The benign corpus normalising
negation is BookCorpus in the paper, WordNet gloss examples here by default (--benign).

Writes OUTPUT_DIR/results.json, samples.jsonl (per-example records) and radar.png (the paper's
Fig. 2, one polygon per model). Each metric is cached under OUTPUT_DIR/cache: a rerun resumes
where it stopped.

Compile before you rent: --compile_only [--target=v5e-8] compiles every engine step the run would
execute at its batch geometry (scoring, packed scoring, hidden states, pair statistics, generation)
and writes per step its shapes, calls, the compiler's memory per device and fit and the TPU cost
model's estimate to OUTPUT_DIR/results.json, reading no weight and running nothing:

    python -m experiments.byod --model=opt-13b --target=v5e-8 --compile_only
"""

from __future__ import annotations

import dataclasses

from lmprobe.cli import common, flags
from lmprobe.cli.common import load_scorer, log, main_guard, output_dir, progress, say
from lmprobe.data.corpus import load_corpus
from lmprobe.data.profanity import load_profanity
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod
from lmprobe.report.plots import draw
from lmprobe.report.radar import radar
from lmprobe.store import join, write_jsonl
from lmprobe.text import estimate, number, plural

DEFAULT_BENIGN = "wordnet-examples"


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    model: tuple[str, ...] = ("smollm2-135m",)  # models: local HF dir, hub id, alias, .gguf, embedded default
    # file, directory, .jsonl/.csv/.tsv, tfds:NAME, hf:NAME, 'fortunes' or 'wordnet-examples'; none: fortunes
    corpus: str | None = None
    column: str = "text"  # text column of jsonl/csv/tsv/hf corpora
    split: str = "train"  # split of tfds: / hf: corpora
    max_documents: int | None = None  # read at most this many documents
    # profanity list: none (the paper's LDNOOBW English list, shipped), better-profanity, or a file of entries
    profanity: str | None = None
    benign: str = DEFAULT_BENIGN  # benign corpus that normalises the negation score ('' to skip)
    output_dir: str = "runs/byod"  # results.json, samples.jsonl, radar.png and the metric caches


COMPILED_ON_ZEROS = ("the method's own code chose the steps, running on the zeros compiled steps return: where a "
                     "step's input comes from the model's output (toxicity's generated continuations), its shapes are "
                     "those zeros give")


def build_parser():
    p = common.parser(__doc__, "byod")
    common.front_end(p, FrontEnd, convert={"max_documents": flags.bounded(1)})
    common.compile_flags(p)
    return p, common.method(p, byod.Config, choices={"metrics": byod.METRICS})


def _compiled_metrics(result: byod.Result) -> list[str]:
    """A compile-only run's notes on a model: the metrics whose steps were compiled, and why any other could
    not run (as a run reports it in results.json)."""
    return [f"metrics compiled: {', '.join(result.metrics) or 'none'}",
            *(f"{name}: not compiled, it could not run: {error}" for name, error in result.errors.items())]


def _or_error(load, spec):
    try:
        return load(spec)
    except LmprobeError as e:
        return e


def _cell(metric: dict) -> str:
    if metric.get("error"):
        return "error"
    if metric.get("score") is None:
        return f"n=0 ({sum(metric.get('skipped', {}).values())} skipped)"
    return f"{estimate(metric['score'], metric.get('stderr'), '.4f', ' ± ')} ({metric['n']})"


def summary(models: dict[str, dict], metrics) -> str:
    """One row per metric, one column per model: score ± stderr (n); then its other numbers and
    its ablation (a row per value)."""
    width = max(28, *(len(m) + 2 for m in models))
    extras = {"negation": ("normalized", "percent_ppl_drops"), "toxicity": ("logit_score",),
              "word_order": ("mean",), "entropy": ("sentence_entropy",)}
    rows = [("metric", list(models))]
    for name in metrics:
        rows.append((name, [_cell(r[name]) for r in models.values()]))
        for extra in extras.get(name, ()):
            cells = [r[name].get(extra) for r in models.values()]
            rows.append(("  " + extra, [number(c, ".4f") for c in cells]))
        first = next((r[name]["ablation"] for r in models.values() if r[name].get("ablation")), [])
        for i, entry in enumerate(first):  # ablation rows: "  k=1", "  trigger_count=3", ...
            param = next(iter(entry))
            cells = [(r[name].get("ablation") or [{}] * len(first))[i] for r in models.values()]
            rows.append((f"  {param}={entry[param]}", [_cell({**c, "skipped": {}}) if "score" in c else "-"
                                                       for c in cells]))
    label = max(14, *(len(row[0]) + 2 for row in rows))
    return "\n".join(f"{head:<{label}}" + "".join(f"{c:>{width}}" for c in cells) for head, cells in rows)


def _skips(model: str, metrics: dict) -> list[str]:
    lines = []
    for name, m in metrics.items():
        if m.get("error"):
            lines.append(f"{model}: {name} not computed: {m['error']}")
        elif m["n"] == 0:
            reasons = ", ".join(f"{why}: {count}" for why, count in m["skipped"].items()) or "no sentences"
            lines.append(f"{model}: {name} has no usable example ({reasons})")
    return lines


@main_guard
def main(argv=None):
    run = common.Run(argv)
    p, method = build_parser()
    args = run.parse(p)
    config = method.make(args)
    config.check()  # bad settings and inputs fail before any model loads
    common.require_kind(args, args.model, "byod", byod.KINDS)  # so does an encoder (its config alone is read)
    corpus = load_corpus(args.corpus, column=args.column, split=args.split, max_documents=args.max_documents)
    if not corpus.sentences:
        raise LmprobeError(f"corpus {corpus.name!r} has no sentences: pass a text corpus with --corpus")
    benign = _or_error(load_corpus, args.benign) if args.benign and "negation" in config.metrics else None
    if isinstance(benign, LmprobeError):
        log.warning(f"no normalised negation score: {benign}")
        benign = None
    # a list that cannot be read fails the toxicity metric only (reported in results.json)
    profanity = _or_error(load_profanity, args.profanity) if "toxicity" in config.metrics else None
    out = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    if common.check_compile_flags(args):  # every step of each model's run compiled, nothing run (common.compile_only)
        common.compile_only(run, args, lambda scorer, name: _compiled_metrics(byod.run(
            scorer, corpus, config, model_name=name, benign=benign, profanity=profanity, cache_dir=None)),
            out, notes=[COMPILED_ON_ZEROS])
        return
    log.info(f"corpus {corpus.name}: {plural(len(corpus.paragraphs), 'paragraph')}, "
             f"{plural(len(corpus.sentences), 'sentence')}"
             + (f"; benign {benign.name}: {plural(len(benign.sentences), 'sentence')}" if benign else "")
             + (f"; profanity list {profanity.source}: {plural(len(profanity.words), 'entry', 'entries')}"
                if profanity is not None and not isinstance(profanity, LmprobeError) else ""))
    log.info("examples per metric: " + ", ".join(f"{name} {config.limit(name) or 'all'}" for name in config.metrics))

    results = {"method": "byod", "corpus": {"name": corpus.name, "paragraphs": len(corpus.paragraphs),
                                            "sentences": len(corpus.sentences)},
               "config": dataclasses.asdict(config),
               "examples": {name: config.limit(name) for name in config.metrics},  # per metric (null: all)
               "models": {}, "timings_s": {}, "cached_stages": {}}
    samples = []
    for name in args.model:
        scorer = run.loaded(name, load_scorer(args, name))
        result = byod.run(scorer, corpus, config, model_name=name, benign=benign, profanity=profanity,
                          cache_dir=join(out, "cache"),
                          progress=lambda it, desc, name=name, **kw: progress(it, desc=f"{name}: {desc}", **kw))
        results["models"][name] = result.to_dict()
        results["timings_s"][name] = result.timings
        results["cached_stages"][name] = result.cached
        samples += list(result.samples())
        run.write(join(out, "results.json"), results)  # after every model
        write_jsonl(join(out, "samples.jsonl"), samples)
        for line in _skips(name, results["models"][name]):
            log.warning(line)
    say("\n== BYOD (score ± stderr (n); word order: median)")
    say(summary(results["models"], config.metrics))
    drawn = draw(radar, results["models"], join(out, "radar.png"), title=f"BYOD sensitivity scores on {corpus.name}")
    if drawn is False:  # None: drawing failed, and draw said so
        log.warning("no radar drawn: no model has a score on any of its axes (toxicity, negation, long_range, "
                    "word_order, tokenization)")
    if not any(m.get("score") is not None for r in results["models"].values() for m in r.values()):
        raise LmprobeError(f"no metric has a score for any model (the warnings above say why); results in {out}")
    say(f"\nresults in {out}")
