"""SCoPE's models by name: each built once, as the task and the classifier head ask (auto: decoders
zero-shot, encoders a head fine-tuned on the training split), and black boxes (``blackbox:NAME``)
sampled from the model NAME builds. Scorers come from the caller's loader (a front end's flags).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from lmprobe import log as logging
from lmprobe.errors import LmprobeError
from lmprobe.methods import no_progress
from lmprobe.methods.scope import models, training
from lmprobe.text import plural

BLACK_BOX = "blackbox:"  # prefix of a black box known only through sampled labels
CLASSIFIER_HEADS = ("auto", "finetune", "probe", "zero-shot", "checkpoint")
LEARNING_RATES = {"finetune": 2e-5, "probe": 1e-2}  # a trained head's, when its TrainConfig's is None
log = logging.get("methods.scope")


def head_for(head: str, scorer) -> str:
    """The classifier ``head`` (one of CLASSIFIER_HEADS) is for ``scorer``'s model: 'auto' is
    zero-shot for decoders and a fine-tuned head for encoders."""
    return head if head != "auto" else ("zero-shot" if scorer.is_decoder else "finetune")


class Models:
    """``models(name)``: the ScopeModel of ``name``, built on first use and kept.

    ``load_scorer(name)``: the Scorer of a model name (variants applied); ``task``: 'classify' or
    'lm' (next-token distributions); ``head``: one of CLASSIFIER_HEADS; ``train``: the labelled
    data trained heads learn from (its label names are the classes); ``train_config``: their
    training (learning_rate None: LEARNING_RATES of the head); ``samples`` / ``seed``: draws per
    text of black boxes; ``progress``: a tqdm-like bar for fine-tuning."""

    def __init__(self, load_scorer: Callable, *, task: str, head: str, train, train_config: training.TrainConfig,
                 samples: int = 10, seed: int = 0, progress: Callable = no_progress):
        self.load_scorer, self.task, self.head, self.train = load_scorer, task, head, train
        self.train_config, self.samples, self.seed, self.progress = train_config, samples, seed, progress
        self.built = {}

    def __call__(self, name: str):
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _build(self, name: str):
        if name.startswith(BLACK_BOX):
            inner = self(name[len(BLACK_BOX):])
            if inner.label_names is None:
                raise LmprobeError(f"'{name}': black boxes give labels, so they need `task=classify`")
            return models.SampledModel(name, models.sampler_from(inner), inner.label_names, k=self.samples,
                                       seed=self.seed, unknown_token=inner.unknown_token)
        scorer = self.load_scorer(name)
        if self.task == "lm":
            return models.NextToken(name, scorer)
        names = self.train.label_names
        head = head_for(self.head, scorer)
        if head == "zero-shot":
            return models.ZeroShotClassifier(name, scorer, names)
        if head == "checkpoint":
            return training.from_checkpoint(scorer, names, name=name)
        config = dataclasses.replace(self.train_config,
                                     learning_rate=self.train_config.learning_rate or LEARNING_RATES[head])
        train_fn = training.finetune if head == "finetune" else training.linear_probe
        kw = {"progress": self.progress} if head == "finetune" else {}
        model, losses = train_fn(scorer, self.train.texts, self.train.labels, names, config=config, name=name, **kw)
        log.info(f"{name}: {head} on {plural(len(self.train), 'example')}, epoch losses "
                 + ", ".join(f"{l:.4f}" for l in losses))
        return model
