"""Runs a model's jitted steps (lmprobe.engine.steps) over streams of bucketed batches on a mesh.

    runner = Runner(model, mesh, batch_size=16, max_tokens=None, max_length=2048)
    step = runner.jit("score", steps.token_logprobs)         # compiled once per (name, statics, shapes)
    batches = runner.batches(seqs)                            # bucketed, padded, sharded over 'data'
    outputs = runner.run(step, (runner.put(b.ids, b.mask) for b in batches))   # numpy, in order

``run`` pipelines: batch k+1 is padded, placed and dispatched while the device computes batch k,
outputs stay on device sharded over 'data', and they come back to the host together at the end
(or in groups, when they would hold more than ``readback_bytes`` of device memory). ``batch_size``
and ``max_tokens`` are per device of the 'data' axis (``data_axes``: the mesh axes a batch is split
over, ('data',) on lmprobe's own mesh; on a trainer's mesh, e.g. ('data', 'fsdp')).

The parameters stay where they are (no copy), unless some sit on devices outside the mesh: those
are moved onto it, and the log says so once. ``update(state)`` swaps in new weights of the same
layout; the compiled steps take them as arguments, so nothing recompiles. Runners of one model structure
(equal ``nnx.graphdef``) on one mesh share their jitted steps: a Runner of the next checkpoint, or of the
same model in the next test, neither traces nor lowers them again. The steps used last are kept after
their Runners go, while they hold at most ``SHARED_PROGRAMS`` compiled programs.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe import log
from lmprobe.engine.batching import LENGTH_BUCKETS, Batch, make_batches, pow2_at_least
from lmprobe.engine.mesh import auto_axes, batch_axes, batch_devices, batch_sharding, replicated, tracing_on
from lmprobe.errors import LmprobeError

# compiled programs that the shared steps keep, least recently used step first out: XLA:CPU maps 100-250 memory
# regions for each program of even a 2-layer model, and a Linux process may hold 65,530 (vm.max_map_count)
SHARED_PROGRAMS = 48
_shared: collections.OrderedDict = collections.OrderedDict()  # step key -> (jitted step, its traces)
_shared_lock = threading.Lock()
_traces = contextvars.ContextVar("traces", default=None)  # the calling Runner's compilations, while a step traces


class Runner:
    """A model split into its graph and (sharded) state, a mesh, and the batch geometry.

    ``compilations`` counts traces per step name (tests, diagnostics). The batch geometry
    (``batch_size``, ``max_tokens``, ``max_length``, ``buckets``) and the dispatch settings
    (``lookahead``, ``readback_bytes``) may be changed between calls.
    """

    lookahead = 4  # batches dispatched past the oldest result not yet read back, when reading early
    readback_bytes = 1 << 28  # bytes of results (all devices) a call holds on device before reading the oldest back
    # XLA's CPU client runs the devices' shares of queued executions on one thread pool: with many programs
    # holding collectives in flight, shares wait on rendezvous that cannot start, and it aborts after 40 s
    # (a 2-device CPU mesh, ~125 embedding batches dispatched ahead). On a CPU mesh of several devices a call
    # reads back early past this many batches in flight (host and devices share memory: readback is cheap).
    cpu_mesh_in_flight = 16

    def __init__(self, model: nnx.Module, mesh, *, batch_size: int, max_tokens: int | None, max_length: int,
                 buckets: Sequence[int] = LENGTH_BUCKETS, data_axes: Sequence[str] | None = None):
        self.mesh = mesh
        self.data_axes = batch_axes(mesh, data_axes)
        self.graphdef, state = nnx.split(model)
        self.batch_size, self.max_tokens, self.max_length, self.buckets = batch_size, max_tokens, max_length, buckets
        self.compilations = collections.Counter()
        self._jitted = {}
        self._said: set[str] = set()
        self.state = self.onto_mesh(state)

    @property
    def model(self) -> nnx.Module:
        return nnx.merge(self.graphdef, self.state)

    @property
    def data_parallel(self) -> int:
        """How many ways a batch is split: the devices of the mesh's ``data_axes``."""
        return batch_devices(self.mesh, self.data_axes)

    def say_once(self, key: str, message: str) -> None:
        """``message`` as a notice (lmprobe.log.notice: a warning on stderr) the first time this runner
        meets ``key``."""
        if key not in self._said:
            self._said.add(key)
            log.notice(message)

    def onto_mesh(self, state):
        """``state`` with the arrays committed to devices outside the mesh moved onto it (replicated);
        the others untouched (uncommitted arrays follow their arguments, as jit places them)."""
        devices = set(self.mesh.devices.flat)
        away = [x for x in jax.tree.leaves(state)
                if isinstance(x, jax.Array) and x.committed and x.sharding.device_set != devices]
        if not away:
            return state
        self.say_once("placement", f"moved {len(away)} parameter arrays ({_nbytes(away) / 2**20:.1f} MiB) onto the "
                      "mesh, replicated on every device: they sat on other devices, and a jitted step takes "
                      "its arguments on its mesh only; place them on the mesh you give the Scorer to avoid this")
        target = replicated(self.mesh)
        return jax.tree.map(lambda x: jax.device_put(x, target) if any(x is a for a in away) else x, state)

    def update(self, state) -> None:
        """Swap in ``state`` (an nnx.State like ``self.state``): the same leaves, shapes, dtypes and
        shardings, else an error naming the first that differs (arrays on devices outside the mesh
        are first moved, as at the start; uncommitted ones go where jit puts them). Compiled steps
        are kept."""
        state = self.onto_mesh(state)
        old, new = _leaves(self.state), _leaves(state)
        differ = sorted(old.keys() ^ new.keys())
        if differ:
            raise LmprobeError(f"update: the new weights {'lack' if differ[0] in old else 'add'} the leaf {differ[0]}"
                               ": pass weights of the same structure as the Scorer's model")
        for path, x in new.items():
            y, problem = old[path], None
            if not isinstance(x, jax.Array):
                problem = f"is a {type(x).__name__}, not a jax.Array on the mesh"
            elif (x.shape, x.dtype, x.weak_type) != (y.shape, y.dtype, y.weak_type):
                problem = f"is {_describe(x)}, expected {_describe(y)}"
            elif y.committed and x.sharding != y.sharding and not x.sharding.is_equivalent_to(y.sharding, x.ndim):
                problem = f"has sharding {x.sharding}, expected {y.sharding}"
            if problem:
                raise LmprobeError(f"update: leaf {path} {problem}: pass weights with the layout of the "
                                   "Scorer's (e.g. the trainer's updated parameters of the same model)")
        if jax.tree.structure(state) != jax.tree.structure(self.state):
            raise LmprobeError("update: the new weights hold the same leaves in other containers or variable "
                               f"types ({str(jax.tree.structure(state))[:120]}...): pass them as the Scorer's "
                               "model holds them (the same pytree types)")
        self.state = state

    def jit(self, name: str, fn, **static) -> Step:
        """``fn(model, *args, **static)`` jitted once per (name, static); called with ``args`` only.
        Traces are counted in ``compilations[name]``; outputs stay where the rows are (``fetch``
        gathers them once per call)."""
        key = (name, tuple(sorted(static.items())))
        if key not in self._jitted:
            self._jitted[key] = _shared_step(self.graphdef, self.mesh, self.data_axes, name, fn, key[1])
        return Step(self._jitted[key], self.state, self.compilations)

    def program(self, name: str, fn, *args, **static):
        """``fn(*args, **static)``: a method's own jitted program on host-sized arrays (kernels on
        embeddings, a probe's training), run where its arguments are (``run_here``); named so that a
        compile-only runner (planning.aot) compiles it for one device instead."""
        return run_here(name, fn, *args, **static)

    def mesh_program(self, name: str, fn, *args):
        """``fn(*args)``: a method's own jitted program over arrays on the mesh (a training step on the
        model's sharded parameters), run where its arguments are; named so that a compile-only runner
        (planning.aot) compiles it for the whole mesh instead. Give ``fn`` the ``out_shardings`` its
        outputs keep (a compile-only runner hands them on, abstract)."""
        return run_here(name, fn, *args)

    def replicate(self, x):
        """``x`` (host-sized: a fresh head's weights) on every device of the mesh."""
        return jax.device_put(x, replicated(self.mesh))

    def same_kind(self, runner: Runner) -> Runner:
        """``runner`` (of another model on this mesh: a head on this model) as this runner runs: as is
        here; a compile-only runner makes it compile into its own report."""
        return runner

    def put(self, *arrays) -> tuple:
        """Host arrays (the same on every host) onto the mesh, batch axis over ``data_axes``."""
        return tuple(jax.make_array_from_callback(np.shape(a), batch_sharding(self.mesh, np.ndim(a), self.data_axes),
                                                  lambda index, a=a: a[index]) for a in arrays)

    def batches(self, seqs, *, left_pad: bool = False, max_length: int | None = None, max_tokens: int | None = None,
                buckets: Sequence[int] | None = None, fill: bool = False) -> list[Batch]:
        """Bucketed batches of token id lists; no bucket exceeds ``max_length`` (the model's
        context by default). ``max_tokens`` and ``buckets`` replace the runner's for this call;
        ``fill`` pads each bucket's partial batch to a full one (make_batches)."""
        limit = max_length or self.max_length
        return make_batches(seqs, batch_size=self.batch_size, max_tokens=max_tokens or self.max_tokens,
                            buckets=self.bucket_lengths(limit, buckets), left_pad=left_pad,
                            data_parallel=self.data_parallel, fill=fill)

    def bucket_lengths(self, limit: int | None = None, buckets: Sequence[int] | None = None) -> list[int]:
        """The length buckets (the runner's, or ``buckets``), none above ``limit`` (the model's
        context by default)."""
        limit = limit or self.max_length
        return sorted({min(b, limit) for b in (buckets or self.buckets)})

    def rows(self, per_device: int, work: int | None = None) -> int:
        """Rows of a batch with ``per_device`` rows on each device of the ``data_axes``; with ``work`` (the rows
        there are to run), no more per device than the power of two that holds them: a batch larger than the
        work would only run padding (memory and time for nothing), and powers of two keep the shapes few."""
        if work is not None:
            per_device = min(per_device, pow2_at_least(-(-work // self.data_parallel)))
        return max(1, per_device) * self.data_parallel

    def run(self, step, calls: Iterable[tuple], readback: Callable | None = None) -> list:
        """``step(*args)`` for each ``args`` of ``calls``; the outputs in order, read back by
        ``readback`` (``fetch``: to numpy) in as few transfers as device memory allows.

        ``calls`` is lazy, so the host pads and places batch k+1 while the device runs batch k
        (dispatch is asynchronous). Nothing is read back before the last step is dispatched,
        unless the outputs held on device pass ``readback_bytes`` (or, on a CPU mesh of several devices,
        ``cpu_mesh_in_flight`` batches): then all but the newest ``lookahead`` are read back together,
        the newer ones still running meanwhile.
        """
        readback = readback or self.fetch
        devices = self.mesh.devices
        in_flight = self.cpu_mesh_in_flight if devices.size > 1 and devices.flat[0].platform == "cpu" else None
        done, pending, held = [], [], 0
        for args in calls:
            pending.append(step(*args))
            held += _nbytes(pending[-1])
            ready = len(pending) - self.lookahead
            if ready > 0 and (held > self.readback_bytes or (in_flight is not None and len(pending) > in_flight)):
                done += readback(pending[:ready])
                del pending[:ready]
                held = _nbytes(pending)
        return done + (readback(pending) if pending else [])

    def fetch(self, outputs: list) -> list:
        """Device outputs (pytrees of arrays sharded over 'data') as numpy, in one transfer. On
        several processes each array is first gathered onto every device (a jitted reshard,
        one program per shape), so that every process reads all of it."""
        if jax.process_count() > 1:
            outputs = jax.tree.map(_replicator(self.mesh), outputs)
        return jax.device_get(outputs)

    def in_order(self, outputs: list, source: np.ndarray) -> jax.Array:
        """Per-batch device outputs concatenated, row i taken from row ``source[i]``; left on device,
        replicated (every process can read it)."""
        return _rows_in_order(self.mesh)(outputs, source)


@dataclasses.dataclass(frozen=True, eq=False)
class Step:
    """A Runner's jitted step with the runner's weights bound: ``step(*args)`` runs it, ``step.lower(*args)``
    lowers it (planning.aot); a trace either makes is counted in ``traces`` (the runner's ``compilations``)."""

    jitted: Callable
    state: object
    traces: collections.Counter

    def __call__(self, *args):
        with self.counting():
            return self.jitted(self.state, *args)

    def lower(self, *args):
        with self.counting():
            return self.jitted.lower(self.state, *args)

    @contextlib.contextmanager
    def counting(self):
        token = _traces.set(self.traces)
        try:
            yield
        finally:
            _traces.reset(token)


def _shared_step(graphdef, mesh, data_axes: tuple, name: str, fn, static: tuple):
    """The jitted ``fn`` of (model structure, mesh, ``data_axes``, name, static), made once and kept while the
    steps used since hold at most ``SHARED_PROGRAMS`` programs; a model whose structure does not hash (a
    foreign module's graph holding an unhashable attribute) gets a jitted step of its own."""
    key = (graphdef, mesh, data_axes, name, fn, static)
    try:
        hash(key)
    except TypeError:
        return _jit_step(*key, collections.Counter())
    with _shared_lock:
        if key in _shared:
            _shared.move_to_end(key)
            return _shared[key][0]
        traces = collections.Counter()
        _shared[key] = _jit_step(*key, traces), traces
        while len(_shared) > 1 and sum(held.total() for _, held in _shared.values()) > SHARED_PROGRAMS:
            _shared.popitem(last=False)
        return _shared[key][0]


def _jit_step(graphdef, mesh, data_axes: tuple, name: str, fn, static: tuple, traces: collections.Counter):
    """``fn`` jitted on ``mesh``, each trace counted in ``traces`` and in the calling Runner's."""
    static = dict(static)

    def traced(state, *args):
        for counter in (traces, _traces.get()):
            if counter is not None:
                counter[name] += 1
        with tracing_on(mesh, data_axes):  # activations split over the batch, as planned
            return auto_axes(lambda s, *a: fn(nnx.merge(graphdef, s), *a, **static), mesh, data_axes)(state, *args)

    return jax.jit(traced, out_shardings=batch_sharding(mesh, 1, data_axes))


def run_here(name: str, fn, *args, **static):
    """``fn(*args, **static)``, as ``Runner.program`` runs a named program: the default ``program`` of
    method code that may run without a Runner."""
    del name
    return fn(*args, **static)


def _nbytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(tree))


def _leaves(state) -> dict:
    """The leaves of a state by their path ('layers.mlp.up_proj.kernel')."""
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    return {".".join(name for name in map(_key, path) if name != "value"): x for path, x in flat}


def _key(k) -> str:
    tree = jax.tree_util
    if isinstance(k, tree.DictKey):
        return str(k.key)
    if isinstance(k, tree.SequenceKey | tree.FlattenedIndexKey):
        return str(k.idx)
    return k.name if isinstance(k, tree.GetAttrKey) else str(k)


def _describe(x) -> str:
    return f"{x.dtype}{'(weak)' * x.weak_type}{list(x.shape)}"


@functools.cache
def _replicator(mesh):
    """A jitted identity that gathers an array onto every device of ``mesh``."""
    return jax.jit(lambda x: x, out_shardings=replicated(mesh))


@functools.cache
def _rows_in_order(mesh):
    """Per-batch outputs concatenated and reordered (rows ``source``), replicated over ``mesh``."""
    return jax.jit(lambda parts, source: jnp.take(jnp.concatenate(parts), source, axis=0),
                   out_shardings=replicated(mesh))
