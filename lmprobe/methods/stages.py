"""The one registry of ways to score one model: every stage that validate, sweep and the in-loop
ProxyCallback run, each registered once with its name, the models it applies to and
``run(scorer, settings) -> {name: Number}`` (lmprobe.methods.result.Number: a value with its standard
error where the method gives one). A stage runs its method and reads the method Result's ``numbers()``.

Label-free proxies, one or more per method: ``syntextbench`` (the score: the mean over its trials, with
its standard error on trials - 1 degrees of freedom; beside it the mean level accuracy,
``syntextbench_accuracy``), ``synbench`` (SynBench-Score at a_t = SYNBENCH_A_T, eps = 0 plug-in and
bias-corrected and eps = 0.2, at n = ``synbench_n_per_width`` x the model's width unless ``synbench_n``
fixes n; beside it the identity's score at that width and n, ``synbench_ceiling``, a reference, not a
proxy), each BYOD metric (``byod_negation``, also normalised by a benign corpus; ``byod_long_range``;
``byod_word_order``, also net of its null perturbation and per unit of next-token entropy;
``byod_tokenization``; ``byod_entropy``; causal LMs), ``scope`` (the invariances the model shares with
``scope_reference`` on next-token predictions of a corpus's texts, perturbed by a greedy search against
the reference: Hard- and Soft-SCoPE, agreements; causal LMs of the reference's vocabulary) and
``mstemp`` (the model's zero-shot or probed accuracy on MSTemp's generated samples against the seeds
they came from: the fair drop; the samples are generated once, by ``mstemp_evaluator``). Real tasks:
``probes`` (SentEval-style probes on rt-polarity and tweets-sentiment), ``zero_shot`` (label-word
accuracy on both, causal LMs) and ``heldout`` (``heldout_loss``, nats per token, and
``heldout_bits_per_byte`` on held-out texts, causal LMs).

``Settings`` holds each method's own Config (its fields, their bounds and checks declared there once)
at the sizes the stages run it, and what only the stages choose; ``FLAT`` names the settings as flags
and the in-loop callback's arguments name them (``syntextbench_n`` is ``syntextbench.n``). ``run``
caches each stage's numbers under RUN_DIR/models/<stage>-<key>.json, keyed by the model's identity and
the stage's settings, so a rerun computes only what is new.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from lmprobe import log as _logging
from lmprobe.data import corpus as corpus_lib
from lmprobe.data import gaussian
from lmprobe.data.labelled import load_labelled
from lmprobe.engine import HiddenMemo, Scorer
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod, model_key, mstemp, no_progress, realtask, scope, synbench, syntextbench
from lmprobe.methods.result import NUMBER_SCHEMA, Number
from lmprobe.methods.scope import models as scope_models
from lmprobe.store import cache_key, cached_json, join, json_problem

STDERR = "_stderr"  # a number's standard error beside it, where numbers are written flat (``flat``)
SYNBENCH_A_T = 0.7
SYNTEXTBENCH_ACCURACY = "syntextbench_accuracy"  # the mean over levels of the Bayes classifiers' test accuracy
INPUT_SCALE = "synbench_input_scale"  # prefix of SynBench's plug-in score at one factor on its inputs
TRAINER_HELDOUT_LOSS = "trainer_heldout_loss"  # a training run's own held-out loss, from its checkpoints' metadata
LOWER_IS_BETTER = frozenset({"byod_tokenization", "heldout_loss", "heldout_bits_per_byte", TRAINER_HELDOUT_LOSS,
                             "mstemp_fair_drop"})
REFERENCES = frozenset({SYNTEXTBENCH_ACCURACY, "synbench_ceiling", "mstemp_fair_baseline_accuracy"})
BYOD = ("byod_negation", "byod_long_range", "byod_word_order", "byod_tokenization")  # what `byod` stands for
GROUPS = {"byod": BYOD}
PROXIES = ("syntextbench", "synbench", "byod")  # the proxies validate and sweep run by default
TASKS = ("probes", "zero_shot", "heldout")
PROBE_SETS = {"rt_polarity": "rt-polarity", "tweets": "tweets-sentiment"}  # probe task -> labelled set
HELDOUT_SET = "rt-reviews"  # held-out movie reviews (its test split), when no held-out texts are given
CACHE_VERSION = 2  # in every key: raised when what an entry holds changes, so that older entries are recomputed
log = _logging.get("methods")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every stage's settings: each method's Config at the sizes the stages run it (its own ``seed``
    replaced by ``seed``), and what only the stages choose."""

    syntextbench: syntextbench.Config = syntextbench.Config(
        n=1024, levels=(0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9), baselines=False, icl_examples=0)
    synbench: synbench.Config = synbench.Config(a_t=(SYNBENCH_A_T,), epsilons=(0.0, 0.2), scales=gaussian.PAPER_SCALES)
    synbench_n: int | None = None  # SynBench samples per scale and split for every model (none: n_per_width x width)
    synbench_n_per_width: int = 20  # SynBench n = this x the model's width: the same n / width for every model
    synbench_input_scales: tuple[float, ...] = ()  # also SynBench at these factors on its inputs (a sweep; none: no)
    byod: byod.Config = byod.Config(max_examples=200)
    scope: scope.Config = scope.Config(task="lm", capability="typo", trials=1, n_bootstrap=200)
    scope_reference: str | None = None  # the causal LM whose invariances SCoPE compares against (same vocabulary)
    scope_texts: int = 64  # SCoPE's base texts: sentences of BYOD's default corpus
    mstemp: mstemp.Config = mstemp.Config(n_templates=2, m_samples=2, repeats=5)
    mstemp_evaluator: str = "smollm2-135m"  # the causal LM that paraphrases MSTemp's seeds
    mstemp_filter: str = "minilm-l6"  # the encoder whose cosine similarity keeps a paraphrase
    mstemp_seeds: int = 40  # MSTemp's seed sentences: a fixed sample of rt-polarity's test split
    realtask: realtask.Config = realtask.Config()
    seed: int = 0
    batch_size: int = 16

    def __post_init__(self):
        for name in ("syntextbench", "synbench", "byod", "scope", "mstemp", "realtask"):
            changes = {"seed": self.seed, **({"batch_size": self.batch_size} if name == "synbench" else {})}
            object.__setattr__(self, name, dataclasses.replace(getattr(self, name), **changes))

    @classmethod
    def of(cls, values) -> Settings:
        """The settings from their flat names (``FLAT`` and the stages' own fields), read from ``values``
        (parsed flags, or any object or dict with such attributes; a missing one keeps its default)."""
        get = values.get if isinstance(values, dict) else lambda name, default: getattr(values, name, default)
        base, nested = cls(), {}
        for name, (method, field) in FLAT.items():
            value = get(name, dataclasses.MISSING)
            if value is not dataclasses.MISSING:
                nested.setdefault(method, {})[field] = tuple(value) if isinstance(value, list) else value
        own = {f.name: get(f.name, dataclasses.MISSING) for f in dataclasses.fields(cls) if f.name not in METHODS}
        return cls(**{k: v for k, v in own.items() if v is not dataclasses.MISSING},
                   **{m: dataclasses.replace(getattr(base, m), **fields) for m, fields in nested.items()})

    def flat(self) -> dict:
        """The settings by their flat names (results.json, cache keys)."""
        out = {name: getattr(getattr(self, method), field) for name, (method, field) in FLAT.items()}
        return {**out, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in METHODS}}

    def check(self) -> None:
        """Each method's Config checks its own fields; then the stages' own."""
        for name in METHODS:
            try:
                getattr(self, name).check()
            except LmprobeError as e:
                named = any(flat.startswith(f"{name}_") for flat, (method, _) in FLAT.items() if method == name)
                raise LmprobeError(f"{name} settings{f' (`{name}_*`)' if named else ''}: {e}") from None
        if (self.synbench_n is not None and self.synbench_n < 8) or self.synbench_n_per_width < 2:
            raise LmprobeError(f"`synbench_n={self.synbench_n}` must be >= 8 (or none) and "
                               f"`synbench_n_per_width={self.synbench_n_per_width}` >= 2")
        if any(not k > 0 for k in self.synbench_input_scales):
            raise LmprobeError(f"`synbench_input_scales={list(self.synbench_input_scales)}`: each factor must be > 0")
        if self.scope_texts < 2 or self.mstemp_seeds < 2:
            raise LmprobeError(f"`scope_texts={self.scope_texts}` and `mstemp_seeds={self.mstemp_seeds}` must be >= 2")


