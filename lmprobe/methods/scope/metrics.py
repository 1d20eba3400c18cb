"""Behavioural-similarity metrics of a target model m2 against a reference m1 on base texts x and
their perturbations x' = C(x; m1) (../seeds/002 Sec. 3.3, App. E, G):

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

Intervals: 95% percentile bootstrap over base examples (all trials of an example resampled
together), seeded.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import kernels
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


def _values(stats, groups: np.ndarray, labels, tolerance, cutoff) -> dict[str, float]:
    ref_inv = stats["ref_x"][groups] == stats["ref_xp"][groups]
    target_inv = stats["target_x"][groups] == stats["target_xp"][groups]
    out = {"iid_agreement": float(stats["iid_agree"][groups].mean()),
           "ood_agreement": float(stats["ood_agree"][groups].mean()),
           "hard_scope": hard_scope(ref_inv, target_inv),
           "soft_scope": soft_scope(ref_inv, target_inv, stats["distance"][groups], tolerance, cutoff)}
    if labels is not None:
        y = labels[groups]
        out["iid_accuracy_gap"] = abs(float((stats["ref_x"][groups] == y).mean())
                                      - float((stats["target_x"][groups] == y).mean()))
    else:
        out["iid_accuracy_gap"] = float("nan")
    return out


def summarize(stats: dict[str, np.ndarray], example_of_pair: Sequence[int], labels=None, *,
              tolerance: float = DEFAULT_TOLERANCE, cutoff: float = DEFAULT_CUTOFF,
              n_bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict:
    """The five metrics and their 95% bootstrap intervals (resampling base examples).

    ``stats`` are pair_statistics over pairs (x_p, x'_p); pair p perturbs base example
    example_of_pair[p]; labels (per pair, or None) give the accuracy gap."""
    example_of_pair = np.asarray(example_of_pair)
    if not len(example_of_pair):
        nan = float("nan")
        return {**{m: nan for m in METRICS}, "intervals": {m: [nan, nan] for m in METRICS}, "pairs": 0}
    labels = None if labels is None else np.asarray(labels)
    values = _values(stats, np.arange(len(example_of_pair)), labels, tolerance, cutoff)
    examples, inverse = np.unique(example_of_pair, return_inverse=True)
    members = [np.flatnonzero(inverse == k) for k in range(len(examples))]
    rng = np.random.default_rng(seed)
    draws = {m: [] for m in METRICS}
    for _ in range(n_bootstrap):
        pick = np.concatenate([members[k] for k in rng.integers(len(examples), size=len(examples))])
        for m, v in _values(stats, pick, labels, tolerance, cutoff).items():
            draws[m].append(v)
    intervals = {m: [float(np.nanpercentile(d, 2.5)), float(np.nanpercentile(d, 97.5))] if n_bootstrap and
                 not np.all(np.isnan(d)) else [float("nan")] * 2 for m, d in draws.items()}
    return {**values, "intervals": intervals, "pairs": int(len(example_of_pair)),
            "examples": int(len(examples))}
