"""The target model's accuracy on the seed set and on the generated set (Sec. 4, Table 1), and
the fair comparison of Sec. 3.3: draw N of the n*m*N generated samples, repeat, average.

Decoders are classified zero-shot: the label name with the highest log-probability after a
prompt that lists the label names (icl.label_log_probs; a chat turn when the tokenizer has a
template). Encoder-decoders (Flan-T5, the paper's first target) read the label name as the
decoder's whole answer to that prompt: ln p(name </s> | prompt) (Scorer.score_targets; lm-eval's
seq2seq loglikelihood). Encoders have no zero-shot reading: a linear probe (ridge regression onto one-hot
classes, closed form) is trained on frozen mean-pooled embeddings of the seed set; its seed accuracy is
k-fold cross-validated (a probe never sees the fold it is scored on), and the generated samples
are scored by the probe trained on every seed.

Fair comparison: the generated set only holds samples of the seeds that kept a paraphrase and a
template with slots (the contributing seeds), so the baseline is also computed on those seeds
alone, and the generated samples are drawn stratified by seed (``stratified_accuracy``: one
sample per contributing seed per draw by default, so every seed weighs as much as in the
baseline). The all-seed baseline and the unstratified draws are kept for comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.methods import icl
from lmprobe.methods.mstemp.paraphrase import user_turn

RIDGE = 1.0  # l2 penalty of the probe, on standardised features
FOLDS = 5


def zero_shot_prompt(tokenizer, text: str, label_names: Sequence[str]) -> str:
    """The classification request; the label word is scored right after it."""
    request = (f"Classify the sentiment of the text as one of: {', '.join(label_names)}.\n\n"
               f"Text: {text}")
    turn = user_turn(tokenizer, request)
    return f"{turn}Answer:" if turn else f"{request}\nAnswer:"


def zero_shot_scores(scorer, texts: Sequence[str], label_names: Sequence[str]) -> np.ndarray:
    """[len(texts), len(label_names)]: ln p(" name" | prompt) (an encoder-decoder: ln p(name | prompt)
    as its answer); the prediction is the argmax."""
    if not len(texts):
        return np.zeros((0, len(label_names)))
    prompts = [zero_shot_prompt(scorer.tokenizer, t, label_names) for t in texts]
    if getattr(scorer, "is_encoder_decoder", False):
        return answer_log_probs(scorer, prompts, list(label_names))
    return icl.label_log_probs(scorer, prompts, list(label_names))


def zero_shot_predictions(scorer, texts: Sequence[str], label_names: Sequence[str]) -> np.ndarray:
    """Class index with the highest ln p(" name" | prompt) (an encoder-decoder: ln p(name | prompt)
    as its answer), per text."""
    if not len(texts):
        return np.zeros(0, np.int64)
    return np.argmax(zero_shot_scores(scorer, texts, label_names), axis=1)


def answer_log_probs(scorer, prompts: Sequence[str], answers: Sequence[str]) -> np.ndarray:
    """[len(prompts), len(answers)]: ln p(answer | prompt) of an encoder-decoder, summed over the
    answer's tokens (the tokenizer's special tokens included: T5's </s> ends the answer)."""
    scores = scorer.score_targets([p for p in prompts for _ in answers], [a for _ in prompts for a in answers])
    return -np.asarray(scores.nll).reshape(len(prompts), len(answers))


def ridge_probe(x: np.ndarray, labels: np.ndarray, l2: float = RIDGE) -> tuple[np.ndarray, np.ndarray]:
    """A linear probe in closed form: ridge regression onto one-hot classes (with a bias),
    (weights [d + 1, C], classes). Predict with argmax([x, 1] @ weights)."""
    classes, y = np.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise LmprobeError("a probe needs seed examples of at least two classes: give more seeds of each class")
    a = np.c_[x, np.ones(len(x))]
    target = np.eye(len(classes))[y]
    weights = np.linalg.solve(a.T @ a + l2 * np.eye(a.shape[1]), a.T @ target)
    return weights, classes


def _predict(probe, x: np.ndarray) -> np.ndarray:
    weights, classes = probe
    return classes[np.argmax(np.c_[x, np.ones(len(x))] @ weights, axis=1)]