METHODS = ("syntextbench", "synbench", "byod", "scope", "mstemp", "realtask")  # Settings' nested Configs
# flat name (a flag of validate and sweep, an argument of the in-loop callback) -> (Settings field, Config field)
FLAT = {
    "syntextbench_n": ("syntextbench", "n"), "syntextbench_levels": ("syntextbench", "levels"),
    "syntextbench_trials": ("syntextbench", "trials"), "synbench_scales": ("synbench", "scales"),
    "byod_examples": ("byod", "max_examples"), "scope_capability": ("scope", "capability"),
    "scope_trials": ("scope", "trials"), "mstemp_templates": ("mstemp", "n_templates"),
    "mstemp_samples": ("mstemp", "m_samples"), "mstemp_tau": ("mstemp", "tau"),
    **{f.name: ("realtask", f.name) for f in dataclasses.fields(realtask.Config) if f.name != "seed"},
}


@dataclasses.dataclass
class Inputs:
    """What the stages read besides the model, built once for many models (``load_inputs``)."""

    tasks: list | None = None  # SynTextBench's synthetic tasks, one set per trial
    corpus: object = None  # BYOD's corpus (lmprobe.data.corpus.Corpus)
    benign: object = None  # the benign corpus that normalises BYOD's negation (None: no normalised reading)
    probes: dict | None = None  # probe task -> (train, test) LabelledData
    heldout: list[str] | None = None  # held-out texts
    scope: ScopeInputs | None = None
    mstemp: MSTempInputs | None = None


