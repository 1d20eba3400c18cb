"""SCoPE end to end (Rawal & Toneva, arXiv:2311.04166v1): perturb base texts along a capability w.r.t. a reference
model (search.py), then compare each target with the reference (metrics.py); or every
reference x target pair of a list of models (``matrix``).

Each target's row reports every metric as the paper does (Sec. 4): mean over the ``trials``
searches +- standard error, with a 95% bootstrap interval in addition, and the pairs / examples
behind it: OOD agreement over every perturbed example, argmax-variant x' included (Sec. 3.3.2,
App. E.1), Hard-/Soft-SCoPE over the reference-invariant pairs only (Eq. 2/3)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.methods import model_key, no_progress
from lmprobe.methods.scope import capabilities, metrics
from lmprobe.methods.scope.search import Goal, Perturbation, SearchResult, search
from lmprobe.perturb.constraints import Words
from lmprobe.store import cache_key, cache_use, cached_json, join, note_undefined

TASKS = ("classify", "lm")
# 2: the reference model's identity in keys; 3: adjacent typos, lemmatized synonyms, NLTK stops;
# 4: argmax-variant perturbations kept, flagged invariant=False (App. E.1)
CACHE_VERSION = 4


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


def _metric_row(iid: dict, paired: dict, accuracy: dict | None) -> dict:
    """A target's results.json row: each metric's headline (mean over trials), std_error,
    bootstrap interval, and the pairs / examples it counts; per-trial and pooled values of the
    pair metrics. The IID metrics see the same base samples in every trial: standard error 0."""
    source = {**{m: iid for m in IID_METRICS}, **{m: paired for m in PAIR_METRICS}}
    row = {m: source[m][m] for m in metrics.METRICS}
    row["std_error"] = {m: 0.0 if m in IID_METRICS else paired["std_error"][m] for m in metrics.METRICS}
    row["intervals"] = {m: source[m]["intervals"][m] for m in metrics.METRICS}
    row["counts"] = {m: source[m]["counts"][m] for m in metrics.METRICS}
    row["per_trial"] = {m: paired["per_trial"][m] for m in PAIR_METRICS}
    row["pooled"] = {m: paired["pooled"][m] for m in PAIR_METRICS}
    row["trials"] = paired["trials"]
    if accuracy is not None:
        row["accuracy"] = accuracy
    row["pairs"] = paired["pairs"]
    note_undefined(row, "null: fewer than two trials define the metric (a standard error needs two)", "std_error")
    note_undefined(row, "null: no bootstrap draw defines the metric", "intervals")
    return row


def compare(reference, targets: dict, texts: Sequence[str], labels, result: SearchResult, config: Config,
            *, decode: Callable | None = None, progress=lambda it, **_: it) -> tuple[dict, list[dict]]:
    """Metrics of every target against the reference on the search's pairs ({target: row},
    _metric_row), and sample rows with every model's outputs."""
    pairs = result.perturbations
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
        out[name] = _metric_row(iid, paired, _accuracy(reference.name, name, iid_stats, labels))
        for k, p in enumerate(pairs):
            samples[k]["probs"][name] = _probs(target, t_x[p.index], t_xp[k], decode)
    return out, samples


def run(reference, targets: dict, texts: Sequence[str], labels, config: Config, *, cache_dir: str | None = None,
        decode: Callable | None = None, progress=lambda it, **_: it) -> tuple[dict, list[dict]]:
    """One reference, several targets: (results dict, samples rows)."""
    config.check()
    with cache_use(f"{reference.name}: search") as use:
        result, seconds = cached_search(reference, list(texts), config, cache_dir, progress)
    compared, samples = compare(reference, targets, texts, labels, result, config, decode=decode, progress=progress)
    n_pairs = len(result.perturbations)
    return {"method": "scope", "reference": reference.name, "capability": config.capability, "task": config.task,
            "objective": config.objective, "n_examples": result.n_examples, "n_perturbed": result.n_perturbed,
            "n_invariant": result.n_invariant, "n_pairs": n_pairs,
            "n_invariant_pairs": sum(p.invariant for p in result.perturbations), "skipped": result.skipped,
            "search": {"seconds": seconds, "seconds_per_perturbed_sample": seconds / max(n_pairs, 1),
                       "model_calls": result.model_calls, "candidates_scored": result.candidates_scored,
                       "cached": bool(use.hits)},  # seconds: those of the run that computed it
            "targets": compared, "config": dataclasses.asdict(config)}, samples


def matrix(models: dict, texts: Sequence[str], labels, config: Config, *, cache_dir: str | None = None,
           progress=lambda it, **_: it) -> dict:
    """Every reference x target pair of ``models``: {reference: {target: metrics}}."""
    out = {}
    for name, model in models.items():
        result, _ = cached_search(model, list(texts), config, cache_dir, progress)
        out[name], _ = compare(model, models, texts, labels, result, config, progress=progress)
    return out
