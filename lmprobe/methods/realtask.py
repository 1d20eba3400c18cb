"""Real-task ground truth per model: what the label-free proxies should track (lmprobe validate).

``probe``: SentEval's linear probe (Conneau & Kiela 2018, sklearn path). Frozen sentence
embeddings (by default the pooling SynTextBench uses: the last token of a decoder, the mean of
the first and last layers of an encoder), multinomial logistic regression with an L2 penalty
(kernels.logistic: sklearn's LogisticRegression objective, same C), C from SentEval's grid
2^-2 .. 2^4 chosen by stratified 5-fold cross-validation accuracy on the training set (seeded
folds; ties go to the smaller C), refit on the whole training set, scored on the test set. With
a ``validation`` split, C is instead chosen by validation accuracy and the model trained on the
training set alone (SentEval's SplitClassifier). One departure from SentEval: features are
standardized with the statistics of the rows each fit sees (``standardize=False`` restores
SentEval's raw features). Decoder hidden states have outlier dimensions thousands of times
larger than the rest, which would otherwise dominate the penalty and the conditioning.

``zero_shot`` (decoders): the label word with the highest log-probability after a prompt, e.g.
"Review: TEXT\\nSentiment:" + " negative" / " positive" (tweets: " neutral" too), summed over
the word's tokens (icl.label_log_probs).

``perplexity`` (decoders): held-out prose, each text cut at a word boundary to at most
``max_chars`` characters so that every model reads the same text; every text token is predicted,
after one start token (below); total NLL per token (perplexity) and per UTF-8 byte (bits per byte).

Balanced accuracy (the mean of per-class recalls) is reported beside accuracy: on an imbalanced
set (tweets) a model that always answers one class gets the majority rate as accuracy but 1 / K
balanced. It is the number to correlate. Every result is a JSON-able dict; all randomness is
``seed``'s.

Each number carries its uncertainty over examples (no model rerun): ``*_stderr`` (the std of
BOOTSTRAP_RESAMPLES seeded bootstrap values) and a LEVEL percentile interval ``*_low`` /
``*_high``. Accuracies resample test examples within each true class (class counts fixed, so
every resample has every class: what balanced accuracy weighs equally); bits per byte resamples
texts, recomputing the ratio sum(NLL) / sum(bytes). Balanced accuracy also comes item by item
(``balanced_accuracy_items``, whose mean it is), for paired comparisons of models on one test set.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.kernels import logistic
from lmprobe.methods import icl, no_progress
from lmprobe.methods.syntextbench import default_pooling
from lmprobe.text import plural

SENTEVAL_CS = logistic.SENTEVAL_CS  # 2^-2 .. 2^4
BOOTSTRAP_RESAMPLES = 1000
LEVEL = 0.95  # the percentile intervals' coverage
FOLDS = 5
EMBED_CHUNK = 512  # texts per engine call: one step of the progress bar
SCORE_CHUNK = 64  # texts per scoring call in perplexity
TEMPLATES = {"review": "Review: {text}\nSentiment:", "tweet": "Tweet: {text}\nSentiment:"}
DOCUMENT_SEPARATOR = "<|endoftext|>"


@dataclasses.dataclass(frozen=True)
class Config:
    """The real tasks' sizes, as the stage registry runs them (lmprobe.methods.stages: probes, zero_shot,
    heldout)."""

    probe_train: int = 1000  # probe training sentences per dataset (a fixed sample of the train split)
    probe_test: int = 800  # probe test sentences per dataset (a fixed sample of the test split)
    zero_shot_examples: int = 400  # zero-shot test sentences per dataset (decoders)
    zero_shot_chars: int = 0  # cut each zero-shot text to this many characters (0: whole; short-context models)
    tweets_min_confidence: float = 0.0  # keep tweets whose annotator confidence is at least this
    heldout_texts: int = 60  # held-out texts for the held-out loss and bits per byte (decoders)
    heldout_chars: int = 1500  # characters of each held-out text, cut at a word boundary
    seed: int = 0

    def check(self) -> None:
        counts = {k: getattr(self, k) for k in ("probe_train", "probe_test", "zero_shot_examples", "heldout_texts",
                                                "heldout_chars")}
        bad = [f"`{k}={v}`" for k, v in counts.items() if v < 1]
        if bad or self.zero_shot_chars < 0 or not 0 <= self.tweets_min_confidence <= 1:
            raise LmprobeError(f"{', '.join(bad) or 'the real tasks'}: every count must be >= 1, `zero_shot_chars` "
                               f">= 0 (0: whole texts) and `tweets_min_confidence` in [0, 1]")


def balanced_accuracy(predictions, labels, n_classes: int) -> float:
    """Mean over the classes present in ``labels`` of the fraction of that class predicted right
    (sklearn's balanced_accuracy_score)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    recalls = [np.mean(predictions[labels == k] == k) for k in range(n_classes) if np.any(labels == k)]
    return float(np.mean(recalls))


def balanced_accuracy_items(predictions, labels) -> list[float]:
    """Per test item, its share of the balanced accuracy: correct / (classes present x items of its
    class) x items, so that their mean is the balanced accuracy. Two models' items on the same test
    set differ item by item, which is what a paired test of their balanced accuracies compares."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    per_class = dict(zip(classes.tolist(), counts.tolist()))
    weight = np.array([labels.size / (len(classes) * per_class[y]) for y in labels.tolist()])
    return (weight * (predictions == labels)).tolist()


def _summary(name: str, draws: np.ndarray | None, level: float) -> dict:
    """``name``_stderr, _low, _high of a statistic's bootstrap ``draws`` (None: fewer than 2 examples)."""
    if draws is None:
        return {f"{name}_stderr": None, f"{name}_low": None, f"{name}_high": None}
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return {f"{name}_stderr": float(draws.std(ddof=1)), f"{name}_low": float(low), f"{name}_high": float(high)}


def _check_bootstrap(resamples: int, level: float) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < 2:
        raise LmprobeError(f"resamples={resamples!r}: pass a whole number >= 2 (BOOTSTRAP_RESAMPLES by default)")
    if not 0 < level < 1:
        raise LmprobeError(f"level={level!r}: pass the interval's coverage as a fraction in (0, 1), e.g. 0.95")


def accuracy_intervals(predictions, labels, n_classes: int, *, resamples: int = BOOTSTRAP_RESAMPLES,
                       level: float = LEVEL, seed: int = 0) -> dict:
    """Bootstrap stderr and percentile interval of balanced accuracy and accuracy (keys
    balanced_accuracy_stderr / _low / _high, accuracy_stderr / _low / _high), resampling the
    examples of each true class within that class (module docstring)."""
    _check_bootstrap(resamples, level)
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape:
        raise LmprobeError(f"{predictions.size} predictions for {labels.size} labels: pass one per example")
    if labels.size and not 0 <= labels.min() <= labels.max() < n_classes:
        raise LmprobeError(f"labels {labels.min()}..{labels.max()} for {n_classes} classes: pass class indices "
                           f"0..{n_classes - 1}")
    if labels.size < 2:
        return {**_summary("balanced_accuracy", None, level), **_summary("accuracy", None, level)}
    rng = np.random.default_rng(seed)
    recalls, counts = [], []  # [classes present, resamples] recalls; examples per class
    for k in range(n_classes):
        right = (predictions[labels == k] == k).astype(np.float64)
        if right.size:
            recalls.append(right[rng.integers(0, right.size, (resamples, right.size))].mean(1))
            counts.append(right.size)
    recalls = np.stack(recalls)
    plain = np.asarray(counts, np.float64) @ recalls / sum(counts)
    return {**_summary("balanced_accuracy", recalls.mean(0), level), **_summary("accuracy", plain, level)}


def bits_per_byte_interval(nll, n_bytes, *, resamples: int = BOOTSTRAP_RESAMPLES, level: float = LEVEL,
                           seed: int = 0) -> dict:
    """Bootstrap stderr and percentile interval of bits per byte = sum(nll) / ln 2 / sum(bytes)
    over texts (per-text total NLL in nats and UTF-8 bytes), resampling texts: bits_per_byte_stderr
    / _low / _high."""
    _check_bootstrap(resamples, level)
    nll, n_bytes = np.asarray(nll, np.float64), np.asarray(n_bytes, np.float64)
    if nll.shape != n_bytes.shape:
        raise LmprobeError(f"{nll.size} NLLs for {n_bytes.size} byte counts: pass one of each per text")
    draws = None
    if nll.size >= 2:
        idx = np.random.default_rng(seed).integers(0, nll.size, (resamples, nll.size))
        draws = nll[idx].sum(1) / math.log(2) / n_bytes[idx].sum(1)
    return _summary("bits_per_byte", draws, level)


def embed(scorer, texts: Sequence[str], pooling: str, *, progress: Callable = no_progress,
          desc: str = "embedding") -> np.ndarray:
    """[len(texts), D] float32 embeddings, EMBED_CHUNK texts per engine call (a bar step each)."""
    starts = range(0, len(texts), EMBED_CHUNK)
    parts = [scorer.embed(list(texts[s:s + EMBED_CHUNK]), pooling=pooling)
             for s in progress(starts, desc=desc, total=len(starts))]
    return np.concatenate(parts).astype(np.float32)


# ---------------------------------------------------------------------- probe


def probe_embeddings(x_train, y_train, x_test, y_test, n_classes: int | None = None, *, x_validation=None,
                     y_validation=None, cs=SENTEVAL_CS, folds: int = FOLDS, seed: int = 0,
                     standardize: bool = True) -> dict:
    """The SentEval probe on precomputed embeddings [n, D] and class indices [n] (module docstring):
    C by stratified ``folds``-fold CV on train (or by validation accuracy when a validation split
    is given), the model of that C trained on all of train, scored on test."""
    y_train, y_test = np.asarray(y_train, np.int32), np.asarray(y_test, np.int32)
    n_classes = n_classes or int(max(y_train.max(), y_test.max())) + 1
    counts = np.bincount(y_train, minlength=n_classes)
    validation = x_validation is not None
    need = 1 if validation else folds
    if len(counts) > n_classes or counts.min() < need or (len(y_test) and y_test.max() >= n_classes):
        raise LmprobeError(f"the probe's training set has class counts {counts.tolist()} for {n_classes} classes: "
                           f"every class needs at least {need} examples" + ("" if validation else " (one per fold)"))
    if validation:
        y_validation = np.asarray(y_validation, np.int32)
        models = logistic.fit_many(x_train, y_train, n_classes, np.asarray(cs), np.ones((len(cs), len(y_train))),
                                   standardize=standardize)
        by_c = np.mean(np.asarray(logistic.predict(models, x_validation)) == y_validation, axis=-1)
        index = int(np.argmax(by_c))  # the first maximum: the smallest C among ties
        selection = "validation split"
    else:
        cv = logistic.cross_validate(x_train, y_train, n_classes, cs, folds, seed, standardize=standardize)
        models, by_c, index = cv.models, cv.accuracy, cv.index
        selection = f"stratified {folds}-fold cross-validation on train"
    model = jax.tree.map(lambda a: a[index], models)
    predictions = np.asarray(logistic.predict(model, x_test))
    iterations = int(np.asarray(models.iterations).max())
    return {"accuracy": float(np.mean(predictions == y_test)),
            "balanced_accuracy": balanced_accuracy(predictions, y_test, n_classes),
            "balanced_accuracy_items": balanced_accuracy_items(predictions, y_test),
            **accuracy_intervals(predictions, y_test, n_classes, seed=seed),
            "c": float(np.asarray(cs)[index]), "cv_accuracy": float(by_c[index]),
            "cv_accuracy_by_c": [float(a) for a in by_c], "cs": [float(c) for c in cs], "selection": selection,
            "n_train": int(len(y_train)), "n_test": int(len(y_test)),
            "n_validation": int(len(y_validation)) if validation else 0, "n_classes": int(n_classes),
            "standardize": bool(standardize), "seed": int(seed), "iterations": iterations,
            "converged": iterations < logistic.DEFAULT_MAX_ITER}


def probe(scorer, train, test, *, pooling: str | None = None, validation=None, cs=SENTEVAL_CS, folds: int = FOLDS,
          seed: int = 0, standardize: bool = True, progress: Callable = no_progress) -> dict:
    """The SentEval probe of ``scorer``'s frozen embeddings on LabelledData ``train`` / ``test``
    (and ``validation``, which then chooses C); ``probe_embeddings``' numbers plus the pooling and
    how many texts were cut to the model's context while embedding."""
    pooling = pooling or default_pooling(scorer)
    truncated = getattr(scorer, "truncated", 0)
    x_train = embed(scorer, train.texts, pooling, progress=progress, desc="probe: train embeddings")
    x_test = embed(scorer, test.texts, pooling, progress=progress, desc="probe: test embeddings")
    x_val = None if validation is None else embed(scorer, validation.texts, pooling, progress=progress,
                                                  desc="probe: validation embeddings")
    result = probe_embeddings(x_train, train.labels, x_test, test.labels, len(train.label_names),
                              x_validation=x_val, y_validation=None if validation is None else validation.labels,
                              cs=cs, folds=folds, seed=seed, standardize=standardize)
    return {**result, "pooling": pooling, "truncated": int(getattr(scorer, "truncated", 0) - truncated)}


# ---------------------------------------------------------------------- zero-shot


def _require_causal(scorer, what: str, instead: str) -> None:
    if scorer.is_decoder:
        return
    kind = "an encoder-decoder" if scorer.is_encoder_decoder else "an encoder"
    raise LmprobeError(f"{what} needs a causal language model; {type(scorer.model).__name__} is {kind}: {instead}")


def label_scores(scorer, texts: Sequence[str], label_words: Sequence[str], *, template: str = TEMPLATES["review"],
                 max_chars: int | None = None, progress: Callable = no_progress) -> np.ndarray:
    """[len(texts), len(label_words)]: ln p(" word" | template with the text), summed over the
    word's tokens. ``max_chars`` cuts each text first (``cut``); a prompt that still does not fit
    the model's context is an error (the engine would cut its end, the label word's place)."""
    _require_causal(scorer, "zero-shot classification", "probe its embeddings with realtask.probe")
    if "{text}" not in template:
        raise LmprobeError(f"template {template!r} has no {{text}} placeholder")
    texts = [cut(t, max_chars) for t in texts] if max_chars else list(texts)
    prompts = [template.replace("{text}", t) for t in texts]
    tok = scorer.tokenizer
    longest_word = max(len(tok(" " + w, add_special_tokens=False)["input_ids"]) for w in label_words)
    lengths = [len(ids) + longest_word for ids in tok(prompts)["input_ids"]] if prompts else []
    too_long = [i for i, n in enumerate(lengths) if n > scorer.max_length]
    if too_long:
        raise LmprobeError(f"{len(too_long)} zero-shot prompts (text {too_long[0]} the first, {lengths[too_long[0]]} "
                           f"tokens with its label word) do not fit the model's context of {scorer.max_length} "
                           "tokens: pass max_chars to cut the texts")
    return icl.label_log_probs(scorer, prompts, list(label_words), progress=progress, desc="zero-shot prompts")


def zero_shot(scorer, data, *, template: str = TEMPLATES["review"], label_words: Sequence[str] | None = None,
              max_chars: int | None = None, seed: int = 0, progress: Callable = no_progress) -> dict:
    """Zero-shot accuracy of a decoder on LabelledData ``data``: the prediction is the label word
    (one per class, by default the class names) with the highest log-probability after the prompt.
    ``predicted_share``: how many texts got each class; ``seed``: the bootstrap's."""
    words = list(label_words or data.label_names)
    if len(words) != len(data.label_names):
        raise LmprobeError(f"{plural(len(words), 'label word')} {words} for "
                           f"{plural(len(data.label_names), 'class', 'classes')} "
                           f"{list(data.label_names)}: give one word per class")
    if label_words is None and any(w.strip().isdigit() for w in words):
        raise LmprobeError(f"the class names {words} are numbers, not words a model could answer: pass label_words")
    scores = label_scores(scorer, data.texts, words, template=template, max_chars=max_chars, progress=progress)
    predictions = scores.argmax(-1)
    labels = np.asarray(data.labels)
    return {"accuracy": float(np.mean(predictions == labels)),
            "balanced_accuracy": balanced_accuracy(predictions, labels, len(words)),
            "balanced_accuracy_items": balanced_accuracy_items(predictions, labels),
            **accuracy_intervals(predictions, labels, len(words), seed=seed),
            "label_words": words, "template": template, "n": len(data.texts), "max_chars": max_chars,
            "predicted_share": np.bincount(predictions, minlength=len(words)).tolist()}


# ---------------------------------------------------------------------- perplexity


def cut(text: str, max_chars: int) -> str:
    """``text`` with runs of whitespace made single spaces, then cut to at most ``max_chars``
    characters at the last space within the limit (mid-word only for a longer first word)."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    head = text[:max_chars + 1]
    return head[:head.rfind(" ")] if " " in head else text[:max_chars]


def start_tokens(tokenizer) -> list[int]:
    """What the first text token is predicted after: the tokenizer's own start tokens where it adds
    some (Llama's and Gemma's <s> / <bos>, OPT's </s>); else the document separator <|endoftext|>
    of GPT-2-style pretraining (GPT-2, Pythia, Qwen, SmolLM2); else BOS; else EOS."""
    plain, full = tokenizer("a", add_special_tokens=False)["input_ids"], tokenizer("a")["input_ids"]
    k = len(full) - len(plain)
    if k > 0 and full[k:] == plain:
        return list(full[:k])
    if DOCUMENT_SEPARATOR in tokenizer.get_vocab():
        return [tokenizer.convert_tokens_to_ids(DOCUMENT_SEPARATOR)]
    for token in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token is not None:
            return [token]
    raise LmprobeError("the tokenizer has no start, <|endoftext|>, BOS or EOS token to predict the first token after")


def perplexity(scorer, texts: Sequence[str], *, max_chars: int = 1500, seed: int = 0,
               progress: Callable = no_progress) -> dict:
    """Held-out language modelling of a decoder.

    Each non-empty text is cut (``cut``) to at most ``max_chars`` characters, tokenized without
    special tokens and scored after ``start_tokens``: every text token is predicted, none of the
    start tokens. A text longer than the model's context is scored in windows of the context
    (``windows``): each token is predicted once, after at least half a context of the text before
    it, never truncated. Reported: the total NLL (nats), per-token NLL and perplexity, and
    bits per byte = total NLL / ln 2 / total UTF-8 bytes of the cut texts. Tokenizers differ
    across models, so per-token numbers do not compare models; bits per byte does (all models
    predict the same bytes), with its bootstrap over texts (``bits_per_byte_interval``, ``seed``)."""
    _require_causal(scorer, "perplexity", "an encoder has no next-token distribution")
    shown = [cut(t, max_chars) for t in texts if t.strip()]
    if not shown:
        raise LmprobeError("no text to compute perplexity on: pass non-empty texts")
    tok = scorer.tokenizer
    start = start_tokens(tok)
    ids = [start + list(i) for i in tok(shown, add_special_tokens=False)["input_ids"]]
    if scorer.max_length <= len(start) + 1:
        raise LmprobeError(f"the model's context of {scorer.max_length} tokens leaves no room to predict a token")
    pieces = [(t, *w) for t, i in enumerate(ids) for w in windows(i, len(start), scorer.max_length)]
    chunks = range(0, len(pieces), SCORE_CHUNK)
    text_nll = np.zeros(len(shown))
    for s in progress(chunks, desc="perplexity", total=len(chunks)):
        part = pieces[s:s + SCORE_CHUNK]
        for (text, _, first), lp in zip(part, scorer.score([w for _, w, _ in part]).token_logprobs):
            text_nll[text] -= float(np.sum(lp[first - 1:], dtype=np.float64))  # the tokens this window predicts
    nll = float(text_nll.sum())
    tokens = sum(len(i) - len(start) for i in ids)
    text_bytes = [len(t.encode("utf-8")) for t in shown]
    n_bytes = sum(text_bytes)
    return {"bits_per_byte": nll / math.log(2) / n_bytes,
            **bits_per_byte_interval(text_nll, text_bytes, seed=seed), "perplexity": math.exp(nll / tokens),
            "nll_per_token": nll / tokens, "nll": nll, "tokens": tokens, "bytes": n_bytes, "texts": len(shown),
            "cut": sum(len(" ".join(t.split())) > max_chars for t in texts if t.strip()),
            "max_chars": max_chars, "windows": len(pieces), "start_tokens": tok.convert_ids_to_tokens(start)}


def windows(ids: list[int], first: int, limit: int) -> list[tuple[list[int], int]]:
    """``ids`` as (window, index of its first predicted token) pairs of at most ``limit`` tokens that
    predict every token from ``first`` on exactly once: the whole sequence when it fits, else windows
    that each predict the tokens after the last one's, with at least ``limit // 2`` tokens before them."""
    out, context = [(ids[:limit], first)], limit - limit // 2
    done = min(len(ids), limit)  # tokens predicted so far (from the start)
    while done < len(ids):
        lo = done - context
        out.append((ids[lo:lo + limit], context))
        done = min(len(ids), lo + limit)
    return out
