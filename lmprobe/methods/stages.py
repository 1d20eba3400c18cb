"""The one registry of ways to score one model: every stage that validate, sweep and the in-loop
ProxyCallback run, each registered once with its name, its settings, the models it applies to and
``run(scorer, settings) -> numbers``, each number with its standard error where the method gives one.

Label-free proxies: ``syntextbench`` (mean over ``syntextbench_trials``, with its standard error on
trials - 1 degrees of freedom; beside it the mean level accuracy, ``syntextbench_accuracy``),
``synbench`` (SynBench-Score at a_t = SYNBENCH_A_T, eps = 0 plug-in and bias-corrected and
eps = 0.2, at n = ``synbench_n_per_width`` x the model's width unless ``synbench_n`` fixes n; beside
it the identity's score at that width and n, ``synbench_ceiling``, a reference, not a proxy), and
each BYOD metric (``byod_negation``, also normalised by a benign corpus; ``byod_long_range``;
``byod_word_order``, also net of its null perturbation and per unit of next-token entropy;
``byod_tokenization``; ``byod_entropy``; causal LMs only). Real tasks: ``probes`` (SentEval-style
probes on rt-polarity and tweets-sentiment), ``zero_shot`` (label-word accuracy on both, causal
LMs) and ``heldout`` (``heldout_loss``, nats per token, and ``heldout_bits_per_byte`` on held-out
texts, causal LMs).

A stage's numbers are one flat dict ``{name: value, name_stderr, name_df, name_items}``
(``numbers`` turns it into Number objects, with ``interval``); ``run`` caches each stage under
RUN_DIR/models/<stage>-<key>.json, keyed by the model's identity and the stage's settings, so a
rerun computes only what is new.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from lmprobe import log as _logging
from lmprobe.data import corpus as corpus_lib
from lmprobe.data import gaussian
from lmprobe.data.labelled import load_labelled
from lmprobe.engine import HiddenMemo
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod, model_key, no_progress, realtask, synbench, syntextbench
from lmprobe.store import cache_key, cached_json, join, json_problem

# suffixes of a number's standard error, the degrees of freedom behind it, its per-item values
STDERR, DF, ITEMS = "_stderr", "_df", "_items"
SYNBENCH_A_T = 0.7
SYNBENCH_CORRECTED = "score_corrected"  # synbench.Result.scores' key of the bias-corrected eps = 0 score
SYNTEXTBENCH_ACCURACY = "syntextbench_accuracy"  # the mean over levels of the Bayes classifiers' test accuracy
INPUT_SCALE = "synbench_input_scale"  # prefix of SynBench's plug-in score at one factor on its inputs
TRAINER_HELDOUT_LOSS = "trainer_heldout_loss"  # a training run's own held-out loss, from its checkpoints' metadata
LOWER_IS_BETTER = frozenset({"byod_tokenization", "heldout_loss", "heldout_bits_per_byte", TRAINER_HELDOUT_LOSS})
BYOD = ("byod_negation", "byod_long_range", "byod_word_order", "byod_tokenization")  # what `byod` stands for
GROUPS = {"byod": BYOD}
PROXIES = ("syntextbench", "synbench", "byod")  # the proxies validate and sweep run by default
TASKS = ("probes", "zero_shot", "heldout")
PROBE_SETS = {"rt_polarity": "rt-polarity", "tweets": "tweets-sentiment"}  # probe task -> labelled set
HELDOUT_SET = "rt-reviews"  # held-out movie reviews (its test split), when no held-out texts are given
CACHE_VERSION = 1
log = _logging.get("methods")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every stage's sizes (front ends take them as flags of the same names)."""

    syntextbench_n: int = 1024  # SynTextBench sentences per level (train and test)
    syntextbench_levels: tuple[float, ...] = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9)  # SynTextBench levels p
    syntextbench_trials: int = 1  # SynTextBench repeats (seeds seed, seed+1, ...): their mean and its stderr
    synbench_n: int | None = None  # SynBench samples per scale and split for every model (none: n_per_width x width)
    synbench_n_per_width: int = 20  # SynBench n = this x the model's width: the same n / width for every model
    synbench_scales: tuple[float, ...] = gaussian.PAPER_SCALES  # SynBench class-mean scales (the paper's 50)
    synbench_input_scales: tuple[float, ...] = ()  # also SynBench at these factors on its inputs (a sweep; none: no)
    byod_examples: int = 200  # BYOD examples per metric
    probe_train: int = 1000  # probe training sentences per dataset (a fixed sample of the train split)
    probe_test: int = 800  # probe test sentences per dataset (a fixed sample of the test split)
    zero_shot_examples: int = 400  # zero-shot test sentences per dataset (decoders)
    zero_shot_chars: int = 0  # cut each zero-shot text to this many characters (0: whole; short-context models)
    tweets_min_confidence: float = 0.0  # keep tweets whose annotator confidence is at least this
    heldout_texts: int = 60  # held-out texts for the held-out loss and bits per byte (decoders)
    heldout_chars: int = 1500  # characters of each held-out text, cut at a word boundary
    seed: int = 0
    batch_size: int = 16

    @classmethod
    def of(cls, args) -> Settings:
        """The settings from parsed flags (any object with these attributes; a missing one keeps its default)."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})


@dataclasses.dataclass
class Inputs:
    """What the stages read besides the model, built once for many models (``load_inputs``)."""

    tasks: list | None = None  # SynTextBench's synthetic tasks, one set per trial
    corpus: object = None  # BYOD's corpus (lmprobe.data.corpus.Corpus)
    benign: object = None  # the benign corpus that normalises BYOD's negation (None: no normalised reading)
    probes: dict | None = None  # probe task -> (train, test) LabelledData
    heldout: list[str] | None = None  # held-out texts


@dataclasses.dataclass(frozen=True)
class Number:
    """One number of a stage: its value, standard error, the degrees of freedom behind that error
    (None: many examples, a normal error) and its per-item values on a test set every model shares."""

    value: float | None
    stderr: float | None = None
    df: int | None = None
    items: list | None = None

    def interval(self, level: float = 0.95) -> tuple[float, float] | None:
        """The two-sided ``level`` interval value +- q x stderr (q: Student's t on ``df``, else normal)."""
        if self.value is None or self.stderr is None or not math.isfinite(self.stderr):
            return None
        tail = (1 + level) / 2
        q = float(stats.t.ppf(tail, self.df) if self.df else stats.norm.ppf(tail))
        return self.value - q * self.stderr, self.value + q * self.stderr


@dataclasses.dataclass(frozen=True)
class Call:
    """One stage's run on one model: what its ``compute`` reads."""

    scorer: object
    name: str  # the model's name (method caches and messages)
    settings: Settings
    inputs: Inputs
    cache_dir: str | None  # the methods' own caches (None: none)
    progress: Callable
    memo: HiddenMemo  # hidden states shared by the stages of one call on one model


@dataclasses.dataclass(frozen=True)
class Stage:
    """One way to score a model, registered once in STAGES."""

    name: str
    compute: Callable[[Call], dict]  # -> {number name: value, name_stderr, ...}
    key: Callable[[Settings, Inputs], dict]  # the cache key's content: what decides the numbers besides the model
    proxy: bool  # a label-free proxy (else a real task)
    decoders_only: bool = False  # causal LMs only (it reads next-token distributions)
    reads: str | None = None  # what else a model must expose: "hidden" states or token "embeddings"

    def applies(self, scorer) -> bool:
        return bool(scorer.is_decoder) or not self.decoders_only

    def cannot_run(self, scorer, *, own_model: bool = False) -> str | None:
        """Why ``scorer``'s model cannot run this stage (None when it can); ``own_model``: a model
        of the user's own code (a CallableLM or nnx.Module), which exposes no token embeddings."""
        if self.decoders_only and not scorer.is_decoder:
            return "a causal language model"
        if self.reads and scorer.config.hidden_size is None:
            return "hidden states (return (logits, hidden [B, T, D]) from apply or __call__)"
        if self.reads == "embeddings" and own_model:
            return "the model's token embeddings, which a model of your own does not expose"
        return None


# --- the stages --------------------------------------------------------------------------------


def syntextbench_config(s: Settings) -> syntextbench.Config:
    return syntextbench.Config(n=s.syntextbench_n, levels=tuple(s.syntextbench_levels), seed=s.seed,
                               baselines=False, icl_examples=0)


def _syntextbench(c: Call) -> dict:
    s = c.settings
    trials = [syntextbench.run(c.scorer, config, model_name=c.name, tasks=tasks, cache_dir=c.cache_dir,
                               progress=c.progress)
              for config, tasks in zip(syntextbench.trial_configs(syntextbench_config(s), s.syntextbench_trials),
                                       c.inputs.tasks, strict=True)]
    accuracy = float(np.mean([[level["accuracy"] for level in t.levels] for t in trials]))
    if len(trials) == 1:
        return {"syntextbench": trials[0].score, SYNTEXTBENCH_ACCURACY: accuracy}
    summary = syntextbench.summarize_trials(trials)
    return {"syntextbench": summary["score"]["mean"],
            f"syntextbench{STDERR}": summary["score"]["std"] / len(trials) ** 0.5,
            f"syntextbench{DF}": len(trials) - 1, SYNTEXTBENCH_ACCURACY: accuracy}


def _syntextbench_key(s: Settings, inputs: Inputs) -> dict:
    # one trial keeps the key of the runs before trials
    return dict(n=s.syntextbench_n, levels=list(s.syntextbench_levels), seed=s.seed, numbers=["accuracy"],
                **({"trials": s.syntextbench_trials} if s.syntextbench_trials > 1 else {}))


def synbench_n(s: Settings, width: int) -> int:
    """SynBench's samples per scale and split for a model of ``width``: synbench_n, else
    synbench_n_per_width x width (the same n / width for every model compared)."""
    return s.synbench_n if s.synbench_n is not None else synbench.n_for_width(width, s.synbench_n_per_width)


def _synbench(c: Call) -> dict:
    """SynBench-Score at eps = 0 (plug-in ``synbench`` and bias-corrected ``synbench_corrected``, with
    its standard error) and eps = 0.2, on Gaussian inputs with the model's token-embedding statistics
    pooled as the probes pool, and the identity's score at the same width and n (``synbench_ceiling``)."""
    s, width = c.settings, int(c.scorer.config.hidden_size)
    n = synbench_n(s, width)
    if n <= width:
        raise LmprobeError(f"`synbench_n={n}` is not above {c.name}'s width {width}: the plug-in Bayes classifier "
                           "then overfits its training split and SynBench-Score is 0 for any model (even the "
                           f"identity); leave `synbench_n` unset (n = `synbench_n_per_width` x width, "
                           f"{s.synbench_n_per_width * width} here)")
    config = synbench.Config(n=n, scales=tuple(s.synbench_scales), seed=s.seed, a_t=(SYNBENCH_A_T,),
                             epsilons=(0.0, 0.2), batch_size=s.batch_size)
    rep = synbench.scorer_representation(c.scorer, c.name, inputs="embedding")  # pooled as the probes pool
    result = synbench.run(rep, config, cache_dir=c.cache_dir, progress=c.progress)
    out = {}
    for r in result.scores:
        if r["eps"] == 0:
            out["synbench"], out["synbench_corrected"] = r["score"], r.get(SYNBENCH_CORRECTED)
            out[f"synbench_corrected{STDERR}"] = r.get(f"{SYNBENCH_CORRECTED}{STDERR}")
        else:
            out[f"synbench_eps{r['eps']:g}"] = r["score"]
    out["synbench_ceiling"] = _plug_in(synbench.ceiling(width, config, cache_dir=c.cache_dir, progress=c.progress))
    if s.synbench_input_scales:
        swept = synbench.input_scale_sweep(c.scorer, c.name, config, s.synbench_input_scales,
                                           cache_dir=c.cache_dir, progress=c.progress, inputs="embedding")
        out.update({f"{INPUT_SCALE}{k:g}": _plug_in(r) for k, r in swept.items()})
    return out


def _synbench_key(s: Settings, inputs: Inputs) -> dict:
    n = {"n": s.synbench_n} if s.synbench_n is not None else {"n_per_width": s.synbench_n_per_width}
    return dict(**n, scales=list(s.synbench_scales), seed=s.seed, version=synbench.CACHE_VERSION,
                inputs="embedding", pooling="probes", numbers=["corrected", "ceiling", "stderr"],
                **({"input_scales": list(s.synbench_input_scales)} if s.synbench_input_scales else {}))


def _plug_in(result) -> float:
    """The plug-in SynBench-Score at eps = 0 of a synbench.Result."""
    return next(r["score"] for r in result.scores if r["eps"] == 0)


# BYOD stage -> {its extra number: key of MetricResult.extra (its stderr under key + "_stderr")}
BYOD_READINGS = {"byod_negation": {"byod_negation_normalized": "normalized"},
                 "byod_word_order": {"byod_word_order_net": "net_of_null",
                                     "byod_word_order_per_entropy": "per_entropy"}}


def _byod(stage: str) -> Callable[[Call], dict]:
    metric = stage.removeprefix("byod_")

    def compute(c: Call) -> dict:
        config = byod.Config(metrics=(metric,), max_examples=c.settings.byod_examples, seed=c.settings.seed)
        result = byod.run(c.scorer, c.inputs.corpus, config, model_name=c.name, benign=c.inputs.benign,
                          cache_dir=c.cache_dir, progress=c.progress, memo=c.memo)
        r = result.metrics.get(metric)
        if r is None:  # its input was unusable: no number, said once
            log.warning(f"{c.name}: {stage} not computed: {result.errors.get(metric)}")
        out = {stage: getattr(r, "score", None), f"{stage}{STDERR}": getattr(r, "stderr", None)}
        extra = r.extra if r is not None else {}
        for number, key in BYOD_READINGS.get(stage, {}).items():
            out[number], out[f"{number}{STDERR}"] = extra.get(key), extra.get(f"{key}{STDERR}")
        return out
    return compute


def _byod_key(stage: str) -> Callable[[Settings, Inputs], dict]:
    return lambda s, inputs: dict(n=s.byod_examples, seed=s.seed, stderr=True,
                                  corpus=getattr(inputs.corpus, "name", None),
                                  benign=getattr(inputs.benign, "name", None),
                                  readings=list(BYOD_READINGS.get(stage, {})))


def _probes(c: Call) -> dict:
    out = {}
    for task, (train, test) in c.inputs.probes.items():
        r = realtask.probe(c.scorer, train, test, seed=c.settings.seed, progress=c.progress)
        out.update(_balanced(f"probe_{task}", r))
    return out


def _zero_shot(c: Call) -> dict:
    s, out = c.settings, {}
    for task, (_, test) in c.inputs.probes.items():
        r = realtask.zero_shot(c.scorer, sample(test, s.zero_shot_examples, s.seed), progress=c.progress,
                               template=realtask.TEMPLATES["tweet" if task == "tweets" else "review"],
                               max_chars=s.zero_shot_chars or None, seed=s.seed)
        out.update(_balanced(f"zero_shot_{task}", r))
    return out


def _balanced(name: str, result: dict) -> dict:
    return {name: result["balanced_accuracy"], f"{name}{STDERR}": result.get("balanced_accuracy_stderr"),
            f"{name}{ITEMS}": result.get("balanced_accuracy_items")}


def _heldout(c: Call) -> dict:
    r = realtask.perplexity(c.scorer, c.inputs.heldout, max_chars=c.settings.heldout_chars, progress=c.progress)
    return {"heldout_loss": r["nll_per_token"], "heldout_bits_per_byte": r["bits_per_byte"],
            f"heldout_bits_per_byte{STDERR}": r.get("bits_per_byte_stderr")}


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("syntextbench", _syntextbench, _syntextbench_key, proxy=True, reads="hidden"),
    Stage("synbench", _synbench, _synbench_key, proxy=True, reads="embeddings"),
    *(Stage(name, _byod(name), _byod_key(name), proxy=True, decoders_only=True)
      for name in (*BYOD, "byod_entropy")),
    Stage("probes", _probes, lambda s, i: dict(train=s.probe_train, test=s.probe_test, conf=s.tweets_min_confidence,
                                               seed=s.seed, stderr=True, items=True), proxy=False, reads="hidden"),
    Stage("zero_shot", _zero_shot, lambda s, i: dict(n=s.zero_shot_examples, conf=s.tweets_min_confidence,
                                                     seed=s.seed, stderr=True, items=True,
                                                     **({"chars": s.zero_shot_chars} if s.zero_shot_chars else {})),
          proxy=False, decoders_only=True),
    Stage("heldout", _heldout, lambda s, i: dict(texts=cache_key(texts=list(i.heldout)), chars=s.heldout_chars,
                                                 stderr=True), proxy=False, decoders_only=True),
)}


