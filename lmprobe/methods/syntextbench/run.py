"""SynTextBench on one model: tasks from a lexicon (or a generator), embeddings, the score, baselines."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import time
from collections.abc import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from lmprobe import kernels
from lmprobe.data import lexicons, sentence_stats, synthetic
from lmprobe.engine.runner import run_here
from lmprobe.errors import LmprobeError
from lmprobe.methods import Ticker, icl, loss_data, model_key, no_progress, result
from lmprobe.methods.result import Number
from lmprobe.methods.syntextbench import generated as syntextbench_generated
from lmprobe.store import Array, StageTimes, cache_key, cached, cached_json, join, require_finite

# The paper does not print its a_T. 0.7 keeps levels whose linear accuracy is clearly above
# chance and yields scores of the paper's order (0.1-0.2) for sentence encoders.
DEFAULT_A_T = 0.7
A_T_SWEEP = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)  # thresholds reported beside a_t: the choice shows
CACHE_VERSION = 2  # in every key: raised when what an entry holds changes, so that older entries are recomputed
EMBED_CHUNK = 8192  # sentences per engine call (one step of the progress bar): fewer partial batches
MIN_TEST_SENTENCES = 20  # test sentences per level: accuracy in steps of 0.05 at least (the a_t sweep's spacing)
MAX_N = 1 << 20  # sentences per level: 128 times the paper's 8192; their embeddings take 4 GiB per level at width 1024
MAX_TRIALS = 1000  # repeats of a run, each a whole run
MIN_N = next(n for n in itertools.count(1) if synthetic.test_size(n) >= MIN_TEST_SENTENCES)  # 195


@dataclasses.dataclass(frozen=True)
class Config:
    # sentiwordnet, vader, afinn, textblob, or a path (SentiWordNet 3.0 text file or word<TAB>score)
    lexicon: str = "sentiwordnet"
    levels: tuple[float, ...] = synthetic.PAPER_LEVELS  # mixing ratios p, one task each
    n: int = 8192  # sentences per level, train and test together
    p_e: float = synthetic.DEFAULT_P_E  # <eos> probability (Sec. 2.2)
    p_n: float = synthetic.DEFAULT_P_N  # repeat-an-unpaired-word share; 0 is the no-nesting ablation
    a_t: float = DEFAULT_A_T  # accuracy threshold of the score
    a_t_sweep: tuple[float, ...] = A_T_SWEEP  # more thresholds, each scored from the same levels
    # mean, cls, last, first_last_avg; none: the paper's (encoders first_last_avg, decoders last)
    pooling: str | None = None
    energy: float = 0.99  # whitening: kept singular-value energy (Sec. 2.3)
    seed: int = 0
    trials: int = 1  # repeats with seeds seed, seed+1, ...: the score is their mean (the paper: 3 trials, mean +- std)
    baselines: bool = True  # the loss-data baselines Val loss / MDL / SDL / eSC
    baseline_level: float = 0.2  # the task the loss-data baselines see (Sec. 3.1)
    baseline_steps: int = 4000  # training steps of the loss-data baselines' probes
    icl_examples: int = 256  # test sentences per level for in-context accuracy (decoders); 0: off
    # A.2 ablation: a causal LM (name as for --model) that writes the synthetic sets under the vocabulary
    # constraint V~ U STOP instead of the LM-free Sec. 2.2 generator; None: LM-free (the paper's method)
    generator: str | None = None
    generator_vocab: int = 0  # A.2: words K of V~ per class and level; 0: the smallest of |POS|, |NEG|, |NEU| n V
    generator_max_tokens: int = syntextbench_generated.DEFAULT_MAX_TOKENS  # A.2: new tokens per generated sentence

    def check(self) -> None:
        """Bad settings fail here, before any model is loaded."""
        for a in (self.a_t, *self.a_t_sweep):
            if not 0 < a < 1:
                raise LmprobeError(f"a_t={a} must lie in (0, 1): it is an accuracy threshold of the score")
        bad = [p for p in self.levels if not 0 <= p <= 1]
        if bad or not self.levels:
            raise LmprobeError(f"difficulty levels {list(self.levels)} must be non-empty and in [0, 1]")
        if self.n > MAX_N:
            raise LmprobeError(f"`n={self.n}` sentences per level: lmprobe generates and embeds at most {MAX_N:,} "
                               "(4 GiB of embeddings per level at width 1024; the paper: 4096 to 32768)")
        if synthetic.test_size(self.n) < MIN_TEST_SENTENCES:
            raise LmprobeError(f"n={self.n} sentences per level leaves {synthetic.test_size(self.n)} to test on "
                               f"({synthetic.DEFAULT_TEST_FRACTION:.0%} of n): accuracy needs at least "
                               f"{MIN_TEST_SENTENCES} (steps of 0.05, the a_t sweep's); use n >= {MIN_N} "
                               "(the paper: 4096 to 32768)")
        if not 0 < self.energy <= 1:
            raise LmprobeError(f"energy={self.energy} is the share of singular-value energy whitening keeps "
                               "(Sec. 2.3): give a number in (0, 1], e.g. 0.99")
        if self.icl_examples < 0 or self.baseline_steps < 1:
            raise LmprobeError(f"icl_examples={self.icl_examples} must be >= 0 (0: off) and "
                               f"baseline_steps={self.baseline_steps} >= 1")
        if self.generator_vocab < 0 or self.generator_max_tokens < 1:
            raise LmprobeError(f"generator_vocab={self.generator_vocab} must be >= 0 (0: the smallest list) and "
                               f"generator_max_tokens={self.generator_max_tokens} >= 1")
        if not 1 <= self.trials <= MAX_TRIALS:
            raise LmprobeError(f"`trials={self.trials}` must be in [1, {MAX_TRIALS}] (the paper reports the mean of 3)")
        if self.baselines and self.baseline_level not in self.levels:
            raise LmprobeError(f"baseline_level={self.baseline_level} is not one of the levels {list(self.levels)}")


@dataclasses.dataclass
class Result(result.Result):
    """SynTextBench of one model: the score (over ``config.trials`` trials: their mean, with its standard
    error), the levels, baselines and timings of the first trial, and every trial's result (``trials``)."""

    model: str
    score: Number
    scores_by_a_t: dict[str, float]  # a_t (as text) -> score, for config.a_t_sweep
    levels: list[dict]  # per level: p, accuracy, margin, feasibility[, icl_accuracy]
    baselines: dict
    timings: dict
    config: Config
    sets: str = "lm-free"  # who wrote the synthetic sentences: "lm-free" or the A.2 generator's name
    cached_stages: dict = dataclasses.field(default_factory=dict)  # stage -> {"hits", "entries"} read from the cache
    trials: list[Result] = dataclasses.field(default_factory=list)  # every trial's own result, with several

    @property
    def n_test(self) -> int:
        """Test sentences per level (the rest of config.n train the classifier)."""
        return synthetic.test_size(self.config.n)

    @property
    def icl_accuracy_mean(self) -> float | None:
        """In-context accuracy averaged over the levels (decoders), None without it."""
        values = [level["icl_accuracy"] for level in self.levels if "icl_accuracy" in level]
        return float(np.mean(values)) if values else None

    def to_dict(self) -> dict:
        out = {"method": "syntextbench", "model": self.model, "score": self.score.value, "sets": self.sets,
               "a_t": self.config.a_t, "scores_by_a_t": self.scores_by_a_t, "n": self.config.n,
               "n_train": self.config.n - self.n_test, "n_test": self.n_test,
               "seed": self.config.seed, "icl_accuracy_mean": self.icl_accuracy_mean, "levels": self.levels,
               "baselines": self.baselines, "timings_s": self.timings, "cached_stages": self.cached_stages,
               "config": dataclasses.asdict(self.config)}
        if len(self.trials) > 1:
            out["trials"] = summarize_trials(self.trials)
        return out

    def numbers(self) -> dict[str, Number]:
        """The score and, beside it, the mean over trials and levels of the Bayes classifiers' test accuracy."""
        trials = self.trials or [self]
        return {"syntextbench": self.score, "syntextbench_accuracy": Number(
            float(np.mean([[level["accuracy"] for level in t.levels] for t in trials])))}


