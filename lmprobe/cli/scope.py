"""SCoPE: do two models share their invariances along a linguistic capability?

    python -m experiments.scope --reference=NAME --model=NAME [--model=...]
        --capability=synonym|typo|fairness --task=classify|lm [--dataset=rt-polarity]
        [--trials=3 --max_examples=200 --head=auto|finetune|probe|checkpoint --objective=l1|kl --matrix]
        [--output_dir=runs/scope]

Model names: anything lmprobe loads, with variants (smollm2-135m@bf16, @int8,
@drop-layer=K; lmprobe.checkpoints.variants) and black boxes known only through samples
(blackbox:NAME, --samples draws per text). Classification: decoders are zero-shot classifiers
(label-word log-probabilities); encoders get a head fine-tuned on the whole training split
(--head=finetune, App. A recipe; --max_train caps it) or a linear probe (--head=probe). The head
is the family's Hugging Face sequence-classification head (--head_layout=hf: BERT's pooler,
DistilBERT's pre-classifier, RoBERTa/MPNet's dense layer, decoders' last-token score, dropout
in training) or a linear head on mean-pooled tokens (--head_layout=mean). --head=checkpoint
evaluates the head a *ForSequenceClassification checkpoint was fine-tuned with (e.g. an SST-2
classifier, as the paper does), its labels matched to the data's by name. --task=lm compares next-token
distributions after each text minus its last word (App. G).

Several target models: repeat --model or use commas. The default dataset, rt-polarity (Rotten Tomatoes
sentences, human labels; heads train on its train split, base samples come from its test split),
is installed by `python -m experiments.assets --install pang-lee`; --dataset=offline-sentiment needs
no install but has SILVER labels (lmprobe.data.labelled). Offline demo:

    python -m experiments.scope --reference=smollm2-135m
        --model=smollm2-135m@bf16 --model=smollm2-135m@int8 --model=smollm2-135m@drop-layer=15
    lmprobe scope --reference=minilm-l6 --model=minilm-l6@int8,minilm-l6@bf16 --head=probe --capability=typo

The target models are --model (as in every front end; before, --target, and --model was another name of
--reference): --target names the TPU slice --compile_only compiles for, and an old --target=MODEL stops
with one line saying so.

Writes OUTPUT_DIR/results.json, samples.jsonl, metrics.png (and matrix_*.png with --matrix);
searches are cached in OUTPUT_DIR/cache, so a rerun resumes.

Compile before you rent: --compile_only [--target=v5e-8] compiles every engine step the run would execute
at its batch geometry, for the reference and each model (their zero-shot label-word or next-token
log-probabilities over the base texts and the search's perturbations, with --matrix every pair's; a
trained head's training steps, --head=finetune or probe, then its scoring), and writes per model and step
its shapes, calls, the compiler's memory per device and fit and the TPU cost model's estimate to
OUTPUT_DIR/results.json, reading no weight and running nothing (--head=checkpoint, which reads one, is
refused).

    python -m experiments.scope --reference=opt-13b --model=opt-13b@int8 --target=v5e-8 --compile_only
"""

from __future__ import annotations

import dataclasses

from lmprobe.checkpoints import variants
from lmprobe.cli import common, flags
from lmprobe.cli.common import log, main_guard, output_dir, progress, say
from lmprobe.data.labelled import DEFAULT, evaluation_split, load_labelled, named_dataset
from lmprobe.errors import LmprobeError
from lmprobe.methods import scope as scope_method
from lmprobe.methods.scope import build as scope_build
from lmprobe.methods.scope import capabilities, metrics, training
from lmprobe.models import CAUSAL_LM
from lmprobe.report import scope_plots
from lmprobe.report.plots import draw
from lmprobe.store import join, write_jsonl
from lmprobe.text import estimate, number, plural

