"""SCoPE end to end (../seeds/002): perturb base texts along a capability w.r.t. a reference
model (search.py), then compare each target with the reference (metrics.py); or every
reference x target pair of a list of models (``matrix``)."""

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
from lmprobe.report.artifacts import cache_key, cached_json, join

TASKS = ("classify", "lm")
CACHE_VERSION = 3  # 2: the reference model's identity in keys; 3: adjacent typos, lemmatized synonyms, NLTK stops


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
    return cached_json(join(cache_dir, f"search-{key}.json"), compute, decode=decode,
                       encode=lambda done: {**dataclasses.asdict(done[0]), "seconds": done[1]})


def _top(log_probs, label_names, k=5, decode=None) -> list:
    if label_names is not None:
        return np.round(np.exp(np.asarray(log_probs, np.float64)), 6).tolist()
    values, ids = jax.lax.top_k(log_probs, k)
    return [[decode(int(i)) if decode else int(i), round(float(np.exp(v)), 6)]
            for i, v in zip(np.asarray(ids), np.asarray(values))]


def compare(reference, targets: dict, texts: Sequence[str], labels, result: SearchResult, config: Config,
            *, outputs: dict | None = None, decode: Callable | None = None,
            progress=lambda it, **_: it) -> tuple[dict, list[dict]]:
    """Metrics of every target against the reference on the search's pairs, and sample rows.
    ``outputs`` caches each model's log-probabilities of texts (name -> {text: row})."""
    pairs = result.perturbations
    perturbed = [p.perturbed for p in pairs]
    agreement = "cosine" if config.task == "lm" else "argmax"
    labels = None if labels is None else np.asarray(labels)

    def lp(model, xs):
        return model.log_probs(xs) if xs else None

    ref_x, ref_xp = lp(reference, list(texts)), lp(reference, perturbed)
    base_index = np.asarray([p.index for p in pairs], np.int64)
    samples = [{"index": p.index, "trial": p.trial, "text": p.text, "perturbed": p.perturbed,
                "objective": p.objective, "label": None if labels is None else int(labels[p.index]),
                "probs": {reference.name: {"x": _top(ref_x[p.index], reference.label_names, decode=decode),
                                           "x_perturbed": _top(ref_xp[k], reference.label_names, decode=decode)}}}
               for k, p in enumerate(pairs)]
    out = {}
    for name, target in progress(list(targets.items()), desc="targets"):
        t_x = ref_x if target is reference else lp(target, list(texts))
        iid = metrics.pair_statistics(ref_x, ref_x, t_x, t_x, agreement=agreement)
        iid_summary = metrics.summarize(iid, np.arange(len(texts)), labels, tolerance=config.tolerance,
                                        cutoff=config.cutoff, n_bootstrap=config.n_bootstrap, seed=config.seed)
        if pairs:
            t_xp = ref_xp if target is reference else lp(target, perturbed)
            idx = jnp.asarray(base_index)
            stats = metrics.pair_statistics(ref_x[idx], ref_xp, t_x[idx], t_xp, agreement=agreement)
            summary = metrics.summarize(stats, base_index, None, tolerance=config.tolerance, cutoff=config.cutoff,
                                        n_bootstrap=config.n_bootstrap, seed=config.seed)
            per_trial = [metrics.summarize({k: v[m] for k, v in stats.items()}, base_index[m], None,
                                           tolerance=config.tolerance, cutoff=config.cutoff, n_bootstrap=0)
                         for m in (np.asarray([p.trial == t for p in pairs]) for t in range(config.trials)) if m.any()]
            for k, p in enumerate(pairs):
                samples[k]["probs"][name] = {"x": _top(t_x[p.index], target.label_names, decode=decode),
                                             "x_perturbed": _top(t_xp[k], target.label_names, decode=decode)}
        else:
            summary, per_trial = metrics.summarize({}, [], None), []
        row = {m: summary[m] for m in ("ood_agreement", "hard_scope", "soft_scope")}
        row.update(iid_accuracy_gap=iid_summary["iid_accuracy_gap"], iid_agreement=iid_summary["iid_agreement"])
        row["intervals"] = {**{m: summary["intervals"][m] for m in ("ood_agreement", "hard_scope", "soft_scope")},
                            "iid_accuracy_gap": iid_summary["intervals"]["iid_accuracy_gap"],
                            "iid_agreement": iid_summary["intervals"]["iid_agreement"]}
        if len(per_trial) > 1:
            row["trial_std_error"] = {m: float(np.nanstd([t[m] for t in per_trial], ddof=1) / np.sqrt(len(per_trial)))
                                      for m in ("ood_agreement", "hard_scope", "soft_scope")}
        if labels is not None:
            row["accuracy"] = {reference.name: float((iid["ref_x"] == labels).mean()),
                               name: float((iid["target_x"] == labels).mean())}
        row["pairs"] = summary.get("pairs", 0)
        out[name] = row
    return out, samples


def run(reference, targets: dict, texts: Sequence[str], labels, config: Config, *, cache_dir: str | None = None,
        decode: Callable | None = None, progress=lambda it, **_: it) -> tuple[dict, list[dict]]:
    """One reference, several targets: (results dict, samples rows)."""
    config.check()
    result, seconds = cached_search(reference, list(texts), config, cache_dir, progress)
    compared, samples = compare(reference, targets, texts, labels, result, config, decode=decode, progress=progress)
    n_pairs = len(result.perturbations)
    return {"method": "scope", "reference": reference.name, "capability": config.capability, "task": config.task,
            "objective": config.objective, "n_examples": result.n_examples, "n_invariant": result.n_invariant,
            "n_pairs": n_pairs, "skipped": result.skipped,
            "search": {"seconds": seconds, "seconds_per_perturbed_sample": seconds / max(n_pairs, 1),
                       "model_calls": result.model_calls, "candidates_scored": result.candidates_scored},
            "targets": compared, "config": dataclasses.asdict(config)}, samples


def matrix(models: dict, texts: Sequence[str], labels, config: Config, *, cache_dir: str | None = None,
           progress=lambda it, **_: it) -> dict:
    """Every reference x target pair of ``models``: {reference: {target: metrics}}."""
    out = {}
    for name, model in models.items():
        result, _ = cached_search(model, list(texts), config, cache_dir, progress)
        out[name], _ = compare(model, models, texts, labels, result, config, progress=progress)
    return out