def trial_configs(config: Config) -> list[Config]:
    """The configs of ``config.trials`` repeats: seeds seed, seed + 1, ... (new synthetic tasks each)."""
    config.check()
    return [dataclasses.replace(config, seed=config.seed + t) for t in range(config.trials)]


def combine(trials: list[Result], config: Config) -> Result:
    """Repeats of one model as one result: the first trial's levels, baselines and timings; the score the
    trials' mean, with its standard error on trials - 1 degrees of freedom."""
    if len(trials) == 1:
        return trials[0]
    scores = np.asarray([t.score.value for t in trials], np.float64)
    score = Number(float(scores.mean()), float(scores.std(ddof=1) / len(scores) ** 0.5), len(scores) - 1)
    return dataclasses.replace(trials[0], score=score, config=config, trials=trials)


def summarize_trials(results: list[Result]) -> dict:
    """Mean and sample standard deviation (ddof 1; 0 for one trial) over repeated runs: the
    score, the score at each swept a_t, and the mean in-context accuracy where there is one."""
    def stats(values):
        values = np.asarray(values, np.float64)
        return {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0}

    out = {"trials": len(results), "seeds": [r.config.seed for r in results],
           "score": stats([r.score.value for r in results]), "scores": [r.score.value for r in results],
           "scores_by_a_t": {a: stats([r.scores_by_a_t[a] for r in results]) for a in results[0].scores_by_a_t}}
    if results[0].icl_accuracy_mean is not None:
        out["icl_accuracy_mean"] = stats([r.icl_accuracy_mean for r in results])
    return out


