"""Models as SCoPE needs them: a text x -> the output distribution m(x) (Rawal & Toneva, arXiv:2311.04166v1 Sec. 3.3).

Every model gives ``log_probs(texts) -> jax.Array [N, n]``, log-probabilities over its n labels
(classifiers) or its vocabulary (language modelling, App. G), kept on device: the search and the
metrics reduce them there (kernels.divergence), so no full-vocabulary array reaches the host.

* EncoderClassifier: an encoder (or decoder body) with a classification head (Classifier: the
  family's Hugging Face head or a mean-pooled linear one; fine-tuned or a linear probe, see
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

from lmprobe.engine.steps import pooled_embedding
from lmprobe.errors import LmprobeError
from lmprobe.methods import icl
from lmprobe.models import family_of


class ScopeModel(Protocol):
    name: str
    label_names: tuple[str, ...] | None  # None: next-token distributions (App. G)
    unknown_token: str  # PWWS's leave-one-out replacement
    identity: dict  # what the model is (its scorer's identity and head): results.json, cache keys

    def log_probs(self, texts: Sequence[str]) -> jax.Array: ...


def _unknown(tokenizer) -> str:
    return getattr(tokenizer, "unk_token", None) or "UNK"


HEADS = ("hf", "mean")  # TrainConfig.head: the family's transformers head, or a linear head on mean pooling


def _linear(d_in: int, d_out: int, rngs, *, bias: bool = True) -> nnx.Linear:
    """A head layer initialised as HF's _init_weights does: kernel ~ N(0, 0.02), bias 0."""
    return nnx.Linear(d_in, d_out, use_bias=bias, kernel_init=nnx.initializers.normal(0.02), rngs=rngs)


def _dropout(x, rate: float, key):
    """Inverted dropout; the identity when ``key`` is None (serving)."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)


def _split(key, n: int):
    return (None,) * n if key is None else tuple(jax.random.split(key, n))


class LinearHead(nnx.Module):
    """dropout -> classifier: BertForSequenceClassification after its pooler; with rate 0, the
    mean-pooled head (sentence-transformers) and the linear probes."""

    def __init__(self, d: int, num_labels: int, rate: float, rngs):
        self.rate, self.classifier = rate, _linear(d, num_labels, rngs)

    def __call__(self, x, key=None):
        return self.classifier(_dropout(x, self.rate, key))


class DistilBertHead(nnx.Module):
    """DistilBertForSequenceClassification: pre_classifier -> ReLU -> dropout -> classifier."""

    def __init__(self, d: int, num_labels: int, rate: float, rngs):
        self.rate = rate
        self.pre_classifier, self.classifier = _linear(d, d, rngs), _linear(d, num_labels, rngs)

    def __call__(self, x, key=None):
        return self.classifier(_dropout(jax.nn.relu(self.pre_classifier(x)), self.rate, key))


class RobertaHead(nnx.Module):
    """RobertaClassificationHead / MPNetClassificationHead: dropout -> dense -> tanh -> dropout -> out_proj."""

    def __init__(self, d: int, num_labels: int, rate: float, rngs):
        self.rate = rate
        self.dense, self.out_proj = _linear(d, d, rngs), _linear(d, num_labels, rngs)

    def __call__(self, x, key=None):
        k1, k2 = _split(key, 2)
        x = jnp.tanh(self.dense(_dropout(x, self.rate, k1)))
        return self.out_proj(_dropout(x, self.rate, k2))


class ScoreHead(nnx.Module):
    """GPT2/LlamaForSequenceClassification: ``score``, no bias, on the last real token; no dropout."""

    def __init__(self, d: int, num_labels: int, rate: float, rngs):
        self.score = _linear(d, num_labels, rngs, bias=False)

    def __call__(self, x, key=None):
        return self.score(x)


# layout -> (what the head reads: pooler / cls / last / mean, head module, HF prefix of its tensors)
LAYOUTS = {"bert": ("pooler", LinearHead, ""), "distilbert": ("cls", DistilBertHead, ""),
           "roberta": ("cls", RobertaHead, "classifier."), "decoder": ("last", ScoreHead, ""),
           "mean": ("mean", LinearHead, "")}


def hf_layout(encoder) -> str:
    """The layout of ``encoder``'s transformers ForSequenceClassification head."""
    family = family_of(encoder)
    name = None if family is None else family.name
    if family is not None and family.is_decoder:
        return "decoder"
    if name == "bert":  # BERT and RoBERTa share the module; RoBERTa's positions skip its pad id
        return "bert" if encoder.config.position_padding_idx is None else "roberta"
    layout = {"nomic_bert": "bert", "distilbert": "distilbert", "mpnet": "roberta"}.get(name)
    if layout is None:
        raise LmprobeError(f"no Hugging Face sequence-classification head is implemented for a {name or 'wrapped'} "
                           "model: use the mean-pooled head (`head_layout=mean`)")
    return layout


