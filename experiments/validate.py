"""Do the label-free scores mean anything? Each proxy's ranking of a model ladder against real tasks.

    python -m experiments.validate --models=minilm-l6,mpnet-base,nomic-embed-v1.5,smollm2-135m,gemma3-270m
    python -m experiments.validate --models=smollm2-135m,smollm2-135m@noise=0.05,smollm2-135m@noise=0.1 \\
        --proxies=syntextbench,synbench,byod --output_dir=runs/validate

Every model gets every proxy (SynTextBench score; SynBench-Score at a_t = 0.7, eps = 0 and 0.2;
BYOD negation / long-range / word-order / tokenization sensitivity, decoders only) and every real
task that applies (lmprobe.methods.realtask: SentEval-style probes on rt-polarity and
tweets-sentiment for all models; for decoders zero-shot label-word accuracy on both and
bits per byte on held-out movie reviews). Then, per family group (encoders, decoders), Pearson,
Spearman and Kendall between every proxy and every real task with bootstrap intervals over
models, one scatter grid per group and OUTPUT_DIR/results.json.

Signs: a lower-is-better number (BYOD tokenization sensitivity, bits per byte) is negated before
correlating, so a positive correlation always means "the proxy orders models as the task does".
BYOD's other sensitivities count as higher-is-better, as in the paper (negation tracks TriviaQA,
long-range and word order track LAMBADA).

Model names take variants (lmprobe.checkpoints.variants): NAME@noise=SIGMA (seeded Gaussian
noise, sigma x each tensor's rms), NAME@drop-layer=K, NAME@int8, NAME@bf16; a noise ladder has
a known order. Each (model, stage) result is cached under OUTPUT_DIR/models, keyed by the model's
identity and the stage's settings: a rerun, or a run with more models, computes only what is new.
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
from lmprobe.checkpoints import variants
from lmprobe.data.labelled import load_labelled
from lmprobe.errors import LmprobeError
from lmprobe.methods import proxies as proxies_lib
from lmprobe.methods import realtask
from lmprobe.report import correlation, plots
from lmprobe.report.artifacts import join
from lmprobe.report.text import number, plural

PROXIES, BYOD_METRICS = proxies_lib.PROXIES, proxies_lib.BYOD_METRICS
TASKS = ("probes", "zero_shot", "prose")  # zero_shot and prose: decoders only
LOWER_IS_BETTER = proxies_lib.LOWER_IS_BETTER | {"prose_bits_per_byte"}


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    models: tuple[str, ...] = ()  # models and variants (NAME@noise=SIGMA, @drop-layer=K, @int8), at least 3 per group
    proxies: tuple[str, ...] = PROXIES  # label-free scores to check: syntextbench, synbench, byod
    tasks: tuple[str, ...] = TASKS  # real tasks: probes (all models); zero_shot, prose (decoders)
    output_dir: str = "runs/validate"  # results.json, scatter plots, per-model caches
    syntextbench_n: int = 1024  # SynTextBench sentences per level (train and test)
    syntextbench_levels: tuple[float, ...] = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9)  # SynTextBench levels p
    synbench_n: int = 2048  # SynBench samples per scale and split (the paper's; must exceed the model's width)
    synbench_scales: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0)  # SynBench class-mean scales
    byod_examples: int = 200  # BYOD examples per metric
    probe_train: int = 1000  # probe training sentences per dataset (a fixed sample of the train split)
    probe_test: int = 800  # probe test sentences per dataset (a fixed sample of the test split)
    zero_shot_examples: int = 400  # zero-shot test sentences per dataset (decoders)
    prose_texts: int = 60  # held-out reviews (rt-reviews test split) for bits per byte (decoders)
    prose_chars: int = 1500  # characters of each review, cut at a word boundary
    tweets_min_confidence: float = 0.0  # keep tweets whose annotator confidence is at least this
    bootstrap: int = 2000  # bootstrap resamples of the models for the intervals


def build_parser():
    p = cli.parser(__doc__, "validate")
    counts = ("byod_examples", "probe_train", "probe_test", "zero_shot_examples", "prose_texts", "prose_chars",
              "bootstrap")
    cli.front_end(p, FrontEnd, convert={**dict.fromkeys(counts, flags.bounded(1)), "synbench_n": flags.bounded(8),
                                        "synbench_scales": flags.bounded(0, base=float, strict=True),
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


# --- one model ---------------------------------------------------------------------------------


def _stages(args, decoder: bool) -> dict:
    """stage name -> its settings (the cache key's content)."""
    out = proxies_lib.stages(args.proxies, proxies_lib.Settings.of(args), decoder)
    if "probes" in args.tasks:
        out["probes"] = dict(train=args.probe_train, test=args.probe_test, conf=args.tweets_min_confidence,
                             seed=args.seed)
    if "zero_shot" in args.tasks and decoder:
        out["zero_shot"] = dict(n=args.zero_shot_examples, conf=args.tweets_min_confidence, seed=args.seed)
    if "prose" in args.tasks and decoder:
        out["prose"] = dict(texts=args.prose_texts, chars=args.prose_chars, seed=args.seed, start="separator")
    return out


def _run_stage(stage: str, scorer, name: str, args, data: Data, cache_dir: str) -> dict:
    """{number name: value} of one stage on one model."""
    if stage in PROXIES:
        return proxies_lib.run_stage(stage, scorer, name, proxies_lib.Settings.of(args), data.inputs, cache_dir,
                                     progress=progress)
    if stage == "probes":
        out = {}
        for task, (train, test) in data.probes.items():
            r = realtask.probe(scorer, train, test, seed=args.seed, progress=progress)
            out[f"probe_{task}"] = r["balanced_accuracy"]
        return out
    if stage == "zero_shot":
        out = {}
        for task, (_, test) in data.probes.items():
            r = realtask.zero_shot(scorer, _sample(test, args.zero_shot_examples, args.seed), progress=progress,
                                   template=realtask.TEMPLATES["tweet" if task == "tweets" else "review"])
            out[f"zero_shot_{task}"] = r["balanced_accuracy"]
        return out
    if stage == "prose":
        return {"prose_bits_per_byte": realtask.perplexity(scorer, data.prose, max_chars=args.prose_chars,
                                                           progress=progress)["bits_per_byte"]}
    raise LmprobeError(f"unknown stage {stage!r}")


def measure(name: str, args, data: Data, run_dir: str, run: cli.Run) -> dict:
    """Every stage on one model (cached per stage)."""
    start = time.perf_counter()
    scorer = run.loaded(name, cli.load_scorer(args, name))
    decoder = bool(scorer.is_decoder)
    record = {"model": name, "group": "decoders" if decoder else "encoders", "numbers": {}, "stderr": {}, "seconds": {},
              "load_s": time.perf_counter() - start}
    cache_dir = join(run_dir, "cache")
    for stage, settings in _stages(args, decoder).items():
        t = time.perf_counter()
        numbers, stderr = proxies_lib.split_stderr(proxies_lib.cached_stage(
            run_dir, stage, settings, scorer,
            lambda stage=stage: _run_stage(stage, scorer, name, args, data, cache_dir)))
        record["numbers"].update(numbers)
        record["stderr"].update(stderr)
        record["seconds"][stage] = time.perf_counter() - t
        log.info(f"{name}: {stage} in {record['seconds'][stage]:.1f} s")
    return record


# --- across models -----------------------------------------------------------------------------


def _names(records, prefixes) -> list[str]:
    seen = dict.fromkeys(k for r in records for k in r["numbers"])
    return [k for k in seen if k.startswith(prefixes)]


def correlate(records: list[dict], args) -> dict:
    """Per group: the proxy x task correlation rows (lmprobe.report.correlation.correlation_table)."""
    out = {}
    for group in sorted({r["group"] for r in records}):
        rows = [r for r in records if r["group"] == group]
        proxies = {p: [r["numbers"].get(p) for r in rows] for p in _names(rows, PROXIES)}
        tasks = {t: [r["numbers"].get(t) for r in rows] for t in _names(rows, ("probe_", "zero_shot_", "prose_"))}
        out[group] = {"models": [r["model"] for r in rows],
                      "rows": correlation.correlation_table(proxies, tasks, lower_is_better=LOWER_IS_BETTER,
                                                            n_resamples=args.bootstrap, seed=args.seed)}
    return out


def summary(records: list[dict], correlations: dict) -> str:
    lines = []
    for group, table in correlations.items():
        rows = [r for r in records if r["group"] == group]
        names = list(dict.fromkeys(k for r in rows for k in r["numbers"]))
        lines.append(f"== {group}: per-model numbers")
        lines.append("model".ljust(34) + " ".join(n[:14].rjust(14) for n in names))
        lines += [r["model"][:34].ljust(34) + " ".join(number(r["numbers"].get(n), ".4f").rjust(14) for n in names)
                  for r in rows]
        lines.append(f"== {group}: proxy vs real task ({plural(len(rows), 'model')}; Spearman / Kendall, "
                     "95% bootstrap CI)")
        for row in table["rows"]:
            rho, tau = row["spearman"], row["kendall"]
            if rho.get("estimate") is None:
                lines.append(f"{row['proxy']:<22} {row['task']:<26} n={row['n']}: {row.get('note', '-')}")
                continue
            rho, tau, r = ({k: number(c.get(k), ".2f") for k in ("estimate", "low", "high")}
                           for c in (rho, tau, row["pearson"]))
            lines.append(f"{row['proxy']:<22} {row['task']:<26} n={row['n']}  rho {rho['estimate']} [{rho['low']}, "
                         f"{rho['high']}]  tau {tau['estimate']} [{tau['low']}, {tau['high']}]  r {r['estimate']}")
    return "\n".join(lines)


@main_guard
def main(argv=None):
    run = cli.Run(argv)
    args = run.parse(build_parser())
    for flag, given, known in (("proxies", args.proxies, PROXIES), ("tasks", args.tasks, TASKS)):
        if [v for v in given if v not in known]:
            raise LmprobeError(f"--{flag}={','.join(given)}: choose from {', '.join(known)}")
    if not args.models:
        raise LmprobeError("give the models to compare: --models=a,b,c (3 or more per family group)")
    for name in args.models:
        variants.split_name(name)  # bad variant names fail before any work
    started = time.perf_counter()
    run_dir = output_dir(args.output_dir)
    data = load_data(args)
    records = []
    for name in args.models:
        records.append(measure(name, args, data, run_dir, run))
        gc.collect()  # the model's weights go before the next one loads
    correlations = correlate(records, args)
    for group in correlations:
        rows = [r for r in records if r["group"] == group]
        plots.scatter_grid({p: [r["numbers"].get(p) for r in rows] for p in _names(rows, PROXIES)},
                           {t: [r["numbers"].get(t) for r in rows]
                            for t in _names(rows, ("probe_", "zero_shot_", "prose_"))},
                           [r["model"] for r in rows], [group] * len(rows), join(run_dir, f"scatter-{group}.png"),
                           lower_is_better=LOWER_IS_BETTER)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    run.write(join(run_dir, "results.json"),
              {"method": "validate", "models": records, "correlations": correlations,
               "lower_is_better": sorted(LOWER_IS_BETTER), "wall_s": time.perf_counter() - started,
               "peak_rss_gb": peak_gb})
    say(summary(records, correlations))
    say(f"\n{plural(len(records), 'model')} in {time.perf_counter() - started:.0f} s, peak RSS {peak_gb:.1f} GB; "
        f"results in {os.path.abspath(run_dir) if '://' not in run_dir else run_dir}")


if __name__ == "__main__":
    main()
