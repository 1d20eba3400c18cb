"""SCoPE end to end (Rawal & Toneva, arXiv:2311.04166v1): perturb base texts along a capability w.r.t. a reference
model (search.py), then compare each target with the reference (metrics.py); or every
reference x target pair of a list of models (``matrix``).

Each target's row reports every metric as the paper does (Sec. 4): mean over the ``trials``
searches +- standard error, with a 95% bootstrap interval in addition, and the pairs / examples
behind it: OOD agreement over every perturbed example, argmax-variant x' included (Sec. 3.3.2,
App. E.1), Hard-/Soft-SCoPE over the reference-invariant pairs only (Eq. 2/3)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.methods import model_key, no_progress, result
from lmprobe.methods.result import Number
from lmprobe.methods.scope import capabilities, metrics
from lmprobe.methods.scope.search import Goal, Perturbation, SearchResult, search
from lmprobe.perturb.constraints import Words
from lmprobe.store import cache_key, cache_use, cached_json, join, note_undefined

TASKS = ("classify", "lm")
CACHE_VERSION = 4  # in every key: raised when what an entry holds changes, so that older entries are recomputed


@dataclasses.dataclass(frozen=True)
class Config:
    capability: str = "synonym"  # linguistic capability of the perturbations
    task: str = "classify"  # classify (labels) or lm (next token)
    objective: str = "l1"  # search objective: l1 or kl distance of the reference's output distributions
    trials: int = 3  # perturbation searches per example (Sec. 4: three)
    max_words: int | None = None  # words one perturbation may change (none: the capability's; typo 3, others 1)
    tolerance: float = metrics.DEFAULT_TOLERANCE  # Soft-SCoPE: output distance that still counts fully
    cutoff: float = metrics.DEFAULT_CUTOFF  # Soft-SCoPE: output distance that counts zero
    n_bootstrap: int = metrics.DEFAULT_BOOTSTRAP  # bootstrap resamples of the intervals
    seed: int = 0

    def check(self) -> None:
        if self.task not in TASKS:
            raise LmprobeError(f"task '{self.task}' is not one of {TASKS}")
        if self.trials < 1 or (self.max_words is not None and self.max_words < 1):
            raise LmprobeError(f"trials={self.trials}, max_words={self.max_words}: both must be >= 1")
        if self.n_bootstrap < 0:
            raise LmprobeError(f"n_bootstrap={self.n_bootstrap} must be >= 0 (0: no bootstrap intervals)")
        Goal(self.objective).check()
        metrics.decay(0.0, self.tolerance, self.cutoff)
        capabilities.get(self.capability)


def lm_examples(texts: Sequence[str], tokenizer) -> tuple[list[str], np.ndarray]:
    """App. G as a task with labels from the text itself: x = the text up to its last word, the
    label = the first token of that word. Texts of fewer than two words are dropped."""
    prefixes, labels = [], []
    for text in texts:
        words = Words.of(text)
        if len(words.words) < 2:
            continue
        start = words.spans[-1][0]
        prefix, word = text[:start].rstrip(), text[start:words.spans[-1][1]]
        ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        if prefix and ids:
            prefixes.append(prefix)
            labels.append(ids[0])
    if not prefixes:
        raise LmprobeError("no text has two words or more: the language-modelling task needs a "
                           "prefix and a next word")
    return prefixes, np.asarray(labels, np.int64)


def cached_search(reference, texts, config: Config, cache_dir: str | None,
                  progress=no_progress) -> tuple[SearchResult, float]:
    """search() with the result cached as JSON under cache_dir (reruns resume); (result, seconds)."""
    key = cache_key(model=reference.name, reference=model_key(reference), texts=texts, **dataclasses.asdict(config),
                    version=CACHE_VERSION)

    def compute():
        start = time.perf_counter()
        overrides = {} if config.max_words is None else {"max_words": config.max_words}
        capability = capabilities.get(config.capability, **overrides)
        result = search(reference, texts, capability, goal=Goal(config.objective), trials=config.trials,
                        seed=config.seed, progress=progress)
        return result, time.perf_counter() - start

    def decode(saved):
        result = SearchResult([Perturbation(**{**p, "words": tuple(p["words"])}) for p in saved["perturbations"]],
                              saved["n_examples"], saved["skipped"], saved["model_calls"], saved["candidates_scored"])
        return result, saved["seconds"]

    if not cache_dir:
        return compute()
    return cached_json(join(cache_dir, f"search-{key}.json"), compute, expect={**SearchResult.SCHEMA, "seconds": float},
                       decode=decode, encode=lambda done: {**dataclasses.asdict(done[0]), "seconds": done[1]})


def _top(log_probs, label_names, k=5, decode=None) -> list:
    if label_names is not None:
        return np.round(np.exp(np.asarray(log_probs, np.float64)), 6).tolist()
    values, ids = jax.lax.top_k(log_probs, k)
    return [[decode(int(i)) if decode else int(i), round(float(np.exp(v)), 6)]
            for i, v in zip(np.asarray(ids), np.asarray(values))]


PAIR_METRICS = ("ood_agreement", "hard_scope", "soft_scope")  # on (x, x') pairs, per trial
IID_METRICS = ("iid_accuracy_gap", "iid_agreement")  # on the base samples x only


def _log_probs(model, texts: Sequence[str]):
    return model.log_probs(list(texts)) if texts else None


def _pair_index(pairs: Sequence[Perturbation]) -> tuple[np.ndarray, np.ndarray]:
    """(base example, trial) of each pair."""
    return (np.asarray([p.index for p in pairs], np.int64), np.asarray([p.trial for p in pairs], np.int64))


def _sample_rows(pairs: Sequence[Perturbation], labels, reference, ref_x, ref_xp, decode) -> list[dict]:
    """One samples.jsonl row per pair with the reference's outputs (targets are added later)."""
    return [{"index": p.index, "trial": p.trial, "text": p.text, "perturbed": p.perturbed, "objective": p.objective,
             "invariant": p.invariant, "label": None if labels is None else int(labels[p.index]),
             "probs": {reference.name: _probs(reference, ref_x[p.index], ref_xp[k], decode)}}
            for k, p in enumerate(pairs)]


