"""BYOD (Jain et al., ../seeds/001): self-supervised evaluation by a model's sensitivity to text
transformations of the user's own corpus (Eq. 1: SCORE = A{M(f(x), f(x')) for (x, x') in X}).

    corpus -> sentences / paragraphs -> (x, x') pairs per metric (lmprobe.perturb)
    -> each pair scored as one packed row (the tokens x and x' share at the start run once):
       log-perplexities (negation), next-token JSD / entropy / profane-token mass at chosen
       positions, on device; seeded generation. Within a run, a sentence that several metrics
       compare (toxicity, word order, tokenization, entropy) runs once (engine.HiddenMemo)
    -> per-example records, mean (or median) and standard error, skipped sentences and why

Metrics (one module per family): negation (knowledge.py, Sec. 4), toxicity (toxicity.py,
Sec. 5), long_range (long_range.py, Sec. 6), word_order / tokenization / entropy
(next_token.py, Secs. 7-9). ``run`` computes the chosen ones on one model, caching each under a
directory so that a rerun resumes.

An encoder-decoder (T5) runs negation (each sentence scored as the decoder's target given an
empty source, Scorer.score) and toxicity's generation score (the answer to x'); the metrics on
next-token distributions after a text need a causal LM and report an error naming this.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from lmprobe.engine import HiddenMemo
from lmprobe.errors import LmprobeError
from lmprobe.methods import model_key
from lmprobe.methods.byod import knowledge, long_range, next_token, toxicity
from lmprobe.methods.byod.common import MetricResult, no_progress, shuffled
from lmprobe.perturb.text import DEFAULT_TRIGGER
from lmprobe.report.artifacts import cache_key, cached_json, join

METRICS = ("negation", "toxicity", "long_range", "word_order", "tokenization", "entropy")
CACHE_VERSION = 3  # 2: sampling among the top-k candidates; 3: keys hold the model's identity and the paragraphs


@dataclasses.dataclass(frozen=True)
class Config:
    """A BYOD run. Tuples of k / n_swaps / chop are ablations: the first value is the headline."""

    metrics: tuple[str, ...] = METRICS  # metrics to compute
    max_examples: int | None = 1000  # examples per metric (the paper: 1000); none: all
    seed: int = 0
    k_long_range: tuple[int, ...] = (2,)  # sentences replaced (Sec. 6; A.3 Fig. 18 ablation)
    n_swaps: tuple[int, ...] = (1,)  # word swaps (Sec. 7; A.4 Fig. 20 ablation)
    chop: tuple[int, ...] = (5,)  # split stride in characters (Sec. 8; A.5 Fig. 21 ablation)
    trigger: str = DEFAULT_TRIGGER  # phrase appended for the toxicity metric (Sec. 5; A.2 Fig. 16)
    generate: bool = True  # the generation-based toxicity score (--no_generate: next-token mass only)
    # continuation: toxicity's logit score averaged over the positions predicting the sampled continuation
    # (Sec. 5: "each position in a block of text"); next: the position after the prompt only
    toxicity_logit: str = "continuation"  # positions of the toxicity logit score: continuation or next
    max_new_tokens: int = 20  # tokens generated per example (toxicity)
    temperature: float = 1.0  # sampling temperature; 0: greedy
    top_k: int = 50  # sampling: keep the k most likely tokens (transformers' default, the authors' setting)
    top_p: float = 1.0  # sampling: nucleus mass (1: off)

    def check(self) -> None:
        """Bad settings fail here, before any model is loaded."""
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown or not self.metrics:
            raise LmprobeError(f"unknown metric(s) {unknown or '(none given)'}: choose from {', '.join(METRICS)}")
        if self.max_examples is not None and self.max_examples < 1:
            raise LmprobeError(f"max_examples={self.max_examples} must be at least 1")
        for name, values, low in (("k_long_range", self.k_long_range, 0), ("n_swaps", self.n_swaps, 1),
                                  ("chop", self.chop, 1)):
            if not values or min(values) < low:
                raise LmprobeError(f"{name}={list(values)} must be non-empty integers >= {low}")
        if not self.trigger.strip():
            raise LmprobeError("the toxicity trigger is empty: pass --trigger=' Fuck Fuck' or another phrase")
        if "toxicity" in self.metrics:
            toxicity.check_logit(self.toxicity_logit, self.generate)
        if self.max_new_tokens < 1 or self.temperature < 0:
            raise LmprobeError(f"max_new_tokens={self.max_new_tokens} must be >= 1 and "
                               f"temperature={self.temperature} >= 0")


@dataclasses.dataclass
class Result:
    model: str
    metrics: dict[str, MetricResult]
    errors: dict[str, str]  # metric -> message, for metrics that could not run at all
    timings: dict[str, float]

    def to_json(self) -> dict:
        out = {name: m.to_json() for name, m in self.metrics.items()}
        for name, message in self.errors.items():
            out[name] = {"score": None, "stderr": None, "n": 0, "error": message, "skipped": {}}
        return out

    def samples(self):
        """Per-example records: one JSON object per line of samples.jsonl."""
        for name, metric in self.metrics.items():
            for record in metric.records:
                yield {"model": self.model, "metric": name, **record}


def _fingerprint(corpus) -> str:
    """The corpus's sentences in their paragraphs (long-range replaces sentences within one)."""
    return cache_key(paragraphs=corpus.paragraphs) if corpus else "none"


