"""BYOD: self-supervised sensitivity scores of language models on your own text.

    python -m experiments.byod --model=NAME [--model=NAME2 ...] [--corpus=PATH_OR_SPEC
        --metrics=negation,toxicity,long_range,word_order,tokenization,entropy --max_examples=1000
        --seed=0 --output_dir=runs/byod --k_long_range=2 --n_swaps=1 --chop=5 --trigger=' Fuck Fuck'
        --profanity=PATH --benign=wordnet-examples]

--k_long_range, --n_swaps and --chop take comma lists for the paper's ablations (the first value
is the headline score). Writes OUTPUT_DIR/results.json, samples.jsonl (per-example records) and
radar.png (the paper's Fig. 2, one polygon per model). Each metric is cached under
OUTPUT_DIR/cache: a rerun resumes where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses

from experiments.cli import load_scorer, main_guard, output_dir, parse, parser, progress, say
from lmprobe.data.corpus import load_corpus
from lmprobe.data.profanity import load_profanity
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod
from lmprobe.report.artifacts import join, write_json, write_jsonl
from lmprobe.report.radar import radar

DEFAULT_BENIGN = "wordnet-examples"


def _ints(flag: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise LmprobeError(f"--{flag}={text!r} must be an integer or a comma list of integers") from None


def _models(argv: list[str] | None, last: str) -> list[str]:
    """Every --model given (repeated and/or comma-separated); argparse keeps only the last."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    found = []
    for i, arg in enumerate(argv):
        if arg.startswith("--model="):
            found.append(arg.split("=", 1)[1])
        elif arg == "--model" and i + 1 < len(argv):
            found.append(argv[i + 1])
    return [m for value in (found or [last]) for m in value.split(",") if m]


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
    se = metric.get("stderr")
    return f"{metric['score']:.4f} ± {se:.4f} ({metric['n']})" if se is not None else f"{metric['score']:.4f} ({metric['n']})"


def summary(models: dict[str, dict], metrics) -> str:
    """One row per metric, one column per model: score ± stderr (n)."""
    width = max(28, *(len(m) + 2 for m in models))
    rows = [f"{'metric':<14}" + "".join(f"{m:>{width}}" for m in models)]
    extras = {"negation": ("normalized", "percent_ppl_drops"), "toxicity": ("logit_score",),
              "word_order": ("mean",), "entropy": ("sentence_entropy",)}
    for name in metrics:
        rows.append(f"{name:<14}" + "".join(f"{_cell(r[name]):>{width}}" for r in models.values()))
        for extra in extras.get(name, ()):
            cells = [r[name].get(extra) for r in models.values()]
            rows.append(f"{'  ' + extra:<14}" + "".join(
                f"{('-' if c is None else f'{c:.4f}'):>{width}}" for c in cells))
    return "\n".join(rows)


def _skips(model: str, metrics: dict) -> list[str]:
    lines = []
    for name, m in metrics.items():
        if m.get("error"):
            lines.append(f"warning: {model}: {name} not computed: {m['error']}")
        elif m["n"] == 0:
            reasons = ", ".join(f"{why}: {count}" for why, count in m["skipped"].items()) or "no sentences"
            lines.append(f"warning: {model}: {name} has no usable example ({reasons})")
    return lines