def probe_scores(seed_z: np.ndarray, seed_labels: np.ndarray, n_classes: int | None = None):
    """z [n, d] -> class scores [n, n_classes] of the probe trained on every seed (features
    standardised with the seed statistics; classes absent from the seeds score -inf), the
    probe that ``probe_predictions`` applies to the generated samples."""
    mean, std = seed_z.mean(0), seed_z.std(0) + 1e-6
    weights, classes = ridge_probe((seed_z - mean) / std, seed_labels)
    n_classes = n_classes or int(classes.max()) + 1

    def scores(z: np.ndarray) -> np.ndarray:
        out = np.full((len(z), n_classes), -np.inf)
        out[:, classes] = np.c_[(np.asarray(z) - mean) / std, np.ones(len(z))] @ weights
        return out

    return scores


def probe_predictions(seed_z: np.ndarray, seed_labels: np.ndarray, other_z: np.ndarray,
                      folds: int = FOLDS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cross-validated predictions on the seeds, predictions on ``other_z`` from a probe
    trained on all seeds). Features are standardised with the seed statistics."""
    mean, std = seed_z.mean(0), seed_z.std(0) + 1e-6
    x, other = (seed_z - mean) / std, (other_z - mean) / std
    order = np.random.default_rng(seed).permutation(len(x))
    cross = np.empty(len(x), np.asarray(seed_labels).dtype)
    for part in np.array_split(order, min(folds, len(x))):
        train = np.setdiff1d(order, part)
        cross[part] = _predict(ridge_probe(x[train], seed_labels[train]), x[part])
    full = ridge_probe(x, seed_labels)
    return cross, (_predict(full, other) if len(other) else np.zeros(0, cross.dtype))


def fair_accuracy(correct: np.ndarray, n: int, repeats: int, rng: np.random.Generator) -> tuple[float, float]:
    """Mean and std over ``repeats`` draws of min(n, len) generated samples without replacement
    (Sec. 3.3: sample N of the nmN samples, several times, average)."""
    correct = np.asarray(correct, np.float64)
    if not len(correct):
        return float("nan"), float("nan")
    k = min(n, len(correct))
    draws = [correct[rng.choice(len(correct), size=k, replace=False)].mean() for _ in range(repeats)]
    return float(np.mean(draws)), float(np.std(draws))


def stratified_counts(capacity: Sequence[int], k: int, rng: np.random.Generator) -> np.ndarray:
    """How many of k draws each group gets when every group should be equally represented:
    level L with sum(min(capacity, L)) <= k, then the remainder +1 each to randomly chosen groups
    that have more than L; groups with fewer than L items give all of them. Counts of the groups
    not limited by their capacity differ by at most one."""
    capacity = np.asarray(capacity, np.int64)
    k = min(int(k), int(capacity.sum()))
    level = 0
    while np.minimum(capacity, level + 1).sum() <= k and level < capacity.max(initial=0):
        level += 1
    counts = np.minimum(capacity, level)
    spare = np.flatnonzero(capacity > level)
    counts[rng.choice(spare, size=k - int(counts.sum()), replace=False)] += 1
    return counts


def stratified_draw(groups: Sequence, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of k items drawn without replacement, the groups (e.g. the seed of each generated
    sample) as equally represented as their sizes allow (``stratified_counts``)."""
    groups = np.asarray(groups)
    names, inverse = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(inverse == g) for g in range(len(names))]
    counts = stratified_counts([len(m) for m in members], k, rng)
    picked = [rng.choice(m, size=c, replace=False) for m, c in zip(members, counts) if c]
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, np.int64)


def stratified_accuracy(correct: np.ndarray, groups: Sequence, repeats: int, rng: np.random.Generator,
                        n: int | None = None) -> tuple[float, float]:
    """Mean and std over ``repeats`` stratified draws (``stratified_draw``) of n samples, n = the
    number of groups by default: one generated sample per contributing seed, the size and the
    weights of the baseline on those seeds."""
    correct = np.asarray(correct, np.float64)
    if not len(correct):
        return float("nan"), float("nan")
    n = len(np.unique(groups)) if n is None else n
    draws = [correct[stratified_draw(groups, n, rng)].mean() for _ in range(repeats)]
    return float(np.mean(draws)), float(np.std(draws))


def seed_weighted_accuracy(correct: np.ndarray, groups: Sequence) -> float:
    """Mean over groups of the group's accuracy: what stratified draws of one sample per group
    average to."""
    correct, groups = np.asarray(correct, np.float64), np.asarray(groups)
    if not len(correct):
        return float("nan")
    return float(np.mean([correct[groups == g].mean() for g in np.unique(groups)]))
