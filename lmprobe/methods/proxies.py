"""The cheap label-free proxies of one model, each stage cached per (model, stage settings).

Proxies: SynTextBench's score; SynBench-Score at a_t = SYNBENCH_A_T, eps = 0 and 0.2; BYOD's
negation / long-range / word-order / tokenization sensitivity (decoders only), each with its
standard error (``<name>_stderr``). ``run`` gives ``{number name: value}``; ``cached_stage``
keeps any stage's numbers under RUN_DIR/models/<stage>-<key>.json, the key made of the model's
identity (``model_key``) and the stage's settings, so a rerun computes only what is new.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from lmprobe import log as _logging
from lmprobe.data import corpus as corpus_lib
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod, model_key, no_progress, synbench, syntextbench
from lmprobe.report.artifacts import cache_key, cached_json, join

PROXIES = ("syntextbench", "synbench", "byod")
BYOD_METRICS = ("negation", "long_range", "word_order", "tokenization")
LOWER_IS_BETTER = frozenset({"byod_tokenization"})
SYNBENCH_A_T = 0.7
CACHE_VERSION = 1
STDERR = "_stderr"  # suffix of a number's standard error
log = _logging.get("methods")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The proxies' sizes (front ends take them as flags of the same names)."""

    syntextbench_n: int = 1024  # SynTextBench sentences per level (train and test)
    syntextbench_levels: tuple[float, ...] = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9)  # SynTextBench levels p
    synbench_n: int = 2048  # SynBench samples per scale and split (must exceed the model's width)
    synbench_scales: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0)  # SynBench class-mean scales
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


def check(proxies, flag: str = "--proxies") -> tuple[str, ...]:
    """``proxies``, or one LmprobeError naming the unknown ones (given as ``flag``)."""
    unknown = [p for p in proxies if p not in PROXIES]
    if unknown or not proxies:
        raise LmprobeError(f"{flag}={','.join(proxies)}: choose from {', '.join(PROXIES)}")
    return tuple(proxies)


def syntextbench_config(s: Settings) -> syntextbench.Config:
    return syntextbench.Config(n=s.syntextbench_n, levels=tuple(s.syntextbench_levels), seed=s.seed,
                               baselines=False, icl_examples=0)


def load_inputs(proxies, s: Settings) -> Inputs:
    """The proxies' data, before any model loads (a missing corpus fails now)."""
    out = Inputs()
    if "syntextbench" in proxies:
        out.tasks = syntextbench.build_tasks(syntextbench_config(s))
    if "byod" in proxies:
        out.corpus, out.benign = corpus_lib.load_corpus(None), corpus_lib.load_corpus("wordnet-examples")
    return out


def stages(proxies, s: Settings, decoder: bool) -> dict:
    """stage name -> its settings (the cache key's content), for the proxies that apply."""
    out = {}
    if "syntextbench" in proxies:
        out["syntextbench"] = dict(n=s.syntextbench_n, levels=list(s.syntextbench_levels), seed=s.seed)
    if "synbench" in proxies:
        out["synbench"] = dict(n=s.synbench_n, scales=list(s.synbench_scales), seed=s.seed,
                               version=synbench.CACHE_VERSION)  # scores from before the input signs were 0
    if "byod" in proxies and decoder:
        out["byod"] = dict(metrics=list(BYOD_METRICS), n=s.byod_examples, seed=s.seed, stderr=True)
    return out


def run_stage(stage: str, scorer, name: str, s: Settings, inputs: Inputs, cache_dir: str, *,
              progress: Callable = no_progress) -> dict:
    """{number name: value} of one proxy stage on one model (method caches under ``cache_dir``)."""
    if stage == "syntextbench":
        return {"syntextbench": syntextbench.run(scorer, syntextbench_config(s), model_name=name, tasks=inputs.tasks,
                                                 cache_dir=cache_dir, progress=progress).score}
    if stage == "synbench":
        width = int(scorer.config.hidden_size)
        if s.synbench_n <= width:
            raise LmprobeError(f"--synbench_n={s.synbench_n} is not above {name}'s width {width}: the plug-in Bayes "
                               "classifier then overfits its training split and SynBench-Score is 0 for any model "
                               f"(even the identity); use --synbench_n={max(2048, 2 * width)}")
        config = synbench.Config(n=s.synbench_n, scales=tuple(s.synbench_scales), seed=s.seed,
                                 a_t=(SYNBENCH_A_T,), epsilons=(0.0, 0.2), batch_size=s.batch_size)
        result = synbench.run(synbench.scorer_representation(scorer, name), config, cache_dir=cache_dir,
                              progress=progress)
        return {"synbench" if r["eps"] == 0 else f"synbench_eps{r['eps']:g}": r["score"] for r in result.scores}
    if stage == "byod":
        config = byod.Config(metrics=BYOD_METRICS, max_examples=s.byod_examples, seed=s.seed)
        result = byod.run(scorer, inputs.corpus, config, model_name=name, benign=inputs.benign, cache_dir=cache_dir,
                          progress=progress)
        out = {}
        for m in BYOD_METRICS:
            r = result.metrics.get(m)
            out[f"byod_{m}"], out[f"byod_{m}{STDERR}"] = (r.score, r.stderr) if r is not None else (None, None)
        return out
    raise LmprobeError(f"unknown proxy stage {stage!r}: choose from {', '.join(PROXIES)}")


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
    """({name: value}, {name: standard error}) of a stage's numbers."""
    values = {k: v for k, v in numbers.items() if not k.endswith(STDERR)}
    return values, {k[:-len(STDERR)]: v for k, v in numbers.items() if k.endswith(STDERR)}
