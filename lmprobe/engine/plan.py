"""Memory analysis before loading: will this model, dtype, mesh and batch fit the devices? From
config.json alone (no weight is read), for a mesh that may be simulated on CPU; ``check_fits``
raises one LmprobeError naming the flag that fixes it, ``plan`` reports (``Plan.table``).

- parameter bytes per device: each parameter's bytes (the model built with ``nnx.eval_shape``)
  divided by the devices its PartitionSpec (``mesh.spec_for`` under the sharding rules) splits it over;
- the engine's step (decoders: ``steps.token_logprobs``; encoders: ``steps.pooled_embedding``,
  mean pooling) compiled ahead of time for abstract, sharded arguments, with XLA's memory
  analysis per device: arguments (parameters and the batch), outputs and temporaries;
- given a memory size per device, the largest batch per length bucket that fits: peak memory is
  close to linear in the batch, so two compiles give a line and a third checks it.

Batch sizes are rows per 'data' shard, the Scorer's unit (``batching.batch_size_for``).

    plan("opt-13b", dtype=jnp.bfloat16, mesh=make_mesh(1), hbm_bytes=parse_bytes("16GiB")).table()

On CPU, XLA's CPU compiler decides fusion and buffer reuse: its temporaries approximate those
of TPU/GPU (``Planner.compiler_options`` switches off the one CPU-only artifact).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lmprobe.checkpoints.model_config import hf_config
from lmprobe.engine import steps
from lmprobe.engine.batching import LENGTH_BUCKETS, batch_size_for
from lmprobe.engine.hlo_cost import program_cost
from lmprobe.engine.mesh import DATA, MODEL, RULES, batch_sharding, make_mesh, spec_for, tracing_on
from lmprobe.engine.targets import Target, target_devices
from lmprobe.errors import LmprobeError
from lmprobe.models import family_for
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, LAYERS, POSITIONS, VOCAB

REPRESENTATIVE_BUCKETS = (128, 512, 2048)  # plus the largest (max_length)
SEARCH_CAP = 4096  # rows per data shard: the search never proposes more
_REFINE = 3  # compiles after the first two, per bucket, at most
CPU_DISABLED_PASSES = "while-loop-invariant-code-motion"  # see Planner.compiler_options


# ------------------------------------------------------------------------------- devices and sizes


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


MAX_DEVICE_BYTES = 2**50  # 1 PiB: more memory than any one device has, by far


def parse_bytes(text: str | int | float, *, flag: str = "hbm") -> int:
    """Bytes from '16GiB', '32GiB', '80GB', '80e9', '512MiB', 2**30 (K/M/G/T alone: binary): a device's
    memory, between 1 byte and MAX_DEVICE_BYTES."""
    if isinstance(text, (int, float)):
        size = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise LmprobeError(f"`{flag}={text}` is not a memory size: write e.g. 16GiB, 32GiB, 80GB or 80e9")
        size = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not 1 <= size <= MAX_DEVICE_BYTES:  # inf and nan too
        raise LmprobeError(f"`{flag}={text}` is not the memory of a device: give a size between 1 byte and 1 PiB, "
                           "e.g. 16GiB or 80GB")
    return int(size)


def format_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _count(n: int) -> str:
    return f"{n / 1e9:.3f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"


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


def plan_devices(n: int | None) -> tuple[list, bool]:
    """(devices, simulated) to plan for: the machine's own n devices (all for None), else n CPU
    devices standing in for them (made by --xla_force_host_platform_device_count before jax starts)."""
    if n is None:
        return jax.devices(), False
    if n < 1:
        raise LmprobeError(f"`devices={n}`: give a positive number of devices")
    if jax.device_count() == n:
        devices = jax.devices()
        return devices, devices[0].platform == "cpu"
    cpus = jax.devices("cpu")
    if len(cpus) < n:
        raise LmprobeError(
            f"`devices={n}`: only {len(cpus)} CPU devices could be made because jax started before "
            f"the plan could ask for more: run it as lmprobe plan (or python -m experiments.plan), or set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={n}")
    return cpus[:n], True


def plan_dtype(name: str, platform: str, simulated: bool):
    """The dtype --dtype names for the planned devices: 'auto' is a run's own rule (float32 on CPU,
    bfloat16 on accelerators), bfloat16 when CPU devices stand in for accelerators."""
    if name == "auto":
        name = "float32" if platform == "cpu" and not simulated else "bfloat16"
    return jnp.dtype(name)


# ------------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class StepCost:
    """What one compiled step costs by the TPU compiler's program (``hlo_cost``: every loop body times
    its trip count), per device unless named otherwise; times are estimates of the cost model, never
    measurements."""

    flops: float  # compiled matrix-product FLOPs, all devices
    useful_flops: float  # by hand: 2 x matmul parameters x tokens + causal attention, all devices
    bytes_accessed: float  # per device
    collective_bytes: float  # per device, moved by all-gathers, reductions
    seconds: float  # roofline estimate of the compiled program at the chip's peak FLOPs and bandwidth
    compiler_seconds: float | None  # cost_analysis()'s own estimate (loop bodies counted once)
    tokens: int  # per step, all devices
    peak_flops: float  # per device
    kernel_flops: float = 0.0  # useful FLOPs inside Pallas kernels (attention), which the count cannot see

    @property
    def overhead(self) -> float:
        """Compiled FLOPs / useful FLOPs, both outside Pallas kernels."""
        useful = self.useful_flops - self.kernel_flops
        return self.flops / useful if useful else math.nan

    @property
    def mfu(self) -> float:
        """Useful FLOPs / (estimated seconds x peak FLOPs of all devices): the cost model's MFU."""
        return self.useful_flops / (self.seconds * self.peak_flops * self.devices) if self.seconds else math.nan

    devices: int = 1


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
    cost: StepCost | None = None

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
class Plan:
    """What ``plan`` found: sizes are bytes per device unless named otherwise; ``table()`` renders
    it for a terminal, ``to_dict()`` for JSON."""

    model: str
    source: str  # where config.json came from
    family: str
    decoder: bool
    step: str  # the engine function compiled
    dtype: str
    platform: str
    devices: int
    mesh_shape: dict
    strategy: str
    num_params: int
    param_bytes: int  # all parameters, unsharded
    param_bytes_per_device: int
    hbm_bytes: int | None
    batch_size: int  # rows per data shard
    max_length: int
    step_memory: StepMemory | None  # at (rows at max_length, max_length); None when not compiled
    buckets: list[BucketFit] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    target: str | None = None  # the TPU slice compiled for (lmprobe.engine.targets), if any
    max_tokens: int | None = None  # check_fits: the tokens a batch may hold per device to fit, where rows must shrink

    @property
    def params_fit(self) -> bool | None:
        return None if self.hbm_bytes is None else self.param_bytes_per_device <= self.hbm_bytes

    @property
    def fits(self) -> bool | None:
        """Parameters and the step at batch_size x max_length within hbm_bytes (None: unknown)."""
        if self.hbm_bytes is None:
            return None
        if not self.params_fit:
            return False
        s = self.step_memory
        return None if s is None else not s.exhausted and s.peak_bytes <= self.hbm_bytes

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["fits"] = self.fits
        if self.step_memory is not None:
            d["step_memory"]["peak_bytes"] = self.step_memory.peak_bytes
        return d

    def table(self) -> str:
        g = format_bytes
        mesh = " x ".join(f"{k}={v}" for k, v in self.mesh_shape.items())
        hbm = f"{g(self.hbm_bytes)} per device" if self.hbm_bytes else "no limit given (report only)"
        lines = [
            f"memory plan: {self.model} ({self.family}, {'decoder' if self.decoder else 'encoder'}; "
            f"config {self.source})",
            f"  {self.dtype} on {self.devices} {self.platform} device(s), mesh {mesh}, sharding "
            f"{self.strategy}; memory {hbm}",
            f"  parameters: {_count(self.num_params)} = {g(self.param_bytes)}; "
            f"{g(self.param_bytes_per_device)} per device"
            + ("" if self.params_fit is not False else "  [DOES NOT FIT]"),
        ]
        s = self.step_memory
        if s is not None:
            lines += [
                f"  step {self.step} at {s.rows} rows/device ({s.global_rows} global) x {s.length} tokens, "
                f"per device (compiled in {s.compile_seconds:.1f} s):",
                f"    arguments {g(s.argument_bytes)} (parameters {g(self.param_bytes_per_device)}), "
                f"outputs {g(s.output_bytes)}, temporaries (activations) {g(s.temp_bytes)}",
                f"    peak {g(s.peak_bytes)}"
                + ("" if self.hbm_bytes is None else ("  [fits]" if s.peak_bytes <= self.hbm_bytes and not s.exhausted
                                                       else "  [DOES NOT FIT]")),
            ]
            if s.exhausted:
                lines[-2:] = [f"    {ran_out(s)}  [DOES NOT FIT]"]
            lines += _cost_lines(s.cost)
        if self.buckets:
            lines.append(f"  largest batch that fits {g(self.hbm_bytes)} (rows per device / global):")
            lines.append(f"    {'bucket':>7} {'rows/dev':>9} {'global':>8} {'peak/dev':>12} {'compiles':>9}")
            for b in self.buckets:
                rows = f"{b.rows}{'+' if b.capped else ''}"
                lines.append(f"    {b.length:>7} {rows:>9} {b.global_rows:>8} {g(b.peak_bytes):>12} {b.compiles:>9}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _cost_lines(c: StepCost | None) -> list[str]:
    if c is None:
        return []
    est = "" if c.compiler_seconds is None else (f"; the compiler's own {c.compiler_seconds * 1e3:.3g} ms counts "
                                                 "loops once")
    if not 0.5 < c.overhead < 2:
        return [f"    compiled FLOPs {c.flops:.4g} against {c.useful_flops:.4g} useful by hand: {c.overhead:.2f}x, "
                "so the count of this program is not trusted and no time is estimated"]
    kernel = f", {c.kernel_flops:.4g} of them in Pallas kernels, not counted" if c.kernel_flops else ""
    return [f"    compiled FLOPs {c.flops:.4g} = {c.overhead:.3f} x useful outside kernels (useful "
            f"{c.useful_flops:.4g}: 2 x params x tokens + attention{kernel}); per device "
            f"{format_bytes(c.bytes_accessed)} accessed, "
            f"{format_bytes(c.collective_bytes)} by collectives",
            f"    ESTIMATE (TPU cost model, not measured): {c.seconds * 1e3:.4g} ms a step, "
            f"{c.tokens / c.seconds:,.0f} tokens/s, MFU {c.mfu:.0%}{est}"]


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
    """One model built abstractly; parameter bytes and compiled steps for any mesh and rules."""

    def __init__(self, hf: dict, dtype, where: str, target: Target | None = None):
        self.target = target
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
        ``exhausted``, does not fit) and, for a target, the cost of ``rows`` per data shard x ``length``
        (``head``: the step runs the LM head at every position; default: decoders do; not ``model``: a
        program that is no model step, so no hand count of useful FLOPs). None: the backend gives no
        memory analysis. The plan's steps and compile-only runs (engine.aot) both come here."""
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
        cost = None
        if self.target is not None:
            cost = self.cost(compiled, global_rows, length, mesh.devices.size, head=head, model=model)
        return StepMemory(rows, global_rows, length, int(m.argument_size_in_bytes), int(m.output_size_in_bytes),
                          int(m.temp_size_in_bytes), int(m.alias_size_in_bytes),
                          int(getattr(m, "generated_code_size_in_bytes", 0) or 0), seconds, cost=cost)

    def useful_flops(self, rows: int, length: int, attention: bool = True, head: bool | None = None) -> float:
        """By hand: 2 x (matmul parameters + the LM head, vocab x embed) x tokens + causal attention
        (scores and values: 2 x layers x heads x head_dim x T (T + 1) a row; an encoder's, bidirectional:
        x 2T^2); ``head``: whether the
        step runs the LM head at every position (default: decoders do)."""
        attention_on, with_head, matmul, head, attention = attention, head, 0, 0, 0
        for p in self.params:
            axes = p.axes or ()
            if not p.is_param or POSITIONS in axes or EMBED not in axes:
                continue
            if VOCAB in axes:
                head = max(head, math.prod(p.shape))
                continue
            if len([a for a in axes if a != LAYERS]) >= 2:
                matmul += math.prod(p.shape)
                if not attention and HEADS in axes and HEAD_DIM in axes and LAYERS in axes:
                    attention = math.prod(p.shape[axes.index(a)] for a in (LAYERS, HEADS, HEAD_DIM))
        if not (self.decoder if with_head is None else with_head):
            head = 0
        attention *= attention_on
        pairs = length * (length + 1) if self.decoder else 2 * length * length  # causal: T(T+1)/2 query-key pairs
        return rows * (2.0 * (matmul + head) * length + 2.0 * attention * pairs)

    def cost(self, compiled, rows: int, length: int, devices: int, head: bool | None = None,
             model: bool = True) -> StepCost:
        """The step's cost; with Pallas kernels in the program (attention), their FLOPs are the hand
        count's attention, timed at the chip's peak. Not ``model``: no useful FLOPs (no hand count)."""
        chip = self.target.chip
        program = program_cost(compiled.as_text(), peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth)
        raw = (compiled.cost_analysis() or {}).get("optimal_seconds")
        useful = self.useful_flops(rows, length, head=head) if model else 0.0
        kernel = (useful - self.useful_flops(rows, length, attention=False, head=head)
                  if program.custom_calls and model else 0.0)
        seconds = program.seconds + kernel / devices / chip.peak_flops
        return StepCost(program.flops * devices, useful, program.bytes_accessed, program.collective_bytes, seconds,
                        raw, rows * length, chip.peak_flops, kernel_flops=kernel, devices=devices)

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
    return int(float(m.group(1)) * _UNITS[m.group(2).lower() or "b"]) if m else UNKNOWN_BYTES


