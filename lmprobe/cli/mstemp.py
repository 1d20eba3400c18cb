"""MSTemp: a target model's accuracy on a labelled seed set and on samples generated from it by
meta semantic templates (evaluator LMs paraphrase, an encoder filters, parsing and refilling).

    python -m experiments.mstemp --model=TARGET --evaluator=NAME [--evaluator=NAME ...]
        [--filter=minilm-l6 --dataset=rt-polarity --n_templates=5 --m_samples=3 --tau=0.7
         --attack=none|greedy-typo|greedy-synonym|random-typo|random-synonym
         --output_dir=runs/mstemp]
    lmprobe mstemp --model=smollm2-135m --evaluator=smollm2-135m,pythia-70m --label_names=negative,positive

The default seeds are rt-polarity's test split (800 Rotten Tomatoes sentences, human labels;
install: python -m experiments.assets --install pang-lee); --dataset=offline-sentiment needs no
install but has SILVER labels (lmprobe.data.labelled).

The headline is the fair comparison: the target's accuracy on the seeds that have generated samples
(the contributing seeds) against stratified draws of one generated sample per contributing seed;
the all-seed baseline against unstratified draws (selection-biased) is printed below it and kept
in results.json (baseline_accuracy, generated_accuracy, drop). --attack=greedy-* edits the samples
to flip the target's prediction (SCoPE's greedy search); random-* adds blind random noise.

Writes OUTPUT_DIR/results.json and OUTPUT_DIR/samples.jsonl (seed, paraphrase, similarity,
template, filled sample, label, prediction). Paraphrases are cached under OUTPUT_DIR/cache: a
rerun (or a run after an interruption) reuses them.

Compile before you rent: --compile_only [--target=v5e-8] compiles every engine step the run would execute
at its batch geometry, for each model it uses (the evaluators' generation: prefill and KV-cached decode
loop, one program per prompt batch shape; the filter's embeddings; the target's zero-shot scoring or
embeddings), and writes per model and step its shapes, calls, the compiler's memory per device and fit
and the TPU cost model's estimate to OUTPUT_DIR/results.json, reading no weight and running nothing:

    python -m experiments.mstemp --model=opt-13b --evaluator=opt-13b --target=v5e-8 --compile_only
"""

from __future__ import annotations

import dataclasses

from lmprobe.cli import common, flags
from lmprobe.cli.common import load_scorer, log, main_guard, output_dir, progress, say
from lmprobe.data.labelled import DEFAULT, evaluation_split, load_labelled
from lmprobe.errors import LmprobeError
from lmprobe.methods import mstemp
from lmprobe.methods.mstemp import filter as semantic_filter
from lmprobe.methods.mstemp import templates
from lmprobe.methods.mstemp.adversarial import ALIASES, ATTACKS
from lmprobe.store import join, write_jsonl
from lmprobe.text import estimate, number, plural, timings


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    model: str = "smollm2-135m"  # target model whose accuracy drop is measured
    evaluator: tuple[str, ...] = ("smollm2-135m",)  # evaluator LMs that paraphrase the seeds
    filter: str = semantic_filter.DEFAULT_FILTER  # encoder of the semantic filter
    # rt-polarity, rt-reviews, tweets-sentiment[@MIN_CONFIDENCE], offline-sentiment (silver labels), .csv/.tsv/.jsonl,
    # tfds:glue/sst2, hf:glue:sst2:validation
    dataset: str = DEFAULT
    split: str | None = None  # split of named datasets (none: test) and tfds / hf ones (none: validation)
    text_column: str = "text"  # text column of the dataset
    label_column: str = "label"  # label column of the dataset
    max_examples: int | None = None  # seed examples to use (none: all)
    output_dir: str = "runs/mstemp"  # results.json, samples.jsonl and the paraphrase cache


def build_parser():
    p = common.parser(__doc__, "mstemp")
    common.front_end(p, FrontEnd, convert={"max_examples": flags.bounded(1)})
    common.compile_flags(p)
    return p, common.method(p, mstemp.Config, choices={
        "attack": (*ATTACKS, *ALIASES), "tagger": ("auto", "nltk", "wordnet"), "slot_kinds": templates.SLOT_KINDS})


COMPILED_ON_ZEROS = ("the method's own code chose the steps, running on the zeros compiled steps return: the "
                     "evaluators' paraphrases decode to nothing, so no candidate reaches the filter and no sample is "
                     "generated. The filter's embedding step is then compiled on the seeds (the candidates are "
                     "paraphrases of them: its calls are not the run's); the target's scoring of generated samples "
                     "(and a greedy --attack's) is the seeds' step, compiled with them at their lengths, its calls "
                     "on samples not counted")
NOT_COMPILED = ("not compiled: the template parsing and filling, the linear probe of an encoder target and the "
                "accuracy draws (host-side)")


