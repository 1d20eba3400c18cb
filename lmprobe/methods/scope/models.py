"""Models as SCoPE needs them: a text x -> the output distribution m(x) (../seeds/002 Sec. 3.3).

Every model gives ``log_probs(texts) -> jax.Array [N, n]``, log-probabilities over its n labels
(classifiers) or its vocabulary (language modelling, App. G), kept on device: the search and the
metrics reduce them there (kernels.divergence), so no full-vocabulary array reaches the host.

* EncoderClassifier: an encoder with a classification head (fine-tuned or a linear probe, see
  training.py), run through the engine's bucketed, sharded, jitted batches.
* ZeroShotClassifier: a decoder as a zero-shot classifier, softmax over the label words'
  log-probabilities after an instruction (methods.icl.label_log_probs).
* NextToken: the language-modelling task of App. G, the next-token distribution after x.
* SampledModel: a black box known only through k sampled labels per text (Sec. 5, after Cheng
  et al. 2023): the distribution is the labels' frequencies.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.engine.mesh import replicated
from lmprobe.engine.scorer import pooled_embedding
from lmprobe.errors import LmprobeError
from lmprobe.methods import icl


class ScopeModel(Protocol):
    name: str
    label_names: tuple[str, ...] | None  # None: next-token distributions (App. G)
    unknown_token: str  # PWWS's leave-one-out replacement
    identity: dict  # what the model is (its scorer's identity and head): results.json, cache keys

    def log_probs(self, texts: Sequence[str]) -> jax.Array: ...


def _unknown(tokenizer) -> str:
    return getattr(tokenizer, "unk_token", None) or "UNK"


class Classifier(nnx.Module):
    """An encoder (or decoder body) + pooling + a linear head: logits [B, num_labels]."""

    def __init__(self, encoder: nnx.Module, num_labels: int, *, pooling: str = "mean", seed: int = 0):
        self.encoder = encoder
        self.config = encoder.config
        self.pooling = pooling
        hidden = encoder.config.hidden_size
        key = jax.random.PRNGKey(seed)
        self.head = nnx.Linear(hidden, num_labels, rngs=nnx.Rngs(params=key),
                               kernel_init=nnx.initializers.normal(0.02))

    @property
    def max_length(self) -> int:
        return getattr(self.encoder, "max_length", self.config.max_position_embeddings)

    def __call__(self, ids, mask):
        return self.head(pooled_embedding(self.encoder, ids, mask, pooling=self.pooling, layer=-1))


def _class_log_probs(model, ids, mask):
    return jax.nn.log_softmax(model(ids, mask).astype(jnp.float32), axis=-1)


def _next_token_log_probs(model, ids, mask):
    h = model(ids, mask, compute_logits=False).last_hidden_state
    last = jnp.maximum(mask.sum(1) - 1, 0)
    h_last = jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]
    return jax.nn.log_softmax(model.logits(h_last), axis=-1)


class EncoderClassifier:
    """A Classifier module served by a Scorer (built by training.finetune / training.linear_probe)."""

    def __init__(self, name: str, scorer, label_names: Sequence[str]):
        if scorer.model.head.out_features != len(label_names):
            raise LmprobeError(f"model '{name}' has a {scorer.model.head.out_features}-way head but "
                               f"the data has {len(label_names)} labels {list(label_names)}: "
                               "train the head on this dataset")
        self.name, self.scorer, self.label_names = name, scorer, tuple(label_names)
        self.unknown_token = _unknown(scorer.tokenizer)
        self.identity = {**scorer.identity, "label_names": list(label_names)}  # training.py puts the head in

    def log_probs(self, texts):
        return self.scorer.apply("scope_classify", _class_log_probs, texts)


class NextToken:
    """The next-token distribution after x over the whole vocabulary (App. G)."""

    label_names = None

    def __init__(self, name: str, scorer):
        if not scorer.is_decoder:
            raise LmprobeError(f"the language-modelling task needs a causal LM; '{name}' is an "
                               "encoder: use --task=classify, or a decoder")
        self.name, self.scorer = name, scorer
        self.unknown_token = _unknown(scorer.tokenizer)
        self.identity = {**scorer.identity, "head": "next-token"}

    def log_probs(self, texts):
        return self.scorer.apply("scope_next_token", _next_token_log_probs, texts)


def zero_shot_instruction(label_words: Sequence[str]) -> str:
    if tuple(w.lower() for w in label_words) == ("negative", "positive"):
        return "Answer the sentiment of the following review, either Positive or Negative.\n\n"
    return f"Classify the following text as one of: {', '.join(label_words)}.\n\n"


class ZeroShotClassifier:
    """A decoder's label-word log-probabilities after a zero-shot prompt, normalised over labels."""

    def __init__(self, name: str, scorer, label_names: Sequence[str], label_words: Sequence[str] | None = None):
        if not scorer.is_decoder:
            raise LmprobeError(f"zero-shot classification needs a causal LM; '{name}' is an encoder: "
                               "fine-tune it instead (--head=finetune or probe)")
        self.name, self.scorer, self.label_names = name, scorer, tuple(label_names)
        self.label_words = tuple(label_words or (n.capitalize() for n in label_names))
        self.instruction = zero_shot_instruction(self.label_words)
        self.unknown_token = _unknown(scorer.tokenizer)
        self.identity = {**scorer.identity, "head": "zero-shot", "label_names": list(self.label_names),
                         "label_words": list(self.label_words), "instruction": self.instruction}

        tok = scorer.tokenizer
        ids = [tok(" " + w, add_special_tokens=False)["input_ids"] for w in self.label_words]
        # single-token label words: one forward per prompt, label logits gathered at its end
        self.single_tokens = jnp.asarray([i[0] for i in ids]) if all(len(i) == 1 for i in ids) else None

    def log_probs(self, texts):
        prompts = [icl.prompt((), t, self.instruction) for t in texts]
        if self.single_tokens is None:
            scores = jnp.asarray(icl.label_log_probs(self.scorer, prompts, self.label_words), jnp.float32)
        else:
            scores = self.scorer.apply("scope_next_token", _next_token_log_probs, prompts)[:, self.single_tokens]
        return jax.nn.log_softmax(scores, axis=-1)