@main_guard
def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--corpus", default=None, help="file, directory, .jsonl/.csv/.tsv, tfds:NAME, hf:NAME, "
                   "'fortunes' or 'wordnet-examples' (default: the offline default corpus)")
    p.add_argument("--column", default="text", help="text column of jsonl/csv/tsv/hf corpora")
    p.add_argument("--split", default="train", help="split of tfds: / hf: corpora")
    p.add_argument("--max_documents", type=int, default=None, help="read at most this many documents")
    p.add_argument("--metrics", default=",".join(byod.METRICS), help="comma list of " + ", ".join(byod.METRICS))
    p.add_argument("--max_examples", type=int, default=1000, help="examples per metric (the paper: 1000)")
    p.add_argument("--output_dir", default="runs/byod")
    p.add_argument("--k_long_range", default="2", help="sentences replaced (comma list: ablation)")
    p.add_argument("--n_swaps", default="1", help="word swaps (comma list: ablation)")
    p.add_argument("--chop", default="5", help="split stride in characters (comma list: ablation)")
    p.add_argument("--trigger", default=byod.Config.trigger, help="phrase appended for the toxicity metric")
    p.add_argument("--profanity", default=None, help="profanity word list, one entry a line "
                   "(default: better-profanity's list; the paper used LDNOOBW's 'en')")
    p.add_argument("--benign", default=DEFAULT_BENIGN,
                   help="benign corpus that normalises the negation score ('' to skip)")
    p.add_argument("--max_new_tokens", type=int, default=byod.Config.max_new_tokens)
    p.add_argument("--temperature", type=float, default=byod.Config.temperature, help="0: greedy")
    p.add_argument("--top_k", type=int, default=byod.Config.top_k)
    p.add_argument("--no_generate", action="store_true", help="toxicity from next-token mass only")
    args = parse(p, argv)
    models = _models(argv, args.model)

    config = byod.Config(
        metrics=tuple(m.strip() for m in args.metrics.split(",") if m.strip()),
        max_examples=args.max_examples, seed=args.seed, k_long_range=_ints("k_long_range", args.k_long_range),
        n_swaps=_ints("n_swaps", args.n_swaps), chop=_ints("chop", args.chop), trigger=args.trigger,
        generate=not args.no_generate, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k)
    config.check()  # bad settings and inputs fail before any model loads
    corpus = load_corpus(args.corpus, column=args.column, split=args.split, max_documents=args.max_documents)
    if not corpus.sentences:
        raise LmprobeError(f"corpus {corpus.name!r} has no sentences: pass a text corpus with --corpus")
    benign = _or_error(load_corpus, args.benign) if args.benign and "negation" in config.metrics else None
    if isinstance(benign, LmprobeError):
        say(f"warning: no normalised negation score: {benign}")
        benign = None
    # a list that cannot be read fails the toxicity metric only (reported in results.json)
    profanity = _or_error(load_profanity, args.profanity) if "toxicity" in config.metrics else None
    out = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    say(f"corpus {corpus.name}: {len(corpus.paragraphs)} paragraphs, {len(corpus.sentences)} sentences"
          + (f"; benign {benign.name}: {len(benign.sentences)} sentences" if benign else "")
          + (f"; profanity list {profanity.source}: {len(profanity.words)} entries"
             if profanity is not None and not isinstance(profanity, LmprobeError) else ""))

    results = {"method": "byod", "corpus": {"name": corpus.name, "paragraphs": len(corpus.paragraphs),
                                            "sentences": len(corpus.sentences)},
               "config": dataclasses.asdict(config), "models": {}, "timings_s": {}}
    samples = []
    for name in models:
        scorer = load_scorer(argparse.Namespace(**{**vars(args), "model": name}))
        result = byod.run(scorer, corpus, config, model_name=name, benign=benign, profanity=profanity,
                          cache_dir=join(out, "cache"),
                          progress=lambda it, desc, name=name: progress(it, desc=f"{name}: {desc}"))
        results["models"][name] = result.to_json()
        results["timings_s"][name] = result.timings
        samples += list(result.samples())
        write_json(join(out, "results.json"), results)  # after every model
        write_jsonl(join(out, "samples.jsonl"), samples)
        for line in _skips(name, results["models"][name]):
            say(line)
    radar(results["models"], join(out, "radar.png"))
    say("\n== BYOD (score ± stderr (n); word order: median)")
    say(summary(results["models"], config.metrics))
    say(f"\nresults in {out}")


if __name__ == "__main__":
    main()
