"""SynTextBench (Ko et al., ../seeds/000): robustness-accuracy of sentence embeddings on
synthetic sentiment tasks generated from a lexicon (Algorithm 1).

    lexicon -> word lists -> one synthetic task per difficulty level p (Sec. 2.2)
    -> sentence embeddings through the engine (Sec. 3.1 poolings), cached per level
    -> class-wise whitening, Bayes classifier, accuracy a_p and mean scaled margin delta_p for
       all levels at once on device (Sec. 2.3, Alg. 1 lines 4-8)
    -> goodness s(a) and score = integral of s over [a_T, 1], exactly (lines 10-11)
plus the loss-data baselines on the p = 0.2 task, in-context accuracy of decoders (Sec. 3.3)
and the lexicon rule's accuracy on each level (task feasibility, A.4).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import jax.numpy as jnp
import numpy as np

import kernels
from lmprobe.data import lexicons, synthetic
from lmprobe.errors import LmprobeError
from lmprobe.methods import icl, loss_data
from lmprobe.report.artifacts import cache_key, cached, join

# The paper does not print its a_T. 0.7 keeps levels whose linear accuracy is clearly above
# chance and yields scores of the paper's order (0.1-0.2) for sentence encoders.
DEFAULT_A_T = 0.7


@dataclasses.dataclass(frozen=True)
class Config:
    lexicon: str = "sentiwordnet"
    levels: tuple[float, ...] = synthetic.PAPER_LEVELS
    n: int = 8192  # sentences per level, train and test together
    p_e: float = synthetic.DEFAULT_P_E  # <eos> probability (Sec. 2.2)
    p_n: float = synthetic.DEFAULT_P_N  # repeat-an-unpaired-word share; 0 is the no-nesting ablation
    a_t: float = DEFAULT_A_T
    pooling: str | None = None  # None: the paper's (encoders first_last_avg, decoders last token)
    energy: float = 0.99  # whitening: kept singular-value energy (Sec. 2.3)
    seed: int = 0
    baselines: bool = True
    baseline_level: float = 0.2  # the task the loss-data baselines see (Sec. 3.1)
    baseline_steps: int = 4000
    icl_examples: int = 256  # test sentences per level for in-context accuracy (decoders); 0: off

    def check(self) -> None:
        """Bad settings fail here, before any model is loaded."""
        if not 0 < self.a_t < 1:
            raise LmprobeError(f"a_t={self.a_t} must lie in (0, 1): it is the accuracy threshold of the score")
        bad = [p for p in self.levels if not 0 <= p <= 1]
        if bad or not self.levels:
            raise LmprobeError(f"difficulty levels {list(self.levels)} must be non-empty and in [0, 1]")
        if self.n < 16:
            raise LmprobeError(f"n={self.n} sentences per level is too few to estimate class "
                               "covariances: use at least 16 (the paper uses 4096 to 32768)")
        if self.baselines and self.baseline_level not in self.levels:
            raise LmprobeError(f"baseline_level={self.baseline_level} is not one of the levels {list(self.levels)}")


@dataclasses.dataclass
class Result:
    model: str
    score: float
    levels: list[dict]  # per level: p, accuracy, margin, feasibility[, icl_accuracy]
    baselines: dict
    timings: dict
    config: Config

    def to_json(self) -> dict:
        return {"method": "syntextbench", "model": self.model, "score": self.score,
                "a_t": self.config.a_t, "n": self.config.n, "levels": self.levels,
                "baselines": self.baselines, "timings_s": self.timings,
                "config": dataclasses.asdict(self.config)}


@dataclasses.dataclass(frozen=True)
class Tasks:
    """The model-free half of a run: lexicon, word lists, and (train, test) per level."""

    lexicon: lexicons.Lexicon
    lists: lexicons.WordLists
    levels: list  # [(train, test) SyntheticTask pairs], one per config.levels entry
    seconds: float


def build_tasks(config: Config) -> Tasks:
    """Word lists from the lexicon, then one synthetic task per level (before any model loads)."""
    config.check()
    start = time.perf_counter()
    lexicon = lexicons.load_lexicon(config.lexicon)
    lists = lexicons.word_lists(lexicon)
    levels = synthetic.make_tasks(lists, config.levels, n=config.n, seed=config.seed, p_e=config.p_e,
                                  p_n=config.p_n)
    return Tasks(lexicon, lists, levels, time.perf_counter() - start)


def run(scorer, config: Config, *, model_name: str, cache_dir: str | None = None,
        tasks: Tasks | None = None, progress: Callable = lambda it, **_: it) -> Result:
    """Algorithm 1 on ``scorer``'s model; embeddings cached under ``cache_dir`` (reruns resume)."""
    tasks = tasks or build_tasks(config)
    pairs, timings = tasks.levels, {"generation": tasks.seconds}

    pooling = config.pooling or ("last" if scorer.is_decoder else "first_last_avg")
    start = time.perf_counter()
    train, test = [], []
    for p, (train_set, test_set) in progress(list(zip(config.levels, pairs)), desc=f"{model_name}: embedding"):
        key = cache_key(model=model_name, lexicon=config.lexicon, n=config.n, seed=config.seed, p=p,
                        p_e=config.p_e, p_n=config.p_n, pooling=pooling, version=1)
        for split, texts, out in (("train", train_set.sentences, train), ("test", test_set.sentences, test)):
            out.append(_maybe_cached(cache_dir, f"{key}-{split}",
                                     lambda texts=texts: scorer.embed(texts, pooling=pooling)))
    timings["embedding"] = time.perf_counter() - start

    start = time.perf_counter()
    y_train = np.stack([train_set.labels for train_set, _ in pairs]).astype(np.int32)
    y_test = np.stack([test_set.labels for _, test_set in pairs]).astype(np.int32)
    summary = kernels.syntextbench_accuracy_margin(jnp.asarray(np.stack(train)), jnp.asarray(y_train),
                                                   jnp.asarray(np.stack(test)), jnp.asarray(y_test),
                                                   energy=config.energy)
    accuracy, margin = np.asarray(summary.accuracy), np.asarray(summary.mean_scaled_margin)
    score = float(kernels.syntextbench_score(jnp.asarray(accuracy), jnp.asarray(margin), config.a_t))
    timings["scoring"] = time.perf_counter() - start

    levels = [{"p": p, "accuracy": float(a), "margin": float(m),
               "feasibility": _feasibility(tasks.lexicon, test_set)}
              for p, a, m, (_, test_set) in zip(config.levels, accuracy, margin, pairs)]
    if scorer.is_decoder and config.icl_examples:
        start = time.perf_counter()
        for level, (train_set, test_set) in progress(list(zip(levels, pairs)), desc=f"{model_name}: in-context"):
            level["icl_accuracy"] = _icl(scorer, train_set, test_set, config)
        timings["icl"] = time.perf_counter() - start

    baselines = {}
    if config.baselines:
        start = time.perf_counter()
        i = config.levels.index(config.baseline_level)
        x = np.concatenate([train[i], test[i]])
        y = np.concatenate([y_train[i], y_test[i]])
        curves = loss_data.loss_data_curves(x, y, steps=config.baseline_steps, seed=config.seed)
        baselines = {"p": config.baseline_level, **loss_data.loss_data_metrics(curves)}
        timings["baselines"] = time.perf_counter() - start
    return Result(model_name, score, levels, baselines, timings, config)


def _maybe_cached(cache_dir, name, compute):
    return compute() if cache_dir is None else cached(join(cache_dir, name + ".npy"), compute)


def _feasibility(lexicon, test_set) -> float:
    """Accuracy of the lexicon's own sentence rule on the level's test sentences (A.4)."""
    predictions = lexicons.lexicon_rule_predictions(lexicon, [t.split() for t in test_set.sentences])
    return float(np.mean(predictions == np.asarray(test_set.labels)))


def _icl(scorer, train_set, test_set, config: Config) -> float:
    """In-context accuracy on the level: one training demonstration per class (Sec. 3.3)."""
    rng = np.random.default_rng(config.seed)
    labels = np.asarray(train_set.labels)
    demos = [(train_set.sentences[int(rng.choice(np.flatnonzero(labels == y)))], y) for y in (1, -1)]
    k = min(config.icl_examples, len(test_set.sentences))
    return icl.icl_accuracy(scorer, test_set.sentences[:k], test_set.labels[:k], demos)