class SampledModel:
    """A black box: ``sample(texts, k, seed) -> int [N, k]`` labels; m(x) = label frequencies.
    Draws are seeded by the text itself, so a text always gets the same estimate."""

    def __init__(self, name: str, sample: Callable, label_names: Sequence[str], k: int = 10,
                 seed: int = 0, unknown_token: str = "UNK"):
        if k < 1:
            raise LmprobeError(f"k={k} samples per text: use at least 1")
        self.name, self.sample, self.label_names = name, sample, tuple(label_names)
        self.k, self.seed, self.unknown_token = k, seed, unknown_token
        sampler = getattr(sample, "identity", None) or {"sampler": getattr(sample, "__qualname__", repr(sample))}
        self.identity = {"name": name, "black_box": sampler, "k": k, "seed": seed, "label_names": list(label_names)}

    def log_probs(self, texts):
        draws = np.asarray(self.sample(list(texts), self.k, self.seed))
        counts = np.stack([np.bincount(row, minlength=len(self.label_names)) for row in draws])
        with np.errstate(divide="ignore"):
            return jnp.asarray(np.log(counts / self.k), jnp.float32)


def sampler_from(model: ScopeModel, temperature: float = 1.0) -> Callable:
    """A black-box sampler drawing labels from another model's distribution (tests, demos)."""

    def sample(texts, k, seed):
        logp = np.asarray(model.log_probs(texts), np.float64) / temperature
        p = np.exp(logp - logp.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = []
        for text, row in zip(texts, p):
            rng = np.random.default_rng([seed, zlib.crc32(text.encode())])
            out.append(rng.choice(len(row), size=k, p=row))
        return np.stack(out)

    sample.identity = {"sampled_from": model.identity, "temperature": temperature}
    return sample


def place_head(classifier: Classifier, mesh) -> None:
    """Replicate the (freshly created) head parameters over the scorer's mesh."""
    for _, var in nnx.to_flat_state(nnx.state(classifier.head, nnx.Param)):
        var.set_value(jax.device_put(var.get_value(), replicated(mesh)))
