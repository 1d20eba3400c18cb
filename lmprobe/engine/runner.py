"""Runs a model's jitted steps (lmprobe.engine.steps) over streams of bucketed batches on a mesh.

    runner = Runner(model, mesh, batch_size=16, max_tokens=None, max_length=2048)
    step = runner.jit("score", steps.token_logprobs)         # compiled once per (name, statics, shapes)
    batches = runner.batches(seqs)                            # bucketed, padded, sharded over 'data'
    outputs = runner.run(step, (runner.put(b.ids, b.mask) for b in batches))   # numpy, in order

``run`` pipelines: batch k+1 is padded, placed and dispatched while the device computes batch k,
outputs stay on device sharded over 'data', and they come back to the host together at the end
(or in groups, when they would hold more than ``readback_bytes`` of device memory). ``batch_size``
and ``max_tokens`` are per device of the 'data' axis.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.engine.batching import LENGTH_BUCKETS, Batch, make_batches
from lmprobe.engine.mesh import DATA, batch_sharding, replicated, tracing_on


class Runner:
    """A model split into its graph and (sharded) state, a mesh, and the batch geometry.

    ``compilations`` counts traces per step name (tests, diagnostics). The batch geometry
    (``batch_size``, ``max_tokens``, ``max_length``, ``buckets``) and the dispatch settings
    (``lookahead``, ``readback_bytes``) may be changed between calls.
    """

    lookahead = 4  # batches dispatched past the oldest result not yet read back, when reading early
    readback_bytes = 1 << 28  # bytes of results (all devices) a call holds on device before reading the oldest back

    def __init__(self, model: nnx.Module, mesh, *, batch_size: int, max_tokens: int | None, max_length: int,
                 buckets: Sequence[int] = LENGTH_BUCKETS):
        self.mesh = mesh
        self.graphdef, self.state = nnx.split(model)
        self.batch_size, self.max_tokens, self.max_length, self.buckets = batch_size, max_tokens, max_length, buckets
        self.compilations = collections.Counter()
        self._jitted = {}

    @property
    def model(self) -> nnx.Module:
        return nnx.merge(self.graphdef, self.state)

    @property
    def data_parallel(self) -> int:
        """Devices of the mesh's 'data' axis."""
        return self.mesh.shape[DATA]

    def jit(self, name: str, fn, **static) -> Callable:
        """``fn(model, *args, **static)`` jitted once per (name, static); called with ``args`` only.
        Traces are counted in ``compilations[name]``; outputs stay where the rows are (``fetch``
        gathers them once per call)."""
        key = (name, tuple(sorted(static.items())))
        if key not in self._jitted:
            graphdef = self.graphdef

            def traced(state, *args):
                self.compilations[name] += 1
                with tracing_on(self.mesh):  # activations split over the batch, as the plan compiles them
                    return fn(nnx.merge(graphdef, state), *args, **static)

            self._jitted[key] = jax.jit(traced, out_shardings=batch_sharding(self.mesh, 1))
        return functools.partial(self._jitted[key], self.state)

    def put(self, *arrays) -> tuple:
        """Host arrays (the same on every host) onto the mesh, batch axis over 'data'."""
        return tuple(jax.make_array_from_callback(np.shape(a), batch_sharding(self.mesh, np.ndim(a)),
                                                  lambda index, a=a: a[index]) for a in arrays)

    def batches(self, seqs, *, left_pad: bool = False, max_length: int | None = None) -> list[Batch]:
        """Bucketed batches of token id lists; no bucket exceeds ``max_length`` (the model's
        context by default)."""
        limit = max_length or self.max_length
        return make_batches(seqs, batch_size=self.batch_size, max_tokens=self.max_tokens,
                            buckets=self.bucket_lengths(limit), left_pad=left_pad, data_parallel=self.data_parallel)

    def bucket_lengths(self, limit: int | None = None) -> list[int]:
        """The length buckets, none above ``limit`` (the model's context by default)."""
        limit = limit or self.max_length
        return sorted({min(b, limit) for b in self.buckets})

    def rows(self, per_device: int) -> int:
        """Rows of a batch with ``per_device`` rows on each device of the 'data' axis."""
        return max(1, per_device) * self.data_parallel

    def run(self, step, calls: Iterable[tuple], readback: Callable | None = None) -> list:
        """``step(*args)`` for each ``args`` of ``calls``; the outputs in order, read back by
        ``readback`` (``fetch``: to numpy) in as few transfers as device memory allows.

        ``calls`` is lazy, so the host pads and places batch k+1 while the device runs batch k
        (dispatch is asynchronous). Nothing is read back before the last step is dispatched,
        unless the outputs held on device pass ``readback_bytes``: then all but the newest
        ``lookahead`` are read back together, the newer ones still running meanwhile.
        """
        readback = readback or self.fetch
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