class Classifier(nnx.Module):
    """An encoder (or decoder body) + a classification head: ``(ids, mask) -> logits [B, num_labels]``.

    ``head``: 'hf', the family's transformers ForSequenceClassification head (``hf_layout``):
    BERT [CLS] -> pooler (the checkpoint's pretrained one when it has one, else a fresh one) ->
    dropout -> classifier; DistilBERT [CLS] -> pre_classifier -> ReLU -> dropout -> classifier;
    RoBERTa / MPNet <s> -> dropout -> dense -> tanh -> dropout -> out_proj; decoders: score (no
    bias) on the last real token (the mask's, with right padding: HF's last non-pad token). 'mean':
    a linear head on mean-pooled tokens (sentence-transformers). ``linear``: a linear probe
    (App. D) on the features the head reads, frozen: the pretrained pooler's output (BERT with
    one), else [CLS] / <s> (encoders) or the last token (decoders); mean pooling for 'mean'.
    Head weights are initialised as HF does (N(0, 0.02), zero bias) from ``seed``. Dropout rates
    are the checkpoint config's (classifier_dropout, seq_classif_dropout, hidden_dropout_prob);
    dropout acts only when a key is given (training), and only in the head: the encoder bodies
    have no dropout layers, so the body is deterministic in training too.
    """

    def __init__(self, encoder: nnx.Module, num_labels: int, *, head: str = "hf", linear: bool = False,
                 seed: int = 0):
        if head not in HEADS:
            raise LmprobeError(f"head '{head}' is not one of {HEADS}")
        self.encoder, self.config, self.num_labels = encoder, encoder.config, num_labels
        self.layout = "mean" if head == "mean" else hf_layout(encoder)
        pooling, module, self.hf_prefix = LAYOUTS[self.layout]
        rngs = nnx.Rngs(params=jax.random.PRNGKey(seed))
        d = encoder.config.hidden_size
        pretrained = getattr(encoder, "pooler", None) is not None
        if linear:
            pooling = "cls" if pooling == "pooler" and not pretrained else pooling
            module, self.hf_prefix = LinearHead, ""
        self.pooling = pooling
        # BERT without a pretrained pooler: a fresh one (HF's name: bert.pooler.dense)
        self.pooler = _linear(d, d, rngs) if pooling == "pooler" and not pretrained else None
        rate = 0.0 if linear or head == "mean" else float(getattr(encoder.config, "classifier_dropout", 0.1))
        self.head = module(d, num_labels, rate, rngs)

    @property
    def max_length(self) -> int:
        return getattr(self.encoder, "max_length", self.config.max_position_embeddings)

    def features(self, ids, mask):
        """[B, D] fp32: what the head reads (pooled output, [CLS], last token or mean)."""
        if self.pooling == "mean":
            return pooled_embedding(self.encoder, ids, mask, pooling="mean", layer=-1)
        family = family_of(self.encoder)
        kwargs = {"compute_logits": False} if family is not None and family.is_decoder else {}
        out = self.encoder(input_ids=ids, attention_mask=mask, **kwargs)
        if self.pooling == "pooler":
            pooled = self.encoder.pooled(out) if self.pooler is None else jnp.tanh(
                self.pooler(out.last_hidden_state[:, 0].astype(jnp.float32)))
            return pooled.astype(jnp.float32)
        h = out.last_hidden_state.astype(jnp.float32)
        if self.pooling == "cls":
            return h[:, 0]
        last = jnp.maximum(mask.sum(1) - 1, 0)  # right padding: the last real token
        return jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]

    def __call__(self, ids, mask, dropout_key=None):
        """Logits [B, num_labels]; ``dropout_key`` (training) turns the head's dropout on."""
        return self.head(self.features(ids, mask), dropout_key)

    def fresh_modules(self) -> list[nnx.Module]:
        """The modules this class created (not the encoder's): the head and a fresh pooler."""
        return [m for m in (self.head, self.pooler) if m is not None]


def load_hf_head(classifier: Classifier, tensors, *, where: str = "the checkpoint") -> None:
    """Set ``classifier``'s head from a transformers ForSequenceClassification checkpoint's tensors
    (a TensorSource in HF layout): classifier.*, pre_classifier.*, classifier.dense / out_proj.*,
    score.weight; BERT's pooler comes with the encoder (bert.pooler.dense.*)."""
    if classifier.pooler is not None:
        raise LmprobeError(f"{where} has no BERT pooler (pooler.dense.weight), so it is no "
                           "BertForSequenceClassification checkpoint: fine-tune a head instead")
    available = set(tensors.names())
    for path, var in nnx.to_flat_state(nnx.state(classifier.head, nnx.Param)):
        *module, leaf = map(str, path)
        name = classifier.hf_prefix + ".".join([*module, {"kernel": "weight"}.get(leaf, leaf)])
        if name not in available:
            raise LmprobeError(f"tensor {name!r} of the {classifier.layout} classification head is missing from "
                               f"{where}: give a *ForSequenceClassification checkpoint, or fine-tune a head")
        array = np.asarray(tensors.read(name), np.float32)
        array = array.T if leaf == "kernel" else array
        want = tuple(var.get_value().shape)
        if array.shape != want:
            raise LmprobeError(f"tensor {name!r} in {where} has shape {tuple(tensors.shape(name))}, which does not fit "
                               f"a {classifier.num_labels}-label head of width {classifier.config.hidden_size}")
        var.set_value(jnp.asarray(array))


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
        if scorer.model.num_labels != len(label_names):
            raise LmprobeError(f"model '{name}' has a {scorer.model.num_labels}-way head but "
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
                               "encoder: use `task=classify`, or a decoder")
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
                               "fine-tune it instead (`head=finetune` or `head=probe`)")
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


def place_head(classifier: Classifier, runner) -> None:
    """Replicate the (freshly created) head parameters over the scorer's mesh (``runner.replicate``)."""
    for module in classifier.fresh_modules():
        for _, var in nnx.to_flat_state(nnx.state(module, nnx.Param)):
            var.set_value(runner.replicate(var.get_value()))