@dataclasses.dataclass(frozen=True)
class Tasks:
    """The model-free half of a run: lexicon, word lists, and (train, test) per level."""

    lexicon: lexicons.Lexicon
    lists: lexicons.WordLists
    levels: list  # [(train, test) SyntheticTask pairs], one per config.levels entry (GeneratedTask: A.2)
    seconds: float
    source: str = "lm-free"  # who wrote the sentences: "lm-free" (Sec. 2.2) or the A.2 generator's name
    cached: dict | None = None  # the generation's cache use ({"hits", "entries"}) where it read any entry


def build_tasks(config: Config) -> Tasks:
    """Word lists from the lexicon, then one synthetic task per level (before any model loads)."""
    config.check()
    start = time.perf_counter()
    if config.lexicon.lower() in lexicons.LOADERS:  # a package's lexicon: the same for the whole process
        lexicon, lists = _named_lexicon(config.lexicon.lower(), os.environ.get(lexicons.SENTIWORDNET_ENV))
    else:
        lexicon = lexicons.load_lexicon(config.lexicon)
        lists = lexicons.word_lists(lexicon)
    levels = synthetic.make_tasks(lists, config.levels, n=config.n, seed=config.seed, p_e=config.p_e,
                                  p_n=config.p_n)
    return Tasks(lexicon, lists, levels, time.perf_counter() - start)


@functools.lru_cache(maxsize=4)
def _named_lexicon(name: str, sentiwordnet_file: str | None) -> tuple[lexicons.Lexicon, lexicons.WordLists]:
    """A named lexicon and its word lists, read once a process (SentiWordNet's parse is slow, and a sweep or
    validate builds the tasks for every step or model); $LMPROBE_SENTIWORDNET's file is part of the key."""
    del sentiwordnet_file
    lexicon = lexicons.load_lexicon(name)
    for scores in (lexicon.pos, lexicon.neg):  # shared by every caller: read-only
        scores.flags.writeable = False
    return lexicon, lexicons.word_lists(lexicon)


def generated_tasks(generator, config: Config, tasks: Tasks | None = None, *, cache_dir: str | None = None,
                    progress: Callable = no_progress) -> Tasks:
    """``tasks`` (default ``build_tasks(config)``) with its levels written by the ``generator``
    Scorer (App. A.2, config.generator names it), cached under ``cache_dir``."""
    tasks = tasks or build_tasks(config)
    if not config.generator:
        raise LmprobeError("generated_tasks needs config.generator: the name of the LM that writes the sets")
    stages = StageTimes()
    with stages("generation", f"{config.generator}: generating A.2 sets"):
        levels = syntextbench_generated.generated_levels(
            generator, tasks.lists, levels=config.levels, n=config.n, seed=config.seed,
            vocab_size=config.generator_vocab, max_tokens=config.generator_max_tokens,
            generator_name=config.generator, cache_dir=cache_dir, progress=progress)
    return dataclasses.replace(tasks, levels=levels, seconds=stages.seconds["generation"],
                               cached=stages.cached.get("generation"), source=config.generator)


def label_word_fraction(tasks: Tasks, pair) -> float:
    """Fig. 3's statistic of one level: the mean share of label-class words per sentence, train
    and test together (exact for LM-free sets, by list membership for generated ones)."""
    values = [sentence_stats.task_label_fractions(split, tasks.lists.positive, tasks.lists.negative) for split in pair]
    return sentence_stats.mean_label_fraction(np.concatenate(values))


