"""The model queries every method uses, run by a Runner: jitted, length-bucketed, sharded over the mesh.

    scorer = Scorer.load("smollm2-135m")               # or "smollm2-135m@int8": lmprobe.checkpoints.variants
    scorer.score(["Some text."])                       # token log-probs, NLL, log-perplexity
    scorer.score_pairs(a, b)                           # the same for pairs, shared prefixes once
    scorer.score_continuations([(context, answer)])    # ln p(answer | context) and greedy hit (lm-eval's)
    scorer.next_token_stats(a, a_pos, b, b_pos)        # JSD / KL / entropy / mass / top-k, on device
    scorer.embed(["Some text."], pooling="mean")       # sentence embeddings
    scorer.score_targets(sources, targets)             # encoder-decoders: ln p(target | source)
    scorer.embed_inputs(x)                             # continuous inputs (Gaussian probing)
    scorer.generate(["Once upon"], max_new_tokens=20)  # KV-cache generation

Inputs are texts or pre-tokenized id lists. Results come back in input order as numpy arrays;
no full-vocabulary array ever leaves the device. A method never touches devices or padding.
Every query runs a step of lmprobe.engine.steps over a stream of batches with the scorer's
``runner`` (lmprobe.engine.runner: pipelined dispatch, one readback per call). ``batch_size`` and
``max_tokens`` are per device of the 'data' axis (of ``data_axes`` on a user's mesh).

Models from memory: ``Scorer(model, tokenizer, mesh=trainer_mesh, data_axes=("data", "fsdp"))``
takes a model whose parameters are already sharded on the user's mesh, as they are;
``Scorer(CallableLM(apply, params, max_length=...), tokenizer)`` any JAX callable
(lmprobe.models.callable_lm), and ``Scorer(module, tokenizer)`` an nnx.Module of the user's own
(``__call__(ids, mask)`` -> logits or (logits, hidden)) by the same path. What a model's family lacks
(Family.packing, kv_cache) falls back to unpacked rows and full recomputation, said once (a
warning: lmprobe.log.notice). ``scorer.update(new_weights, step=...)`` swaps in weights of the same
shapes and dtypes and keeps the compiled steps (a training loop's callback); leaves that come with
another sharding are put back onto the Scorer's layout, said once.

``Scorer(model, ...)`` and ``Scorer.load`` give the class of the model's kind: encoder-decoders
(T5) get a ``Seq2SeqScorer`` (lmprobe.engine.seq2seq), whose queries read the text as a target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe import log
from lmprobe.checkpoints import identity as checkpoint_identity
from lmprobe.checkpoints import load as load_checkpoint
from lmprobe.checkpoints.variants import apply_variants, split_name
from lmprobe.engine import generation, steps
from lmprobe.engine.batching import FINE_LENGTH_BUCKETS, LENGTH_BUCKETS, bucket_length, cpu_token_budget, restore
from lmprobe.engine.memory import check_fits
from lmprobe.engine.mesh import make_mesh, placement
from lmprobe.engine.packing import Packed, pack_continuations, pack_pairs, packed_rows, padded
from lmprobe.engine.runner import Runner
from lmprobe.engine.runtime import enable_compilation_cache, initialize_distributed, main_print, resolve_dtype
from lmprobe.errors import LmprobeError
from lmprobe.models import ENCODER, CallableLM, family_of

POOLINGS = ("mean", "cls", "last", "first_last_avg")
BATCH_LINES: set[str] = set()  # the batch-geometry lines Scorer.load has logged in this process
SCORERS: dict[str, type] = {}  # model kind -> the Scorer subclass for it (class Seq2SeqScorer(Scorer, kind=...))
FALLBACKS = {  # Family capability -> what the engine does without it
    "packing": "packed rows: pairs and continuations run one sequence per row (the same numbers; shared "
               "prefixes run twice)",
    "kv_cache": "KV cache: generation recomputes the whole row for each new token (the same tokens; slower)"}


@dataclasses.dataclass
class Cuts:
    """Inputs longer than the model's context, cut to it: how many, to how many tokens, the longest's length."""

    count: int = 0
    limit: int = 0
    longest: int = 0

    def add(self, length: int, limit: int) -> None:
        self.count, self.longest = self.count + 1, max(self.longest, length)
        self.limit = min(self.limit, limit) if self.limit else limit

    def line(self, context: int) -> str:
        """The warning: how many inputs were cut, and how long they were."""
        were = "input was" if self.count == 1 else "inputs were"
        return (f"{self.count} {were} longer than the model's context of {context} tokens and cut to {self.limit} "
                f"tokens (the longest had {self.longest:,}): the tokens past the cut are not scored; shorten those "
                "inputs, or use a model with a longer context")


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

    @classmethod
    def of(cls, rows: list[np.ndarray]) -> Scores:
        """Scores of per-text token log-probabilities."""
        return cls(rows, np.asarray([-r.sum() for r in rows], np.float64), np.asarray([len(r) for r in rows], np.int64))

    def split(self, n: int) -> tuple[Scores, Scores]:
        """The first ``n`` texts' scores and the rest's."""
        return (Scores(self.token_logprobs[:n], self.nll[:n], self.num_predicted[:n]),
                Scores(self.token_logprobs[n:], self.nll[n:], self.num_predicted[n:]))


class HiddenMemo:
    """Final hidden states by the tokens they follow: position p of ids is stored under ids[:p+1]
    (all a causal model's state there depends on), so a sentence is found inside any longer text
    that starts with it. ``generate`` fills it with its prompts' states, ``next_token_stats``
    reads and fills it: BYOD's metrics compare the same sentences with different partners, and
    each sentence runs once. Valid for one model (and weights) only. It holds what the LM head
    reads: a CallableLM's logits, [V] per position."""

    def __init__(self):
        self._states: dict[tuple[int, ...], np.ndarray] = {}

    def get(self, ids, positions) -> np.ndarray | None:
        keys = [tuple(ids[:p + 1]) for p in positions]
        return np.stack([self._states[k] for k in keys]) if all(k in self._states for k in keys) else None

    def put(self, ids, positions, hidden) -> None:
        for p, h in zip(positions, hidden):
            self._states[tuple(ids[:p + 1])] = np.array(h)


class _OnRunner:
    """A Scorer attribute kept on its runner (batch geometry, dispatch settings, trace counts)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, scorer, owner=None):
        return self if scorer is None else getattr(scorer.runner, self.name)

    def __set__(self, scorer, value):
        setattr(scorer.runner, self.name, value)


class Scorer:
    """A model, its tokenizer and a runner on a mesh, with a query for every method.

    ``batch_size`` is sequences per batch on each device of the mesh's 'data' axis (a batch has
    batch_size x mesh.shape['data'] rows); ``max_tokens``, when given, caps each device's share
    of a batch at that many tokens (padding included), never below one sequence. Both, and the
    runner's ``lookahead`` and ``readback_bytes``, may be changed between queries.

    ``mesh``: lmprobe's ('data', 'model') mesh by default, or any mesh the parameters already sit
    on; ``data_axes`` names the mesh axes a batch is split over (default ('data',)), whose sizes
    multiply into the data-parallel degree. The parameters are used where they are.
    """

    batch_size = _OnRunner()
    max_tokens = _OnRunner()
    max_length = _OnRunner()
    buckets = _OnRunner()
    lookahead = _OnRunner()
    readback_bytes = _OnRunner()
    compilations = _OnRunner()  # traces per step name (tests, diagnostics)
    embed_batching = "auto"  # 'auto': embed_geometry's rule for encoders on CPU; 'runner': the runner's geometry
    # None for a Scorer that runs its steps; a compile-only Scorer's settings (planning.aot): its queries
    # compile their steps and answer zeros, so a method skips the checks that such placeholders would fail
    compile_only: dict | None = None

    def __init_subclass__(cls, *, kind: str | None = None, **kwargs):
        """``class Seq2SeqScorer(Scorer, kind=ENCODER_DECODER)``: the class ``Scorer(model)`` gives for
        models of that kind."""
        super().__init_subclass__(**kwargs)
        if kind is not None:
            SCORERS[kind] = cls

    def __new__(cls, model=None, *args, **kwargs):
        """``Scorer(model, ...)`` is an instance of the class registered for the model's kind (SCORERS)."""
        family = family_of(model) if model is not None else None
        if cls is Scorer and family is not None:
            cls = SCORERS.get(family.kind, cls)
        return super().__new__(cls)

    def __init__(self, model: nnx.Module, tokenizer=None, *, mesh=None, batch_size: int = 16,
                 max_tokens: int | None = None, max_length: int | None = None,
                 truncate: bool = True, buckets: Sequence[int] = LENGTH_BUCKETS, strategy: str | None = None,
                 identity: dict | None = None, data_axes: Sequence[str] | None = None):
        if batch_size < 1 or (max_tokens is not None and max_tokens < 1):
            raise LmprobeError(f"batch_size={batch_size} and max_tokens={max_tokens} must be >= 1 (sequences and "
                               "tokens per device per batch)")
        enable_compilation_cache()
        self.module_graph = None  # a foreign module's graph (run as a CallableLM): update takes that module
        if is_foreign(model):
            self.module_graph = nnx.graphdef(model)
            model = CallableLM.of_module(model, max_length=max_length)
        self.tokenizer = tokenizer
        self.config = model.config
        self.family = family_of(model)  # None: a wrapped model (a task head on a body)
        self.is_decoder = bool(self.family and self.family.is_decoder)
        self.is_encoder_decoder = bool(self.family and self.family.is_encoder_decoder)
        self.kind = self.family.kind if self.family else ENCODER  # models.CAUSAL_LM, ENCODER or ENCODER_DECODER
        self.vocab_size = model.config.vocab_size
        max_length = max_length or getattr(model, "max_length", model.config.max_position_embeddings)
        self.runner = Runner(model, mesh if mesh is not None else make_mesh(), batch_size=batch_size,
                             max_tokens=max_tokens, max_length=max_length, buckets=buckets, data_axes=data_axes)
        self.mesh = self.runner.mesh
        self.truncate = truncate
        self.truncated = 0  # inputs cut to max_length so far
        self.cuts = Cuts()  # the inputs cut since the last report (report_cuts)
        self.updates = 0  # weights swapped in by update()
        self.strategy = strategy  # the sharding strategy of the parameters ('fsdp', 'tp'); None: not known
        about = identity if identity is not None else model_identity(model)  # results.json, cache keys
        self.identity = {**about, "max_length": self.max_length}  # truncation changes outputs too

    @classmethod
    def load(cls, name: str, *, dtype="auto", model_parallel: int = 1, strategy: str = "fsdp",
             offline: bool | None = None, allow_pickle: bool = False, revision: str | None = None,
             progress: Callable = lambda it, **_: it, **kwargs) -> Scorer:
        """Load ``name`` with its parameters placed straight onto their shardings.

        ``name`` may end in model variants, applied to the weights in order
        (``smollm2-135m@int8@drop-layer=3``; lmprobe.checkpoints.variants): the variant keeps the
        mesh, sharding and batch geometry, and its identity names the variants.
        ``dtype``: a jnp dtype, or a name for ``runtime.resolve_dtype`` ('auto': bfloat16 on GPU
        and TPU, float32 on CPU). Prints the batch geometry once (process 0). Where the device
        reports its memory (GPU, TPU), the memory plan first checks, before any weight is read,
        that the parameters and the largest bucket's step fit (lmprobe.engine.memory.check_fits); where
        only fewer rows fit the largest bucket and no ``max_tokens`` is given, batches hold at most
        the tokens that fit there.
        ``revision``: the hub revision (branch, tag or commit) of a hub model; ``progress``
        (tqdm-like) counts the parameters read."""
        base, variants = split_name(name)
        initialize_distributed()
        dtype = resolve_dtype(dtype) if isinstance(dtype, str) else dtype
        mesh = make_mesh(model_parallel)
        fit = check_fits(base, dtype=dtype, mesh=mesh, strategy=strategy, batch_size=kwargs.get("batch_size", 16),
                         max_length=kwargs.get("max_length"), max_tokens=kwargs.get("max_tokens"), offline=offline,
                         revision=revision)
        capped = fit is not None and fit.max_tokens is not None  # a long context: fewer rows fit its longest bucket
        if capped:
            kwargs["max_tokens"] = fit.max_tokens
        loaded = load_checkpoint(base, dtype=dtype, place=placement(mesh, strategy), offline=offline,
                                 allow_pickle=allow_pickle, revision=revision, progress=progress)
        model, tokenizer = loaded.model, loaded.tokenizer
        about = model_identity(model, name=base, checkpoint=checkpoint_identity(loaded.checkpoint), dtype=dtype,
                               model_type=loaded.checkpoint.config.get("model_type"))
        del loaded  # the checkpoint's host buffers go before a variant copies the weights
        if variants:
            model = apply_variants(model, variants)
            about = {**about, "name": name, "variants": [f"@{v}" for v in variants]}
        scorer = cls(model, tokenizer, mesh=mesh, strategy=strategy, identity=about, **kwargs)
        d = scorer.runner.data_parallel
        budget = f", at most {scorer.max_tokens} tokens per device" if scorer.max_tokens else ""
        if capped:
            budget += f" (the memory plan: {fit.max_tokens // fit.max_length} rows of {fit.max_length} tokens fit)"
        line = (f"batch: {scorer.batch_size} per device x {d} data-parallel device{'s' * (d > 1)} = "
                f"{scorer.batch_size * d} sequences per batch{budget}")
        if line not in BATCH_LINES:  # a run that loads several models says it once
            BATCH_LINES.add(line)
            main_print(line)
        return scorer

    @property
    def model(self) -> nnx.Module:
        return self.runner.model

    def with_model(self, model: nnx.Module, identity: dict) -> Scorer:
        """A Scorer of ``model`` (a task head on this scorer's model) with this one's tokenizer, mesh, batch
        geometry and runner kind (a compile-only scorer's compiles into the same report)."""
        scorer = Scorer(model, self.tokenizer, mesh=self.mesh, batch_size=self.batch_size, max_tokens=self.max_tokens,
                        strategy=self.strategy, identity=identity, data_axes=self.runner.data_axes)
        scorer.runner = self.runner.same_kind(scorer.runner)
        return scorer

    def supports(self, capability: str) -> bool:
        """Whether the model's family has ``capability`` (a FALLBACKS key: 'packing', 'kv_cache');
        the first time it does not, the log says what the engine does instead."""
        fallback = FALLBACKS[capability]
        if self.family is None or getattr(self.family, capability):
            return True
        self.runner.say_once(capability, f"{self.family.name} models have no {fallback}")
        return False

    def update(self, weights, *, step: int | None = None, identity: dict | None = None) -> None:
        """Swap in new weights of the model's layout, keeping every compiled step (no recompilation).

        ``weights``: an nnx.Module of the same graph (the trainer's model after some steps), its
        nnx.State, a CallableLM's params pytree, or the user's own module the Scorer was built on; each
        leaf with the shape and dtype of the one it replaces, else an error naming the first that
        differs (a leaf with another sharding is copied onto the Scorer's: ``onto_layout``). ``identity`` replaces the
        scorer's identity (results.json, cache keys); else it gets ``step`` (and, without a step, a
        count of updates), so that caches keyed on it never serve the old weights' results. A
        HiddenMemo filled before holds the old weights' states: start a new one.

        The Scorer holds the model's own nnx Variables: a trainer that updates that model in place
        (nnx.Optimizer) is seen by the next query even without ``update``, which then only renames.
        """
        graphdef = self.runner.graphdef
        if self.module_graph is not None and isinstance(weights, nnx.Module) and not isinstance(weights, CallableLM):
            if nnx.graphdef(weights) != self.module_graph:
                raise LmprobeError(f"update: the new {type(weights).__name__}'s graph differs from the Scorer's "
                                   "(another architecture or config): build a new Scorer for it")
            weights = nnx.state(weights)  # the foreign module's state: its CallableLM's params
        if isinstance(weights, nnx.Module):
            graphdef, weights = nnx.split(weights)
        elif self.family is not None and self.family.model is CallableLM:
            weights = nnx.State({"params": nnx.Param(weights)})  # its params pytree, whatever its type
        elif not isinstance(weights, nnx.State):
            raise LmprobeError(f"update takes an nnx.Module of the Scorer's graph or its nnx.State; got "
                               f"{type(weights).__name__} (a params pytree is for a CallableLM)")
        if graphdef != self.runner.graphdef:
            raise LmprobeError(f"update: the new model's graph differs from the Scorer's {self.identity['family']}"
                               " (another architecture or config): build a new Scorer for it")
        self.runner.update(self.onto_layout(weights))
        self.updates += 1
        if identity is None:
            identity = {**{k: v for k, v in self.identity.items() if k != "update"}, "step": step}
            if step is None:
                identity["update"] = self.updates
        self.identity = {**identity, "max_length": self.max_length}

    def onto_layout(self, state):
        """``state`` with each array whose shape and dtype match the Scorer's but whose sharding differs
        put onto the Scorer's sharding (a trainer's step jitted without out_shardings may re-shard
        small leaves), said once; other differences are left for ``Runner.update`` to refuse."""
        moved = []

        def place(path, x, y):
            if (isinstance(x, jax.Array) and isinstance(y, jax.Array) and y.committed
                    and (x.shape, x.dtype, x.weak_type) == (y.shape, y.dtype, y.weak_type)
                    and x.sharding != y.sharding and not x.sharding.is_equivalent_to(y.sharding, x.ndim)):
                moved.append((jax.tree_util.keystr(path, simple=True, separator="."), x.nbytes))
                return jax.device_put(x, y.sharding)
            return x

        try:
            state = jax.tree_util.tree_map_with_path(place, state, self.runner.state)
        except (ValueError, TypeError):  # another structure: Runner.update names the leaf
            return state
        if moved:
            names = ", ".join(n.replace(".value", "") for n, _ in moved[:3]) + (", ..." if len(moved) > 3 else "")
            self.runner.say_once("re-placed", f"update: {len(moved)} parameter arrays ({names}; "
                                 f"{_size(sum(b for _, b in moved))}) came with another sharding than the "
                                 "Scorer's and were copied onto its layout (on every update that brings them so): "
                                 "give the train step out_shardings to keep its layout")
        return state

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
        return [self.cut_to_context(i, s) for i, s in enumerate(seqs)]

    def cut_to_context(self, i: int, seq: list[int], limit: int | None = None, keep: str = "first") -> list[int]:
        """Input ``i``'s ids ``seq`` cut to ``limit`` tokens (the context by default), keeping the
        ``first`` or the ``last`` ones, and counted in ``truncated`` and ``cuts``; or an error
        (truncate=False)."""
        limit = limit or self.max_length
        if len(seq) <= limit:
            return seq
        if not self.truncate:
            raise LmprobeError(f"input {i} has {len(seq)} tokens, more than the {limit} that fit the "
                               f"model's context of {self.max_length}: shorten it, or allow "
                               "truncation (truncate=True)")
        self.truncated += 1
        self.cuts.add(len(seq), limit)
        return seq[:limit] if keep == "first" else seq[-limit:]

    def report_cuts(self) -> None:
        """The inputs cut since the last report (``cuts``) as one warning, before the model runs: every query
        calls it once its inputs are encoded, so that a method that encodes its texts one by one first
        (BYOD's sentences) hears of them once, when their work starts."""
        cuts, self.cuts = self.cuts, Cuts()
        if cuts.count:
            log.get(__name__).warning(cuts.line(self.max_length))

    def require_decoder(self, what: str) -> None:
        """An error naming ``what`` unless the model is a causal language model."""
        if not self.is_decoder:
            raise LmprobeError(f"{what} needs a causal language model; {type(self.model).__name__} "
                               "is an encoder: use a decoder checkpoint (llama, gpt2, opt, ...)")

    # ------------------------------------------------------------------ scoring

    def score(self, inputs) -> Scores:
        """Token log-probabilities, summed NLL and log-perplexity of each text or id list."""
        self.require_decoder("score")
        seqs = self.encode(inputs)
        self.report_cuts()
        if not seqs:
            return Scores.of([])
        runner = self.runner
        batches = runner.batches(seqs)
        per_batch = runner.run(runner.jit("score", steps.token_logprobs), (runner.put(b.ids, b.mask) for b in batches))
        return Scores.of(restore(batches, [[lp[r, :n - 1] for r, n in enumerate(b.lengths)]
                                           for b, lp in zip(batches, per_batch)], len(seqs)))

    def score_pairs(self, a, b) -> tuple[Scores, Scores]:
        """``score(a)`` and ``score(b)`` for pairs (a[i], b[i]), each pair in one packed row: the
        tokens they share at the start are computed once (e.g. a sentence and its negation)."""
        if len(a) != len(b):
            raise LmprobeError(f"score_pairs needs as many a ({len(a)}) as b ({len(b)})")
        self.require_decoder("score_pairs")
        seqs = self.encode(list(a) + list(b))
        self.report_cuts()
        if not seqs:
            return Scores.of([]).split(0)
        n = len(a)
        packs = self.supports("packing")
        packed = pack_pairs(seqs[:n], seqs[n:], self.max_length, shared=packs)
        side = (np.arange(2 * n) >= n).astype(np.int64)  # target set: 0 for the a's, 1 for the b's
        targets = [np.zeros((len(r), 2), np.int32) for r in packed.rows]
        for i, seq in enumerate(seqs):
            targets[packed.row[i]][packed.slots[i][:-1], side[i]] = seq[1:]
        runner = self.runner
        batches = runner.batches(packed.rows)
        calls = (runner.put(b.ids, *packed_rows(packed.segments, packed.positions, b),
                            padded(targets, b.indices, (*b.shape, 2), 0))
                 for b in batches)
        per_row = restore(batches, runner.run(runner.jit("score_packed", steps.packed_logprobs, packed=packs), calls),
                          len(packed.rows))
        return Scores.of([per_row[packed.row[i]][packed.slots[i][:-1], side[i]] for i in range(2 * n)]).split(n)

    def score_continuations(self, pairs, *, limit: int | None = None) -> list[tuple[float, bool]]:
        """(ln p(continuation | context), whether greedy decoding yields the continuation) for (context ids,
        continuation ids) pairs, as lm-eval's HF backend computes them: context + continuation cut on the
        left to ``limit`` + 1 tokens (the context by default). Rows come from packing.pack_continuations:
        packed rows where a long context is shared, short sequences end to end, the rest plain causal
        sequences, each kind batched by length apart; the LM head runs only at the slots that predict a
        continuation token. A token id outside the vocabulary is an error naming the pair, before anything runs.
        On CPU, with the default buckets, rows are batched on ``FINE_LENGTH_BUCKETS`` where those pad fewer
        slots than the default ones (lm-eval's 40 long documents: 1.11x their tokens, where 1.22x; a few
        documents spread over the fine buckets may pad more rows instead)."""
        self.require_decoder("score_continuations")
        limit = limit or self.max_length
        packs = self.supports("packing")
        choices = [self.runner.bucket_lengths(limit)]
        if tuple(self.buckets) == LENGTH_BUCKETS and self.mesh.devices.flat[0].platform == "cpu":
            choices.insert(0, self.runner.bucket_lengths(limit, FINE_LENGTH_BUCKETS))
        packed, buckets = min(((pack_continuations(pairs, limit, shared=packs, buckets=b), b) for b in choices),
                              key=lambda choice: self._slots(*choice))
        rows = packed.rows
        _check_vocabulary(rows, pairs, self.vocab_size)
        base = np.cumsum([0] + [len(row.targets) for row in rows], dtype=np.int64)  # where each row's targets start
        flat = tuple(np.concatenate([getattr(row, key) for row in rows] or [np.zeros(0, np.int32)])
                     for key in ("slots", "targets"))
        logprobs, greedy = np.zeros(len(flat[1]), np.float64), np.zeros(len(flat[1]), bool)
        is_packed = np.asarray([row.packed for row in rows], bool)
        for kind in (False, True):  # plain rows: the causal step, no [T, T] mask
            which = np.flatnonzero(is_packed == kind)
            if len(which):
                self._score_rows([rows[i] for i in which], base[which], flat, kind, buckets, (logprobs, greedy))
        ends = packed.first + packed.length  # sums over each pair's targets: differences of running sums
        totals = np.concatenate([[0.0], np.cumsum(logprobs)])
        misses = np.concatenate([[0], np.cumsum(~greedy)])
        return list(zip((totals[ends] - totals[packed.first]).tolist(),
                        (misses[ends] == misses[packed.first]).tolist()))

    def _slots(self, packed, buckets) -> int:
        """Slots (tokens and padding) of the batches ``score_continuations`` runs for ``packed`` on ``buckets``."""
        runner, kinds = self.runner, {True: [], False: []}
        for row in packed.rows:
            kinds[row.packed].append(row.ids)
        return sum(b.ids.size for rows in kinds.values() if rows
                   for b in runner.batches(rows, max_length=max(buckets), buckets=buckets))

    def _score_rows(self, rows, first, flat, packs: bool, buckets, out) -> None:
        """``score_continuations``' rows (all packed or all plain) in batches on ``buckets``; row r's targets
        are ``first[r] ..`` of the flat (slots, targets) ``flat``, and their (log-probability, greedy hit) go to
        the same places of ``out``."""
        slots, targets = flat
        counts = np.asarray([len(row.targets) for row in rows], np.int64)
        runner = self.runner
        step = runner.jit(*(("continuations_packed", steps.packed_scores_at) if packs else
                            ("continuations", steps.causal_scores_at)))
        batches = runner.batches([row.ids for row in rows], max_length=max(buckets), buckets=buckets)
        places = [_scored_places(first[b.indices], counts[b.indices]) for b in batches]
        segments, positions = [row.segments for row in rows], [row.positions for row in rows]

        def call(batch, place):
            gather, scored = (np.zeros((batch.shape[0], place[0].shape[1]), np.int32) for _ in range(2))
            gather[:len(batch.indices)], scored[:len(batch.indices)] = slots[place[0]], targets[place[0]]
            masks = packed_rows(segments, positions, batch) if packs else (batch.mask,)
            return runner.put(batch.ids, *masks, gather, scored)

        for batch, (source, valid), (lp, hit) in zip(batches, places, runner.run(step, map(call, batches, places))):
            n = len(batch.indices)
            out[0][source[valid]], out[1][source[valid]] = lp[:n][valid], hit[:n][valid]

    def score_targets(self, sources, targets) -> Scores:
        """ln p(target | source) per target token of an encoder-decoder (Seq2SeqScorer)."""
        raise LmprobeError("score_targets needs an encoder-decoder (T5); with a causal LM score the "
                           "source followed by the target with score() and keep the target's tokens")

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
        self.require_decoder("next_token_stats")
        if not (len(a) == len(b) == len(a_positions) == len(b_positions)):
            raise LmprobeError("next_token_stats needs as many a, a_positions, b and b_positions")
        counts = [len(p) for p in a_positions]
        if counts != [len(p) for p in b_positions]:
            raise LmprobeError("pair i must compare as many positions in a[i] as in b[i]")
        if not len(a):
            return {}
        seqs = self.encode(list(a) + list(b))
        self.report_cuts()
        positions = [_absolute(p, len(s), i) for i, (s, p) in
                     enumerate(zip(seqs, list(a_positions) + list(b_positions)))]
        n = len(a)
        known = [None if memo is None else memo.get(s, p) for s, p in zip(seqs, positions)]
        todo = [s if k is None else None for s, k in zip(seqs, known)]
        packs = self.supports("packing")
        hidden = self._hidden_at(pack_pairs(todo[:n], todo[n:], self.max_length, shared=packs), positions, known,
                                 packs)
        if memo is not None:
            for s, p, k, h in zip(seqs, positions, known, hidden):
                if k is None:
                    memo.put(s, p, h)
        # Positions are independent: all of them in one flat list, the head in blocks of equal size.
        flat_a, flat_b = np.concatenate(hidden[:n]), np.concatenate(hidden[n:])
        mask = np.zeros(self.vocab_size, bool)
        if token_set is not None:
            mask[np.asarray(token_set, np.int64)] = True
        runner = self.runner
        step = runner.jit("pair_stats", steps.pair_stats, top_k=top_k, with_mass=token_set is not None)
        total = len(flat_a)
        block = runner.rows(8 * self.batch_size, work=total)
        takes = [np.minimum(np.arange(start, start + block), total - 1)  # repeats, dropped below
                 for start in range(0, total, block)]
        mask = runner.replicate(mask)  # one transfer, not one per block
        outs = runner.run(step, ((*runner.put(flat_a[t], flat_b[t]), mask) for t in takes))
        splits = np.cumsum(counts)[:-1]
        return {key: np.split(np.concatenate([o[key] for o in outs])[:total], splits) for key in (outs or [{}])[0]}

    def _hidden_at(self, packed: Packed, positions, known, packs: bool) -> list[np.ndarray]:
        """The states the head reads (steps.head_states) of each sequence at its positions,
        [len(positions[i]), D] each: ``known[i]`` where given, else from its row (``packs``: rows
        packed by pairs; else one sequence each)."""
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
        runner = self.runner
        batches = runner.batches(packed.rows)
        calls = (runner.put(b.ids, *packed_rows(packed.segments, packed.positions, b),
                            padded(asked, b.indices, (b.shape[0], row_width), 0))
                 for b in batches)
        per_row = restore(batches, runner.run(runner.jit("hidden_at", steps.packed_hidden_at, packed=packs), calls),
                          len(packed.rows))
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
        self.report_cuts()
        if not seqs:
            raise LmprobeError("no inputs to apply the model to: pass at least one text")
        runner = self.runner
        batches = runner.batches(seqs)
        outputs = runner.run(runner.jit(name, fn), (runner.put(b.ids, b.mask) for b in batches), readback=list)
        starts = np.cumsum([0] + [b.shape[0] for b in batches])
        source = np.zeros(len(seqs), np.int32)
        for batch, start in zip(batches, starts):
            source[batch.indices] = start + np.arange(len(batch.indices))
        return runner.in_order(outputs, source)

    def embed(self, inputs, *, pooling: str = "mean", layer: int = -1) -> np.ndarray:
        """Sentence embeddings [N, D] of texts or id lists.

        pooling: 'mean' over real tokens, 'cls' (first token), 'last' (last real token: decoders),
        or 'first_last_avg' (SimCSE: mean over tokens of the average of the first layer's output,
        hidden_states[1], and the last). ``layer`` picks the hidden state in HF's numbering
        (0 = embeddings, -1 = last) for the other poolings. An encoder-decoder pools its encoder.
        """
        _check_pooling(pooling)
        if self.config.hidden_size is None:
            raise LmprobeError(steps.NO_HIDDEN)
        seqs = self.encode(inputs)
        self.report_cuts()
        if not seqs:
            return np.zeros((0, self.config.hidden_size), np.float32)
        runner = self.runner
        step = runner.jit("embed", steps.pooled_embedding, pooling=pooling, layer=layer)
        batches = runner.batches(seqs, **self.embed_geometry())
        per_batch = runner.run(step, (runner.put(b.ids, b.mask) for b in batches))
        return np.stack(restore(batches, per_batch, len(seqs)))

    def embed_geometry(self) -> dict:
        """What ``embed`` changes in the runner's batch geometry (``Runner.batches``' overrides).

        An encoder on CPU, with no ``max_tokens`` set and the default buckets, embeds at most
        ``cpu_token_budget`` tokens per batch (its MLP width: the batch's widest activation stays in
        cache) on ``FINE_LENGTH_BUCKETS`` (less padding); rows stay at most ``batch_size``; a bucket's
        partial batch is padded to a full one (``fill``: one compiled shape per bucket, as padding a
        batch that small costs less than compiling another). Nothing changes for decoders,
        encoder-decoders, GPU and TPU, or with ``embed_batching = "runner"``.
        """
        if (self.embed_batching != "auto" or self.kind != ENCODER or self.max_tokens is not None
                or self.mesh.devices.flat[0].platform != "cpu"):
            return {}
        width = getattr(self.config, "intermediate_size", None) or 4 * self.config.hidden_size
        geometry = {"max_tokens": cpu_token_budget(width), "fill": True}
        if tuple(self.buckets) == LENGTH_BUCKETS:
            geometry["buckets"] = FINE_LENGTH_BUCKETS
        return geometry

    def embed_inputs(self, inputs_embeds: np.ndarray, attention_mask: np.ndarray | None = None, *,
                     pooling: str = "mean", layer: int = -1) -> np.ndarray:
        """Embeddings [N, D] of continuous inputs [N, T, D] fed in place of token embeddings."""
        _check_pooling(pooling)
        x = np.asarray(inputs_embeds, np.float32)
        hidden_size = self.config.hidden_size
        if hidden_size is None:
            raise LmprobeError(steps.NO_HIDDEN)
        if x.ndim != 3 or x.shape[-1] != hidden_size:
            raise LmprobeError(f"inputs_embeds has shape {x.shape}; expected [N, T, "
                               f"{hidden_size}] (the model's hidden size)")
        mask = np.ones(x.shape[:2], np.int32) if attention_mask is None else np.asarray(attention_mask, np.int32)
        n = len(x)
        if n == 0:
            return np.zeros((0, x.shape[-1]), np.float32)
        runner = self.runner
        rows = runner.rows(self.batch_size, work=n)
        step = runner.jit("embed_inputs", steps.pooled_embedding, pooling=pooling, layer=layer, continuous=True)
        takes = [np.minimum(np.arange(start, start + rows), n - 1) for start in range(0, n, rows)]  # repeats, dropped
        return np.concatenate(runner.run(step, (runner.put(x[t], mask[t]) for t in takes)))[:n]

    # ------------------------------------------------------------------ generation

    def generate(self, prompts, *, max_new_tokens: int = 20, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, eos_id: int | None = None,
                 decode: bool = True, memo: HiddenMemo | None = None, allowed=None, stop_ids=()) -> list:
        """Continuations of each prompt: greedy (temperature 0) or sampled, KV-cached.

        Stops at ``eos_id`` (the tokenizer's by default) or after max_new_tokens; a row also ends
        with (and keeps) any id of ``stop_ids`` (e.g. the tokens whose text holds a stop string):
        a batch stops decoding once every row has ended. Sampling is
        seeded per prompt (its index), so a prompt gets the same continuation whatever the
        batch size. Returns texts (decode=True) or id lists, without the prompt. A ``memo``
        receives the prompts' final hidden states at every position (the prefill computes them).

        ``allowed`` constrains decoding (causal LMs): a bool mask over the model's vocabulary
        (``vocab_size`` ids) for every prompt, or a sequence of such masks, one per prompt (rows
        may share one array). Only True ids and EOS are ever emitted (greedy: the best allowed
        id; sampling: the filtered distribution renormalised over the allowed ids). The mask is
        an array argument of the jitted program: new masks do not recompile.
        """
        self.require_decoder("generate")
        row_allowed = self.allowed_rows(allowed, len(prompts)) if allowed is not None else None
        stop_ids = tuple(int(t) for t in stop_ids)
        if any(not 0 <= t < self.vocab_size for t in stop_ids):
            raise LmprobeError(f"generate(stop_ids=...) holds ids outside the model's vocabulary of {self.vocab_size}: "
                               f"{sorted(t for t in stop_ids if not 0 <= t < self.vocab_size)[:5]}")
        room = self.max_length - max_new_tokens  # prompt slots + new-token slots fit the context
        if room < 1:
            raise LmprobeError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the "
                               f"model's context of {self.max_length}")
        step = self.runner.jit("generate", generation.generate, max_new_tokens=max_new_tokens, top_k=top_k,
                               greedy=temperature <= 0, prompt_hidden=memo is not None,
                               kv_cache=self.supports("kv_cache"))
        return self.generate_with(step, prompts, room=room, eos_id=eos_id, seed=seed, temperature=temperature,
                                  top_p=top_p, decode=decode, memo=memo, allowed=row_allowed, stop_ids=stop_ids)

    def generate_with(self, step, prompts, *, room: int, eos_id: int | None, seed: int, temperature: float,
                      top_p: float, decode: bool, memo: HiddenMemo | None = None, allowed=None,
                      stop_ids=()) -> list:
        """``generate`` with a jitted generation ``step`` (the model kind's: generation.generate,
        seq2seq.generate): each prompt kept to its last ``room`` tokens, left-padded in buckets,
        rows seeded by their prompt's index; ``memo`` filled from a step with the prompts' hidden
        states (prompt_hidden); ``allowed``: one checked mask per prompt (``allowed_rows``); ``stop_ids``:
        checked ids that end a row (given: the step takes a [vocab_size] bool mask after ``allowed``)."""
        seqs = [self.cut_to_context(i, s, room, keep="last") for i, s in enumerate(self.encode(prompts))]
        self.report_cuts()
        if not seqs:
            return []
        if eos_id is None and self.tokenizer is not None:
            eos_id = self.tokenizer.eos_token_id
        eos = -1 if eos_id is None else int(eos_id)
        runner = self.runner
        batches = generation.prompt_batches(runner, seqs, room)
        settings = (np.uint32(seed), np.float32(max(temperature, 1e-6)), np.float32(top_p), np.int32(eos))
        stop = ()
        if stop_ids:
            stop = (np.zeros(self.vocab_size, bool),)
            stop[0][list(stop_ids)] = True

        def call(batch):
            index = np.full(batch.shape[0], -1, np.int32)  # row seeds: positions in the input list
            index[:len(batch.indices)] = batch.indices
            if allowed is None:
                return (*runner.put(batch.ids, batch.mask, index), *settings, *((None, *stop) if stop else ()))
            rows = np.ones((batch.shape[0], self.vocab_size), bool)  # padding rows: unconstrained
            for row, i in enumerate(batch.indices):
                rows[row] = allowed[i]
            ids, mask, index, rows = runner.put(batch.ids, batch.mask, index, rows)
            return ids, mask, index, *settings, rows, *stop

        per_batch = []
        for batch, out in zip(batches, runner.run(step, map(call, batches))):
            if memo is not None:
                out, hidden = out
                for row, n in enumerate(batch.lengths):  # left padding: the prompt ends the row
                    memo.put(seqs[batch.indices[row]], range(n), hidden[row, batch.shape[1] - n:])
            per_batch.append([generation.until_eos(row, eos, stop_ids) for row in out])
        outputs = restore(batches, per_batch, len(seqs))
        if decode and self.tokenizer is not None:
            return [self.tokenizer.decode(o) for o in outputs]
        return outputs

    def allowed_rows(self, allowed, n: int) -> list:
        """``generate``'s ``allowed`` for ``n`` prompts: one [vocab_size] bool mask per prompt, checked."""
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