UNKNOWN_BYTES = 2**62  # an exhausted compile's temporaries when its message gives no figure: more than any device


def ran_out(step: StepMemory) -> str:
    """'the compiler ran out of memory' and the temporaries it asked for, when its message said."""
    known = step.temp_bytes < UNKNOWN_BYTES
    return "the compiler ran out of memory" + (f" (temporaries {format_bytes(step.temp_bytes)})" if known else "")


def _buckets_for(max_length: int, buckets: Sequence[int] | None) -> list[int]:
    chosen = REPRESENTATIVE_BUCKETS if buckets is None else buckets
    return sorted({min(int(b), max_length) for b in chosen} | {max_length})


# ------------------------------------------------------------------------------- entry points


def target_mesh(t: Target, model_parallel: int = 1) -> Mesh:
    """The (data, model) mesh over the devices of TPU target ``t`` (compile only)."""
    return make_mesh(model_parallel, target_devices(t))


def planner_setup(config_or_name, dtype, mesh, strategy, max_length, offline, revision=None, target=None):
    """(Planner, mesh, max_length, name, source) of a model's config: the settings checked, the mesh the
    target's (or ``mesh``, or this host's default one)."""
    if strategy not in RULES:
        raise LmprobeError(f"`sharding={strategy}` is not one of {', '.join(RULES)}")
    hf, source = hf_config(config_or_name, offline=offline, revision=revision)
    planner = Planner(hf, dtype, source, target)
    mesh = mesh if mesh is not None else target_mesh(target) if target is not None else make_mesh()
    context = planner.max_length
    name = os.fspath(config_or_name) if not isinstance(config_or_name, dict) else (
        config_or_name.get("_name_or_path") or config_or_name["model_type"])
    if max_length is not None and not 1 <= max_length <= (context or max_length):
        raise LmprobeError(f"`max_length={max_length}`: " + (f"{name}'s context is {context} tokens: pass 1 to "
                                                              f"{context}" if context else "pass at least 1"))
    return planner, mesh, int(context if max_length is None else max_length), name, source