def run(scorer, config: Config, *, model_name: str, cache_dir: str | None = None,
        tasks: Sequence[Tasks] | None = None, progress: Callable = no_progress,
        on_score: Callable[[float, dict], None] | None = None) -> Result:
    """Algorithm 1 on ``scorer``'s model, ``config.trials`` times (seeds seed, seed + 1, ...; ``tasks``:
    one set per trial, default ``build_tasks`` of each trial's config), combined (``combine``);
    embeddings, in-context accuracies and baselines cached under ``cache_dir`` (reruns resume); every
    long stage moves a ``progress`` bar. ``on_score(score, scores_by_a_t)`` is called as soon as a
    trial's score is known, before its in-context accuracy and loss-data baselines (minutes more)."""
    configs = trial_configs(config)
    tasks = tasks or [build_tasks(c) for c in configs]
    trials = [run_trial(scorer, c, model_name=model_name, cache_dir=cache_dir, tasks=t, progress=progress,
                        on_score=on_score) for c, t in zip(configs, tasks, strict=True)]
    return combine(trials, config)


def run_trial(scorer, config: Config, *, model_name: str, cache_dir: str | None = None,
              tasks: Tasks | None = None, progress: Callable = no_progress,
              on_score: Callable[[float, dict], None] | None = None) -> Result:
    """One trial of Algorithm 1 at ``config.seed`` on ``tasks`` (default ``build_tasks(config)``)."""
    tasks = tasks or build_tasks(config)
    pairs = tasks.levels
    stages = StageTimes({"generation": tasks.seconds}, {"generation": tasks.cached} if tasks.cached else {})

    pooling = config.pooling or default_pooling(scorer)
    with stages("embedding", f"{model_name}: embedding"):
        keys, train, test = _embeddings(scorer, pairs, pooling, model_name=model_name, cache_dir=cache_dir,
                                        progress=progress)

    with stages("scoring"):
        accuracy, margin, score, scores_by_a_t = level_scores(pairs, train, test, config,
                                                              program=scorer.runner.program)
        require_finite([*accuracy, *margin, score, *scores_by_a_t.values()], model=model_name, stage="scoring")
    if on_score is not None:
        on_score(score, scores_by_a_t)

    levels = [{"p": p, "accuracy": float(a), "margin": float(m),
               "feasibility": _feasibility(tasks.lexicon, pair[1]),
               "label_word_fraction": label_word_fraction(tasks, pair)}
              for p, a, m, pair in zip(config.levels, accuracy, margin, pairs)]
    if scorer.is_decoder and config.icl_examples:
        with stages("icl", f"{model_name}: in-context prompts"):
            for level, value in zip(levels, _icl(scorer, pairs, config, model_name, cache_dir, progress)):
                level["icl_accuracy"] = value

    baselines = {}
    if config.baselines:
        with stages("baselines", f"{model_name}: loss-data baselines"):
            baselines = _baselines(scorer, pairs, keys, train, test, config, model_name, cache_dir, progress)
    return Result(model_name, Number(score), scores_by_a_t, levels, baselines, stages.seconds, config, tasks.source,
                  stages.cached)


def _baselines(scorer, pairs, keys, train, test, config: Config, model_name: str, cache_dir, progress) -> dict:
    """The loss-data baselines (Sec. 4) on config.baseline_level's embeddings, cached."""
    i = config.levels.index(config.baseline_level)
    x = np.concatenate([train[i], test[i]])
    y = np.concatenate([pairs[i][0].labels, pairs[i][1].labels]).astype(np.int32)
    key = cache_key(embeddings=keys[i], steps=config.baseline_steps, seed=config.seed, version=CACHE_VERSION)
    return _maybe_cached_json(cache_dir, f"baselines-{key}", {"p": float, **loss_data.METRICS_SCHEMA}, lambda: {
        "p": config.baseline_level, **loss_data.loss_data_metrics(loss_data.loss_data_curves(
            x, y, steps=config.baseline_steps, seed=config.seed, progress=progress,
            desc=f"{model_name}: loss-data baselines", program=scorer.runner.program))})


