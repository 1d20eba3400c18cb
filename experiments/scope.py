"""SCoPE: do two models share their invariances along a linguistic capability?

    python -m experiments.scope --reference=NAME --target=NAME [--target=...]
        --capability=synonym|typo|fairness --task=classify|lm [--dataset=offline-sentiment]
        [--trials=3 --max_examples=200 --head=auto|finetune|probe --objective=l1|kl --matrix]
        [--output_dir=runs/scope]

Model names: anything lmprobe loads, with variants (smollm2-135m@bf16, @int8,
@drop-layer=K; lmprobe.methods.scope.variants) and black boxes known only through samples
(blackbox:NAME, --samples draws per text). Classification: decoders are zero-shot classifiers
(label-word log-probabilities); encoders get a head fine-tuned on the training split
(--head=finetune, App. A recipe) or a linear probe (--head=probe). --task=lm compares next-token
distributions after each text minus its last word (App. G).

Offline demo (no labelled data offline: the default dataset has SILVER labels, see
lmprobe.data.labelled): python -m experiments.scope --reference=smollm2-135m
    --target=smollm2-135m@bf16 --target=smollm2-135m@int8 --target=smollm2-135m@drop-layer=15

Writes OUTPUT_DIR/results.json, samples.jsonl, metrics.png (and matrix_*.png with --matrix);
searches are cached in OUTPUT_DIR/cache, so a rerun resumes.
"""

from __future__ import annotations

from experiments.cli import dtype, main_guard, output_dir, parse, parser, progress, say
from lmprobe.data.labelled import OFFLINE_DEFAULT, load_labelled
from lmprobe.errors import LmprobeError
from lmprobe.methods.scope import capabilities, metrics, models, run as scope_run, training, variants
from lmprobe.report import scope_plots
from lmprobe.report.artifacts import join, write_json, write_jsonl

DEFAULT_REFERENCE = "smollm2-135m"
DEFAULT_TARGETS = ("smollm2-135m@bf16", "smollm2-135m@int8", "smollm2-135m@drop-layer=15")


def _data(args):
    """(train, test) labelled data."""
    kw = dict(text_column=args.text_column, label_column=args.label_column, seed=args.seed)
    if args.train_dataset:
        return (load_labelled(args.train_dataset, max_examples=args.max_train, **kw),
                load_labelled(args.dataset, split=args.split, max_examples=args.max_examples, **kw))
    if (args.dataset or "").startswith(("tfds:", "hf:")) and args.dataset.count(":") < 3:
        return (load_labelled(args.dataset, split="train", max_examples=args.max_train, **kw),
                load_labelled(args.dataset, split=args.split, max_examples=args.max_examples, **kw))
    data = load_labelled(args.dataset, **kw)
    train, test = data.split(0.2, seed=args.seed)
    return train.subset(range(min(len(train), args.max_train))), test.subset(range(min(len(test), args.max_examples)))


class _Models:
    """Builds each named model once."""

    def __init__(self, args, train):
        self.args, self.train, self.built = args, train, {}

    def __call__(self, name: str):
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _build(self, name: str):
        args = self.args
        if name.startswith("blackbox:"):
            inner = self(name.split(":", 1)[1])
            if inner.label_names is None:
                raise LmprobeError(f"'{name}': black boxes give labels, so they need --task=classify")
            return models.SampledModel(name, models.sampler_from(inner), inner.label_names, k=args.samples,
                                       seed=args.seed, unknown_token=inner.unknown_token)
        scorer = variants.load_scorer(name, dtype=dtype(args), offline=args.offline,
                                      allow_pickle=args.allow_pickle, batch_size=args.batch_size)
        if args.task == "lm":
            return models.NextToken(name, scorer)
        names = self.train.label_names
        head = args.head if args.head != "auto" else ("zero-shot" if scorer.is_decoder else "finetune")
        if head == "zero-shot":
            return models.ZeroShotClassifier(name, scorer, names)
        config = training.TrainConfig(learning_rate=args.learning_rate or (2e-5 if head == "finetune" else 1e-2),
                                      batch_size=args.train_batch_size, epochs=args.epochs, seed=args.seed)
        train_fn = training.finetune if head == "finetune" else training.linear_probe
        kw = {"progress": progress} if head == "finetune" else {}
        model, losses = train_fn(scorer, self.train.texts, self.train.labels, names, config=config, name=name, **kw)
        say(f"{name}: {head} on {len(self.train)} examples, epoch losses "
              + ", ".join(f"{l:.4f}" for l in losses))
        return model