def base_plan(planner: Planner, mesh: Mesh, name, source, strategy, batch_size, max_length, hbm) -> Plan:
    """The Plan before any step is compiled: parameters, their sharding and the memory they take."""
    devices = list(mesh.devices.flat)
    return Plan(model=name, source=source, family=planner.family.name, decoder=planner.decoder,
                step=planner.step_name, dtype=planner.dtype.name, platform=devices[0].platform,
                devices=len(devices), mesh_shape=dict(mesh.shape), strategy=strategy,
                num_params=planner.num_params, param_bytes=planner.total_bytes,
                param_bytes_per_device=planner.bytes_per_device(mesh, strategy), hbm_bytes=hbm,
                batch_size=batch_size, max_length=max_length, step_memory=None)


def plan(config_or_name, *, dtype=jnp.float32, mesh: Mesh | None = None, strategy: str = "fsdp",
         batch_size: int = 16, max_length: int | None = None, max_tokens: int | None = None,
         buckets: Sequence[int] | None = None, hbm_bytes: int | None = None,
         offline: bool | None = None, revision: str | None = None, search: bool = True,
         target: Target | None = None) -> Plan:
    """The memory plan of a model (name, path or config dict) on ``mesh``; reads no weights.

    batch_size (and max_tokens) are per data shard. With ``hbm_bytes`` and ``search``, the
    largest batch is found for each of ``buckets`` (default 128, 512, 2048, clipped to
    max_length) and max_length itself. ``target`` (lmprobe.engine.targets): compiled by the TPU
    compiler for that slice (mesh: ``target_mesh(target)`` unless given; hbm_bytes: the chip's unless
    given), and each step's cost (``StepMemory.cost``) reported.
    """
    if target is not None and hbm_bytes is None:
        hbm_bytes = target.chip.hbm_bytes
    planner, mesh, max_length, name, source = planner_setup(config_or_name, dtype, mesh, strategy, max_length, offline,
                                                     revision, target)
    out = base_plan(planner, mesh, name, source, strategy, batch_size, max_length, hbm_bytes)
    out.target = None if target is None else target.label
    if not planner.takes_text:
        out.notes.append(f"{planner.family.name} takes no token ids: parameters only")
        return out
    if out.params_fit is False:
        out.notes.append("the parameters alone exceed the memory: no step was compiled "
                         "(lmprobe.engine.plan.check_fits names the flag that fixes it)")
        return out
    out.step_memory = planner.step(mesh, strategy, batch_size_for(max_length, batch_size, max_tokens), max_length)
    if out.step_memory is None:
        out.notes.append("this backend gives no memory analysis of compiled programs")
        return out
    if hbm_bytes is not None and search:
        cap = SEARCH_CAP
        for length in _buckets_for(max_length, buckets):
            fit = planner.largest_rows(mesh, strategy, length, hbm_bytes, probe=batch_size, cap=cap)
            out.buckets.append(dataclasses.replace(fit, capped=fit.capped and cap == SEARCH_CAP))
            cap = fit.rows  # a longer bucket never fits more rows
    if out.platform == "cpu":
        out.notes.append("compiled by XLA's CPU compiler: its temporaries approximate those on TPU/GPU"
                         + (" (loop-invariant code motion off: no f32 copies of the 16-bit weights)"
                            if planner.compiler_options(mesh) else ""))
    return out