def level_scores(pairs, train, test, config: Config, *, program: Callable = run_here):
    """Alg. 1 lines 4-11 from the levels' (train, test) embeddings: per-level accuracy and mean
    scaled margin (numpy), the score at config.a_t, and the scores at config.a_t_sweep; the kernels
    through ``program`` (a Scorer's ``runner.program``: compiled, not run, in a compile-only run)."""
    y_train = np.stack([train_set.labels for train_set, _ in pairs]).astype(np.int32)
    y_test = np.stack([test_set.labels for _, test_set in pairs]).astype(np.int32)
    summary = program("accuracy_margin", kernels.syntextbench_accuracy_margin, np.stack(train), y_train,
                      np.stack(test), y_test, energy=config.energy)
    accuracy, margin = np.asarray(summary.accuracy), np.asarray(summary.mean_scaled_margin)
    thresholds = jnp.asarray((config.a_t, *config.a_t_sweep), jnp.float32)[:, None]
    scores = np.asarray(program("score", kernels.syntextbench_score, jnp.asarray(accuracy), jnp.asarray(margin),
                                thresholds)).reshape(-1)
    return accuracy, margin, float(scores[0]), {f"{a:g}": float(v) for a, v in zip(config.a_t_sweep, scores[1:])}


def default_pooling(scorer) -> str:
    """The paper's poolings (Sec. 3.1): the last token of a decoder, first-last average of an encoder."""
    return "last" if scorer.is_decoder else "first_last_avg"


def _embeddings(scorer, pairs, pooling: str, *, model_name: str, cache_dir, progress):
    """(cache keys, train, test embeddings) per level, each split cached under a key of the
    model's identity, the pooling and the sentences; one bar over EMBED_CHUNK-sentence calls."""
    model, width = model_key(scorer), scorer.config.hidden_size if cache_dir else None  # embed: [N, hidden size]
    splits = [(split, texts) for train_set, test_set in pairs
              for split, texts in (("train", train_set.sentences), ("test", test_set.sentences))]
    ticker, target = Ticker(progress, sum(_chunks(t) for _, t in splits), f"{model_name}: embedding"), 0
    keys, out = [], []
    for split, texts in splits:
        key = cache_key(model=model_name, scorer=model, pooling=pooling, texts=texts, version=CACHE_VERSION)

        def compute(texts=texts):
            parts = []
            for s in range(0, len(texts), EMBED_CHUNK):
                parts.append(scorer.embed(texts[s:s + EMBED_CHUNK], pooling=pooling))
                ticker.advance()
            return require_finite(np.concatenate(parts), model=model_name, stage="embedding")

        keys.append(key)
        out.append(_maybe_cached(cache_dir, f"{key}-{split}", Array((len(texts), width)), compute))
        target += _chunks(texts)
        ticker.advance_to(target)  # a split read from the cache moves the bar at once
    return [keys[i:i + 2] for i in range(0, len(keys), 2)], out[0::2], out[1::2]


def _chunks(texts) -> int:
    return -(-len(texts) // EMBED_CHUNK)


def _maybe_cached(cache_dir, name, expect: Array, compute):
    return compute() if cache_dir is None else cached(join(cache_dir, name + ".npy"), compute, expect=expect)


def _maybe_cached_json(cache_dir, name, expect, compute):
    return compute() if cache_dir is None else cached_json(join(cache_dir, name + ".json"), compute, expect=expect)


def _feasibility(lexicon, test_set) -> float:
    """Accuracy of the lexicon's own sentence rule on the level's test sentences (A.4)."""
    split = str.split if isinstance(test_set, synthetic.SyntheticTask) else sentence_stats.words  # LM text: punctuation
    predictions = lexicons.lexicon_rule_predictions(lexicon, [split(t) for t in test_set.sentences])
    return float(np.mean(predictions == np.asarray(test_set.labels)))


def _icl(scorer, pairs, config: Config, model_name: str, cache_dir, progress) -> list[float]:
    """In-context accuracy per level, one training demonstration per class (Sec. 3.3); all
    levels' prompts in one pass (one bar), cached."""
    tasks = []
    for train_set, test_set in pairs:
        rng = np.random.default_rng(config.seed)
        labels = np.asarray(train_set.labels)
        demos = [(train_set.sentences[int(rng.choice(np.flatnonzero(labels == y)))], y) for y in (1, -1)]
        k = min(config.icl_examples, len(test_set.sentences))
        tasks.append((list(test_set.sentences[:k]), [int(v) for v in test_set.labels[:k]], demos))
    key = cache_key(model=model_name, scorer=model_key(scorer), tasks=tasks, instruction=icl.INSTRUCTION,
                    words=icl.LABEL_WORDS, version=CACHE_VERSION)
    return _maybe_cached_json(cache_dir, f"icl-{key}", [float], lambda: icl.icl_accuracies(
        scorer, tasks, progress=progress, desc=f"{model_name}: in-context prompts"))