DEFAULT_REFERENCE = "smollm2-135m"
DEFAULT_TARGETS = ("smollm2-135m@bf16", "smollm2-135m@int8", "smollm2-135m@drop-layer=15")
TRAIN_HELP = {"learning_rate": "learning rate of trained heads; none: 2e-5 (finetune), 1e-2 (probe)"}


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    reference: str = DEFAULT_REFERENCE  # reference model m1, whose invariant perturbations are searched
    # target models m2: anything lmprobe loads, variants (NAME@bf16, @int8, @drop-layer=K), blackbox:NAME
    model: tuple[str, ...] = DEFAULT_TARGETS
    # rt-polarity, rt-reviews, tweets-sentiment[@MIN_CONFIDENCE], offline-sentiment (silver labels), csv/tsv/jsonl,
    # tfds:NAME[:SPLIT], hf:NAME[:CONFIG][:SPLIT]
    dataset: str = DEFAULT
    train_dataset: str | None = None  # training data of fine-tuned heads (none: from --dataset)
    text_column: str = "text"  # text column of the dataset
    label_column: str = "label"  # label column of the dataset
    split: str | None = None  # base-sample split (none: test of named datasets, validation of tfds / hf ones)
    max_examples: int = 200  # base samples (App. H: >= 50 give tight intervals)
    max_train: int | None = None  # training examples of fine-tuned heads and probes (none: the whole train split)
    # classifier: auto (decoders zero-shot, encoders finetune), finetune, probe, zero-shot, checkpoint (the head
    # of a fine-tuned *ForSequenceClassification checkpoint, as it is)
    head: str = "auto"
    samples: int = 10  # draws per text for blackbox: models
    matrix: bool = False  # also every reference x target pair
    output_dir: str = "runs/scope"  # results.json, samples.jsonl, plots and the search cache


def build_parser():
    p = common.parser(__doc__, "scope")
    common.front_end(p, FrontEnd, choices={"head": scope_build.CLASSIFIER_HEADS},
                  convert=dict.fromkeys(("max_examples", "max_train", "samples"), flags.bounded(1)))
    method = common.method(p, scope_method.Config, aliases={"n_bootstrap": "--bootstrap"},
                        choices={"capability": tuple(capabilities.CAPABILITIES), "task": scope_method.TASKS,
                                 "objective": ("l1", "kl")})
    train = common.method(p, training.TrainConfig, help=TRAIN_HELP, defaults={"learning_rate": None},
                       names={"batch_size": "train_batch_size", "head": "head_layout"},
                       choices={"head": training.HEADS})
    common.compile_flags(p, moved="--model")  # --target named the target models before
    return p, method, train


def _data(args):
    """(train, test) labelled data."""
    kw = dict(text_column=args.text_column, label_column=args.label_column, seed=args.seed)
    split = evaluation_split(args.dataset, args.split)
    if args.train_dataset:
        return (load_labelled(args.train_dataset, max_examples=args.max_train, **kw),
                load_labelled(args.dataset, split=split, max_examples=args.max_examples, **kw))
    if named_dataset(args.dataset) or (args.dataset.startswith(("tfds:", "hf:")) and args.dataset.count(":") < 3):
        return (load_labelled(args.dataset, split="train", max_examples=args.max_train, **kw),
                load_labelled(args.dataset, split=split, max_examples=args.max_examples, **kw))
    data = load_labelled(args.dataset, **kw)
    train, test = data.split(0.2, seed=args.seed)
    return (train.subset(range(len(train) if args.max_train is None else min(len(train), args.max_train))),
            test.subset(range(min(len(test), args.max_examples))))


def _summary(result: dict) -> str:
    """The headline as the paper reports it (Sec. 4): mean +- standard error over the trials, then
    the 95% bootstrap interval and the pairs each metric counts (OOD agreement: every pair;
    Hard-/Soft-SCoPE: the reference-invariant ones, App. E.1)."""
    rows = [f"== SCoPE: reference {result['reference']}, capability {result['capability']}, task "
            f"{result['task']}: {result['n_perturbed']}/{plural(result['n_examples'], 'example')} perturbed, "
            f"{result['n_invariant']} with an argmax-invariant perturbation ({plural(result['n_pairs'], 'pair')}, "
            f"{result['n_invariant_pairs']} invariant; skipped {result['skipped'] or 'none'}); search "
            f"{result['search']['seconds']:.1f} s, "
            f"{result['search']['seconds_per_perturbed_sample']:.3f} s per sample",
            "mean +- standard error over trials [95% bootstrap interval] (pairs counted)",
            f"{'target':<32}" + "".join(f"{scope_plots.LABELS[m]:>31}" for m in metrics.METRICS)]
    for name, row in result["targets"].items():
        cells = (f"{estimate(row[m], row['std_error'][m], sep='+-')} [{number(row['intervals'][m][0], '.2f')},"
                 f"{number(row['intervals'][m][1], '.2f')}] ({row['counts'][m]['pairs']})" for m in metrics.METRICS)
        rows.append(f"{name:<32}" + "".join(cell.rjust(31) for cell in cells))
    return "\n".join(rows)