def _compile_only(run: common.Run, args, data, config, out: str) -> None:
    """Every engine step of the run compiled (common.compile_only_models): mstemp.run on compile-only Scorers of
    the target, the evaluators and the filter (one each, as the run loads them), uncached; then the filter's
    embedding of the seeds, standing in for the candidates that zeros do not give."""
    def queries(scorer):
        mstemp.run(scorer(args.model), {name: scorer(name) for name in args.evaluator}, scorer(args.filter), data,
                   config, target_name=args.model, filter_name=args.filter, cache_dir=None, progress=progress)
        semantic_filter.similarities(scorer(args.filter), data.texts, [[text] for text in data.texts])

    common.compile_only_models(run, args, queries, out, notes=[COMPILED_ON_ZEROS, NOT_COMPILED])


def _summary(result: dict, rows: list[dict]) -> str:
    r = result
    lines = [f"== MSTemp: {r['target']} on {plural(r['n_seed'], 'seed')} ({r['dataset'][:60]})",
             f"classifier: {r['classifier']}",
             f"fair (the {plural(r['contributing_seeds'], 'seed')} with generated samples; one sample per seed per "
             f"draw): baseline accuracy {number(r['fair_baseline_accuracy'])}   generated "
             f"{number(r['fair_generated_accuracy'])}   drop {number(r['fair_drop'], '+.3f')} "
             f"({number(r['fair_relative_drop'], '.1%')})",
             f"all seeds (selection-biased, as before): baseline accuracy {number(r['baseline_accuracy'])}   "
             f"generated {number(r['generated_accuracy'])}   drop {number(r['drop'], '+.3f')} "
             f"({number(r['relative_drop'], '.1%')})"]
    if "attack" in result:
        a = result["attack"]
        lines.append(f"attack {a['attack']}: {a['flipped']} of {a['attacked']} correctly classified samples flipped "
                     f"({a['already_wrong']} already wrong)")
    lines.append(f"{'evaluator':<28} {'seeds':>6} {'base':>6} {'fair acc':>14} {'all-seed acc':>14} "
                 f"{'samples':>8} {'accept':>7} {'no tmpl':>8}")
    for name, e in result["per_evaluator"].items():
        lines.append(f"{name:<28} {e['contributing_seeds']:>6} {number(e['baseline_accuracy_contributing']):>6} "
                     f"{estimate(e['accuracy_stratified'], e['accuracy_stratified_std']):>14} "
                     f"{estimate(e['accuracy'], e['accuracy_std']):>14} {e['samples']:>8} "
                     f"{e['acceptance_rate']:>7.2f} {e['seeds_without_template']:>8}")
    for row in rows[:3]:
        lines.append(f"  [{row['label_name']}] {row['seed'][:50]!r} -> {row['template'][:50]!r} -> "
                     f"{row['sample'][:60]!r}")
    lines.append("time: " + timings(result["timings_s"], result.get("cached_stages")))
    return "\n".join(lines)


@main_guard
def main(argv=None):
    run = common.Run(argv)
    p, method = build_parser()
    args = run.parse(p)
    config = method.make(args)
    config.check()
    common.require_kind(args, args.evaluator, "mstemp's evaluators (--evaluator)", mstemp.EVALUATOR_KINDS)
    data = load_labelled(args.dataset, text_column=args.text_column, label_column=args.label_column,
                         split=evaluation_split(args.dataset, args.split),
                         max_examples=args.max_examples, seed=args.seed)
    mstemp.check_data(data, config)
    out = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    if common.check_compile_flags(args):
        return _compile_only(run, args, data, config, out)
    log.info(f"{plural(len(data), 'seed')} from {data.source}; classes {list(data.label_names)}")
    if not config.label_names and all(n.isdigit() for n in data.label_names):
        log.warning("the classes are numbers; a decoder target scores these words zero-shot: "
                    "give --label_names=negative,positive (in class order) for meaningful prompts")

    scorers = {}

    def get(name):
        if name not in scorers:
            scorers[name] = run.loaded(name, load_scorer(args, name))
        return scorers[name]

    found = mstemp.run(get(args.model), {name: get(name) for name in args.evaluator}, get(args.filter), data,
                       config, target_name=args.model, filter_name=args.filter, cache_dir=join(out, "cache"),
                       progress=progress)
    result, rows = found.to_dict(), found.rows
    run.write(join(out, "results.json"), result)
    write_jsonl(join(out, "samples.jsonl"), rows)
    say(_summary(result, rows))
    if not rows:
        raise LmprobeError(f"no evaluator gave a generated sample (see the counts above), so there is no accuracy "
                           f"drop: lower --tau, raise --n_templates, or try another evaluator; results in {out}")
    say(f"\nresults in {out}")
