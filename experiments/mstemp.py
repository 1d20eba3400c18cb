"""MSTemp: a target model's accuracy on a labelled seed set and on samples generated from it by
meta semantic templates (evaluator LMs paraphrase, an encoder filters, parsing and refilling).

    python -m experiments.mstemp --model=TARGET --evaluator=NAME [--evaluator=NAME ...]
        [--filter=minilm-l6 --dataset=offline-sentiment --n_templates=5 --m_samples=3 --tau=0.7
         --attack=none|typo|synonym --output_dir=runs/mstemp]

Writes OUTPUT_DIR/results.json and OUTPUT_DIR/samples.jsonl (seed, paraphrase, similarity,
template, filled sample, label, prediction). Paraphrases are cached under OUTPUT_DIR/cache: a
rerun (or a run after an interruption) reuses them.
"""

from __future__ import annotations

import argparse

from experiments.cli import load_scorer, main_guard, output_dir, parse, parser, progress, say
from lmprobe.data.labelled import OFFLINE_DEFAULT, load_labelled
from lmprobe.methods import mstemp
from lmprobe.errors import LmprobeError
from lmprobe.methods.mstemp import filter as semantic_filter
from lmprobe.methods.mstemp.run import ATTACKS
from lmprobe.report.artifacts import join, write_json, write_jsonl


def _summary(result: dict, rows: list[dict]) -> str:
    lines = [f"== MSTemp: {result['target']} on {result['n_seed']} seeds ({result['dataset'][:60]})",
             f"classifier: {result['classifier']}",
             f"baseline accuracy {result['baseline_accuracy']:.3f}   generated {result['generated_accuracy']:.3f}   "
             f"drop {result['drop']:+.3f} ({100 * result['relative_drop']:.1f}%)",
             f"{'evaluator':<28} {'accuracy':>14} {'samples':>8} {'accept':>7} {'no tmpl':>8}"]
    for name, e in result["per_evaluator"].items():
        lines.append(f"{name:<28} {e['accuracy']:>7.3f}±{e['accuracy_std']:.3f} {e['samples']:>8} "
                     f"{e['acceptance_rate']:>7.2f} {e['seeds_without_template']:>8}")
    for r in rows[:3]:
        lines.append(f"  [{r['label_name']}] {r['seed'][:50]!r} -> {r['template'][:50]!r} -> {r['sample'][:60]!r}")
    lines.append("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in result["timings_s"].items()))
    return "\n".join(lines)


@main_guard
def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--evaluator", action="append", default=None,
                   help="evaluator LM that paraphrases the seeds (repeat the flag for several; default smollm2-135m)")
    p.add_argument("--filter", default=semantic_filter.DEFAULT_FILTER, help="encoder of the semantic filter")
    p.add_argument("--dataset", default=OFFLINE_DEFAULT,
                   help=".csv/.tsv/.jsonl, tfds:glue/sst2, hf:glue:sst2:validation or offline-sentiment")
    p.add_argument("--split", default="validation")
    p.add_argument("--text_column", default="text")
    p.add_argument("--label_column", default="label")
    p.add_argument("--label_names", default=None, help="comma-separated words for the classes (zero-shot prompt)")
    p.add_argument("--max_examples", type=int, default=None, help="seed examples to use (default all)")
    p.add_argument("--n_templates", type=int, default=5, help="n: templates kept per seed and evaluator")
    p.add_argument("--n_candidates", type=int, default=None, help="paraphrases sampled per seed (default n_templates)")
    p.add_argument("--m_samples", type=int, default=3, help="m: fillings per template")
    p.add_argument("--tau", type=float, default=semantic_filter.DEFAULT_TAU, help="cosine threshold of the filter")
    p.add_argument("--attack", default="none", choices=sorted(ATTACKS))
    p.add_argument("--attack_strength", type=int, default=1, help="typo / synonym edits per sample")
    p.add_argument("--tagger", default="auto", choices=["auto", "nltk", "wordnet"])
    p.add_argument("--repeats", type=int, default=10, help="draws of N generated samples (fair comparison)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top_p", type=float, default=0.95)
    p.add_argument("--max_new_tokens", type=int, default=48)
    p.add_argument("--output_dir", default="runs/mstemp")
    args = parse(p, argv)
    evaluators = args.evaluator or ["smollm2-135m"]

    config = mstemp.Config(
        n_templates=args.n_templates, n_candidates=args.n_candidates, m_samples=args.m_samples, tau=args.tau,
        attack=args.attack, attack_strength=args.attack_strength, tagger=args.tagger, repeats=args.repeats,
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed,
        label_names=tuple(args.label_names.split(",")) if args.label_names else None)
    config.check()
    data = load_labelled(args.dataset, text_column=args.text_column, label_column=args.label_column,
                         split=args.split, max_examples=args.max_examples, seed=args.seed)
    mstemp.check_data(data)
    if config.label_names and len(config.label_names) != len(data.label_names):
        raise LmprobeError(f"--label_names gives {len(config.label_names)} names for "
                                      f"{len(data.label_names)} classes {list(data.label_names)}")
    out = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    say(f"{len(data)} seeds from {data.source}; classes {list(data.label_names)}")
    if not config.label_names and all(n.isdigit() for n in data.label_names):
        say("note: the classes are numbers; a decoder target scores these words zero-shot: "
              "give --label_names=negative,positive (in class order) for meaningful prompts")

    scorers = {}

    def get(name):
        if name not in scorers:
            scorers[name] = load_scorer(argparse.Namespace(**{**vars(args), "model": name}))
        return scorers[name]

    result, rows = mstemp.run(get(args.model), {name: get(name) for name in evaluators}, get(args.filter), data,
                              config, target_name=args.model, filter_name=args.filter,
                              cache_dir=join(out, "cache"), progress=progress)
    write_json(join(out, "results.json"), result)
    write_jsonl(join(out, "samples.jsonl"), rows)
    say(_summary(result, rows))
    say(f"\nresults in {out}")


if __name__ == "__main__":
    main()
