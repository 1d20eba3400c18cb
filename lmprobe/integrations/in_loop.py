"""An in-loop callback: label-free proxies of a model while it trains, on the trainer's own mesh.

    probe = ProxyCallback(tokenizer, run_dir="runs/x", mesh=mesh, seed=0)
    for step in range(steps):
        ...                                         # the trainer's own step
        if step % 100 == 0:
            logger.log(probe(step, model), step)    # {"heldout_loss": 3.2, "byod_negation": 0.04, ...}

Every input is drawn once, at construction, from a seeded sample of the corpus: the same texts on
every call, so the numbers compare across steps and the compiled programs never change shape.
The first call builds one Scorer on the model as it is (its parameters stay where the trainer put
them); each later call swaps in the new weights (``Scorer.update``: the same model, its
nnx.State, or a CallableLM's params) and reuses the compiled steps (a later call that compiles
says so: lmprobe.log.notice). A model that is not an lmprobe family runs as
``lmprobe.models.callable_lm.CallableLM(apply, params, ...)``, or is an nnx.Module of your own
whose ``__call__(ids, mask)`` returns logits or (logits, hidden): pass it on the first call, then
the same again (or the CallableLM's params). The first call checks the methods against what the
model gives (hidden states, token embeddings) before any work: one error naming those it cannot run.
Each call appends one row (step, UTC time, seconds, every metric, seconds per method, and
``traces``: the engine's compilations so far, constant after the first call) to
RUN_DIR/proxies.jsonl on process 0, in one write, flushed and synced: a crash mid-write leaves the
earlier rows whole (``read_rows`` skips a torn last line).
In a multi-process job every process calls the probe at the same steps (the queries are collective).
Between calls the Scorer keeps a reference to the weights it last scored.

Proxies (``methods``): stages of lmprobe.methods.stages, the same code and numbers as validate and
sweep at small settings: heldout (``heldout_loss``, nats per token, and ``heldout_bits_per_byte``
on ``heldout_texts`` documents), byod_negation / byod_word_order / byod_long_range /
byod_tokenization / byod_entropy (BYOD on ``examples`` sentences or paragraphs of the corpus),
syntextbench (``syntextbench_n`` sentences on ``syntextbench_levels``), synbench (``synbench_n``
samples at ``synbench_scales``), probes; a number a stage cannot give here (BYOD's normalised
negation: no benign corpus) is left out of the row. Left out: SCoPE and MSTemp need a second model (score
saved checkpoints against one with ``lmprobe sweep`` or their front ends), and BYOD's toxicity
samples continuations on every call.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Sequence

from flax import nnx

from lmprobe.data.corpus import Corpus, load_corpus
from lmprobe.engine import Scorer
from lmprobe.engine.runtime import is_main
from lmprobe.errors import LmprobeError
from lmprobe.log import notice
from lmprobe.methods import realtask, stages, syntextbench
from lmprobe.methods.byod import knowledge, long_range
from lmprobe.methods.byod.common import shuffled
from lmprobe.store import is_remote, json_text

FILENAME = "proxies.jsonl"
BUCKETS = (16, 32, 64, 128, 256, 512)  # coarser than the engine's: fewer programs to compile on the first call
DEFAULT_METHODS = ("heldout", "byod_negation", "byod_word_order", "byod_long_range", "syntextbench")


class ProxyCallback:
    """``probe(step, model) -> metrics``: the chosen proxies on the model's current weights.

    ``corpus``: a corpus name or path (lmprobe.data.corpus.load_corpus), a Corpus, or a list of
    texts, for BYOD and the held-out loss; ``heldout``: the held-out texts (default
    ``heldout_texts`` documents of the corpus: pass texts the model does not train on).
    ``mesh`` / ``data_axes``: the trainer's mesh and the axes a batch is split over (the Scorer's).
    ``batch_size`` is per device; ``max_length`` caps the context the proxies use. ``settings``: any other
    stage setting by its flat name (lmprobe.methods.stages.FLAT), e.g. ``scope_reference="smollm2-135m"``
    for the scope method.
    """

    def __init__(self, tokenizer, run_dir: str | None = None, *, methods: Sequence[str] = DEFAULT_METHODS,
                 mesh=None, data_axes: Sequence[str] | None = None, seed: int = 0, corpus="fortunes",
                 heldout: Sequence[str] | None = None, heldout_texts: int = 32, heldout_chars: int = 200,
                 examples: int = 32, syntextbench_n: int = syntextbench.MIN_N,
                 syntextbench_levels: Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8),
                 synbench_n: int = 512, synbench_scales: Sequence[float] = (1.0, 5.0), batch_size: int = 16,
                 max_length: int = 256, buckets: Sequence[int] = BUCKETS, **settings):
        unknown = [m for m in methods if m not in stages.STAGES]
        if unknown or not methods:
            raise LmprobeError(f"ProxyCallback: unknown method(s) {unknown or '(none given)'}: choose from "
                               f"{', '.join(stages.STAGES)}")
        if min(examples, heldout_texts, heldout_chars, batch_size, max_length) < 1:
            raise LmprobeError(f"ProxyCallback: examples={examples}, heldout_texts={heldout_texts}, heldout_chars="
                               f"{heldout_chars}, batch_size={batch_size} and max_length={max_length} must be >= 1")
        if run_dir is not None and is_remote(run_dir):
            raise LmprobeError(f"ProxyCallback: run_dir '{run_dir}' is remote; proxies.jsonl is appended to a "
                               "local file: give a local directory")
        self.tokenizer, self.methods, self.seed, self.examples = tokenizer, tuple(methods), seed, examples
        self.mesh, self.data_axes, self.batch_size, self.max_length = mesh, data_axes, batch_size, max_length
        self.buckets = tuple(buckets)
        self.heldout_chars = heldout_chars
        self.path = os.path.join(os.fspath(run_dir), FILENAME) if run_dir is not None else None
        if self.path and is_main():
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.scorer, self.rows = None, 0  # rows: calls done
        self.last_seconds, self.last_seconds_by_method = None, {}  # the latest call's wall time, in all and per method
        self.settings = stages.Settings.of(dict(
            syntextbench_n=syntextbench_n, syntextbench_levels=tuple(syntextbench_levels), synbench_n=synbench_n,
            synbench_scales=tuple(synbench_scales), byod_examples=examples, heldout_chars=heldout_chars, seed=seed,
            batch_size=batch_size, **settings))
        prepared = ("syntextbench", "probes", "scope", "mstemp")  # the rest: _prepare
        self.inputs = stages.load_inputs([m for m in self.methods if m in prepared], self.settings)
        self._prepare(corpus, heldout, heldout_texts)

    def _prepare(self, corpus, heldout, heldout_texts: int) -> None:
        """The fixed inputs: BYOD's corpus and the held-out texts, each checked to hold what its methods need."""
        needs_corpus = any(m.startswith("byod_") for m in self.methods) or ("heldout" in self.methods
                                                                            and heldout is None)
        if not needs_corpus:
            corpus = None
        elif isinstance(corpus, str | os.PathLike):
            corpus = load_corpus(os.fspath(corpus))
        elif not isinstance(corpus, Corpus):
            corpus = Corpus.from_texts("texts", list(corpus))
        if heldout is not None:
            self.heldout = [t for t in heldout if t.strip()]
        else:  # documents of the corpus whose first heldout_chars fit max_length tokens
            docs = shuffled(corpus.documents, self.seed + 1)[:4 * heldout_texts] if corpus else []
            self.heldout = self._fitting(docs)[:heldout_texts]
        self.inputs.corpus, self.inputs.heldout = corpus, self.heldout
        sentences = shuffled(corpus.sentences, self.seed)[:8 * self.examples] if corpus else []
        usable = {"byod_negation": lambda: knowledge.build(sentences, 1).examples,
                  "byod_long_range": lambda: corpus.long_paragraphs(long_range.MIN_SENTENCES) if corpus else [],
                  "heldout": lambda: self.heldout}
        source = "the heldout texts" if heldout is not None else f"corpus '{getattr(corpus, 'name', '')}'"
        for name, found in usable.items():
            if name in self.methods and not found():
                where = source if name == "heldout" else f"corpus '{corpus.name}'"
                raise LmprobeError(f"ProxyCallback: {name} finds no usable text in {where}: give English prose "
                                   "(e.g. corpus='fortunes'; negation needs is/was/were, long_range paragraphs of "
                                   f"{long_range.MIN_SENTENCES}+ sentences) or drop the method")

    def _fitting(self, texts: list[str]) -> list[str]:
        """The non-empty texts whose cut (``heldout_chars``) fits ``max_length`` tokens."""
        texts = [t for t in texts if t.strip()]
        cut = [realtask.cut(t, self.heldout_chars) for t in texts]
        ids = self.tokenizer(cut, add_special_tokens=False)["input_ids"] if cut else []
        return [t for t, i in zip(texts, ids) if len(i) < self.max_length]

    def __call__(self, step: int, model) -> dict[str, float | None]:
        """The metrics of ``model`` (an lmprobe model or CallableLM; after the first call, also
        its nnx.State or a CallableLM's params) at training step ``step``; one row appended."""
        try:
            step = int(step)
        except (TypeError, ValueError):
            raise LmprobeError(f"ProxyCallback: step {step!r} is not an integer: pass the training step") from None
        start = time.perf_counter()
        scorer = self._scorer(model, step)
        traced = sum(scorer.compilations.values()) if self.rows else None
        found, seconds = stages.run(self.methods, scorer, self.settings, self.inputs, name="in-loop")
        metrics = {k: float(v) for k, v in stages.flat(found).items() if v is not None}  # no reading: left out
        seconds = {k: round(v, 4) for k, v in seconds.items()}
        self.last_seconds, self.last_seconds_by_method = time.perf_counter() - start, seconds
        row = {"step": step, "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "seconds": round(self.last_seconds, 4), **metrics, "seconds_by_method": seconds,
               "traces": sum(scorer.compilations.values())}
        if self.path and is_main():
            append_row(self.path, row)
        if traced is not None and row["traces"] > traced:
            notice(f"ProxyCallback: step {step} compiled {row['traces'] - traced} program(s) again (the weights' "
                   "layout or the inputs' shapes changed): later calls should compile nothing")
        self.rows += 1
        return metrics

    def _scorer(self, model, step: int) -> Scorer:
        """The Scorer, built on the first call's model; later calls swap in the new weights."""
        if self.scorer is not None:
            self.scorer.update(model, step=step)
            return self.scorer
        if not isinstance(model, nnx.Module):
            raise LmprobeError(f"ProxyCallback: the first call needs the model itself, got {type(model).__name__}: "
                               "pass an lmprobe model (e.g. lmprobe.models.llama.Llama), an nnx.Module of your own "
                               "or lmprobe.models.callable_lm.CallableLM(apply, params, ...); later calls may pass "
                               "its nnx.State or params")
        context = getattr(model, "max_length", None) or getattr(
            getattr(model, "config", None), "max_position_embeddings", None) or self.max_length
        extra = {"data_axes": tuple(self.data_axes)} if self.data_axes is not None else {}
        scorer = Scorer(model, self.tokenizer, mesh=self.mesh, batch_size=self.batch_size,
                        max_length=min(self.max_length, context), buckets=self.buckets, **extra)
        self.check(scorer)
        self.scorer = scorer
        return scorer

    def check(self, scorer: Scorer) -> None:
        """One error, before any work, naming the methods ``scorer``'s model cannot run and why."""
        why = stages.missing(self.methods, scorer, own_model=scorer.identity.get("family") == "CallableLM")
        if why:
            needs = "; ".join(f"{name} needs {reason}" for name, reason in why.items())
            keep = tuple(m for m in self.methods if m not in why)
            raise LmprobeError(f"ProxyCallback: {needs}: drop {'it' if len(why) == 1 else 'them'} (methods="
                               f"{keep!r}) or give a model that has {'it' if len(why) == 1 else 'them'}")

    @property
    def compilations(self) -> dict[str, int]:
        """Traces per engine step so far (a copy): unchanged after the first call."""
        return dict(self.scorer.compilations) if self.scorer is not None else {}


def append_row(path: str, row: dict) -> None:
    """``row`` appended to the JSONL file ``path`` as one line, in one write, flushed and synced. A
    torn last line (a crash mid-write) is ended first, so the new row starts on a line of its own."""
    line = (json_text(row, indent=None) + "\n").encode("utf-8")
    with open(path, "a+b") as f:
        if f.seek(0, os.SEEK_END):
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = b"\n" + line
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: str) -> list[dict]:
    """The rows of a proxies.jsonl file, skipping lines a crash tore."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows
