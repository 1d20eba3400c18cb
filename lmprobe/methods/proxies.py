"""The cheap label-free proxies of one model, each stage cached per (model, stage settings).

Proxies: SynTextBench's score (mean over trials, with its standard error); SynBench-Score at
a_t = SYNBENCH_A_T, eps = 0 (plug-in and bias-corrected) and 0.2, at n = synbench_n_per_width x
the model's width unless synbench_n fixes n, with the identity's score at the same width and n
(``synbench_ceiling``, a reference, not a proxy) and, when asked, its score at other factors on
the inputs (``synbench_input_scale<c>``); BYOD's negation / long-range / word-order /
tokenization sensitivity (decoders only), negation also normalised by a benign corpus and word
order also net of its null perturbation and per unit of next-token entropy, each with its
standard error (``<name>_stderr``). ``run`` gives ``{number name: value}``; ``cached_stage`` keeps
any stage's numbers under RUN_DIR/models/<stage>-<key>.json, the key made of the model's identity
(``model_key``) and the stage's settings, so a rerun computes only what is new.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from lmprobe import log as _logging
from lmprobe.data import corpus as corpus_lib
from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod, model_key, no_progress, synbench, syntextbench
from lmprobe.store import cache_key, cached_json, join

PROXIES = ("syntextbench", "synbench", "byod")
BYOD_METRICS = ("negation", "long_range", "word_order", "tokenization")
LOWER_IS_BETTER = frozenset({"byod_tokenization"})
INPUT_SCALE = "synbench_input_scale"  # prefix of SynBench's plug-in score at one factor on its inputs
# BYOD's extra readings: number name -> (metric, key of MetricResult.extra; its stderr under key + "_stderr")
BYOD_READINGS = {"byod_negation_normalized": ("negation", "normalized"),
                 "byod_word_order_net": ("word_order", "net_of_null"),
                 "byod_word_order_per_entropy": ("word_order", "per_entropy")}
SYNBENCH_A_T = 0.7
SYNBENCH_CORRECTED = "score_corrected"  # synbench.Result.scores' key of the bias-corrected eps = 0 score
CACHE_VERSION = 1
STDERR = "_stderr"  # suffix of a number's standard error
DF = "_df"  # suffix of the degrees of freedom behind a standard error (none: a normal error, many examples)
ITEMS = "_items"  # suffix of a number's per-item values on a test set every model shares (their mean is the number)
log = _logging.get("methods")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The proxies' sizes (front ends take them as flags of the same names)."""

    syntextbench_n: int = 1024  # SynTextBench sentences per level (train and test)
    syntextbench_levels: tuple[float, ...] = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9)  # SynTextBench levels p
    syntextbench_trials: int = 1  # SynTextBench repeats (seeds seed, seed+1, ...): their mean and its stderr
    synbench_n: int | None = None  # SynBench samples per scale and split for every model (none: n_per_width x width)
    synbench_n_per_width: int = 20  # SynBench n = this x the model's width: the same n / width for every model
    synbench_scales: tuple[float, ...] = gaussian.PAPER_SCALES  # SynBench class-mean scales (the paper's 50)
    synbench_input_scales: tuple[float, ...] = ()  # also SynBench at these factors on its inputs (a sweep; none: no)
    byod_examples: int = 200  # BYOD examples per metric
    seed: int = 0
    batch_size: int = 16

    @classmethod
    def of(cls, args) -> Settings:
        """The settings from parsed flags (any object with these attributes)."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass
class Inputs:
    """What the proxies read besides the model, built once for many models."""

    tasks: object = None  # SynTextBench's synthetic tasks
    corpus: object = None  # BYOD's corpus and benign corpus
    benign: object = None


def check(proxies, flag: str = "proxies") -> tuple[str, ...]:
    """``proxies``, or one LmprobeError naming the unknown ones (given as ``flag``)."""
    unknown = [p for p in proxies if p not in PROXIES]
    if unknown or not proxies:
        raise LmprobeError(f"`{flag}={','.join(proxies)}`: choose from {', '.join(PROXIES)}")
    return tuple(proxies)


def syntextbench_config(s: Settings) -> syntextbench.Config:
    return syntextbench.Config(n=s.syntextbench_n, levels=tuple(s.syntextbench_levels), seed=s.seed,
                               baselines=False, icl_examples=0)


def load_inputs(proxies, s: Settings) -> Inputs:
    """The proxies' data, before any model loads (a missing corpus fails now)."""
    out = Inputs()
    if "syntextbench" in proxies:  # one set of tasks per trial
        out.tasks = [syntextbench.build_tasks(c)
                     for c in syntextbench.trial_configs(syntextbench_config(s), s.syntextbench_trials)]
    if "byod" in proxies:
        out.corpus, out.benign = corpus_lib.load_corpus(None), corpus_lib.load_corpus("wordnet-examples")
    return out


def stages(proxies, s: Settings, decoder: bool) -> dict:
    """stage name -> its settings (the cache key's content), for the proxies that apply."""
    out = {}
    if "syntextbench" in proxies:  # one trial keeps the key of the runs before trials
        out["syntextbench"] = dict(n=s.syntextbench_n, levels=list(s.syntextbench_levels), seed=s.seed,
                                   **({"trials": s.syntextbench_trials} if s.syntextbench_trials > 1 else {}))
    if "synbench" in proxies:
        n = {"n": s.synbench_n} if s.synbench_n is not None else {"n_per_width": s.synbench_n_per_width}
        out["synbench"] = dict(**n, scales=list(s.synbench_scales), seed=s.seed, version=synbench.CACHE_VERSION,
                               inputs="embedding", pooling="probes", numbers=["corrected", "ceiling", "stderr"],
                               **({"input_scales": list(s.synbench_input_scales)} if s.synbench_input_scales else {}))
    if "byod" in proxies and decoder:
        out["byod"] = dict(metrics=list(BYOD_METRICS), n=s.byod_examples, seed=s.seed, stderr=True,
                           readings=list(BYOD_READINGS))
    return out


def run_stage(stage: str, scorer, name: str, s: Settings, inputs: Inputs, cache_dir: str, *,
              progress: Callable = no_progress) -> dict:
    """{number name: value} of one proxy stage on one model (method caches under ``cache_dir``)."""
    if stage == "syntextbench":
        trials = [syntextbench.run(scorer, c, model_name=name, tasks=tasks, cache_dir=cache_dir, progress=progress)
                  for c, tasks in zip(syntextbench.trial_configs(syntextbench_config(s), s.syntextbench_trials),
                                      inputs.tasks, strict=True)]
        if len(trials) == 1:
            return {"syntextbench": trials[0].score}
        summary = syntextbench.summarize_trials(trials)
        return {"syntextbench": summary["score"]["mean"],
                f"syntextbench{STDERR}": summary["score"]["std"] / len(trials) ** 0.5,
                f"syntextbench{DF}": len(trials) - 1}
    if stage == "synbench":
        return synbench_numbers(scorer, name, s, cache_dir, progress=progress)
    if stage == "byod":
        config = byod.Config(metrics=BYOD_METRICS, max_examples=s.byod_examples, seed=s.seed)
        result = byod.run(scorer, inputs.corpus, config, model_name=name, benign=inputs.benign, cache_dir=cache_dir,
                          progress=progress)
        out = {}
        for m in BYOD_METRICS:
            r = result.metrics.get(m)
            out[f"byod_{m}"], out[f"byod_{m}{STDERR}"] = (r.score, r.stderr) if r is not None else (None, None)
        for number, (metric, key) in BYOD_READINGS.items():
            extra = result.metrics[metric].extra if metric in result.metrics else {}
            out[number], out[f"{number}{STDERR}"] = extra.get(key), extra.get(f"{key}{STDERR}")
        return out
    raise LmprobeError(f"unknown proxy stage {stage!r}: choose from {', '.join(PROXIES)}")


def synbench_n(s: Settings, width: int) -> int:
    """SynBench's samples per scale and split for a model of ``width``: synbench_n, else
    synbench_n_per_width x width (the same n / width for every model compared)."""
    return s.synbench_n if s.synbench_n is not None else synbench.n_for_width(width, s.synbench_n_per_width)


