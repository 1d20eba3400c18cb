"""Behavioural-similarity metrics of a target model m2 against a reference m1 on base texts x and
their perturbations x' = C(x; m1) (Rawal & Toneva, arXiv:2311.04166v1 Sec. 3.3, App. E, G):

    Gap in IID accuracy  |acc(m1) - acc(m2)| on labelled x
    IID agreement        E_x 1[y_m1(x) = y_m2(x)]
    OOD agreement        E_x 1[y_m1(x') = y_m2(x')]
    Hard-SCoPE (Eq. 2)   E 1[y_m2(x) = y_m2(x')]            over pairs with y_m1(x) = y_m1(x')
    Soft-SCoPE (Eq. 3)   E decay(||dm1 - dm2||_1) 1[...]     over the same pairs, dm = m(x') - m(x)

decay (Sec. 3.3: "linear"; the reference left its constants without defaults) is 1 up to
DEFAULT_TOLERANCE, 0 from DEFAULT_CUTOFF, linear between. ||dm1 - dm2||_1 lies in [0, 4].
Defaults: tolerance 0.05 (a difference of 2.5 probability points per class in a binary task
counts as none: batching and precision noise) and cutoff 1.0 (effects that differ by half of
one distribution's total L1 range get no credit). Soft-SCoPE <= Hard-SCoPE always.

Language modelling (App. G): y is the argmax next token; agreements are the cosine similarity
of the two models' next-token distributions (vocabularies must match); accuracy is the top-1
accuracy on the held-out next token.

Which pairs each metric counts (App. E.1): the search keeps an x' for every example with an
eligible word, argmax-invariant for m1 or not. OOD agreement is an expectation over all x in X
(Sec. 3.3.2), so it counts every pair; Hard-/Soft-SCoPE condition on y_m1(x) = y_m1(x') (Eq. 2/3:
"the argmax-variant samples would be ignored"), so they count only the m1-invariant pairs; the
IID metrics use the base samples only. ``counts`` reports the pairs and examples behind each.

Headline (Sec. 4: "we generate the perturbed examples three times and report the average
results with standard errors"): each metric is computed per trial (one x' per example and
trial), then mean over the trials +- standard error std(ddof=1) / sqrt(T) (NaN with one trial).
Trials where a metric is undefined (no m1-invariant pair) are left out of its mean and error.
In addition: 95% percentile bootstrap intervals of that mean over trials, resampling base
examples (all trials of an example together), seeded; and the pooled value over all pairs.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe import kernels
from lmprobe.errors import LmprobeError

DEFAULT_TOLERANCE = 0.05
DEFAULT_CUTOFF = 1.0
DEFAULT_BOOTSTRAP = 1000
METRICS = ("iid_accuracy_gap", "iid_agreement", "ood_agreement", "hard_scope", "soft_scope")


def decay(distance, tolerance: float = DEFAULT_TOLERANCE, cutoff: float = DEFAULT_CUTOFF) -> np.ndarray:
    """1 for distance <= tolerance, 0 for distance >= cutoff, linear between."""
    if not 0 <= tolerance < cutoff:
        raise LmprobeError(f"Soft-SCoPE decay needs 0 <= tolerance < cutoff (got {tolerance}, {cutoff})")
    return np.clip((cutoff - np.asarray(distance, np.float64)) / (cutoff - tolerance), 0.0, 1.0)


def hard_scope(ref_invariant, target_invariant) -> float:
    """Eq. 2 from per-pair booleans; NaN when the reference is invariant on no pair."""
    ref, target = np.asarray(ref_invariant, bool), np.asarray(target_invariant, bool)
    return float(target[ref].mean()) if ref.any() else float("nan")


def soft_scope(ref_invariant, target_invariant, distance, tolerance: float = DEFAULT_TOLERANCE,
               cutoff: float = DEFAULT_CUTOFF) -> float:
    """Eq. 3 from per-pair booleans and ||dm1 - dm2||_1."""
    ref, target = np.asarray(ref_invariant, bool), np.asarray(target_invariant, bool)
    weight = decay(distance, tolerance, cutoff) * target
    return float(weight[ref].mean()) if ref.any() else float("nan")


@jax.jit
def _pair_stats(r_x, r_xp, t_x, t_xp):
    y = [jnp.argmax(a, -1) for a in (r_x, r_xp, t_x, t_xp)]
    delta = (jnp.exp(r_xp) - jnp.exp(r_x)) - (jnp.exp(t_xp) - jnp.exp(t_x))
    return {"ref_x": y[0], "ref_xp": y[1], "target_x": y[2], "target_xp": y[3],
            "distance": jnp.abs(delta).sum(-1),
            "cosine_x": kernels.cosine_similarity(r_x, t_x), "cosine_xp": kernels.cosine_similarity(r_xp, t_xp)}


def pair_statistics(ref_x, ref_xp, target_x, target_xp, *, agreement: str = "argmax") -> dict[str, np.ndarray]:
    """Per-pair predictions, ||dm1 - dm2||_1 and agreements from [P, n] log-probabilities (on
    device; only [P] vectors come back)."""
    if ref_x.shape[-1] != target_x.shape[-1]:
        raise LmprobeError(f"the reference has {ref_x.shape[-1]} outputs and the target "
                           f"{target_x.shape[-1]}: compare models with the same labels (or vocabulary)")
    out = {k: np.asarray(v) for k, v in _pair_stats(ref_x, ref_xp, target_x, target_xp).items()}
    if agreement == "argmax":
        out["iid_agree"] = (out["ref_x"] == out["target_x"]).astype(np.float64)
        out["ood_agree"] = (out["ref_xp"] == out["target_xp"]).astype(np.float64)
    else:
        out["iid_agree"], out["ood_agree"] = out["cosine_x"], out["cosine_xp"]
    return out


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def _values(stats, groups: np.ndarray, labels, tolerance, cutoff) -> dict[str, float]:
    """The five metrics over the pairs ``groups`` (indices, repeats allowed)."""
    ref_inv = stats["ref_x"][groups] == stats["ref_xp"][groups]
    target_inv = stats["target_x"][groups] == stats["target_xp"][groups]
    out = {"iid_agreement": _mean(stats["iid_agree"][groups]),
           "ood_agreement": _mean(stats["ood_agree"][groups]),
           "hard_scope": hard_scope(ref_inv, target_inv),
           "soft_scope": soft_scope(ref_inv, target_inv, stats["distance"][groups], tolerance, cutoff)}
    if labels is not None:
        y = labels[groups]
        out["iid_accuracy_gap"] = abs(_mean(stats["ref_x"][groups] == y) - _mean(stats["target_x"][groups] == y))
    else:
        out["iid_accuracy_gap"] = float("nan")
    return out


def counts(stats, example_of_pair) -> dict[str, dict[str, int]]:
    """Pairs and base examples each metric counts: all pairs for the agreements and the accuracy
    gap, the m1-invariant ones (y_m1(x) = y_m1(x')) for Hard-/Soft-SCoPE (Eq. 2/3, App. E.1)."""
    example_of_pair = np.asarray(example_of_pair)
    invariant = np.asarray(stats["ref_x"]) == np.asarray(stats["ref_xp"]) if len(example_of_pair) else np.zeros(0, bool)
    every = {"pairs": int(len(example_of_pair)), "examples": int(len(np.unique(example_of_pair)))}
    conditioned = {"pairs": int(invariant.sum()), "examples": int(len(np.unique(example_of_pair[invariant])))}
    return {m: conditioned if m in ("hard_scope", "soft_scope") else every for m in METRICS}


def mean_and_std_error(per_trial) -> tuple[float, float]:
    """Mean over trials and its standard error std(ddof=1) / sqrt(T) (Sec. 4), over the trials
    where the metric is defined; NaN error with fewer than two."""
    v = np.asarray(per_trial, np.float64)
    v = v[~np.isnan(v)]
    if not len(v):
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")


def _trial_means(stats, pairs_by_trial: list[np.ndarray], labels, tolerance, cutoff) -> dict[str, float]:
    per_trial = [_values(stats, g, labels, tolerance, cutoff) for g in pairs_by_trial if len(g)]
    return {m: mean_and_std_error([t[m] for t in per_trial])[0] for m in METRICS}


def summarize(stats: dict[str, np.ndarray], example_of_pair: Sequence[int], labels=None, *, trial_of_pair=None,
              tolerance: float = DEFAULT_TOLERANCE, cutoff: float = DEFAULT_CUTOFF,
              n_bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict:
    """The five metrics as mean over trials, their standard errors and 95% bootstrap intervals
    (module docstring).

    ``stats`` are pair_statistics over pairs (x_p, x'_p); pair p perturbs base example
    example_of_pair[p] in trial trial_of_pair[p] (None: one trial); labels (per pair, or None) give
    the accuracy gap. Returns {metric: mean, "std_error", "per_trial", "pooled", "intervals",
    "counts": {metric: {"pairs", "examples"}}, "pairs", "examples", "trials"}."""
    example_of_pair = np.asarray(example_of_pair)
    nan = float("nan")
    if not len(example_of_pair):
        return {**{m: nan for m in METRICS}, "std_error": {m: nan for m in METRICS},
                "per_trial": {m: [] for m in METRICS}, "pooled": {m: nan for m in METRICS},
                "intervals": {m: [nan, nan] for m in METRICS},
                "counts": counts(stats, example_of_pair), "pairs": 0, "examples": 0, "trials": 0}
    labels = None if labels is None else np.asarray(labels)
    trial_of_pair = np.zeros(len(example_of_pair), np.int64) if trial_of_pair is None else np.asarray(trial_of_pair)
    trials = np.unique(trial_of_pair)
    per_trial = [_values(stats, np.flatnonzero(trial_of_pair == t), labels, tolerance, cutoff) for t in trials]
    headline = {m: mean_and_std_error([t[m] for t in per_trial]) for m in METRICS}
    examples, inverse = np.unique(example_of_pair, return_inverse=True)
    members = [np.flatnonzero(inverse == k) for k in range(len(examples))]
    rng = np.random.default_rng(seed)
    draws = {m: [] for m in METRICS}
    for _ in range(n_bootstrap):
        pick = np.concatenate([members[k] for k in rng.integers(len(examples), size=len(examples))])
        for m, v in _trial_means(stats, [pick[trial_of_pair[pick] == t] for t in trials], labels, tolerance,
                                 cutoff).items():
            draws[m].append(v)
    intervals = {m: [float(np.nanpercentile(d, 2.5)), float(np.nanpercentile(d, 97.5))] if n_bootstrap and
                 not np.all(np.isnan(d)) else [nan, nan] for m, d in draws.items()}
    return {**{m: headline[m][0] for m in METRICS}, "std_error": {m: headline[m][1] for m in METRICS},
            "per_trial": {m: [t[m] for t in per_trial] for m in METRICS},
            "pooled": _values(stats, np.arange(len(example_of_pair)), labels, tolerance, cutoff),
            "intervals": intervals, "counts": counts(stats, example_of_pair), "pairs": int(len(example_of_pair)),
            "examples": int(len(examples)), "trials": int(len(trials))}
