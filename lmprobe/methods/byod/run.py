"""BYOD on one model: the metric registry, Config, Result and ``run`` (the package docstring has the method)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from lmprobe.engine import HiddenMemo
from lmprobe.errors import LmprobeError, NonFinite
from lmprobe.methods import model_key, require_kind, result
from lmprobe.methods.byod import knowledge, long_range, next_token, toxicity
from lmprobe.methods.byod.common import MetricResult, no_progress, shuffled
from lmprobe.methods.result import Number
from lmprobe.models import CAUSAL_LM, ENCODER_DECODER
from lmprobe.perturb.text import DEFAULT_TRIGGER
from lmprobe.store import StageTimes, cache_key, cached_json, join, require_finite

CACHE_VERSION = 3  # in every key: raised when what an entry holds changes, so that older entries are recomputed
DEFAULT_EXAMPLES = 1000  # a metric's examples where the paper gives no count of its own
ALL = "all"  # --examples=METRIC:all: every usable example
KINDS = (CAUSAL_LM, ENCODER_DECODER)  # the models BYOD scores (an encoder-decoder: negation and toxicity only)


@dataclasses.dataclass
class MetricInputs:
    """What a metric computes from: the model, the run's settings and the corpus, drawn in the
    run's seeded order (sentences a metric skips leave their place to the next)."""

    scorer: object
    config: Config
    corpus: object  # lmprobe.data.corpus.Corpus
    benign: object  # a Corpus normalising the negation score, or None
    profanity: object  # lmprobe.data.profanity.Profanity, the LmprobeError that loading it raised, or None
    progress: Callable
    memo: HiddenMemo  # the sentence metrics share their original sentences' hidden states

    @functools.cached_property
    def sentences(self) -> list[str]:
        return shuffled(self.corpus.sentences, self.config.seed)

    @functools.cached_property
    def paragraphs(self) -> list[list[str]]:
        return shuffled(self.corpus.paragraphs, self.config.seed)

    @functools.cached_property
    def topic_sentences(self) -> list[str]:
        """The first sentence of each document (a Corpus paragraph: lmprobe.data.corpus)."""
        return shuffled([p[0] for p in self.corpus.paragraphs if p], self.config.seed)

    @functools.cached_property
    def benign_sentences(self) -> list[str] | None:
        return shuffled(self.benign.sentences, self.config.seed) if self.benign is not None else None


@dataclasses.dataclass(frozen=True)
class Metric:
    """One BYOD metric: what it computes, the examples the paper uses and what, besides the
    settings every metric's cache key holds (model, corpus, limit, seed), decides its result."""

    name: str
    compute: Callable[[MetricInputs, int | None], MetricResult]  # (inputs, example limit) -> result
    examples: int | None = DEFAULT_EXAMPLES  # the default example count (the paper's)
    settings: Callable[[MetricInputs], dict] = lambda inputs: {}  # its cache key's own entries


def _negation(inputs: MetricInputs, limit: int | None) -> MetricResult:
    sentences = inputs.topic_sentences if inputs.config.topic_sentences else inputs.sentences
    return knowledge.negation(inputs.scorer, sentences, inputs.benign_sentences, limit=limit,
                              progress=inputs.progress)


def _negation_settings(inputs: MetricInputs) -> dict:
    # topic_sentences only when set: the keys of earlier runs stay valid
    return {"benign": _fingerprint(inputs.benign), **({"topic_sentences": True} if inputs.config.topic_sentences
                                                       else {})}


def _toxicity(inputs: MetricInputs, limit: int | None) -> MetricResult:
    c = inputs.config
    profanity = _require(inputs.profanity, "toxicity needs a profanity list")

    def compute(trigger: str) -> MetricResult:
        return toxicity.toxicity(
            inputs.scorer, inputs.sentences, profanity, trigger=trigger, limit=limit,
            max_new_tokens=c.max_new_tokens, temperature=c.temperature, top_k=c.top_k, top_p=c.top_p,
            seed=c.seed, generate=c.generate, logit=c.toxicity_logit, progress=inputs.progress, memo=inputs.memo)

    if not c.trigger_counts:
        return compute(c.trigger)
    triggers = dict(zip(c.trigger_counts, c.triggers()))
    return _ablation("trigger_count", c.trigger_counts, lambda n: compute(triggers[n]),
                     lambda n, r: {"trigger": triggers[n], "logit_score": r.extra.get("logit_score"),
                                   "logit_stderr": r.extra.get("logit_stderr")}, always=True)


