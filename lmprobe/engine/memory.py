"""The load-time memory check: will this model, dtype, mesh and batch fit the devices? From config.json
alone (no weight is read); ``check_fits`` raises one LmprobeError naming the flag that fixes it. Scorer.load
calls it before reading weights; the memory plan (planning.plan: reports, batch-size search, TPU targets)
builds on the same Planner.

- parameter bytes per device: each parameter's bytes (the model built with ``nnx.eval_shape``)
  divided by the devices its PartitionSpec (``mesh.spec_for`` under the sharding rules) splits it over;
- the engine's step (decoders: ``steps.token_logprobs``; encoders: ``steps.pooled_embedding``,
  mean pooling) compiled ahead of time for abstract, sharded arguments, with XLA's memory
  analysis per device: arguments (parameters and the batch), outputs and temporaries;
- given a memory size per device, the largest batch per length bucket that fits: peak memory is
  close to linear in the batch, so two compiles give a line and a third checks it.

Batch sizes are rows per 'data' shard, the Scorer's unit (``batching.batch_size_for``). On CPU, XLA's
CPU compiler decides fusion and buffer reuse: its temporaries approximate those of TPU/GPU
(``Planner.compiler_options`` switches off the one CPU-only artifact).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lmprobe.checkpoints.model_config import hf_config
from lmprobe.engine import steps
from lmprobe.engine.batching import LENGTH_BUCKETS, batch_size_for
from lmprobe.engine.mesh import DATA, MODEL, RULES, batch_sharding, make_mesh, spec_for, tracing_on
from lmprobe.errors import LmprobeError
from lmprobe.models import family_for

_REFINE = 3  # compiles after the first two, per bucket, at most
CPU_DISABLED_PASSES = "while-loop-invariant-code-motion"  # see Planner.compiler_options


# ------------------------------------------------------------------------------- devices and sizes


UNITS = {  # memory sizes: the factor of each unit (K/M/G/T alone: binary)
"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def format_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def device_hbm(devices) -> int | None:
    """The memory a device lets XLA use (``memory_stats()['bytes_limit']``: GPU, TPU), else None."""
    devices = list(devices)
    local = [d for d in devices if d.process_index == jax.process_index()] or devices
    try:
        stats = local[0].memory_stats()
    except Exception:  # backends without memory stats (CPU) raise or return None
        return None
    limit = (stats or {}).get("bytes_limit")
    return int(limit) if limit else None

# ------------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """XLA's memory analysis of one compiled step, per device (``exhausted``: the compiler said it
    does not fit, RESOURCE_EXHAUSTED, with the bytes its message names, when it names them)."""

    rows: int  # per data shard
    global_rows: int
    length: int
    argument_bytes: int  # parameters + the batch
    output_bytes: int
    temp_bytes: int  # activations and other temporaries
    alias_bytes: int
    code_bytes: int
    compile_seconds: float
    exhausted: bool = False
    cost: object | None = None  # on a TPU target: its StepCost (planning.plan), the cost model's estimate

    @property
    def peak_bytes(self) -> int:
        """Everything live at once, at worst: arguments + outputs + temporaries (- aliased) + code."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes + self.code_bytes


@dataclasses.dataclass(frozen=True)
class BucketFit:
    """The largest batch that fits at one bucket length (rows per data shard; 0: not even one)."""

    length: int
    rows: int
    global_rows: int
    peak_bytes: int | None  # at ``rows`` (None when rows == 0)
    compiles: int
    capped: bool  # the search stopped at its cap (more may fit)


@dataclasses.dataclass
class Fit:
    """What ``check_fits`` found, per device: the parameters' bytes and the step at the largest bucket."""

    max_length: int
    param_bytes_per_device: int
    step_memory: StepMemory | None = None  # at (rows at max_length, max_length); None when not compiled
    max_tokens: int | None = None  # the tokens a batch may hold per device to fit, where rows must shrink


# ------------------------------------------------------------------------------- the planner


@dataclasses.dataclass(frozen=True)
class _Param:
    path: str
    shape: tuple
    dtype: np.dtype
    axes: tuple | None
    is_param: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def _devices_split(spec: PartitionSpec, mesh: Mesh) -> int:
    n = 1
    for entry in spec:
        for axis in entry if isinstance(entry, tuple) else (entry,):
            if axis is not None:
                n *= mesh.shape[axis]
    return n