def check_fits(config_or_name, *, dtype=jnp.float32, mesh: Mesh | None = None, strategy: str = "fsdp",
               batch_size: int = 16, max_length: int | None = None, max_tokens: int | None = None,
               hbm_bytes: int | None = None, offline: bool | None = None,
               revision: str | None = None, target: Target | None = None) -> Plan | None:
    """Raise one LmprobeError naming the flag that fixes it when the model, at ``batch_size`` rows
    per data shard (capped at ``max_tokens`` tokens, as the Scorer does) up to ``max_length``
    tokens, does not fit ``hbm_bytes`` per device (default: the mesh devices' own limit).

    Without ``max_tokens``, a model whose longest bucket fits fewer rows than ``batch_size`` (a long
    context: 16 rows of 32k tokens) is no error: the plan's ``max_tokens`` is then the rows that fit
    there times ``max_length``, for the Scorer to cap its batches at (shorter buckets keep up to
    ``batch_size`` rows, within as many tokens). Reads no weights: call it before loading. Returns the
    plan (parameters, and the step at the largest bucket), or None, compiling nothing, when no memory
    limit is known (CPU).
    """
    mesh = mesh if mesh is not None else target_mesh(target) if target is not None else make_mesh()
    hbm = hbm_bytes if hbm_bytes is not None else target.chip.hbm_bytes if target is not None else device_hbm(
        mesh.devices.flat)
    if hbm is None:
        return None
    planner, mesh, max_length, name, source = planner_setup(config_or_name, dtype, mesh, strategy, max_length, offline,
                                                     revision, target)
    out = base_plan(planner, mesh, name, source, strategy, batch_size, max_length, hbm)
    g = format_bytes
    where = (f"{planner.dtype.name}, sharding {strategy} on {mesh.devices.size} device{'s' * (mesh.devices.size > 1)}, "
             f"mesh data={mesh.shape[DATA]} x model={mesh.shape[MODEL]}")
    if not out.params_fit:
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
                  max_tokens: int | None, hbm: int, out: Plan) -> tuple[int, int, StepMemory] | None:
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