@dataclasses.dataclass
class ScopeInputs:
    """SCoPE's reference (its next-token view) and base texts with their next-token labels (App. G)."""

    reference: scope_models.NextToken
    texts: list[str]
    labels: np.ndarray


@dataclasses.dataclass
class MSTempInputs:
    """MSTemp's seeds, evaluator and filter; the generated samples, made on first use (``generated``)."""

    data: object  # LabelledData
    evaluator: object  # Scorer
    encoder: object  # Scorer
    generated: mstemp.Generated | None = None


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
    compute: Callable[[Call], dict[str, Number]]
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


def _syntextbench(c: Call) -> dict[str, Number]:
    return syntextbench.run(c.scorer, c.settings.syntextbench, model_name=c.name, tasks=c.inputs.tasks,
                            cache_dir=c.cache_dir, progress=c.progress).numbers()


def synbench_n(s: Settings, width: int) -> int:
    """SynBench's samples per scale and split for a model of ``width``: synbench_n, else
    synbench_n_per_width x width (the same n / width for every model compared)."""
    return s.synbench_n if s.synbench_n is not None else synbench.n_for_width(width, s.synbench_n_per_width)


def _synbench(c: Call) -> dict[str, Number]:
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
    config = dataclasses.replace(s.synbench, n=n)
    rep = synbench.scorer_representation(c.scorer, c.name, inputs="embedding")  # pooled as the probes pool
    out = synbench.run(rep, config, cache_dir=c.cache_dir, progress=c.progress).numbers()
    out["synbench_ceiling"] = _plug_in(synbench.ceiling(width, config, cache_dir=c.cache_dir, progress=c.progress))
    if s.synbench_input_scales:
        swept = synbench.input_scale_sweep(c.scorer, c.name, config, s.synbench_input_scales,
                                           cache_dir=c.cache_dir, progress=c.progress, inputs="embedding")
        out.update({f"{INPUT_SCALE}{k:g}": _plug_in(r) for k, r in swept.items()})
    return out