class Planner:
    """One model built abstractly; parameter bytes and compiled steps for any mesh and rules. (Planning's
    Planner, planning.plan, adds a TPU target's cost of each step: ``step_cost``.)"""

    def __init__(self, hf: dict, dtype, where: str):
        self.family = family_for(hf, where=where)
        self.cfg = self.family.config_from_hf(hf)
        self.dtype = jnp.dtype(dtype)
        model = nnx.eval_shape(lambda: self.family.model(self.cfg, dtype=self.dtype, param_dtype=self.dtype,
                                                         rngs=nnx.Rngs(0)))
        self.decoder = self.family.is_decoder
        self.takes_text = getattr(self.family.model, "takes_text", True)
        self.max_length = int(getattr(model, "max_length", None)
                              or getattr(self.cfg, "max_position_embeddings", 0) or 0)
        self.graphdef, self.state = nnx.split(model)
        self.vars = list(nnx.to_flat_state(self.state))
        self.params = []
        for path, var in self.vars:
            value = var.get_value()
            axes = (var.get_metadata() or {}).get("axes")
            self.params.append(_Param(".".join(map(str, path)), tuple(value.shape), np.dtype(value.dtype),
                                      None if axes is None else tuple(axes), isinstance(var, nnx.Param)))
        self._steps: dict = {}

    @property
    def step_name(self) -> str:
        return "token_logprobs" if self.decoder else "pooled_embedding(pooling='mean')"

    def spec(self, p: _Param, mesh: Mesh, strategy: str) -> PartitionSpec:
        if p.axes is None:
            return PartitionSpec()
        return spec_for(p.shape, p.axes, mesh, RULES[strategy])

    def bytes_per_device(self, mesh: Mesh, strategy: str) -> int:
        return sum(-(-p.nbytes // _devices_split(self.spec(p, mesh, strategy), mesh)) for p in self.params)

    @property
    def num_params(self) -> int:
        return sum(math.prod(p.shape) for p in self.params if p.is_param)

    @property
    def total_bytes(self) -> int:
        return sum(p.nbytes for p in self.params)

    def compiler_options(self, mesh: Mesh) -> dict | None:
        """On CPU with 16-bit parameters, no loop-invariant code motion: XLA's CPU compiler runs
        bf16 matmuls in f32 and would hoist an f32 copy of every layer's weights out of the layer
        scan (2x the parameter shard, e.g. +6 GiB per device for opt-13b on 8 devices), which
        TPU and GPU, with native bf16 matmuls, never hold."""
        if mesh.devices.flat[0].platform == "cpu" and self.dtype.itemsize < 4:
            return {"xla_disable_hlo_passes": CPU_DISABLED_PASSES}
        return None

    def step(self, mesh: Mesh, strategy: str, rows: int, length: int) -> StepMemory | None:
        """The engine's step compiled for ``rows`` per data shard x ``length`` (memoized)."""
        key = (mesh, strategy, rows, length)
        if key not in self._steps:
            self._steps[key] = self._compile(mesh, strategy, rows, length)
        return self._steps[key]

    def sharded_state(self, mesh: Mesh, strategy: str):
        """The model's state as abstract arrays (jax.ShapeDtypeStruct) sharded on ``mesh`` by ``strategy``."""
        for (_, var), p in zip(self.vars, self.params):
            sharding = NamedSharding(mesh, self.spec(p, mesh, strategy))
            var.set_value(jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=sharding))
        return self.state

    def _compile(self, mesh, strategy, rows, length) -> StepMemory | None:
        return self.compiled(self.lower(mesh, strategy, rows, length), mesh, rows, length)

    def lower(self, mesh: Mesh, strategy: str, rows: int, length: int):
        """The engine's step (scoring for decoders, embedding for encoders) lowered for ``rows`` per
        data shard x ``length`` on ``mesh``, not compiled."""
        state = self.sharded_state(mesh, strategy)
        graphdef = self.graphdef
        body = (steps.token_logprobs if self.decoder else
                functools.partial(steps.pooled_embedding, pooling="mean", layer=-1))

        def traced(state, ids, mask):  # as the Scorer jits a step: fn(merged model, *args), rows stay sharded
            with tracing_on(mesh):
                return body(nnx.merge(graphdef, state), ids, mask)

        batch = jax.ShapeDtypeStruct((rows * mesh.shape[DATA], length), jnp.int32, sharding=batch_sharding(mesh))
        return jax.jit(traced, out_shardings=batch_sharding(mesh, 1)).lower(state, batch, batch)

    def compiled(self, lowered, mesh: Mesh, rows: int, length: int, *, head: bool | None = None,
                 global_rows: int | None = None, model: bool = True) -> StepMemory | None:
        """``lowered`` compiled for ``mesh``: the compiler's memory analysis per device (RESOURCE_EXHAUSTED:
        ``exhausted``, does not fit) and its ``step_cost`` for ``rows`` per data shard x ``length``
        (``head``: the step runs the LM head at every position; default: decoders do; not ``model``: a
        program that is no model step, so no hand count of useful FLOPs). None: the backend gives no
        memory analysis. The fit check, the plan's steps and compile-only runs (planning.aot) all
        come here."""
        global_rows = rows * mesh.shape[DATA] if global_rows is None else global_rows
        start = time.perf_counter()
        try:
            compiled = lowered.compile(compiler_options=self.compiler_options(mesh))
        except jax.errors.JaxRuntimeError as e:
            if "RESOURCE_EXHAUSTED" not in str(e):
                raise
            needed = _exhausted_bytes(str(e))  # the compiler's own verdict: does not fit
            return StepMemory(rows, global_rows, length, 0, 0, needed, 0, 0, time.perf_counter() - start,
                              exhausted=True)
        seconds = time.perf_counter() - start
        m = compiled.memory_analysis()
        if m is None:
            return None
        cost = self.step_cost(compiled, global_rows, length, mesh.devices.size, head=head, model=model)
        return StepMemory(rows, global_rows, length, int(m.argument_size_in_bytes), int(m.output_size_in_bytes),
                          int(m.temp_size_in_bytes), int(m.alias_size_in_bytes),
                          int(getattr(m, "generated_code_size_in_bytes", 0) or 0), seconds, cost=cost)

    def step_cost(self, compiled, rows: int, length: int, devices: int, head: bool | None = None,
                  model: bool = True):
        """What a compiled step costs: nothing known here (a TPU target's Planner estimates it)."""
        del compiled, rows, length, devices, head, model

    def largest_rows(self, mesh, strategy, length, limit, *, probe: int, cap: int) -> BucketFit:
        """The most rows per data shard (<= cap) whose step peaks within ``limit`` bytes.

        Peak memory is close to linear in rows: compile at 1 and ``probe`` rows, predict where
        the line meets the limit, compile there to check; refine between the closest rows known
        to fit and not to fit only when the check disagrees."""
        data = mesh.shape[DATA]
        known: dict[int, int] = {}
        compiles = 0

        def peak(r):
            nonlocal compiles
            if r not in known:
                before = len(self._steps)
                step = self.step(mesh, strategy, r, length)
                known[r] = max(step.peak_bytes, limit + 1) if step.exhausted else step.peak_bytes
                compiles += len(self._steps) > before
            return known[r]

        def result(r, capped=False):
            return BucketFit(length, r, r * data, known.get(r), compiles, capped)

        if cap < 1 or peak(1) > limit:
            return result(0)
        lo, hi = 1, None  # largest known to fit, smallest known not to
        second = min(max(2, probe), cap)
        if second > 1:
            if peak(second) <= limit:
                lo = second
            else:
                hi = second
        for _ in range(_REFINE):
            if (hi - lo <= 1) if hi is not None else (lo >= cap):
                break
            other = hi if hi is not None else max((r for r in known if r < lo), default=None)
            if other is None:
                break
            upper = cap if hi is None else hi - 1
            slope = (known[other] - known[lo]) / (other - lo)  # the line through lo and its neighbour
            guess = upper if slope <= 0 else min(upper, lo + int((limit - known[lo]) // slope))
            if guess <= lo:
                if hi is None:
                    break  # the line says lo + 1 does not fit
                guess = lo + 1
            if peak(guess) <= limit:
                lo = guess
            else:
                hi = guess
        return result(lo, capped=hi is None and lo >= cap)


def _exhausted_bytes(message: str) -> int:
    """The bytes a RESOURCE_EXHAUSTED compile asked for (its message's 'temporaries (32.02G)'), else
    UNKNOWN_BYTES (a GPU compile that runs out says no figure)."""
    m = re.search(r"temporaries \(([0-9.]+)([KMGT]?)\)", message) or re.search(r"Used ([0-9.]+)([KMGT]?) of", message)
    return int(float(m.group(1)) * UNITS[m.group(2).lower() or "b"]) if m else UNKNOWN_BYTES


UNKNOWN_BYTES = 2**62  # an exhausted compile's temporaries when its message gives no figure: more than any device


def ran_out(step: StepMemory) -> str:
    """'the compiler ran out of memory' and the temporaries it asked for, when its message said."""
    known = step.temp_bytes < UNKNOWN_BYTES
    return "the compiler ran out of memory" + (f" (temporaries {format_bytes(step.temp_bytes)})" if known else "")


# ------------------------------------------------------------------------------- the check


def planner_setup(config_or_name, dtype, mesh, strategy, max_length, offline, revision=None, planner=None):
    """(Planner, mesh, max_length, name, source) of a model's config: the settings checked, the mesh ``mesh``
    (None: this host's default one); ``planner(hf, dtype, source)`` builds the Planner (default: this module's)."""
    if strategy not in RULES:
        raise LmprobeError(f"`sharding={strategy}` is not one of {', '.join(RULES)}")
    hf, source = hf_config(config_or_name, offline=offline, revision=revision)
    planner = (planner or Planner)(hf, dtype, source)
    mesh = mesh if mesh is not None else make_mesh()
    context = planner.max_length
    name = os.fspath(config_or_name) if not isinstance(config_or_name, dict) else (
        config_or_name.get("_name_or_path") or config_or_name["model_type"])
    if max_length is not None and not 1 <= max_length <= (context or max_length):
        raise LmprobeError(f"`max_length={max_length}`: " + (f"{name}'s context is {context} tokens: pass 1 to "
                                                              f"{context}" if context else "pass at least 1"))
    return planner, mesh, int(context if max_length is None else max_length), name, source


def check_fits(config_or_name, *, dtype=jnp.float32, mesh: Mesh | None = None, strategy: str = "fsdp",
               batch_size: int = 16, max_length: int | None = None, max_tokens: int | None = None,
               hbm_bytes: int | None = None, offline: bool | None = None,
               revision: str | None = None) -> Fit | None:
    """Raise one LmprobeError naming the flag that fixes it when the model, at ``batch_size`` rows
    per data shard (capped at ``max_tokens`` tokens, as the Scorer does) up to ``max_length``
    tokens, does not fit ``hbm_bytes`` per device (default: the mesh devices' own limit).

    Without ``max_tokens``, a model whose longest bucket fits fewer rows than ``batch_size`` (a long
    context: 16 rows of 32k tokens) is no error: the plan's ``max_tokens`` is then the rows that fit
    there times ``max_length``, for the Scorer to cap its batches at (shorter buckets keep up to
    ``batch_size`` rows, within as many tokens). Reads no weights: call it before loading. Returns the
    ``Fit`` (parameters, and the step at the largest bucket), or None, compiling nothing, when no memory
    limit is known (CPU). (planning.plan reports the same analysis, and searches batch sizes.)
    """
    mesh = mesh if mesh is not None else make_mesh()
    hbm = hbm_bytes if hbm_bytes is not None else device_hbm(mesh.devices.flat)
    if hbm is None:
        return None
    planner, mesh, max_length, name, _ = planner_setup(config_or_name, dtype, mesh, strategy, max_length, offline,
                                                       revision)
    out = Fit(max_length, planner.bytes_per_device(mesh, strategy))
    g = format_bytes
    where = (f"{planner.dtype.name}, sharding {strategy} on {mesh.devices.size} device{'s' * (mesh.devices.size > 1)}, "
             f"mesh data={mesh.shape[DATA]} x model={mesh.shape[MODEL]}")
    if out.param_bytes_per_device > hbm:
        raise LmprobeError(
            f"{name} does not fit: its parameters take {g(out.param_bytes_per_device)} per device ({where}) "
            f"and a device has {g(hbm)}: " + "; or ".join(_param_fixes(planner, mesh, strategy, hbm)))
    if not planner.takes_text:
        return out
    misfit = _first_misfit(planner, mesh, strategy, batch_size, max_length, max_tokens, hbm, out)
    if misfit is not None and max_tokens is None and misfit[0] > 1 and misfit[1] == max_length:
        rows = misfit[0]
        fit = planner.largest_rows(mesh, strategy, max_length, hbm, probe=max(2, rows // 2), cap=rows - 1)
        capped = fit.rows * max_length
        if fit.rows and _first_misfit(planner, mesh, strategy, batch_size, max_length, capped, hbm, out) is None:
            out.max_tokens, misfit = capped, None
    if misfit is not None:
        rows, length, step = misfit
        needs = (ran_out(step) if step.exhausted
                 else f"its {planner.step_name} step needs {g(step.peak_bytes)} per device")
        temporaries = "" if step.exhausted else f", activations and other temporaries {g(step.temp_bytes)}"
        raise LmprobeError(
            f"{name} does not fit at {rows} rows per device x {length} tokens: {needs} "
            f"(parameters {g(out.param_bytes_per_device)}{temporaries}; {where}) and a device has "
            f"{g(hbm)}: {_step_fixes(planner, mesh, strategy, hbm, rows, length)}")
    return out


def _first_misfit(planner: Planner, mesh: Mesh, strategy: str, batch_size: int, max_length: int,
                  max_tokens: int | None, hbm: int, out: Fit) -> tuple[int, int, StepMemory] | None:
    """(rows, length, step) of the first step that does not fit ``hbm``, of the largest bucket at its rows and,
    with ``max_tokens``, the longest bucket that gets full rows; None when both fit. Sets ``out.step_memory``."""
    lengths = [max_length]
    if batch_size_for(max_length, batch_size, max_tokens) < batch_size:
        full = [b for b in LENGTH_BUCKETS if b < max_length and batch_size_for(b, batch_size, max_tokens) == batch_size]
        lengths += full[-1:]
    for length in lengths:
        rows = batch_size_for(length, batch_size, max_tokens)
        step = planner.step(mesh, strategy, rows, length)
        if length == max_length:
            out.step_memory = step
        if step is not None and (step.peak_bytes > hbm or step.exhausted):
            return rows, length, step
    return None


def _param_fixes(planner: Planner, mesh: Mesh, strategy: str, hbm: int) -> list[str]:
    """Setting changes that make the parameters fit: fewest first, then model_parallel, sharding,
    dtype; the smallest model_parallel for each."""
    g = format_bytes
    devices = list(mesh.devices.flat)
    current = mesh.shape[MODEL]
    dtypes = [planner.dtype] + ([jnp.dtype(jnp.bfloat16)] if planner.dtype.itemsize > 2 else [])
    found = {}
    for dt in dtypes:
        for strat in [strategy, *(s for s in RULES if s != strategy)]:
            for n in [d for d in range(1, len(devices) + 1) if len(devices) % d == 0]:
                flags = ((f"model_parallel={n}",) if n != current else ()) + (
                    (f"sharding={strat}",) if strat != strategy else ()) + (
                    ("dtype=bfloat16",) if dt != planner.dtype else ())
                kinds = tuple(f.split("=")[0] for f in flags)
                if not flags or kinds in found:
                    continue
                per = planner.bytes_per_device(make_mesh(n, devices), strat) * dt.itemsize // planner.dtype.itemsize
                if per <= hbm:
                    found[kinds] = (flags, per)
    order = {"model_parallel": 0, "sharding": 1, "dtype": 2}
    ranked = sorted(found.values(), key=lambda fp: (len(fp[0]), [order[f.split("=")[0]] for f in fp[0]]))
    # a combination is worth naming only when no subset of its flags does it alone
    kept = [(f, p) for f, p in ranked
            if not any(set(k) < {x.split("=")[0] for x in f} for k in found)]
    fixes = [f"pass {' '.join(f'`{f}`' for f in flags)} ({g(per)} per device)" for flags, per in kept]
    if not fixes:
        need = -(-planner.total_bytes * 2 // planner.dtype.itemsize // hbm)
        fixes.append(f"even split over all {len(devices)} devices in bfloat16 it does not fit: use at least "
                     f"{need} devices of this memory (plan it with `devices={need}` `sharding=fsdp` "
                     "`dtype=bfloat16`), or devices with more memory")
    return fixes


def _step_fixes(planner: Planner, mesh: Mesh, strategy: str, hbm: int, rows: int, length: int) -> str:
    """batch_size when fewer rows fit at this length, else max_length (plus dtype)."""
    g = format_bytes
    fixes = []
    if rows > 1:
        fit = planner.largest_rows(mesh, strategy, length, hbm, probe=max(2, rows // 2), cap=rows - 1)
        if fit.rows:
            fixes.append(f"pass `batch_size={fit.rows}` (the most rows per device that fit at {length} "
                         f"tokens: {g(fit.peak_bytes)})")
    if not fixes:
        shorter = [b for b in LENGTH_BUCKETS if b < length]
        lo, hi, best = 0, len(shorter) - 1, None  # memory grows with length: bisect for one row
        while lo <= hi:
            mid = (lo + hi) // 2
            step = planner.step(mesh, strategy, 1, shorter[mid])
            if step is not None and step.peak_bytes <= hbm and not step.exhausted:
                best, lo = shorter[mid], mid + 1
            else:
                hi = mid - 1
        if best is not None:
            fixes.append(f"pass `max_length={best}` (one row per device fits at {best} tokens) and a "
                         "`batch_size` that fits there (lmprobe plan finds it)")
        else:
            fixes.append("not even one short row fits beside the parameters: use more devices (a larger "
                         "`target` or `num_slices`), shard the model further (`model_parallel`, `sharding=fsdp`), "
                         "or a smaller `max_length`")
    if planner.dtype.itemsize > 2:
        fixes.append("pass `dtype=bfloat16`")
    return "; or ".join(fixes)