def run(scorer, corpus, config: Config, *, model_name: str, benign=None, profanity=None,
        cache_dir: str | None = None, progress: Callable = no_progress) -> Result:
    """The chosen metrics of ``config`` on ``scorer``'s model over ``corpus`` (an
    lmprobe.data.corpus.Corpus); ``benign`` (a Corpus) normalises the negation score and
    ``profanity`` (lmprobe.data.profanity.Profanity, or the LmprobeError that loading it raised) is
    the toxicity word list. A metric that
    cannot run (its input is unusable) is reported in ``errors``; the others still run."""
    config.check()
    sentences = shuffled(corpus.sentences, config.seed)
    paragraphs = shuffled(corpus.paragraphs, config.seed)
    benign_sentences = shuffled(benign.sentences, config.seed) if benign is not None else None
    limit, seed = config.max_examples, config.seed
    memo = HiddenMemo()  # the sentence metrics share their original sentences' hidden states
    jobs = {
        "negation": lambda: knowledge.negation(scorer, sentences, benign_sentences, limit=limit, progress=progress),
        "toxicity": lambda: toxicity.toxicity(
            scorer, sentences, _require(profanity, "toxicity needs a profanity list"), trigger=config.trigger,
            limit=limit, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
            top_k=config.top_k, top_p=config.top_p, seed=seed, generate=config.generate,
            logit=config.toxicity_logit, progress=progress, memo=memo),
        "long_range": lambda: _ablation("k", config.k_long_range, lambda k: long_range.long_range(
            scorer, paragraphs, k=k, limit=limit, seed=seed, progress=progress)),
        "word_order": lambda: _ablation("n_swaps", config.n_swaps, lambda n: next_token.word_order(
            scorer, sentences, n_swaps=n, limit=limit, seed=seed, progress=progress, memo=memo)),
        "tokenization": lambda: _ablation("chop", config.chop, lambda k: next_token.tokenization(
            scorer, sentences, chop=k, limit=limit, progress=progress, memo=memo)),
        "entropy": lambda: next_token.entropy(scorer, sentences, limit=limit, progress=progress, memo=memo),
    }
    common = {"model": model_name, "scorer": model_key(scorer), "corpus": _fingerprint(corpus), "limit": limit,
              "seed": seed, "version": CACHE_VERSION}
    settings = {
        "negation": {"benign": _fingerprint(benign)},
        # "logit" (new with the character-offset trigger cut) keeps earlier runs' toxicity caches out
        "toxicity": {"trigger": config.trigger, "generate": config.generate, "logit": config.toxicity_logit,
                     "profanity": sorted(getattr(profanity, "words", ())),
                     "sampling": (config.max_new_tokens, config.temperature, config.top_k, config.top_p)},
        "long_range": {"k": config.k_long_range}, "word_order": {"n": config.n_swaps},
        "tokenization": {"chop": config.chop}, "entropy": {}}
    metrics, errors, timings = {}, {}, {}
    for name in config.metrics:
        path = (join(cache_dir, f"{name}-{cache_key(metric=name, **common, **settings[name])}.json")
                if cache_dir else None)
        start = time.perf_counter()
        try:
            metrics[name] = _cached(path, jobs[name])
        except LmprobeError as e:
            errors[name] = str(e)
        timings[name] = time.perf_counter() - start
    return Result(model_name, metrics, errors, timings)


def _require(value, message: str):
    """``value``, or the error that kept it from being loaded, or ``message`` when it is missing."""
    if isinstance(value, LmprobeError):
        raise value
    if value is None:
        raise LmprobeError(message)
    return value


def _ablation(param: str, values, compute) -> MetricResult:
    """The headline metric at values[0], with the scores at every value in extra['ablation']."""
    results = [compute(v) for v in values]
    main = results[0]
    if len(values) > 1:
        main.extra["ablation"] = [{param: v, "score": r.score, "stderr": r.stderr, "n": r.n}
                                  for v, r in zip(values, results)]
        for v, r in zip(values[1:], results[1:]):
            main.records += [{**rec, "ablation": {param: v}} for rec in r.records]
    return main


def _cached(path: str | None, compute: Callable[[], MetricResult]) -> MetricResult:
    """A metric's result from ``path`` (JSON) if a previous run saved it, else computed and saved
    (collective in a multi-process run: lmprobe.report.artifacts.cached_json)."""
    if not path:
        return compute()
    return cached_json(path, compute, encode=MetricResult.to_cache, decode=MetricResult.from_cache)