def _probs(model, x, xp, decode) -> dict:
    return {"x": _top(x, model.label_names, decode=decode), "x_perturbed": _top(xp, model.label_names, decode=decode)}


def _iid_summary(ref_x, t_x, labels, config: Config, agreement: str) -> tuple[dict, dict]:
    """Gap in IID accuracy and IID agreement over all base samples (Sec. 3.3.1/3.3.2): (summary,
    per-sample statistics)."""
    stats = metrics.pair_statistics(ref_x, ref_x, t_x, t_x, agreement=agreement)
    n = stats["ref_x"].shape[0]
    return metrics.summarize(stats, np.arange(n), labels, tolerance=config.tolerance, cutoff=config.cutoff,
                             n_bootstrap=config.n_bootstrap, seed=config.seed), stats


def _pair_summary(ref_x, ref_xp, t_x, t_xp, example, trial, config: Config, agreement: str) -> dict:
    """OOD agreement over every pair, Hard-/Soft-SCoPE over the m1-invariant ones (Eq. 2/3, App.
    E.1), per trial then mean +- standard error over trials (metrics.summarize)."""
    if not len(example):
        return metrics.summarize({}, [], None)
    idx = jnp.asarray(example)
    stats = metrics.pair_statistics(ref_x[idx], ref_xp, t_x[idx], t_xp, agreement=agreement)
    return metrics.summarize(stats, example, None, trial_of_pair=trial, tolerance=config.tolerance,
                             cutoff=config.cutoff, n_bootstrap=config.n_bootstrap, seed=config.seed)


def _accuracy(reference_name: str, name: str, iid_stats, labels) -> dict | None:
    if labels is None:
        return None
    return {reference_name: float((iid_stats["ref_x"] == labels).mean()),
            name: float((iid_stats["target_x"] == labels).mean())}


NAMES = {"iid_accuracy_gap": "scope_iid_accuracy_gap", "iid_agreement": "scope_iid_agreement",
         "ood_agreement": "scope_ood_agreement", "hard_scope": "scope_hard", "soft_scope": "scope_soft"}  # numbers()


@dataclasses.dataclass
class Comparison:
    """One target against the reference: each metric's headline (mean over trials, its standard error on
    trials - 1 degrees of freedom; the IID metrics see the same base samples in every trial: standard
    error 0), bootstrap interval, and the pairs / examples it counts; per-trial and pooled values of the
    pair metrics."""

    metrics: dict[str, Number]
    intervals: dict
    counts: dict
    per_trial: dict
    pooled: dict
    trials: int
    pairs: int
    accuracy: dict | None  # the reference's and the target's accuracy on the base samples (labels only)

    @classmethod
    def of(cls, iid: dict, paired: dict, accuracy: dict | None) -> Comparison:
        source = {**{m: iid for m in IID_METRICS}, **{m: paired for m in PAIR_METRICS}}
        df = paired["trials"] - 1 if paired["trials"] > 1 else None
        errors = {m: 0.0 if m in IID_METRICS else paired["std_error"][m] for m in metrics.METRICS}
        return cls({m: Number(source[m][m], errors[m] if math.isfinite(errors[m]) else None,
                              None if m in IID_METRICS else df) for m in metrics.METRICS},
                   {m: source[m]["intervals"][m] for m in metrics.METRICS},
                   {m: source[m]["counts"][m] for m in metrics.METRICS},
                   {m: paired["per_trial"][m] for m in PAIR_METRICS}, {m: paired["pooled"][m] for m in PAIR_METRICS},
                   paired["trials"], paired["pairs"], accuracy)

    def to_dict(self) -> dict:
        row = {m: n.value for m, n in self.metrics.items()}
        row["std_error"] = {m: n.stderr for m, n in self.metrics.items()}
        row.update(intervals=self.intervals, counts=self.counts, per_trial=self.per_trial, pooled=self.pooled,
                   trials=self.trials)
        if self.accuracy is not None:
            row["accuracy"] = self.accuracy
        row["pairs"] = self.pairs
        if None in row["std_error"].values():
            row["std_error_note"] = "null: fewer than two trials define the metric (a standard error needs two)"
        note_undefined(row, "null: no bootstrap draw defines the metric", "intervals")
        return row


