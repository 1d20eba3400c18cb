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


def zero_shot_predictions(scorer, texts: Sequence[str], label_names: Sequence[str]) -> np.ndarray:
    """Class index with the highest ln p(" name" | prompt) (an encoder-decoder: ln p(name | prompt)
    as its answer), per text."""
    if not len(texts):
        return np.zeros(0, np.int64)
    prompts = [zero_shot_prompt(scorer.tokenizer, t, label_names) for t in texts]
    if getattr(scorer, "is_encoder_decoder", False):
        return np.argmax(answer_log_probs(scorer, prompts, list(label_names)), axis=1)
    return np.argmax(icl.label_log_probs(scorer, prompts, list(label_names)), axis=1)


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
