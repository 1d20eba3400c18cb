"""The semantic-preserving filter (Sec. 3.1, Algorithm 1): an encoder C embeds the seed x and
each candidate s (z = C(x), z' = C(s); mean pooling for the default minilm-l6, a sentence-
embedding model), keeps s when c = cos(z, z') >= tau, and ranks the kept candidates by c."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_FILTER = "minilm-l6"
DEFAULT_TAU = 0.7  # the paper does not print its tau; see run.Config


def similarities(encoder, seeds: Sequence[str], candidates: Sequence[Sequence[str]],
                 pooling: str = "mean") -> list[np.ndarray]:
    """cos(C(seed_i), C(candidate_ij)) for every candidate of every seed."""
    flat = [c for group in candidates for c in group]
    if not flat:
        return [np.zeros(0) for _ in seeds]
    texts = list(dict.fromkeys([*seeds, *flat]))  # each distinct text embedded once
    vectors = np.asarray(encoder.embed(texts, pooling=pooling), np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    row = {t: i for i, t in enumerate(texts)}
    return [vectors[[row[c] for c in group]] @ vectors[row[s]] if group else np.zeros(0)
            for s, group in zip(seeds, candidates)]


def keep(
    candidates: Sequence[str], scores: np.ndarray, tau: float, limit: int | None = None
) -> list[tuple[str, float]]:
    """(candidate, similarity) with similarity >= tau, best first, at most ``limit``."""
    order = sorted(range(len(candidates)), key=lambda j: (-scores[j], j))
    kept = [(candidates[j], float(scores[j])) for j in order if scores[j] >= tau]
    return kept[:limit] if limit is not None else kept