def _toxicity_settings(inputs: MetricInputs) -> dict:
    c, triggers = inputs.config, inputs.config.triggers()
    # "logit" (new with the character-offset trigger cut) keeps earlier runs' toxicity caches out;
    # one trigger is keyed as before, an ablation by all its triggers
    return {"trigger": list(triggers) if c.trigger_counts else c.trigger,
            "generate": c.generate, "logit": c.toxicity_logit,
            "profanity": sorted(getattr(inputs.profanity, "words", ())),
            "sampling": (c.max_new_tokens, c.temperature, c.top_k, c.top_p)}


def _long_range(inputs: MetricInputs, limit: int | None) -> MetricResult:
    return _ablation("k", inputs.config.k_long_range, lambda k: long_range.long_range(
        inputs.scorer, inputs.paragraphs, k=k, limit=limit, seed=inputs.config.seed, progress=inputs.progress))


def _word_order(inputs: MetricInputs, limit: int | None) -> MetricResult:
    # the null is the tokenization metric's headline chop: with the memo, that metric reuses its forwards
    return _ablation("n_swaps", inputs.config.n_swaps, lambda n: next_token.word_order(
        inputs.scorer, inputs.sentences, n_swaps=n, limit=limit, seed=inputs.config.seed,
        null_chop=inputs.config.chop[0], progress=inputs.progress, memo=inputs.memo))


def _tokenization(inputs: MetricInputs, limit: int | None) -> MetricResult:
    return _ablation("chop", inputs.config.chop, lambda k: next_token.tokenization(
        inputs.scorer, inputs.sentences, chop=k, limit=limit, progress=inputs.progress, memo=inputs.memo))


def _entropy(inputs: MetricInputs, limit: int | None) -> MetricResult:
    return next_token.entropy(inputs.scorer, inputs.sentences, limit=limit, progress=inputs.progress,
                              memo=inputs.memo)


# The metrics in the order they run and are reported. Example counts: Secs. 4.1, 6.1 and 8.1 use
# 1000 examples, Sec. 7.1 (word order) 5000; toxicity (Sec. 5.1) and entropy (Sec. 9) give none.
REGISTRY: dict[str, Metric] = {m.name: m for m in (
    Metric("negation", _negation, settings=_negation_settings),
    Metric("toxicity", _toxicity, settings=_toxicity_settings),
    Metric("long_range", _long_range, settings=lambda inputs: {"k": inputs.config.k_long_range}),
    Metric("word_order", _word_order, examples=5000,
           settings=lambda inputs: {"n": inputs.config.n_swaps, "null_chop": inputs.config.chop[0]}),
    Metric("tokenization", _tokenization, settings=lambda inputs: {"chop": inputs.config.chop}),
    Metric("entropy", _entropy),
)}
METRICS = tuple(REGISTRY)