def _scope(args, config, train_config, train, test, load_scorer, cache: str | None) -> scope_method.Result:
    """The reference and the models built (``load_scorer(name)``: a name's Scorer) and compared, with every
    pair's comparison under --matrix."""
    build = scope_build.Models(load_scorer, task=args.task, head=args.head, train=train, train_config=train_config,
                               samples=args.samples, seed=args.seed, progress=progress)
    reference = build(args.reference)
    texts, labels, decode = test.texts, test.labels, None
    if args.task == "lm":
        texts, labels = scope_method.lm_examples(test.texts, reference.scorer.tokenizer)
        decode = reference.scorer.tokenizer.decode
    target_models = {name: build(name) for name in args.model}
    result = scope_method.run(reference, target_models, texts, labels, config, cache_dir=cache, decode=decode,
                           progress=progress, dataset=test.source,
                           label_names=test.label_names if args.task == "classify" else None)
    if args.matrix:
        everyone = {args.reference: reference, **target_models}
        result.matrix = scope_method.matrix(everyone, texts, labels, config, cache_dir=cache, progress=progress)
    return result


COMPILED_ON_ZEROS = ("the method's own code chose the steps, running on the zeros compiled steps return: the "
                     "search's candidates, rounds and perturbed texts follow the reference's outputs, so their "
                     "count and lengths are those zeros give")
NOT_COMPILED = ("not compiled: the search's and the metrics' own small programs on the log-probabilities "
                "(host-sized, one device), black boxes' sampling (host-side)")


def _compile_only(run: common.Run, args, config, train_config, train, test, out: str) -> None:
    """Every engine step of the run compiled (common.compile_only_models): the reference and the models built
    from compile-only Scorers (a fine-tuned head's training steps on the model's mesh, a probe's on one
    device, then the trained head's scoring) and compared, uncached. A head read from a checkpoint is refused
    in one line: a compile-only run reads no weights."""
    def queries(scorer_for):
        def load(name):
            scorer = scorer_for(name)
            if args.task == "classify" and scope_build.head_for(args.head, scorer) == "checkpoint":
                raise LmprobeError(f"--compile_only reads no weights, and {name}'s head is read from its checkpoint "
                                   "(--head=checkpoint): pass --head=finetune to compile the fine-tuning of a "
                                   "fresh head of its shape, or drop --compile_only")
            return scorer

        _scope(args, config, train_config, train, test, load, None)

    common.compile_only_models(run, args, queries, out, notes=[COMPILED_ON_ZEROS, NOT_COMPILED])


@main_guard
def main(argv=None):
    run = common.Run(argv)
    p, method, train_flags = build_parser()
    args = run.parse(p)
    targets = list(args.model)
    config = method.make(args)
    config.check()
    train_flags.make(args, learning_rate=args.learning_rate or 1e-2).check()
    for name in [args.reference, *targets]:
        variants.split_name(name.split(":", 1)[-1])  # bad variant names fail before loading
    if args.task == "lm" or args.head == "zero-shot":  # next-token outputs: causal LMs only, refused before loading
        common.require_kind(args, [n for n in (args.reference, *targets) if not n.startswith(scope_build.BLACK_BOX)],
                         "scope --task=lm" if args.task == "lm" else "scope --head=zero-shot", (CAUSAL_LM,))
    train, test = _data(args)
    out = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    if common.check_compile_flags(args):
        return _compile_only(run, args, config, train_flags.make(args), train, test, out)
    log.info(f"dataset {test.source}: {len(train)} training, {len(test)} base examples, "
             f"labels {list(test.label_names)}")
    found = _scope(args, config, train_flags.make(args), train, test,
                   lambda name: run.loaded(name, common.load_scorer(args, name)), join(out, "cache"))
    result = found.to_dict()
    run.write(join(out, "results.json"), result)
    write_jsonl(join(out, "samples.jsonl"), found.samples())
    say(_summary(result))
    draw(scope_plots.metric_bars, result, join(out, "metrics.png"))
    if args.matrix:
        for m in ("hard_scope", "soft_scope", "ood_agreement"):
            draw(scope_plots.matrix_heatmap, result["matrix"], m, join(out, f"matrix_{m}.png"))
    say(f"\nresults in {out}")