def model_identity(model, *, name: str | None = None, checkpoint: dict | None = None, dtype=None,
                   model_type: str | None = None) -> dict:
    """What a Scorer's model is (JSON-able): the name as given, the checkpoint's identity
    (``lmprobe.checkpoints.identity``; None for a model built in memory), family, model type,
    parameter and compute dtypes (compute: the parameters' unless given), variants applied (none:
    ``Scorer.load`` names those of a NAME@variant, lmprobe.checkpoints.variants)."""
    floats = (x.dtype for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    param_dtype = next((str(d) for d in floats if jnp.issubdtype(d, jnp.floating)), None)
    return {"name": name, "checkpoint": checkpoint, "family": type(model).__name__,
            **({"apply": model.config.apply_name} if isinstance(model, CallableLM) else {}),
            "model_type": model_type or getattr(model.config, "model_type", None), "param_dtype": param_dtype,
            "dtype": str(jnp.dtype(dtype)) if dtype is not None else param_dtype, "variants": []}


def is_foreign(model) -> bool:
    """Whether ``model`` is an nnx.Module of the user's own: no lmprobe family, and none inside it (a
    task head on an lmprobe body, such as SCoPE's classifier, is not foreign)."""
    return isinstance(model, nnx.Module) and not any(family_of(m) is not None for _, m in nnx.iter_modules(model))


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"


def _absolute(positions, length, i) -> list[int]:
    out = [p + length if p < 0 else p for p in positions]
    if any(not 0 <= p < length for p in out):
        raise LmprobeError(f"input {i} has {length} tokens; positions {list(positions)} fall outside it")
    return out


def _check_pooling(pooling):
    if pooling not in POOLINGS:
        raise LmprobeError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")


def _scored_places(first: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows whose targets are ``first[r] .. first[r] + counts[r]`` of the flat list: [rows, W] indices
    into it (W a length bucket: few shapes, little padding for the LM head; past a row's count its last target
    again) and which are real."""
    width = bucket_length(int(counts.max()), (1, 2, 4, *LENGTH_BUCKETS))
    column = np.arange(width)
    return first[:, None] + np.minimum(column, counts[:, None] - 1), column < counts[:, None]


def _check_vocabulary(rows, pairs, vocab_size: int) -> None:
    """One error naming the first request with a token id the model does not have (e.g. another model's
    prefix token), before anything runs."""
    ids = np.concatenate([np.asarray(row.ids, np.int64) for row in rows] + [row.targets for row in rows] or
                         [np.zeros(0, np.int64)])
    if not len(ids) or (ids.min() >= 0 and ids.max() < vocab_size):
        return
    for i, (context, continuation) in enumerate(pairs):
        bad = [t for t in (*context, *continuation) if not 0 <= t < vocab_size]
        if bad:
            raise LmprobeError(f"request {i} has token id {bad[0]}, outside the model's vocabulary of {vocab_size} "
                               "ids: its tokens come from another tokenizer (check prefix_token_id and that the "
                               "requests were encoded by this model's tokenizer)")
