"""The model queries every method uses, jitted, length-bucketed and sharded over the mesh.

    scorer = Scorer.load("smollm2-135m")
    scorer.score(["Some text."])                       # token log-probs, NLL, log-perplexity
    scorer.score_pairs(a, b)                           # the same for pairs, shared prefixes once
    scorer.next_token_stats(a, a_pos, b, b_pos)        # JSD / KL / entropy / mass / top-k, on device
    scorer.embed(["Some text."], pooling="mean")       # sentence embeddings
    scorer.score_targets(sources, targets)             # encoder-decoders: ln p(target | source)
    scorer.embed_inputs(x)                             # continuous inputs (Gaussian probing)
    scorer.generate(["Once upon"], max_new_tokens=20)  # KV-cache generation

Inputs are texts or pre-tokenized id lists. Results come back in input order as numpy arrays;
no full-vocabulary array ever leaves the device. A method never touches devices or padding.

Every entry point runs its jitted step over a stream of batches (``Scorer._run``): batch k+1 is
padded, placed and dispatched while the device computes batch k, outputs stay on device sharded
over 'data', and they come back to the host together at the end of the call (or in groups, when
they would hold more than ``readback_bytes`` of device memory). ``batch_size`` and ``max_tokens``
are per device of the 'data' axis.

Encoder-decoders (T5; bodies in lmprobe.engine.seq2seq): ``embed`` pools the encoder,
``score_targets`` scores targets given sources, ``score`` / ``score_pairs`` score each text as the
target of an empty source (just EOS: the decoder as a language model), ``generate`` decodes from
the encoded prompt. ``next_token_stats`` (the next token after a text) is for decoders only.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import kernels
from lmprobe.engine import generation, seq2seq
from lmprobe.engine.batching import LENGTH_BUCKETS, Batch, make_batches, restore
from lmprobe.engine.mesh import DATA, batch_sharding, make_mesh, placement, replicated, tracing_on
from lmprobe.engine.packing import PADDING, Packed, pack_pairs, padded, visibility
from lmprobe.engine.plan import check_fits
from lmprobe.engine.runtime import enable_compilation_cache, initialize_distributed, main_print, resolve_dtype
from lmprobe.errors import LmprobeError
from lmprobe.models import ENCODER, family_of

POOLINGS = ("mean", "cls", "last", "first_last_avg")
BATCH_LINES: set[str] = set()  # the batch-geometry lines Scorer.load has logged in this process
_TIME_CHUNK = 32  # positions per LM-head slice when scoring every token


@dataclasses.dataclass
class Scores:
    """Per-text scores. token_logprobs[i][t] = ln p(token t+1 | tokens <= t) of text i."""

    token_logprobs: list[np.ndarray]
    nll: np.ndarray  # summed over predicted tokens, nats
    num_predicted: np.ndarray

    @property
    def mean_nll(self) -> np.ndarray:
        """Mean token NLL in nats: the log-perplexity."""
        return self.nll / np.maximum(self.num_predicted, 1)


class HiddenMemo:
    """Final hidden states by the tokens they follow: position p of ids is stored under ids[:p+1]
    (all a causal model's state there depends on), so a sentence is found inside any longer text
    that starts with it. ``generate`` fills it with its prompts' states, ``next_token_stats``
    reads and fills it: BYOD's metrics compare the same sentences with different partners, and
    each sentence runs once. Valid for one model only."""

    def __init__(self):
        self._states: dict[tuple[int, ...], np.ndarray] = {}

    def get(self, ids, positions) -> np.ndarray | None:
        keys = [tuple(ids[:p + 1]) for p in positions]
        return np.stack([self._states[k] for k in keys]) if all(k in self._states for k in keys) else None

    def put(self, ids, positions, hidden) -> None:
        for p, h in zip(positions, hidden):
            self._states[tuple(ids[:p + 1])] = np.array(h)


class Scorer:
    """A model, its tokenizer and a mesh, with jitted entry points for every method.

    ``batch_size`` is sequences per batch on each device of the mesh's 'data' axis (a batch has
    batch_size x mesh.shape['data'] rows); ``max_tokens``, when given, caps each device's share
    of a batch at that many tokens (padding included), never below one sequence.
    """

    lookahead = 4  # batches dispatched past the oldest result not yet read back, when reading early
    readback_bytes = 1 << 28  # bytes of results (all devices) a call holds on device before reading the oldest back

    def __init__(self, model: nnx.Module, tokenizer=None, *, mesh=None, batch_size: int = 16,
                 max_tokens: int | None = None, max_length: int | None = None,
                 truncate: bool = True, buckets: Sequence[int] = LENGTH_BUCKETS, strategy: str | None = None,
                 identity: dict | None = None):
        if batch_size < 1 or (max_tokens is not None and max_tokens < 1):
            raise LmprobeError(f"batch_size={batch_size} and max_tokens={max_tokens} must be >= 1 (sequences and "
                               "tokens per device per batch)")
        enable_compilation_cache()
        self.mesh = mesh if mesh is not None else make_mesh()
        self.tokenizer = tokenizer
        self.config = model.config
        self.family = family_of(model)  # None: a wrapped model (a task head on a body)
        self.is_decoder = bool(self.family and self.family.is_decoder)
        self.is_encoder_decoder = bool(self.family and self.family.is_encoder_decoder)
        self.kind = self.family.kind if self.family else ENCODER  # models.CAUSAL_LM, ENCODER or ENCODER_DECODER
        self.vocab_size = model.config.vocab_size
        self.max_length = max_length or getattr(model, "max_length", model.config.max_position_embeddings)
        self.batch_size, self.max_tokens, self.buckets = batch_size, max_tokens, buckets
        self.truncate = truncate
        self.truncated = 0  # inputs cut to max_length so far
        self.compilations = collections.Counter()  # traces per entry point (tests, diagnostics)
        self._graphdef, self._state = nnx.split(model)
        self.strategy = strategy  # the sharding strategy of the parameters ('fsdp', 'tp'); None: not known
        about = identity if identity is not None else model_identity(model)  # results.json, cache keys
        self.identity = {**about, "max_length": self.max_length}  # truncation changes outputs too

    @classmethod
    def load(cls, name: str, *, dtype="auto", model_parallel: int = 1, strategy: str = "fsdp",
             offline: bool | None = None, allow_pickle: bool = False, revision: str | None = None,
             progress: Callable = lambda it, **_: it, **kwargs) -> Scorer:
        """Load ``name`` with its parameters placed straight onto their shardings.

        ``dtype``: a jnp dtype, or a name for ``runtime.resolve_dtype`` ('auto': bfloat16 on GPU
        and TPU, float32 on CPU). Prints the batch geometry once (process 0). Where the device
        reports its memory (GPU, TPU), the memory plan first checks, before any weight is read,
        that the parameters and the largest bucket's step fit (lmprobe.engine.plan.check_fits).
        ``revision``: the hub revision (branch, tag or commit) of a hub model; ``progress``
        (tqdm-like) counts the parameters read."""
        from lmprobe.checkpoints import identity, load

        initialize_distributed()
        dtype = resolve_dtype(dtype) if isinstance(dtype, str) else dtype
        mesh = make_mesh(model_parallel)
        check_fits(name, dtype=dtype, mesh=mesh, strategy=strategy, batch_size=kwargs.get("batch_size", 16),
                   max_length=kwargs.get("max_length"), max_tokens=kwargs.get("max_tokens"), offline=offline,
                   revision=revision)
        loaded = load(name, dtype=dtype, place=placement(mesh, strategy), offline=offline,
                      allow_pickle=allow_pickle, revision=revision, progress=progress)
        about = model_identity(loaded.model, name=name, checkpoint=identity(loaded.checkpoint), dtype=dtype,
                               model_type=loaded.checkpoint.config.get("model_type"))
        scorer = cls(loaded.model, loaded.tokenizer, mesh=mesh, strategy=strategy, identity=about, **kwargs)
        d = mesh.shape[DATA]
        budget = f", at most {scorer.max_tokens} tokens per device" if scorer.max_tokens else ""
        line = (f"batch: {scorer.batch_size} per device x {d} data-parallel device{'s' * (d > 1)} = "
                f"{scorer.batch_size * d} sequences per batch{budget}")
        if line not in BATCH_LINES:  # a run that loads several models says it once
            BATCH_LINES.add(line)
            main_print(line)
        return scorer

    @property
    def model(self) -> nnx.Module:
        return nnx.merge(self._graphdef, self._state)

    # ------------------------------------------------------------------ inputs

    def encode(self, inputs: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
        """Token ids of texts (with the tokenizer's special tokens), or id lists checked as given."""
        if len(inputs) and isinstance(inputs[0], str):
            if self.tokenizer is None:
                raise LmprobeError("this Scorer has no tokenizer: pass token id lists, or build it "
                                   "with Scorer.load(name) / a tokenizer")
            seqs = self.tokenizer(list(inputs))["input_ids"]
        else:
            seqs = [list(map(int, s)) for s in inputs]
        for i, s in enumerate(seqs):
            bad = [t for t in s if not 0 <= t < self.vocab_size]
            if bad:
                raise LmprobeError(f"input {i} has token id {bad[0]} outside the vocabulary "
                                   f"[0, {self.vocab_size}): use ids from this model's tokenizer")
        return [self._fit(i, s) for i, s in enumerate(seqs)]

    def _fit(self, i: int, seq: list[int], limit: int | None = None, keep: str = "first") -> list[int]:
        """``seq`` cut to ``limit`` tokens (the context by default), counted; or an error."""
        limit = limit or self.max_length
        if len(seq) <= limit:
            return seq
        if not self.truncate:
            raise LmprobeError(f"input {i} has {len(seq)} tokens, more than the {limit} that fit the "
                               f"model's context of {self.max_length}: shorten it, or allow "
                               "truncation (truncate=True)")
        self.truncated += 1
        return seq[:limit] if keep == "first" else seq[-limit:]

    def _batches(self, seqs, *, left_pad=False, max_length=None) -> list[Batch]:
        """Bucketed batches; no bucket exceeds ``max_length`` (the model's context by default)."""
        limit = max_length or self.max_length
        buckets = sorted({min(b, limit) for b in self.buckets})
        return make_batches(seqs, batch_size=self.batch_size, max_tokens=self.max_tokens,
                            buckets=buckets, left_pad=left_pad, data_parallel=self.mesh.shape[DATA])

    def _rows(self, per_device: int) -> int:
        """Rows of a batch with ``per_device`` rows on each device of the 'data' axis."""
        return max(1, per_device) * self.mesh.shape[DATA]

    def _put(self, *arrays):
        """Host arrays (the same on every host) onto the mesh, batch axis over 'data'."""
        return tuple(jax.make_array_from_callback(np.shape(a), batch_sharding(self.mesh, np.ndim(a)),
                                                  lambda index, a=a: a[index]) for a in arrays)

    def _jit(self, name, fn, **static):
        """``fn(model, *args)`` jitted once per Scorer; traces are counted in ``compilations``."""
        key = (name, tuple(sorted(static.items())))
        cache = self.__dict__.setdefault("_jitted", {})
        if key not in cache:
            graphdef = self._graphdef

            def traced(state, *args):
                self.compilations[name] += 1
                with tracing_on(self.mesh):  # activations split over the batch, as the plan compiles them
                    return fn(nnx.merge(graphdef, state), *args, **static)

            # Outputs stay where the rows are; _fetch gathers them once per call.
            cache[key] = jax.jit(traced, out_shardings=batch_sharding(self.mesh, 1))
        return functools.partial(cache[key], self._state)

    def _run(self, step, calls: Iterable[tuple], readback: Callable | None = None) -> list:
        """``step(*args)`` for each ``args`` of ``calls``; the outputs in order, read back by
        ``readback`` (``_fetch``: to numpy) in as few transfers as device memory allows.

        ``calls`` is lazy, so the host pads and places batch k+1 while the device runs batch k
        (dispatch is asynchronous). Nothing is read back before the last step is dispatched,
        unless the outputs held on device pass ``readback_bytes``: then all but the newest
        ``lookahead`` are read back together, the newer ones still running meanwhile.
        """
        readback = readback or self._fetch
        done, pending, held = [], [], 0
        for args in calls:
            pending.append(step(*args))
            held += _nbytes(pending[-1])
            ready = len(pending) - self.lookahead
            if ready > 0 and held > self.readback_bytes:
                done += readback(pending[:ready])
                del pending[:ready]
                held = _nbytes(pending)
        return done + (readback(pending) if pending else [])

    def _fetch(self, outputs: list) -> list:
        """Device outputs (pytrees of arrays sharded over 'data') as numpy, in one transfer. On
        several processes each array is first gathered onto every device (a jitted reshard,
        one program per shape), so that every process reads all of it."""
        if jax.process_count() > 1:
            outputs = jax.tree.map(_replicator(self.mesh), outputs)
        return jax.device_get(outputs)

    def _require_decoder(self, what: str):
        if self.is_encoder_decoder:
            raise LmprobeError(f"{what} needs a causal language model; {type(self.model).__name__} is an "
                               "encoder-decoder: score it with score_targets (ln p(target | source)), score "
                               "or generate, or use a decoder checkpoint (llama, gpt2, opt, ...)")
        if not self.is_decoder:
            raise LmprobeError(f"{what} needs a causal language model; {type(self.model).__name__} "
                               "is an encoder: use a decoder checkpoint (llama, gpt2, opt, ...)")

    # ------------------------------------------------------------------ scoring

    def score(self, inputs) -> Scores:
        """Token log-probabilities, summed NLL and log-perplexity of each text or id list.

        An encoder-decoder scores each as the target of an empty source (EOS alone): every token
        is predicted, the first one too."""
        if self.is_encoder_decoder:
            seqs = self.encode(inputs)
            return self.score_targets([[self.config.eos_token_id]] * len(seqs), seqs)
        self._require_decoder("score")
        seqs = self.encode(inputs)
        if not seqs:
            return Scores([], np.zeros(0), np.zeros(0, np.int64))
        step = self._jit("score", _token_logprobs)
        batches = self._batches(seqs)
        per_batch = self._run(step, (self._put(b.ids, b.mask) for b in batches))
        rows = restore(batches, [[lp[r, :n - 1] for r, n in enumerate(b.lengths)]
                                 for b, lp in zip(batches, per_batch)], len(seqs))
        return Scores(rows, np.asarray([-r.sum() for r in rows], np.float64),
                      np.asarray([len(r) for r in rows]))

    def score_pairs(self, a, b) -> tuple[Scores, Scores]:
        """``score(a)`` and ``score(b)`` for pairs (a[i], b[i]), each pair in one packed row: the
        tokens they share at the start are computed once (e.g. a sentence and its negation).
        An encoder-decoder scores them as ``score`` does, unpacked."""
        if len(a) != len(b):
            raise LmprobeError(f"score_pairs needs as many a ({len(a)}) as b ({len(b)})")
        if self.is_encoder_decoder:
            both, n = self.score(list(a) + list(b)), len(a)
            return (Scores(both.token_logprobs[:n], both.nll[:n], both.num_predicted[:n]),
                    Scores(both.token_logprobs[n:], both.nll[n:], both.num_predicted[n:]))
        self._require_decoder("score_pairs")
        seqs = self.encode(list(a) + list(b))
        if not seqs:
            empty = Scores([], np.zeros(0), np.zeros(0, np.int64))
            return empty, empty
        n = len(a)
        packed = pack_pairs(seqs[:n], seqs[n:], self.max_length)
        side = (np.arange(2 * n) >= n).astype(np.int64)  # target set: 0 for the a's, 1 for the b's
        targets = [np.zeros((len(r), 2), np.int32) for r in packed.rows]
        for i, seq in enumerate(seqs):
            targets[packed.row[i]][packed.slots[i][:-1], side[i]] = seq[1:]
        step = self._jit("score_packed", _packed_logprobs)
        batches = self._batches(packed.rows)
        calls = (self._put(b.ids, *self._packing(packed, b), padded(targets, b.indices, (*b.shape, 2), 0))
                 for b in batches)
        per_row = restore(batches, self._run(step, calls), len(packed.rows))
        rows = [per_row[packed.row[i]][packed.slots[i][:-1], side[i]] for i in range(2 * n)]
        scores = Scores(rows, np.asarray([-r.sum() for r in rows], np.float64), np.asarray([len(r) for r in rows]))
        return (Scores(scores.token_logprobs[:n], scores.nll[:n], scores.num_predicted[:n]),
                Scores(scores.token_logprobs[n:], scores.nll[n:], scores.num_predicted[n:]))

    def score_targets(self, sources, targets) -> Scores:
        """ln p(target | source) per target token of an encoder-decoder: token_logprobs[i][t] =
        ln p(target_i token t | its tokens before t, source_i), every target token predicted.
        Texts or id lists; texts get the tokenizer's special tokens (T5's </s> ends a target, as
        lm-eval scores seq2seq continuations)."""
        if not self.is_encoder_decoder:
            raise LmprobeError("score_targets needs an encoder-decoder (T5); with a causal LM score the "
                               "source followed by the target with score() and keep the target's tokens")
        if len(sources) != len(targets):
            raise LmprobeError(f"score_targets needs as many sources ({len(sources)}) as targets ({len(targets)})")
        sources, targets = self.encode(list(sources)), self.encode(list(targets))
        if not targets:
            return Scores([], np.zeros(0), np.zeros(0, np.int64))
        step = self._jit("score_targets", seq2seq.target_logprobs)
        buckets = sorted({min(b, self.max_length) for b in self.buckets})
        batches = seq2seq.pair_batches(sources, targets, buckets=buckets, batch_size=self.batch_size,
                                       max_tokens=self.max_tokens, data_parallel=self.mesh.shape[DATA])
        calls = (self._put(b.source_ids, b.source_mask, b.target_ids, b.target_mask) for b in batches)
        rows = restore(batches, [[lp[r, :n] for r, n in enumerate(b.target_lengths)]
                                 for b, lp in zip(batches, self._run(step, calls))], len(targets))
        return Scores(rows, np.asarray([-r.sum() for r in rows], np.float64), np.asarray([len(r) for r in rows]))

    def _packing(self, packed: Packed, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Segments and positions of a batch of packed rows (padding: PADDING, 0)."""
        return (padded(packed.segments, batch.indices, batch.shape, PADDING),
                padded(packed.positions, batch.indices, batch.shape, 0))

    def next_token_stats(self, a, a_positions, b, b_positions, *, token_set=None, top_k: int = 0,
                         memo: HiddenMemo | None = None) -> dict[str, list[np.ndarray]]:
        """Compare next-token distributions of paired inputs at chosen positions.

        Position t of an input is the distribution of the token after token t (negative t counts
        from the end: -1 is after the last token). Pair i compares a[i] at a_positions[i][j] with
        b[i] at b_positions[i][j]. Returns per pair, per position: 'jsd', 'kl_ab', 'kl_ba',
        'entropy_a', 'entropy_b'; 'mass_a', 'mass_b' (probability on ``token_set``, a list of
        token ids) when given; 'topk_a', 'topk_b' ids and 'topk_logp_a', 'topk_logp_b' when
        top_k > 0. The LM head runs only at these positions, on device. Each pair runs as one
        packed row (lmprobe.engine.packing): tokens a[i] and b[i] share at the start run once.
        With a ``memo``, inputs whose hidden states at these positions it holds are not run again,
        and what runs is added to it.
        """
        self._require_decoder("next_token_stats")
        if not (len(a) == len(b) == len(a_positions) == len(b_positions)):
            raise LmprobeError("next_token_stats needs as many a, a_positions, b and b_positions")
        counts = [len(p) for p in a_positions]
        if counts != [len(p) for p in b_positions]:
            raise LmprobeError("pair i must compare as many positions in a[i] as in b[i]")
        if not len(a):
            return {}
        seqs = self.encode(list(a) + list(b))
        positions = [_absolute(p, len(s), i) for i, (s, p) in
                     enumerate(zip(seqs, list(a_positions) + list(b_positions)))]
        n = len(a)
        known = [None if memo is None else memo.get(s, p) for s, p in zip(seqs, positions)]
        todo = [s if k is None else None for s, k in zip(seqs, known)]
        hidden = self._hidden_at(pack_pairs(todo[:n], todo[n:], self.max_length), positions, known)
        if memo is not None:
            for s, p, k, h in zip(seqs, positions, known, hidden):
                if k is None:
                    memo.put(s, p, h)
        # Positions are independent: all of them in one flat list, the head in blocks of equal size.
        flat_a, flat_b = np.concatenate(hidden[:n]), np.concatenate(hidden[n:])
        mask = np.zeros(self.vocab_size, bool)
        if token_set is not None:
            mask[np.asarray(token_set, np.int64)] = True
        step = self._jit("pair_stats", _pair_stats, top_k=top_k, with_mass=token_set is not None)
        block, total = self._rows(8 * self.batch_size), len(flat_a)
        takes = [np.minimum(np.arange(start, start + block), total - 1)  # repeats, dropped below
                 for start in range(0, total, block)]
        mask = jax.device_put(mask, replicated(self.mesh))  # one transfer, not one per block
        outs = self._run(step, ((*self._put(flat_a[t], flat_b[t]), mask) for t in takes))
        splits = np.cumsum(counts)[:-1]
        return {key: np.split(np.concatenate([o[key] for o in outs])[:total], splits) for key in (outs or [{}])[0]}

    def _hidden_at(self, packed: Packed, positions, known) -> list[np.ndarray]:
        """Final hidden states of each sequence at its positions, [len(positions[i]), D] each:
        ``known[i]`` where given, else from its packed row."""
        hidden = list(known)
        asked = [[] for _ in packed.rows]  # per row: the slots its sequences ask for, in order
        offset = np.zeros(len(positions), np.int64)
        for i, p in enumerate(positions):
            if known[i] is None:
                offset[i] = len(asked[packed.row[i]])
                asked[packed.row[i]] += packed.slots[i][p].tolist()
        if not packed.rows:
            return hidden
        row_width = 1 << max(0, (max(map(len, asked)) - 1).bit_length())
        step = self._jit("hidden_at", _packed_hidden_at)
        batches = self._batches(packed.rows)
        calls = (self._put(b.ids, *self._packing(packed, b), padded(asked, b.indices, (b.shape[0], row_width), 0))
                 for b in batches)
        per_row = restore(batches, self._run(step, calls), len(packed.rows))
        for i, p in enumerate(positions):
            if known[i] is None:
                hidden[i] = per_row[packed.row[i]][offset[i]:offset[i] + len(p)]
        return hidden

    # ------------------------------------------------------------------ embeddings

    def apply(self, name: str, fn, inputs) -> jax.Array:
        """``fn(model, ids, mask) -> [B, ...]`` over texts or id lists, jitted once per bucket shape
        (``name`` keys the jit cache); rows in input order, left on device (replicated, so every
        process can read it)."""
        seqs = self.encode(list(inputs))
        if not seqs:
            raise LmprobeError("no inputs to apply the model to: pass at least one text")
        step = self._jit(name, fn)
        batches = self._batches(seqs)
        outputs = self._run(step, (self._put(b.ids, b.mask) for b in batches), readback=list)
        starts = np.cumsum([0] + [b.shape[0] for b in batches])
        source = np.zeros(len(seqs), np.int32)
        for batch, start in zip(batches, starts):
            source[batch.indices] = start + np.arange(len(batch.indices))
        return _rows_in_order(self.mesh)(outputs, source)

    def embed(self, inputs, *, pooling: str = "mean", layer: int = -1) -> np.ndarray:
        """Sentence embeddings [N, D] of texts or id lists.

        pooling: 'mean' over real tokens, 'cls' (first token), 'last' (last real token: decoders),
        or 'first_last_avg' (SimCSE: mean over tokens of the average of the first layer's output,
        hidden_states[1], and the last). ``layer`` picks the hidden state in HF's numbering
        (0 = embeddings, -1 = last) for the other poolings.
        """
        _check_pooling(pooling)
        seqs = self.encode(inputs)
        if not seqs:
            return np.zeros((0, self._hidden_size()), np.float32)
        step = self._jit("embed", pooled_embedding, pooling=pooling, layer=layer)
        batches = self._batches(seqs)
        per_batch = self._run(step, (self._put(b.ids, b.mask) for b in batches))
        return np.stack(restore(batches, per_batch, len(seqs)))

    def embed_inputs(self, inputs_embeds: np.ndarray, attention_mask: np.ndarray | None = None, *,
                     pooling: str = "mean", layer: int = -1) -> np.ndarray:
        """Embeddings [N, D] of continuous inputs [N, T, D] fed in place of token embeddings."""
        _check_pooling(pooling)
        x = np.asarray(inputs_embeds, np.float32)
        if x.ndim != 3 or x.shape[-1] != self._hidden_size():
            raise LmprobeError(f"inputs_embeds has shape {x.shape}; expected [N, T, "
                               f"{self._hidden_size()}] (the model's hidden size)")
        mask = np.ones(x.shape[:2], np.int32) if attention_mask is None else np.asarray(attention_mask, np.int32)
        n = len(x)
        if n == 0:
            return np.zeros((0, x.shape[-1]), np.float32)
        rows = self._rows(self.batch_size)
        step = self._jit("embed_inputs", pooled_embedding, pooling=pooling, layer=layer, continuous=True)
        takes = [np.minimum(np.arange(start, start + rows), n - 1) for start in range(0, n, rows)]  # repeats, dropped
        return np.concatenate(self._run(step, (self._put(x[t], mask[t]) for t in takes)))[:n]

    def _hidden_size(self) -> int:
        return self.config.hidden_size

    # ------------------------------------------------------------------ generation

    def generate(self, prompts, *, max_new_tokens: int = 20, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, eos_id: int | None = None,
                 decode: bool = True, memo: HiddenMemo | None = None, allowed=None) -> list:
        """Continuations of each prompt: greedy (temperature 0) or sampled, KV-cached.

        Stops at ``eos_id`` (the tokenizer's by default) or after max_new_tokens. Sampling is
        seeded per prompt (its index), so a prompt gets the same continuation whatever the
        batch size. Returns texts (decode=True) or id lists, without the prompt. A ``memo``
        receives the prompts' final hidden states at every position (the prefill computes them).

        An encoder-decoder encodes each prompt (up to the whole context) and generates its
        decoder's answer; it stops at the config's EOS when there is no tokenizer; a ``memo`` is
        left as is (its states are a decoder's).

        ``allowed`` constrains decoding (causal LMs): a bool mask over the model's vocabulary
        (``vocab_size`` ids) for every prompt, or a sequence of such masks, one per prompt (rows
        may share one array). Only True ids and EOS are ever emitted (greedy: the best allowed
        id; sampling: the filtered distribution renormalised over the allowed ids). The mask is
        an array argument of the jitted program: new masks do not recompile.
        """
        seq2seq_model = self.is_encoder_decoder
        if not seq2seq_model:
            self._require_decoder("generate")
        row_allowed = self._allowed_rows(allowed, len(prompts)) if allowed is not None else None
        if row_allowed is not None and seq2seq_model:
            raise LmprobeError("generate(allowed=...) constrains causal LMs only: this model is an "
                               "encoder-decoder; generate without a mask, or use a decoder model")
        room = self.max_length if seq2seq_model else self.max_length - max_new_tokens
        if room < 1:
            raise LmprobeError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the "
                               f"model's context of {self.max_length}")
        seqs = [self._fit(i, s, room, keep="last") for i, s in enumerate(self.encode(prompts))]
        if not seqs:
            return []
        if eos_id is None and self.tokenizer is not None:
            eos_id = self.tokenizer.eos_token_id
        if eos_id is None and seq2seq_model:
            eos_id = self.config.eos_token_id
        eos = -1 if eos_id is None else int(eos_id)
        # prompt slots + new-token slots must fit the context (learned position tables)
        batches = self._batches(seqs, left_pad=True, max_length=room)
        if seq2seq_model:
            memo = None
            step = self._jit("generate_seq2seq", seq2seq.generate, max_new_tokens=max_new_tokens, top_k=top_k,
                             greedy=temperature <= 0)
        else:
            step = self._jit("generate", generation.generate, max_new_tokens=max_new_tokens,
                             top_k=top_k, greedy=temperature <= 0, prompt_hidden=memo is not None)
        settings = (np.uint32(seed), np.float32(max(temperature, 1e-6)), np.float32(top_p), np.int32(eos))

        def call(batch):
            index = np.full(batch.shape[0], -1, np.int32)  # row seeds: positions in the input list
            index[:len(batch.indices)] = batch.indices
            if row_allowed is None:
                return (*self._put(batch.ids, batch.mask, index), *settings)
            rows = np.ones((batch.shape[0], self.vocab_size), bool)  # padding rows: unconstrained
            for row, i in enumerate(batch.indices):
                rows[row] = row_allowed[i]
            ids, mask, index, rows = self._put(batch.ids, batch.mask, index, rows)
            return ids, mask, index, *settings, rows

        per_batch = []
        for batch, out in zip(batches, self._run(step, map(call, batches))):
            if memo is not None:
                out, hidden = out
                for row, n in enumerate(batch.lengths):  # left padding: the prompt ends the row
                    memo.put(seqs[batch.indices[row]], range(n), hidden[row, batch.shape[1] - n:])
            per_batch.append([_until_eos(row, eos) for row in out])
        outputs = restore(batches, per_batch, len(seqs))
        if decode and self.tokenizer is not None:
            return [self.tokenizer.decode(o) for o in outputs]
        return outputs


    def _allowed_rows(self, allowed, n: int) -> list:
        """``generate``'s ``allowed``: one [vocab_size] bool mask per prompt, checked."""
        if isinstance(allowed, np.ndarray | jax.Array) and np.ndim(allowed) == 1:
            rows = [np.asarray(allowed, bool)] * n
        else:
            rows = [np.asarray(a, bool) for a in allowed]
            if len(rows) != n:
                raise LmprobeError(f"generate(allowed=...) has {len(rows)} masks for {n} prompts: pass one "
                                   "mask for all prompts or one per prompt")
        checked = {}
        for i, row in enumerate(rows):
            if id(row) in checked:
                continue
            checked[id(row)] = row
            if row.shape != (self.vocab_size,):
                raise LmprobeError(f"generate(allowed=...): mask {i} has shape {row.shape}, not ({self.vocab_size},) "
                                   "(one bool per id of the model's vocabulary)")
            if not row.any():
                raise LmprobeError(f"generate(allowed=...): mask {i} allows no token: allow at least one id "
                                   "(EOS is always allowed)")
        return rows


# ---------------------------------------------------------------------- jitted bodies


def _token_logprobs(model, ids, mask):
    """[B, T]: ln p(ids[t+1] | ids[<=t])."""
    h = model(ids, mask, compute_logits=False).last_hidden_state
    return _logprobs(model, h, jnp.roll(ids, -1, axis=1))


def _logprobs(model, h, targets):
    """ln p(targets[b, t, ...] | h[b, t]): targets [B, T] or [B, T, K] (K tokens scored against
    each distribution), the LM head run once per position, over slices of positions."""
    b, t, d = h.shape
    chunk = math.gcd(t, _TIME_CHUNK)  # buckets are multiples of 4 (powers of two and 1.5x)
    hs = h.reshape(b, t // chunk, chunk, d).swapaxes(0, 1)
    ts = targets.reshape(b, t // chunk, chunk, *targets.shape[2:]).swapaxes(0, 1)
    lp = jax.lax.map(lambda x: kernels.token_log_probs(model.logits(x[0]), x[1]), (hs, ts))
    return lp.swapaxes(0, 1).reshape(targets.shape)


def _packed_hidden(model, ids, segments, positions):
    """Last hidden states of packed rows (lmprobe.engine.packing)."""
    return model(ids, visibility(segments), positions=positions, compute_logits=False).last_hidden_state


def _packed_logprobs(model, ids, segments, positions, targets):
    return _logprobs(model, _packed_hidden(model, ids, segments, positions), targets)


def _packed_hidden_at(model, ids, segments, positions, gather):
    h = _packed_hidden(model, ids, segments, positions)
    return jnp.take_along_axis(h, gather[..., None], axis=1)


def _pair_stats(model, ha, hb, token_mask, *, top_k, with_mass):
    la, lb = model.logits(ha), model.logits(hb)  # [n, P, V], on device only
    out = {"jsd": kernels.js_divergence(la, lb), "kl_ab": kernels.kl_divergence(la, lb),
           "kl_ba": kernels.kl_divergence(lb, la), "entropy_a": kernels.entropy(la),
           "entropy_b": kernels.entropy(lb)}
    if with_mass:
        out["mass_a"] = kernels.token_set_mass(la, token_mask)
        out["mass_b"] = kernels.token_set_mass(lb, token_mask)
    if top_k:
        for name, logits in (("a", la), ("b", lb)):
            logp, ids = jax.lax.top_k(jax.nn.log_softmax(logits, axis=-1), top_k)
            out[f"topk_{name}"], out[f"topk_logp_{name}"] = ids, logp
    return out


def model_identity(model, *, name: str | None = None, checkpoint: dict | None = None, dtype=None,
                   model_type: str | None = None) -> dict:
    """What a Scorer's model is (JSON-able): the name as given, the checkpoint's identity
    (``lmprobe.checkpoints.identity``; None for a model built in memory), family, model type,
    parameter and compute dtypes (compute: the parameters' unless given), variants applied (none:
    ``lmprobe.methods.scope.variants`` names its own)."""
    floats = (v.get_value().dtype for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))
    param_dtype = next((str(d) for d in floats if jnp.issubdtype(d, jnp.floating)), None)
    return {"name": name, "checkpoint": checkpoint, "family": type(model).__name__,
            "model_type": model_type or getattr(model.config, "model_type", None), "param_dtype": param_dtype,
            "dtype": str(jnp.dtype(dtype)) if dtype is not None else param_dtype, "variants": []}


def pooled_embedding(model, x, mask, *, pooling, layer, continuous=False):
    """[B, D] sentence embeddings of one padded batch (``Scorer.embed``'s body; reusable inside
    a larger jitted function, e.g. an encoder plus a classification head)."""
    kwargs = dict(inputs_embeds=x) if continuous else dict(input_ids=x)
    family = family_of(model)
    if family is not None and family.is_decoder:
        kwargs["compute_logits"] = False
    need_all = pooling == "first_last_avg" or layer != -1
    out = model(attention_mask=mask, output_hidden_states=need_all, **kwargs)
    if pooling == "first_last_avg":
        h = 0.5 * (out.hidden_states[1] + out.hidden_states[-1])
    else:
        h = out.hidden_states[layer] if need_all else out.last_hidden_state
    h = h.astype(jnp.float32)
    m = mask.astype(jnp.float32)[..., None]
    if pooling in ("mean", "first_last_avg"):
        return (h * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
    if pooling == "cls":
        return h[:, 0]
    last = jnp.maximum(mask.sum(1) - 1, 0)  # right padding: last real token
    return jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]


# ---------------------------------------------------------------------- helpers


def _absolute(positions, length, i) -> list[int]:
    out = [p + length if p < 0 else p for p in positions]
    if any(not 0 <= p < length for p in out):
        raise LmprobeError(f"input {i} has {length} tokens; positions {list(positions)} fall outside it")
    return out


def _check_pooling(pooling):
    if pooling not in POOLINGS:
        raise LmprobeError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")


def _nbytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(tree))


@functools.cache
def _replicator(mesh):
    """A jitted identity that gathers an array onto every device of ``mesh``."""
    return jax.jit(lambda x: x, out_shardings=replicated(mesh))


@functools.cache
def _rows_in_order(mesh):
    """Per-batch outputs concatenated and reordered (rows ``source``), replicated over ``mesh``."""
    return jax.jit(lambda parts, source: jnp.take(jnp.concatenate(parts), source, axis=0),
                   out_shardings=replicated(mesh))


def _until_eos(row, eos) -> list[int]:
    row = [int(t) for t in row]
    return row[:row.index(eos) + 1] if eos in row else row
