"""Real-task ground truth per model: what the label-free proxies should track (experiments.validate).

* ``probe``: SentEval's linear probe (Conneau & Kiela 2018): frozen sentence embeddings (the
  pooling SynTextBench uses: the last token of a decoder, the mean of the first and last layers
  of an encoder), multinomial logistic regression with an L2 penalty (kernels.logistic, sklearn's
  objective), C from SentEval's grid 2^-2 .. 2^4 chosen by stratified 5-fold cross-validation on
  the training set, refit on all of it, scored on the test set. Features are standardized with
  the statistics of the rows each fit sees (decoder hidden states have outlier dimensions that
  leave an unstandardized L2 probe badly conditioned).
* ``zero_shot`` (decoders): the label word with the highest log-probability after a prompt,
  "Review: TEXT\\nSentiment:" + " negative" / " positive" (tweets: " neutral" too).
* ``perplexity`` (decoders): held-out prose, each text cut at a word boundary to at most
  ``max_chars`` characters so that every model reads the same text; every token is predicted
  (a BOS, else EOS, is put in front), and the total negative log-likelihood is reported per token
  (perplexity) and per UTF-8 byte (bits per byte). Tokenizers differ across models, so only bits
  per byte compares models.

Balanced accuracy (the mean of per-class recalls) is reported beside accuracy: on an imbalanced
set (tweets: 43% negative) a model that always answers one class gets the majority rate as
accuracy but 1 / K balanced.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import numpy as np

from kernels import logistic
from lmprobe.errors import LmprobeError
from lmprobe.methods import icl, no_progress
from lmprobe.methods.syntextbench import default_pooling

SENTEVAL_CS = logistic.SENTEVAL_CS
FOLDS = 5
EMBED_CHUNK = 512  # sentences per engine call: one step of the progress bar
TEMPLATES = {"review": "Review: {text}\nSentiment:", "tweet": "Tweet: {text}\nSentiment:"}


def balanced_accuracy(predictions, labels, n_classes: int) -> float:
    """Mean over the classes present in ``labels`` of the fraction of that class predicted right."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    recalls = [np.mean(predictions[labels == k] == k) for k in range(n_classes) if np.any(labels == k)]
    return float(np.mean(recalls))


def embed(scorer, texts: Sequence[str], pooling: str, *, progress: Callable = no_progress,
          desc: str = "") -> np.ndarray:
    starts = range(0, len(texts), EMBED_CHUNK)
    parts = [scorer.embed(list(texts[s:s + EMBED_CHUNK]), pooling=pooling)
             for s in progress(starts, desc=desc or "embedding", total=len(starts))]
    return np.concatenate(parts).astype(np.float32)


def probe_embeddings(x_train, y_train, x_test, y_test, n_classes: int, *, cs=SENTEVAL_CS, folds: int = FOLDS,
                     seed: int = 0) -> dict:
    """The SentEval probe on precomputed embeddings: C by stratified k-fold CV on train, refit, test."""
    y_train, y_test = np.asarray(y_train, np.int32), np.asarray(y_test, np.int32)
    if len(np.unique(y_train)) < 2 or np.bincount(y_train).min(initial=len(y_train)) < folds:
        raise LmprobeError(f"the probe's training set has class counts {np.bincount(y_train).tolist()}: it needs "
                           f"two classes or more, each with at least {folds} examples (one per fold)")
    cv = logistic.cross_validate(x_train, y_train, n_classes, cs, folds, seed, standardize=True)
    model = jax.tree.map(lambda a: a[cv.index], cv.models)
    predictions = np.asarray(logistic.predict(model, x_test))
    return {"accuracy": float(np.mean(predictions == y_test)),
            "balanced_accuracy": balanced_accuracy(predictions, y_test, n_classes),
            "c": cv.c, "cv_accuracy": float(cv.accuracy[cv.index]), "n_train": int(len(y_train)),
            "n_test": int(len(y_test)), "converged": bool(np.asarray(model.iterations) < logistic.DEFAULT_MAX_ITER)}


def probe(scorer, train, test, *, pooling: str | None = None, cs=SENTEVAL_CS, folds: int = FOLDS, seed: int = 0,
          progress: Callable = no_progress) -> dict:
    """The SentEval probe of ``scorer``'s frozen embeddings on LabelledData ``train`` / ``test``."""
    pooling = pooling or default_pooling(scorer)
    x_train = embed(scorer, train.texts, pooling, progress=progress, desc="probe: train embeddings")
    x_test = embed(scorer, test.texts, pooling, progress=progress, desc="probe: test embeddings")
    result = probe_embeddings(x_train, train.labels, x_test, test.labels, len(train.label_names), cs=cs,
                              folds=folds, seed=seed)
    return {**result, "pooling": pooling}


def zero_shot(scorer, data, *, template: str = TEMPLATES["review"], label_words: Sequence[str] | None = None,
              progress: Callable = no_progress) -> dict:
    """Zero-shot label-word classification of LabelledData ``data`` by a decoder."""
    if not scorer.is_decoder:
        raise LmprobeError("zero-shot label-word accuracy needs a causal LM: for an encoder use the probe")
    words = list(label_words or data.label_names)
    if len(words) != len(data.label_names):
        raise LmprobeError(f"{len(words)} label words {words} for {len(data.label_names)} classes "
                           f"{list(data.label_names)}: give one word per class")
    prompts = [template.format(text=t) for t in data.texts]
    scores = icl.label_log_probs(scorer, prompts, words, progress=progress, desc="zero-shot prompts")
    predictions = scores.argmax(-1)
    return {"accuracy": float(np.mean(predictions == data.labels)),
            "balanced_accuracy": balanced_accuracy(predictions, data.labels, len(words)),
            "label_words": words, "template": template, "n": len(data.texts),
            "predicted_share": np.bincount(predictions, minlength=len(words)).tolist()}


def cut(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, at the last whitespace before the limit."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    head = text[:max_chars + 1]
    return head[:head.rfind(" ")] if " " in head else text[:max_chars]


def perplexity(scorer, texts: Sequence[str], *, max_chars: int = 1500, progress: Callable = no_progress) -> dict:
    """Held-out language modelling of a decoder: NLL per token (perplexity) and per byte (bits per byte)."""
    if not scorer.is_decoder:
        raise LmprobeError("perplexity needs a causal LM: an encoder has no next-token distribution")
    tok = scorer.tokenizer
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    if start is None:
        raise LmprobeError("the tokenizer has neither a BOS nor an EOS token to predict the first token after")
    texts = [cut(t, max_chars) for t in texts if t.strip()]
    if not texts:
        raise LmprobeError("no text to compute perplexity on: pass non-empty texts")
    ids = [[start, *tok(t, add_special_tokens=False)["input_ids"]] for t in texts]
    chunks = range(0, len(ids), EMBED_CHUNK)
    nll = sum(float(-np.sum(lp)) for s in progress(chunks, desc="perplexity", total=len(chunks))
              for lp in scorer.score(ids[s:s + EMBED_CHUNK]).token_logprobs)
    tokens = sum(len(i) - 1 for i in ids)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return {"perplexity": math.exp(nll / tokens), "nll_per_token": nll / tokens,
            "bits_per_byte": nll / math.log(2) / n_bytes, "tokens": tokens, "bytes": n_bytes, "texts": len(texts)}