# --- choosing, loading, running ----------------------------------------------------------------


def expand(names: Sequence[str], setting: str = "stages") -> tuple[str, ...]:
    """The stages ``names`` stand for (a group such as ``byod`` for its stages), or one LmprobeError
    naming the unknown ones (given as the setting ``setting``)."""
    unknown = [n for n in names if n not in STAGES and n not in GROUPS]
    if unknown or not names:
        others = [n for n in STAGES if n not in PROXIES and n not in BYOD]
        raise LmprobeError(f"`{setting}={','.join(names)}`: choose from {', '.join(PROXIES)} (or one of its metrics: "
                           f"{', '.join(BYOD)}), {', '.join(others)}")
    return tuple(dict.fromkeys(s for n in names for s in GROUPS.get(n, (n,))))


def missing(stages: Sequence[str], scorer, *, own_model: bool = False) -> dict[str, str]:
    """{stage: what ``scorer``'s model lacks to run it} for those of ``stages`` it cannot run
    (Stage.cannot_run)."""
    why = {name: STAGES[name].cannot_run(scorer, own_model=own_model) for name in stages}
    return {name: reason for name, reason in why.items() if reason}


def sample(data, k: int, seed: int):
    """A fixed random subset of ``k`` examples of LabelledData (all when fewer), in file order."""
    if k >= len(data):
        return data
    return data.subset(np.sort(np.random.default_rng(seed).permutation(len(data))[:k]))