@dataclasses.dataclass
class Result(result.Result):
    """SCoPE of one reference and its targets: the search's counts and cost, each target's Comparison,
    and one sample row per (x, x') pair with every model's outputs."""

    reference: str
    search: SearchResult
    search_seconds: float  # those of the run that searched (a cached search keeps them)
    search_cached: bool
    targets: dict[str, Comparison]
    rows: list[dict]
    config: Config
    dataset: str | None = None  # the labelled set the base texts came from
    label_names: list | None = None
    matrix: dict | None = None  # every reference x target pair of the models (``matrix``)

    def to_dict(self) -> dict:
        found, n_pairs = self.search, len(self.search.perturbations)
        out = {"method": "scope", "reference": self.reference, "capability": self.config.capability,
               "task": self.config.task, "objective": self.config.objective, "n_examples": found.n_examples,
               "n_perturbed": found.n_perturbed, "n_invariant": found.n_invariant, "n_pairs": n_pairs,
               "n_invariant_pairs": sum(p.invariant for p in found.perturbations), "skipped": found.skipped,
               "search": {"seconds": self.search_seconds,
                          "seconds_per_perturbed_sample": self.search_seconds / max(n_pairs, 1),
                          "model_calls": found.model_calls, "candidates_scored": found.candidates_scored,
                          "cached": self.search_cached},
               "targets": {name: c.to_dict() for name, c in self.targets.items()},
               "config": dataclasses.asdict(self.config), "dataset": self.dataset, "label_names": self.label_names}
        if self.matrix is not None:
            out["matrix"] = self.matrix
        return out

    def numbers(self, target: str | None = None) -> dict[str, Number]:
        """The five metrics of ``target`` (default: the only one) against the reference."""
        if target is None:
            if len(self.targets) != 1:
                raise ValueError(f"give the target: this result compares {len(self.targets)}")
            target = next(iter(self.targets))
        return {NAMES[m]: n for m, n in self.targets[target].metrics.items()}

    def samples(self):
        return iter(self.rows)


def compare(reference, targets: dict, texts: Sequence[str], labels, found: SearchResult, config: Config,
            *, decode: Callable | None = None, progress=lambda it, **_: it) -> tuple[dict[str, Comparison], list[dict]]:
    """Every target against the reference on the search's pairs ({target: Comparison}), and sample rows
    with every model's outputs."""
    pairs = found.perturbations
    perturbed = [p.perturbed for p in pairs]
    agreement = "cosine" if config.task == "lm" else "argmax"
    labels = None if labels is None else np.asarray(labels)
    ref_x, ref_xp = _log_probs(reference, texts), _log_probs(reference, perturbed)
    example, trial = _pair_index(pairs)
    samples = _sample_rows(pairs, labels, reference, ref_x, ref_xp, decode)
    out = {}
    for name, target in progress(list(targets.items()), desc="targets"):
        t_x = ref_x if target is reference else _log_probs(target, texts)
        t_xp = ref_xp if target is reference or not pairs else _log_probs(target, perturbed)
        iid, iid_stats = _iid_summary(ref_x, t_x, labels, config, agreement)
        paired = _pair_summary(ref_x, ref_xp, t_x, t_xp, example, trial, config, agreement)
        out[name] = Comparison.of(iid, paired, _accuracy(reference.name, name, iid_stats, labels))
        for k, p in enumerate(pairs):
            samples[k]["probs"][name] = _probs(target, t_x[p.index], t_xp[k], decode)
    return out, samples


def run(reference, targets: dict, texts: Sequence[str], labels, config: Config, *, cache_dir: str | None = None,
        decode: Callable | None = None, progress=lambda it, **_: it, dataset: str | None = None,
        label_names: Sequence[str] | None = None) -> Result:
    """One reference, several targets: the search (cached under ``cache_dir``), then every target compared."""
    config.check()
    with cache_use(f"{reference.name}: search") as use:
        found, seconds = cached_search(reference, list(texts), config, cache_dir, progress)
    compared, samples = compare(reference, targets, texts, labels, found, config, decode=decode, progress=progress)
    return Result(reference.name, found, seconds, bool(use.hits), compared, samples, config, dataset,
                  None if label_names is None else list(label_names))


def matrix(models: dict, texts: Sequence[str], labels, config: Config, *, cache_dir: str | None = None,
           progress=lambda it, **_: it) -> dict:
    """Every reference x target pair of ``models``: {reference: {target: metrics}}."""
    out = {}
    for name, model in models.items():
        found, _ = cached_search(model, list(texts), config, cache_dir, progress)
        compared, _ = compare(model, models, texts, labels, found, config, progress=progress)
        out[name] = {target: c.to_dict() for target, c in compared.items()}
    return out