def _synbench_key(s: Settings, inputs: Inputs) -> dict:
    n = {"n": s.synbench_n} if s.synbench_n is not None else {"n_per_width": s.synbench_n_per_width}
    return dict(**n, config=dataclasses.asdict(dataclasses.replace(s.synbench, n=0)), version=synbench.CACHE_VERSION,
                inputs="embedding", pooling="probes", input_scales=list(s.synbench_input_scales))


def _plug_in(result: synbench.Result) -> Number:
    """The plug-in SynBench-Score at eps = 0 of a synbench.Result."""
    return result.numbers()["synbench"]


def _byod(stage: str) -> Callable[[Call], dict[str, Number]]:
    metric = stage.removeprefix("byod_")

    def compute(c: Call) -> dict[str, Number]:
        config = dataclasses.replace(c.settings.byod, metrics=(metric,))
        result = byod.run(c.scorer, c.inputs.corpus, config, model_name=c.name, benign=c.inputs.benign,
                          cache_dir=c.cache_dir, progress=c.progress, memo=c.memo)
        if metric in result.errors:  # its input was unusable: no number, said once
            log.warning(f"{c.name}: {stage} not computed: {result.errors[metric]}")
        return result.numbers()
    return compute


def _byod_key(s: Settings, inputs: Inputs) -> dict:
    return dict(config=dataclasses.asdict(dataclasses.replace(s.byod, metrics=())),
                corpus=getattr(inputs.corpus, "name", None), benign=getattr(inputs.benign, "name", None))


def _scope(c: Call) -> dict[str, Number]:
    ref = c.inputs.scope
    reference_vocab = ref.reference.scorer.config.vocab_size
    if c.scorer.config.vocab_size != reference_vocab:
        raise LmprobeError(f"scope compares next-token distributions over one vocabulary: {c.name} has "
                           f"{c.scorer.config.vocab_size} tokens, the reference `scope_reference="
                           f"{ref.reference.name}` {reference_vocab}: give a reference with the model's tokenizer")
    target = scope_models.NextToken(c.name, c.scorer)
    return scope.run(ref.reference, {c.name: target}, ref.texts, ref.labels, c.settings.scope,
                     cache_dir=c.cache_dir, progress=c.progress).numbers()


def _scope_key(s: Settings, inputs: Inputs) -> dict:
    return dict(config=dataclasses.asdict(s.scope), reference=model_key(inputs.scope.reference),
                texts=cache_key(texts=inputs.scope.texts))


def _mstemp(c: Call) -> dict[str, Number]:
    m, config = c.inputs.mstemp, c.settings.mstemp
    if m.generated is None:  # one generated set for every model scored
        m.generated = mstemp.generate({c.settings.mstemp_evaluator: m.evaluator}, m.encoder, m.data, config,
                                      cache_dir=c.cache_dir, progress=c.progress)
    return mstemp.evaluate(c.scorer, m.data, m.generated, config, target_name=c.name,
                           filter_name=c.settings.mstemp_filter, progress=c.progress).numbers()


def _mstemp_key(s: Settings, inputs: Inputs) -> dict:
    return dict(config=dataclasses.asdict(s.mstemp), evaluator=model_key(inputs.mstemp.evaluator),
                filter=model_key(inputs.mstemp.encoder), seeds=cache_key(texts=inputs.mstemp.data.texts))


def _probes(c: Call) -> dict[str, Number]:
    out = {}
    for task, (train, test) in c.inputs.probes.items():
        r = realtask.probe(c.scorer, train, test, seed=c.settings.seed, progress=c.progress)
        out[f"probe_{task}"] = _balanced(r)
    return out