def load_inputs(stages: Sequence[str], s: Settings, *, heldout: Sequence[str] | None = None) -> Inputs:
    """The data of ``stages`` (names from ``expand``), before any model loads (a missing set fails now):
    SynTextBench's tasks, BYOD's corpora, the probes' labelled sets and the held-out texts (``heldout``,
    else a fixed sample of ``heldout_texts`` rt-reviews test reviews)."""
    out = Inputs()
    if "syntextbench" in stages:  # one set of tasks per trial
        out.tasks = [syntextbench.build_tasks(c)
                     for c in syntextbench.trial_configs(syntextbench_config(s), s.syntextbench_trials)]
    if any(n.startswith("byod_") for n in stages):
        out.corpus, out.benign = corpus_lib.load_corpus(None), corpus_lib.load_corpus("wordnet-examples")
    if "probes" in stages or "zero_shot" in stages:
        out.probes = {}
        for task, name in PROBE_SETS.items():
            spec = f"{name}@{s.tweets_min_confidence}" if task == "tweets" and s.tweets_min_confidence else name
            train, test = (load_labelled(spec, split=split) for split in ("train", "test"))
            out.probes[task] = (sample(train, s.probe_train, s.seed), sample(test, s.probe_test, s.seed))
    if "heldout" in stages:
        out.heldout = list(heldout) if heldout is not None else list(
            sample(load_labelled(HELDOUT_SET, split="test"), s.heldout_texts, s.seed).texts)
    return out