def synbench_numbers(scorer, name: str, s: Settings, cache_dir: str, *, progress: Callable = no_progress) -> dict:
    """SynBench-Score at eps = 0 (plug-in ``synbench`` and bias-corrected ``synbench_corrected``, with its
    standard error) and
    eps = 0.2, on Gaussian inputs with the model's token-embedding statistics pooled as the probes
    pool, and the identity's score at the same width and n (``synbench_ceiling``)."""
    width = int(scorer.config.hidden_size)
    n = synbench_n(s, width)
    if n <= width:
        raise LmprobeError(f"`synbench_n={n}` is not above {name}'s width {width}: the plug-in Bayes classifier "
                           "then overfits its training split and SynBench-Score is 0 for any model (even the "
                           f"identity); leave `synbench_n` unset (n = `synbench_n_per_width` x width, "
                           f"{s.synbench_n_per_width * width} here)")
    config = synbench.Config(n=n, scales=tuple(s.synbench_scales), seed=s.seed, a_t=(SYNBENCH_A_T,),
                             epsilons=(0.0, 0.2), batch_size=s.batch_size)
    rep = synbench.scorer_representation(scorer, name, inputs="embedding")  # pooled as the real-task probes pool
    result = synbench.run(rep, config, cache_dir=cache_dir, progress=progress)
    out = {}
    for r in result.scores:
        if r["eps"] == 0:
            out["synbench"], out["synbench_corrected"] = r["score"], r.get(SYNBENCH_CORRECTED)
            out[f"synbench_corrected{STDERR}"] = r.get(f"{SYNBENCH_CORRECTED}{STDERR}")
        else:
            out[f"synbench_eps{r['eps']:g}"] = r["score"]
    identity = synbench.ceiling(width, config, cache_dir=cache_dir, progress=progress)
    out["synbench_ceiling"] = _plug_in(identity)
    if s.synbench_input_scales:
        swept = synbench.input_scale_sweep(scorer, name, config, s.synbench_input_scales, cache_dir=cache_dir,
                                           progress=progress, inputs="embedding")
        out.update({f"{INPUT_SCALE}{c:g}": _plug_in(r) for c, r in swept.items()})
    return out


def _plug_in(result) -> float:
    """The plug-in SynBench-Score at eps = 0 of a synbench.Result."""
    return next(r["score"] for r in result.scores if r["eps"] == 0)


def is_reference(name: str) -> bool:
    """Whether a number is reported beside the proxies but is not one: SynBench's width-matched
    ceiling (the identity's score) and its input-scale sweep."""
    return name == "synbench_ceiling" or name.startswith(INPUT_SCALE)


def cached_stage(run_dir: str, stage: str, settings: dict, scorer, compute: Callable[[], dict],
                 version: int = CACHE_VERSION) -> dict:
    """``compute()`` (a stage's numbers on ``scorer``), or what an earlier run saved for the same
    model identity and ``settings``. Collective in a multi-process run."""
    key = cache_key(stage=stage, settings=settings, model=model_key(scorer), version=version)
    return cached_json(join(run_dir, "models", f"{stage}-{key}.json"), compute)


def run(scorer, name: str, proxies, s: Settings, inputs: Inputs, run_dir: str, *,
        progress: Callable = no_progress) -> tuple[dict, dict]:
    """(numbers, seconds per stage) of every proxy of ``proxies`` that applies to ``scorer``."""
    numbers, seconds = {}, {}
    for stage, settings in stages(proxies, s, bool(scorer.is_decoder)).items():
        t = time.perf_counter()
        numbers.update(cached_stage(run_dir, stage, settings, scorer, lambda stage=stage: run_stage(
            stage, scorer, name, s, inputs, join(run_dir, "cache"), progress=progress)))
        seconds[stage] = time.perf_counter() - t
        log.info(f"{name}: {stage} in {seconds[stage]:.1f} s")
    return numbers, seconds


def split_stderr(numbers: dict) -> tuple[dict, dict]:
    """({name: value}, {name: standard error}) of a stage's numbers (``degrees_of_freedom`` has the rest)."""
    values = {k: v for k, v in numbers.items() if not k.endswith((STDERR, DF, ITEMS))}
    return values, {k[:-len(STDERR)]: v for k, v in numbers.items() if k.endswith(STDERR)}


def items(numbers: dict) -> dict:
    """{name: per-item values} of a stage's numbers that come item by item on a shared test set."""
    return {k[:-len(ITEMS)]: v for k, v in numbers.items() if k.endswith(ITEMS) and v is not None}


def degrees_of_freedom(numbers: dict, settings: Settings) -> dict:
    """{name: degrees of freedom} behind a stage's standard errors where they are few: SynTextBench's
    mean of trials has trials - 1 (also for stages cached before they were recorded); errors over
    many examples are left out (normal)."""
    out = {k[:-len(DF)]: v for k, v in numbers.items() if k.endswith(DF)}
    if f"syntextbench{STDERR}" in numbers and "syntextbench" not in out:
        out["syntextbench"] = settings.syntextbench_trials - 1
    return out