def _zero_shot(c: Call) -> dict[str, Number]:
    s, out = c.settings.realtask, {}
    for task, (_, test) in c.inputs.probes.items():
        r = realtask.zero_shot(c.scorer, sample(test, s.zero_shot_examples, s.seed), progress=c.progress,
                               template=realtask.TEMPLATES["tweet" if task == "tweets" else "review"],
                               max_chars=s.zero_shot_chars or None, seed=s.seed)
        out[f"zero_shot_{task}"] = _balanced(r)
    return out


def _balanced(result: dict) -> Number:
    return Number(result["balanced_accuracy"], result.get("balanced_accuracy_stderr"),
                  items=result.get("balanced_accuracy_items"))


def _heldout(c: Call) -> dict[str, Number]:
    r = realtask.perplexity(c.scorer, c.inputs.heldout, max_chars=c.settings.realtask.heldout_chars,
                            progress=c.progress)
    return {"heldout_loss": Number(r["nll_per_token"]),
            "heldout_bits_per_byte": Number(r["bits_per_byte"], r.get("bits_per_byte_stderr"))}


def _realtask_key(*fields: str) -> Callable[[Settings, Inputs], dict]:
    return lambda s, inputs: {f: getattr(s.realtask, f) for f in ("seed", *fields)}


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("syntextbench", _syntextbench, lambda s, i: dict(config=dataclasses.asdict(s.syntextbench)), proxy=True,
          reads="hidden"),
    Stage("synbench", _synbench, _synbench_key, proxy=True, reads="embeddings"),
    *(Stage(name, _byod(name), _byod_key, proxy=True, decoders_only=True) for name in (*BYOD, "byod_entropy")),
    Stage("scope", _scope, _scope_key, proxy=True, decoders_only=True),
    Stage("mstemp", _mstemp, _mstemp_key, proxy=True, reads="hidden"),
    Stage("probes", _probes, _realtask_key("probe_train", "probe_test", "tweets_min_confidence"), proxy=False,
          reads="hidden"),
    Stage("zero_shot", _zero_shot, _realtask_key("zero_shot_examples", "zero_shot_chars", "tweets_min_confidence"),
          proxy=False, decoders_only=True),
    Stage("heldout", _heldout, lambda s, i: dict(texts=cache_key(texts=list(i.heldout)),
                                                 chars=s.realtask.heldout_chars), proxy=False, decoders_only=True),
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


def load_inputs(stages: Sequence[str], s: Settings, *, heldout: Sequence[str] | None = None,
                load_model: Callable[[str], object] | None = None) -> Inputs:
    """The data of ``stages`` (names from ``expand``), before any model loads (a missing set fails now):
    SynTextBench's tasks, BYOD's corpora, the probes' labelled sets, the held-out texts (``heldout``,
    else a fixed sample of ``heldout_texts`` rt-reviews test reviews), and the models SCoPE and MSTemp
    compare against or generate with (``load_model(name)``: a Scorer; default Scorer.load)."""
    s.check()
    out, r = Inputs(), s.realtask
    if "syntextbench" in stages:  # one set of tasks per trial
        out.tasks = [syntextbench.build_tasks(c) for c in syntextbench.trial_configs(s.syntextbench)]
    if any(n.startswith("byod_") for n in stages) or "scope" in stages:
        out.corpus = corpus_lib.load_corpus(None)
    if any(n.startswith("byod_") for n in stages):
        out.benign = corpus_lib.load_corpus("wordnet-examples")
    if "probes" in stages or "zero_shot" in stages:
        out.probes = {}
        for task, name in PROBE_SETS.items():
            spec = f"{name}@{r.tweets_min_confidence}" if task == "tweets" and r.tweets_min_confidence else name
            train, test = (load_labelled(spec, split=split) for split in ("train", "test"))
            out.probes[task] = (sample(train, r.probe_train, r.seed), sample(test, r.probe_test, r.seed))
    if "heldout" in stages:
        out.heldout = list(heldout) if heldout is not None else list(
            sample(load_labelled(HELDOUT_SET, split="test"), r.heldout_texts, r.seed).texts)
    load_model = load_model or Scorer.load
    if "scope" in stages:
        if s.scope_reference is None:
            raise LmprobeError("the scope stage compares every model with a reference: give `scope_reference=NAME`, "
                               "a causal LM with the models' tokenizer")
        reference = scope_models.NextToken(s.scope_reference, load_model(s.scope_reference))
        texts = [t for t in out.corpus.sentences if len(t.split()) >= 4]
        picked = [texts[i] for i in np.sort(np.random.default_rng(s.seed).permutation(len(texts))[:s.scope_texts])]
        out.scope = ScopeInputs(reference, *scope.lm_examples(picked, reference.scorer.tokenizer))
    if "mstemp" in stages:
        data = sample(load_labelled("rt-polarity", split="test"), s.mstemp_seeds, s.seed)
        mstemp.check_data(data, s.mstemp)
        out.mstemp = MSTempInputs(data, load_model(s.mstemp_evaluator), load_model(s.mstemp_filter))
    return out