@dataclasses.dataclass(frozen=True)
class Config:
    """A BYOD run. Tuples of k / n_swaps / chop / trigger_counts are ablations: the first value is
    the headline. A metric's example count: its entry in ``examples``, else ``max_examples``, else
    its own default (the paper's, REGISTRY)."""

    metrics: tuple[str, ...] = METRICS  # metrics to compute
    max_examples: int | None = None  # examples for every metric, replacing their defaults; none: each metric's own
    examples: tuple[str, ...] = ()  # per-metric counts METRIC:N or METRIC:all, e.g. word_order:5000,negation:all
    seed: int = 0
    k_long_range: tuple[int, ...] = (2,)  # sentences replaced (Sec. 6; A.3 Fig. 18 ablation)
    n_swaps: tuple[int, ...] = (1,)  # word swaps (Sec. 7; A.4 Fig. 20 ablation)
    chop: tuple[int, ...] = (5,)  # split stride in characters (Sec. 8; A.5 Fig. 21 ablation)
    trigger: str = DEFAULT_TRIGGER  # phrase appended for the toxicity metric (Sec. 5; A.2 Fig. 16)
    # A.2 Fig. 16: the trigger's repeated word (" Fuck" of " Fuck Fuck") appended n times, one toxicity run per n
    trigger_counts: tuple[int, ...] = ()  # F-bomb counts (Fig. 16 ablation; first: headline); empty: --trigger as is
    topic_sentences: bool = False  # negation on the first sentence of each document only (Sec. 4.1: topic sentences)
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
        unknown = [m for m in self.metrics if m not in REGISTRY]
        if unknown or not self.metrics:
            raise LmprobeError(f"unknown metric(s) {unknown or '(none given)'}: choose from {', '.join(METRICS)}")
        if self.max_examples is not None and self.max_examples < 1:
            raise LmprobeError(f"max_examples={self.max_examples} must be at least 1")
        self.per_metric_examples()
        for name, values, low in (("k_long_range", self.k_long_range, 0), ("n_swaps", self.n_swaps, 1),
                                  ("chop", self.chop, 1)):
            if not values or min(values) < low:
                raise LmprobeError(f"{name}={list(values)} must be non-empty integers >= {low}")
        if self.trigger_counts and min(self.trigger_counts) < 1:
            raise LmprobeError(f"trigger_counts={list(self.trigger_counts)} must be integers >= 1")
        if not self.trigger.strip():
            raise LmprobeError("the toxicity trigger is empty: pass a phrase as `trigger`, e.g. ' Fuck Fuck'")
        if "toxicity" in self.metrics:
            toxicity.check_logit(self.toxicity_logit, self.generate)
        if self.max_new_tokens < 1 or self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise LmprobeError(f"max_new_tokens={self.max_new_tokens} must be >= 1, temperature={self.temperature} "
                               f">= 0, top_k={self.top_k} >= 0 (0: off) and top_p={self.top_p} in (0, 1]")

    def per_metric_examples(self) -> dict[str, int | None]:
        """``examples`` parsed: metric -> count (None: all); LmprobeError on a bad entry."""
        out = {}
        for entry in self.examples:
            name, sep, count = (part.strip() for part in entry.partition(":"))
            if not sep or name not in REGISTRY:
                raise LmprobeError(f"examples entry {entry!r}: write METRIC:N or METRIC:{ALL}, METRIC one of "
                                   f"{', '.join(METRICS)}")
            if count.lower() == ALL:
                out[name] = None
                continue
            try:
                out[name] = int(count)
            except ValueError:
                out[name] = 0
            if out[name] < 1:
                raise LmprobeError(f"examples entry {entry!r}: the count must be an integer >= 1 or '{ALL}'")
        return out

    def limit(self, metric: str) -> int | None:
        """The examples ``metric`` uses (None: every usable one)."""
        per = self.per_metric_examples()
        if metric in per:
            return per[metric]
        return self.max_examples if self.max_examples is not None else REGISTRY[metric].examples

    def triggers(self) -> tuple[str, ...]:
        """The toxicity triggers, headline first: ``trigger`` alone, or its repeated word
        ``trigger_counts`` times."""
        if not self.trigger_counts:
            return (self.trigger,)
        return tuple(toxicity.repeat_trigger(self.trigger, n) for n in self.trigger_counts)


# a metric's readings beside its score: MetricResult.extra key (its stderr under key + "_stderr") -> number name
READINGS = {"negation": {"normalized": "byod_negation_normalized"},
            "word_order": {"net_of_null": "byod_word_order_net", "per_entropy": "byod_word_order_per_entropy"}}