def _summary(result: dict) -> str:
    rows = [f"== SCoPE: reference {result['reference']}, capability {result['capability']}, task "
            f"{result['task']}: {result['n_invariant']}/{result['n_examples']} examples got an invariant "
            f"perturbation ({result['n_pairs']} pairs; skipped {result['skipped'] or 'none'}); search "
            f"{result['search']['seconds']:.1f} s, {result['search']['seconds_per_perturbed_sample']:.3f} s per sample",
            f"{'target':<32}" + "".join(f"{scope_plots.LABELS[m]:>17}" for m in metrics.METRICS)]
    for name, row in result["targets"].items():
        rows.append(f"{name:<32}" + "".join(f"{row[m]:>8.3f} [{row['intervals'][m][0]:.2f},{row['intervals'][m][1]:.2f}]"
                                            .rjust(17) for m in metrics.METRICS))
    return "\n".join(rows)


@main_guard
def main(argv=None):
    p = parser(__doc__, default_model=DEFAULT_REFERENCE)
    p.add_argument("--reference", default=DEFAULT_REFERENCE)
    p.add_argument("--target", action="append", default=None, help="repeatable")
    p.add_argument("--capability", default="synonym", help=", ".join(capabilities.CAPABILITIES))
    p.add_argument("--task", default="classify", choices=scope_run.TASKS)
    p.add_argument("--dataset", default=OFFLINE_DEFAULT, help="csv/tsv/jsonl, tfds:NAME[:SPLIT], hf:NAME[:CONFIG][:SPLIT]")
    p.add_argument("--train_dataset", default=None, help="training data for fine-tuned heads (default: from --dataset)")
    p.add_argument("--text_column", default="text")
    p.add_argument("--label_column", default="label")
    p.add_argument("--split", default="test", help="base-sample split of tfds/hf datasets")
    p.add_argument("--max_examples", type=int, default=200, help="base samples (App. H: >= 50 give tight intervals)")
    p.add_argument("--max_train", type=int, default=2000)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--max_words", type=int, default=1, help="words one perturbation may change")
    p.add_argument("--objective", default="l1", choices=("l1", "kl"))
    p.add_argument("--head", default="auto", choices=("auto", "finetune", "probe", "zero-shot"))
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--learning_rate", type=float, default=None, help="default 2e-5 (finetune), 1e-2 (probe)")
    p.add_argument("--train_batch_size", type=int, default=64)
    p.add_argument("--samples", type=int, default=10, help="draws per text for blackbox: models")
    p.add_argument("--tolerance", type=float, default=metrics.DEFAULT_TOLERANCE)
    p.add_argument("--cutoff", type=float, default=metrics.DEFAULT_CUTOFF)
    p.add_argument("--bootstrap", type=int, default=metrics.DEFAULT_BOOTSTRAP)
    p.add_argument("--matrix", action="store_true", help="also every reference x target pair")
    p.add_argument("--output_dir", default="runs/scope")
    args = parse(p, argv)
    targets = args.target or list(DEFAULT_TARGETS)
    config = scope_run.Config(capability=args.capability, task=args.task, objective=args.objective,
                              trials=args.trials, max_words=args.max_words, tolerance=args.tolerance,
                              cutoff=args.cutoff, n_bootstrap=args.bootstrap, seed=args.seed)
    config.check()
    for name in [args.reference, *targets]:
        variants.split_name(name.split(":", 1)[-1])  # bad variant names fail before loading
    train, test = _data(args)
    out = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    say(f"dataset {test.source}: {len(train)} training, {len(test)} base examples, labels {list(test.label_names)}")
    build = _Models(args, train)
    reference = build(args.reference)
    texts, labels, decode = test.texts, test.labels, None
    if args.task == "lm":
        texts, labels = scope_run.lm_examples(test.texts, reference.scorer.tokenizer)
        decode = reference.scorer.tokenizer.decode
    target_models = {name: build(name) for name in targets}
    cache = join(out, "cache")
    result, samples = scope_run.run(reference, target_models, texts, labels, config, cache_dir=cache,
                                    decode=decode, progress=progress)
    result.update(dataset=test.source, label_names=list(test.label_names) if args.task == "classify" else None)
    if args.matrix:
        everyone = {args.reference: reference, **target_models}
        result["matrix"] = scope_run.matrix(everyone, texts, labels, config, cache_dir=cache, progress=progress)
        for m in ("hard_scope", "soft_scope", "ood_agreement"):
            scope_plots.matrix_heatmap(result["matrix"], m, join(out, f"matrix_{m}.png"))
    write_json(join(out, "results.json"), result)
    write_jsonl(join(out, "samples.jsonl"), samples)
    scope_plots.metric_bars(result, join(out, "metrics.png"))
    say(_summary(result))
    say(f"\nresults in {out}")


if __name__ == "__main__":
    main()