def run_stage(stage: str, scorer, s: Settings, inputs: Inputs, *, name: str = "model", cache_dir: str | None = None,
              progress: Callable = no_progress, memo: HiddenMemo | None = None) -> dict:
    """{number name: value, ...} of one stage on one model, computed (the methods' caches under ``cache_dir``)."""
    return STAGES[stage].compute(Call(scorer, name, s, inputs, cache_dir, progress, memo or HiddenMemo()))


def cached_stage(run_dir: str, stage: str, settings: dict, scorer, compute: Callable[[], dict],
                 version: int = CACHE_VERSION) -> dict:
    """``compute()`` (a stage's numbers on ``scorer``), or what an earlier run saved for the same
    model identity and ``settings``. Collective in a multi-process run."""
    key = cache_key(stage=stage, settings=settings, model=model_key(scorer), version=version)
    return cached_json(join(run_dir, "models", f"{stage}-{key}.json"), compute, expect=_numbers_problem)


def _numbers_problem(value) -> str | None:
    """Why a cache entry's JSON is not a stage's numbers ({name: number, null or per-item numbers}); None when it is."""
    return json_problem(value, {str: (float, None, [float])}) or (None if value else "holds no number")


def run(stages: Sequence[str], scorer, s: Settings, inputs: Inputs, *, name: str = "model", run_dir: str | None = None,
        progress: Callable = no_progress) -> tuple[dict, dict]:
    """({number name: value, ...}, seconds per stage) of the ``stages`` that apply to ``scorer``'s
    model; with ``run_dir``, each stage cached there per (model identity, stage settings)."""
    numbers, seconds, memo = {}, {}, HiddenMemo()
    for stage in stages:
        if not STAGES[stage].applies(scorer):
            continue
        start = time.perf_counter()
        compute = (lambda stage=stage: run_stage(stage, scorer, s, inputs, name=name, progress=progress, memo=memo,
                                                 cache_dir=join(run_dir, "cache") if run_dir else None))
        numbers.update(cached_stage(run_dir, stage, STAGES[stage].key(s, inputs), scorer, compute) if run_dir
                       else compute())
        seconds[stage] = time.perf_counter() - start
        log.info(f"{name}: {stage} in {seconds[stage]:.1f} s")
    return numbers, seconds


# --- reading numbers ---------------------------------------------------------------------------


def numbers(flat: dict) -> dict[str, Number]:
    """{name: Number} of a stage's flat numbers ."""
    suffixed = lambda suffix: {k[:-len(suffix)]: v for k, v in flat.items() if k.endswith(suffix)}  # noqa: E731
    stderr, df, items = suffixed(STDERR), suffixed(DF), suffixed(ITEMS)
    return {k: Number(v, stderr.get(k), df.get(k), items.get(k))
            for k, v in flat.items() if not k.endswith((STDERR, DF, ITEMS))}


def is_reference(name: str) -> bool:
    """Whether a number is reported beside the proxies but is not one: SynTextBench's mean level
    accuracy (the score is its reading above a_T), SynBench's width-matched ceiling (the identity's
    score) and its input-scale sweep."""
    return name in (SYNTEXTBENCH_ACCURACY, "synbench_ceiling") or name.startswith(INPUT_SCALE)


def is_proxy(name: str) -> bool:
    """Whether a number is a label-free proxy's (not a real task's, not a reference)."""
    return name.startswith(("syntextbench", "synbench", "byod_")) and not is_reference(name)
