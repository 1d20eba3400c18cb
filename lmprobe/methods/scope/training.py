"""Classifiers for SCoPE: fine-tuning a model with a classification head, or a linear probe on
its frozen features (Rawal & Toneva, arXiv:2311.04166v1 App. A and D).

App. A fine-tunes Hugging Face models: by default (TrainConfig.head='hf') the head is the
family's transformers ForSequenceClassification head (models.Classifier), with its dropout
active in training only, drawn from keys seeded by TrainConfig.seed (one per step); the body
has no dropout layers, so it is deterministic. head='mean' is a linear head on mean-pooled
tokens (sentence-transformers). Recipe (the defaults of TrainConfig): Adam, learning rate 2e-5
decayed linearly to 0, batch size 64, 5 epochs, cross-entropy. App. D trains only a linear
probe on the frozen network, on the features the family's head reads (Classifier, linear=True),
with the same optimiser and schedule (its default learning rate, 1e-2, suits a randomly
initialised head on fixed features).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from lmprobe.engine import Scorer
from lmprobe.engine.batching import bucket_length, make_batches
from lmprobe.engine.mesh import replicated
from lmprobe.errors import LmprobeError
from lmprobe.methods import Ticker
from lmprobe.methods.scope.models import HEADS, Classifier, EncoderClassifier, load_hf_head, place_head
from lmprobe.store import cache_key


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = 2e-5  # learning rate of the trained head
    batch_size: int = 64  # training batch of fine-tuned heads and probes
    epochs: int = 5  # training epochs of the heads
    # head layout: hf (the family's transformers sequence-classification head, with its dropout in training),
    # mean (a linear head on mean-pooled tokens, sentence-transformers)
    head: str = "hf"
    seed: int = 0

    def check(self) -> None:
        if self.learning_rate <= 0 or self.batch_size < 1 or self.epochs < 1:
            raise LmprobeError(f"training settings {self}: need learning_rate > 0, batch_size >= 1, epochs >= 1")
        if self.head not in HEADS:
            raise LmprobeError(f"head '{self.head}' is not one of {', '.join(HEADS)}")


PROBE = TrainConfig(learning_rate=1e-2)


def _schedule(config: TrainConfig, n: int):
    steps = config.epochs * -(-n // config.batch_size)
    return optax.adam(optax.linear_schedule(config.learning_rate, 0.0, max(steps, 1)))


def _check_labels(labels, label_names):
    labels = np.asarray(labels, np.int64)
    if len(labels) == 0:
        raise LmprobeError("no training examples: give a dataset with labelled rows")
    bad = labels[(labels < 0) | (labels >= len(label_names))]
    if len(bad):
        raise LmprobeError(f"label {int(bad[0])} is outside the head's classes {list(label_names)}: "
                           "fix the labels or the label names")
    return labels


def finetune(scorer: Scorer, texts: Sequence[str], labels, label_names: Sequence[str], *,
             config: TrainConfig = TrainConfig(), name: str = "classifier",
             progress: Callable = lambda it, **_: it) -> tuple[EncoderClassifier, list[float]]:
    """Fine-tune the scorer's model with a new classification head (App. A), its batches counted
    by ``progress`` (tqdm-like); returns the classifier and the mean training loss of each epoch."""
    config.check()
    labels = _check_labels(labels, label_names)
    classifier = Classifier(scorer.model, len(label_names), head=config.head, seed=config.seed)
    runner = scorer.runner
    place_head(classifier, runner)
    graphdef, params, rest = nnx.split(classifier, nnx.Param, ...)
    tx = _schedule(config, len(labels))
    param_shardings = jax.tree.map(lambda p: p.sharding, params)
    opt_shardings = _like_params(jax.eval_shape(tx.init, params), param_shardings, replicated(scorer.mesh))
    opt_state = runner.mesh_program("finetune_init", jax.jit(tx.init, out_shardings=opt_shardings), params)
    dropout_root = jax.random.PRNGKey(config.seed)

    # the optimizer's state is the step's alone: donated; the first step's parameters are the scorer's own
    @functools.partial(jax.jit, out_shardings=(param_shardings, opt_shardings, replicated(scorer.mesh)),
                       donate_argnums=6)
    def step(ids, mask, y, weight, i, params, opt_state, rest):
        def loss_fn(p):
            key = jax.random.fold_in(dropout_root, i)  # one dropout key per step
            logits = nnx.merge(graphdef, p, rest)(ids, mask, key).astype(jnp.float32)
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
            return (losses * weight).sum() / weight.sum()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    seqs = scorer.encode(list(texts))
    rng = np.random.default_rng(config.seed)
    data_axis = scorer.runner.data_parallel
    epoch_losses, i = [], 0
    ticker = Ticker(progress, config.epochs * -(-len(seqs) // config.batch_size), f"{name}: fine-tuning")
    for _ in range(config.epochs):
        order, total = rng.permutation(len(seqs)), 0.0
        for start in range(0, len(order), config.batch_size):
            chunk = order[start:start + config.batch_size]
            length = bucket_length(max(len(seqs[i]) for i in chunk), scorer.buckets)
            (batch,) = make_batches([seqs[i] for i in chunk], batch_size=-(-len(chunk) // data_axis),
                                    buckets=(length,), data_parallel=data_axis, split=False)
            rows = batch.shape[0]
            y, weight = np.zeros(rows, np.int32), np.zeros(rows, np.float32)
            y[:len(chunk)], weight[:len(chunk)] = labels[chunk[batch.indices]], 1.0
            params, opt_state, loss = runner.mesh_program("finetune_step", step,
                                                          *runner.put(batch.ids, batch.mask, y, weight), np.int32(i),
                                                          params, opt_state, rest)
            i += 1
            total += float(runner.fetch(loss)) * len(chunk)
            ticker.advance()  # after the loss: the count follows the device
        epoch_losses.append(total / len(seqs))
    trained = nnx.merge(graphdef, params, rest)
    served = _served(trained, scorer, "finetune", config, texts, labels, name)
    return EncoderClassifier(name, served, label_names), epoch_losses


def linear_probe(scorer: Scorer, texts: Sequence[str], labels, label_names: Sequence[str], *,
                 config: TrainConfig = PROBE, name: str = "probe") -> tuple[EncoderClassifier, list[float]]:
    """A linear head trained on the frozen features the family's head reads (App. D; Classifier
    with linear=True: the pretrained pooler's output, [CLS] / <s>, the last token, or the mean for
    head='mean'); (classifier, epoch losses)."""
    config.check()
    labels = _check_labels(labels, label_names)
    classifier = Classifier(scorer.model, len(label_names), head=config.head, linear=True, seed=config.seed)
    features = jnp.asarray(_wrap(classifier, scorer, scorer.identity).apply("scope_features", _features, list(texts)))
    graphdef, head = nnx.split(classifier.head)
    tx = _schedule(config, len(labels))
    opt_state = tx.init(nnx.state(head, nnx.Param))

    @jax.jit
    def step(state, opt_state, x, y):
        def loss_fn(s):
            logits = nnx.merge(graphdef, s)(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state)
        updates, opt_state = tx.update(grads, opt_state, state)
        return optax.apply_updates(state, updates), opt_state, loss

    state, rng, epoch_losses = nnx.state(head, nnx.Param), np.random.default_rng(config.seed), []
    y_all = jnp.asarray(labels, jnp.int32)
    for _ in range(config.epochs):
        order, total = rng.permutation(len(labels)), 0.0
        for start in range(0, len(order), config.batch_size):
            idx = jnp.asarray(order[start:start + config.batch_size])
            state, opt_state, loss = scorer.runner.program("probe_step", step, state, opt_state, features[idx],
                                                           y_all[idx])
            total += float(loss) * len(idx)
        epoch_losses.append(total / len(labels))
    nnx.update(classifier.head, state)
    place_head(classifier, scorer.runner)
    served = _served(classifier, scorer, "probe", config, texts, labels, name)
    return EncoderClassifier(name, served, label_names), epoch_losses


def from_checkpoint(scorer: Scorer, label_names: Sequence[str], *, name: str = "classifier",
                    checkpoint=None) -> EncoderClassifier:
    """The classification head a transformers *ForSequenceClassification checkpoint was fine-tuned
    with, untrained further (the paper's App. A models, e.g. an SST-2 classifier). Its labels
    (config id2label) are matched to ``label_names`` by name, case-insensitively; generic ones
    (LABEL_0, ...) are taken in order. ``checkpoint``: the resolved checkpoint (default: the
    scorer's own, from its identity)."""
    if checkpoint is None:
        from lmprobe.checkpoints.resolve import resolve

        location = (scorer.identity.get("checkpoint") or {}).get("location")
        if location is None:
            raise LmprobeError(f"model '{name}' was not loaded from a checkpoint, so it has no head to read: "
                               "fine-tune one (`head=finetune`)")
        checkpoint = resolve(location, offline=True)
    labels = _checkpoint_labels(checkpoint.config)
    classifier = Classifier(scorer.model, len(labels), head="hf")
    load_hf_head(classifier, checkpoint.tensors, where=f"'{checkpoint.location}'")
    order = _label_order(labels, label_names, name)
    last = {"bert": "classifier", "distilbert": "classifier", "roberta": "out_proj", "decoder": "score"}
    layer, order = getattr(classifier.head, last[classifier.layout]), np.asarray(order)
    layer.kernel.set_value(layer.kernel.get_value()[:, order])
    if layer.bias is not None:
        layer.bias.set_value(layer.bias.get_value()[order])
    place_head(classifier, scorer.runner)
    head = {"kind": "checkpoint", "layout": classifier.layout, "label_order": order.tolist()}
    served = _wrap(classifier, scorer, {**scorer.identity, "name": name, "head": head})
    return EncoderClassifier(name, served, label_names)


def _checkpoint_labels(config: dict) -> list[str]:
    """The label names of a ForSequenceClassification checkpoint (config id2label)."""
    id2label = {int(k): str(v) for k, v in (config.get("id2label") or {}).items()}
    n = len(id2label) or config.get("num_labels", 2)
    return [id2label.get(i, f"LABEL_{i}") for i in range(n)]


def _label_order(labels: list[str], label_names: Sequence[str], name: str) -> list[int]:
    """The checkpoint's label index of each of ``label_names``."""
    n = len(labels)
    index = {v.lower(): i for i, v in enumerate(labels)}
    if all(label.lower() in index for label in label_names) and n == len(label_names):
        return [index[label.lower()] for label in label_names]
    if labels == [f"LABEL_{i}" for i in range(n)] and n == len(label_names):
        return list(range(n))
    raise LmprobeError(f"model '{name}' was fine-tuned on the labels {labels} (config id2label), which do not "
                       f"match the data's {list(label_names)}: evaluate it on data with those labels, or "
                       "fine-tune a head (`head=finetune`)")


def _served(classifier, scorer: Scorer, kind: str, config: TrainConfig, texts, labels, name: str) -> Scorer:
    """The trained classifier on the base scorer's mesh; its identity is the base model's plus
    how the head was trained and on what (results.json, cache keys)."""
    head = {"kind": kind, **dataclasses.asdict(config), "layout": classifier.layout, "reads": classifier.pooling,
            "data": cache_key(texts=list(texts), labels=np.asarray(labels).tolist())}
    return _wrap(classifier, scorer, {**scorer.identity, "name": name, "head": head})


def _wrap(classifier, scorer: Scorer, identity: dict) -> Scorer:
    return scorer.with_model(classifier, identity)


def _like_params(opt_state, param_shardings, other):
    """Shardings of an optimizer's state: each subtree shaped as the parameters (Adam's moments) sharded
    as they are, anything else (step counts) ``other``."""
    shaped = jax.tree.structure(param_shardings)

    def is_params(x):
        return jax.tree.structure(x) == shaped

    return jax.tree.map(lambda x: param_shardings if is_params(x) else other, opt_state, is_leaf=is_params)


def _features(model, ids, mask):
    return model.features(ids, mask)