def run_stage(stage: str, scorer, s: Settings, inputs: Inputs, *, name: str = "model", cache_dir: str | None = None,
              progress: Callable = no_progress, memo: HiddenMemo | None = None) -> dict[str, Number]:
    """{number name: Number} of one stage on one model, computed (the methods' caches under ``cache_dir``)."""
    return STAGES[stage].compute(Call(scorer, name, s, inputs, cache_dir, progress, memo or HiddenMemo()))


NUMBERS_SCHEMA = {str: NUMBER_SCHEMA}  # a stage's numbers as its cache entry holds them


def cached_stage(run_dir: str, stage: str, settings: dict, scorer, compute: Callable[[], dict[str, Number]],
                 version: int = CACHE_VERSION) -> dict[str, Number]:
    """``compute()`` (a stage's numbers on ``scorer``), or what an earlier run saved for the same
    model identity and ``settings``. Collective in a multi-process run."""
    key = cache_key(stage=stage, settings=settings, model=model_key(scorer), version=version)
    return cached_json(join(run_dir, "models", f"{stage}-{key}.json"), compute,
                       expect=lambda v: json_problem(v, NUMBERS_SCHEMA) or (None if v else "holds no number"),
                       encode=lambda numbers: {k: n.to_dict() for k, n in numbers.items()},
                       decode=lambda saved: {k: Number.from_dict(n) for k, n in saved.items()})


def run(stages: Sequence[str], scorer, s: Settings, inputs: Inputs, *, name: str = "model", run_dir: str | None = None,
        progress: Callable = no_progress) -> tuple[dict[str, Number], dict]:
    """({number name: Number}, seconds per stage) of the ``stages`` that apply to ``scorer``'s
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


def flat(numbers: dict[str, Number]) -> dict:
    """Numbers as flat JSON (the in-loop callback's proxies.jsonl rows, sweep rows' ``metrics``): each
    value under its name, its standard error beside it as ``NAME_stderr``."""
    out = {k: n.value for k, n in numbers.items()}
    out.update({f"{k}{STDERR}": n.stderr for k, n in numbers.items() if n.stderr is not None})
    return out


def is_reference(name: str) -> bool:
    """Whether a number is reported beside the proxies but is not one: SynTextBench's mean level
    accuracy (the score is its reading above a_T), SynBench's width-matched ceiling (the identity's
    score) and its input-scale sweep, MSTemp's accuracy on the seeds."""
    return name in REFERENCES or name.startswith(INPUT_SCALE)


def is_proxy(name: str) -> bool:
    """Whether a number is a label-free proxy's (not a real task's, not a reference)."""
    return name.startswith(("syntextbench", "synbench", "byod_", "scope_", "mstemp_")) and not is_reference(name)