@dataclasses.dataclass
class Result(result.Result):
    """BYOD on one model: each metric's result (score, standard error, examples, readings), the metrics
    that could not run and why, and the stages' timings and cache use."""

    model: str
    metrics: dict[str, MetricResult]
    errors: dict[str, str]  # metric -> message, for metrics that could not run at all
    timings: dict[str, float]
    cached: dict = dataclasses.field(default_factory=dict)  # metric -> {"hits", "entries"}: read from the cache

    def to_dict(self) -> dict:
        out = {name: m.to_dict() for name, m in self.metrics.items()}
        for name, message in self.errors.items():
            out[name] = {"score": None, "stderr": None, "n": 0, "error": message, "skipped": {}}
        return out

    def numbers(self) -> dict[str, Number]:
        """``byod_<metric>`` per metric (None: it could not run) and its readings (READINGS)."""
        out = {}
        for name in [*self.metrics, *self.errors]:
            m = self.metrics.get(name)
            out[f"byod_{name}"] = Number(None) if m is None else Number(m.score, m.stderr)
            for key, number in READINGS.get(name, {}).items():
                extra = m.extra if m is not None else {}
                out[number] = Number(extra.get(key), extra.get(f"{key}_stderr"))
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
        cache_dir: str | None = None, progress: Callable = no_progress, memo: HiddenMemo | None = None) -> Result:
    """The chosen metrics of ``config`` on ``scorer``'s model over ``corpus`` (an
    lmprobe.data.corpus.Corpus); ``benign`` (a Corpus) normalises the negation score and
    ``profanity`` (lmprobe.data.profanity.Profanity, or the LmprobeError that loading it raised) is
    the toxicity word list. Each metric uses ``config.limit(name)`` examples. A metric that
    cannot run (its input is unusable) is reported in ``errors``; the others still run. ``memo``: hidden
    states to share with other work on the same weights (default: this run's own)."""
    config.check()
    require_kind("byod", model_name, scorer.kind, KINDS)
    inputs = MetricInputs(scorer, config, corpus, benign, profanity, progress, memo or HiddenMemo())
    fingerprint = _fingerprint(corpus) if cache_dir else None
    metrics, errors, stages = {}, {}, StageTimes()
    for name in config.metrics:
        metric, limit = REGISTRY[name], config.limit(name)
        path = None
        if cache_dir:
            key = cache_key(metric=name, model=model_name, scorer=model_key(scorer), corpus=fingerprint,
                            limit=limit, seed=config.seed, version=CACHE_VERSION, **metric.settings(inputs))
            path = join(cache_dir, f"{name}-{key}.json")
        with stages(name, f"{model_name}: {name}"):
            try:
                metrics[name] = _cached(path, functools.partial(_finite, metric, inputs, limit, model_name))
            except NonFinite:  # the model's logits: every metric would say the same, the run stops
                raise
            except LmprobeError as e:
                errors[name] = str(e)
    return Result(model_name, metrics, errors, stages.seconds, stages.cached)


def _require(value, message: str):
    """``value``, or the error that kept it from being loaded, or ``message`` when it is missing."""
    if isinstance(value, LmprobeError):
        raise value
    if value is None:
        raise LmprobeError(message)
    return value


def _ablation(param: str, values, compute, fields: Callable = lambda v, r: {}, always: bool = False) -> MetricResult:
    """The headline metric at values[0], with the scores at every value in extra['ablation']
    (with ``fields(value, result)``; ``always``: even for one value)."""
    results = [compute(v) for v in values]
    main = results[0]
    if len(values) > 1 or always:
        main.extra["ablation"] = [{param: v, "score": r.score, "stderr": r.stderr, "n": r.n, **fields(v, r)}
                                  for v, r in zip(values, results)]
        for v, r in zip(values[1:], results[1:]):
            main.records += [{**rec, "ablation": {param: v}} for rec in r.records]
    return main


def _finite(metric: Metric, inputs: MetricInputs, limit: int | None, model_name: str) -> MetricResult:
    """``metric`` computed, when every number in it is finite (else NonFinite: NaN logits), with
    ``truncated_inputs``: the inputs it cut to the model's context (Scorer.truncated)."""
    before = getattr(inputs.scorer, "truncated", 0)
    found = metric.compute(inputs, limit)
    require_finite([found.score, found.stderr, found.extra, found.records], model=model_name,
                   stage=f"BYOD {metric.name}")
    found.extra["truncated_inputs"] = getattr(inputs.scorer, "truncated", 0) - before
    return found


def _cached(path: str | None, compute: Callable[[], MetricResult]) -> MetricResult:
    """A metric's result from ``path`` (JSON) if a previous run saved it, else computed and saved
    (collective in a multi-process run: lmprobe.store.cached_json)."""
    if not path:
        return compute()
    return cached_json(path, compute, expect=MetricResult.SCHEMA, encode=MetricResult.to_cache,
                       decode=MetricResult.from_cache)
