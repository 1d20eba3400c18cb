"""The memory plan of a model: will it fit the devices, and with which batches? From config.json alone
(no weight is read), for a mesh that may be simulated on CPU or be a TPU target's (lmprobe.planning.targets):
``plan`` reports (``Plan.table``) what the load-time check (lmprobe.engine.memory: ``check_fits``, which
raises one LmprobeError naming the flag that fixes it) computes, plus the largest batch per length bucket
and, on a target, each step's cost by the TPU compiler's program (lmprobe.planning.hlo_cost).

Batch sizes are rows per 'data' shard, the Scorer's unit (``batching.batch_size_for``).

    plan("opt-13b", dtype=jnp.bfloat16, mesh=make_mesh(1), hbm_bytes=parse_bytes("16GiB")).table()
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from lmprobe.engine import memory
from lmprobe.engine.batching import batch_size_for
from lmprobe.engine.memory import (
    UNITS,
    BucketFit,
    StepMemory,
    format_bytes,
    ran_out,
)
from lmprobe.engine.mesh import make_mesh
from lmprobe.errors import LmprobeError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, LAYERS, POSITIONS, VOCAB
from lmprobe.planning.hlo_cost import program_cost
from lmprobe.planning.targets import Target, target_devices

REPRESENTATIVE_BUCKETS = (128, 512, 2048)  # plus the largest (max_length)
SEARCH_CAP = 4096  # rows per data shard: the search never proposes more


# ------------------------------------------------------------------------------- devices and sizes


MAX_DEVICE_BYTES = 2**50  # 1 PiB: more memory than any one device has, by far


def parse_bytes(text: str | int | float, *, flag: str = "hbm") -> int:
    """Bytes from '16GiB', '32GiB', '80GB', '80e9', '512MiB', 2**30 (K/M/G/T alone: binary): a device's
    memory, between 1 byte and MAX_DEVICE_BYTES."""
    if isinstance(text, (int, float)):
        size = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).lower() not in UNITS:
            raise LmprobeError(f"`{flag}={text}` is not a memory size: write e.g. 16GiB, 32GiB, 80GB or 80e9")
        size = float(m.group(1)) * UNITS[m.group(2).lower()]
    if not 1 <= size <= MAX_DEVICE_BYTES:  # inf and nan too
        raise LmprobeError(f"`{flag}={text}` is not the memory of a device: give a size between 1 byte and 1 PiB, "
                           "e.g. 16GiB or 80GB")
    return int(size)


def _count(n: int) -> str:
    return f"{n / 1e9:.3f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"


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
    target: str | None = None  # the TPU slice compiled for (lmprobe.planning.targets), if any

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


class Planner(memory.Planner):
    """The engine's Planner (lmprobe.engine.memory), compiling for a TPU ``target`` where given: then each
    compiled step's cost (``StepCost``) beside its memory."""

    def __init__(self, hf: dict, dtype, where: str, target: Target | None = None):
        super().__init__(hf, dtype, where)
        self.target = target

    def step_cost(self, compiled, rows: int, length: int, devices: int, head: bool | None = None,
                  model: bool = True) -> StepCost | None:
        """The cost of a compiled step on the target (None without one)."""
        return None if self.target is None else self.cost(compiled, rows, length, devices, head=head, model=model)

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


def _buckets_for(max_length: int, buckets: Sequence[int] | None) -> list[int]:
    chosen = REPRESENTATIVE_BUCKETS if buckets is None else buckets
    return sorted({min(int(b), max_length) for b in chosen} | {max_length})


# ------------------------------------------------------------------------------- entry points


def target_mesh(t: Target, model_parallel: int = 1) -> Mesh:
    """The (data, model) mesh over the devices of TPU target ``t`` (compile only)."""
    return make_mesh(model_parallel, target_devices(t))


def planner_setup(config_or_name, dtype, mesh, strategy, max_length, offline, revision=None, target=None):
    """(Planner, mesh, max_length, name, source) of a model's config (``memory.planner_setup``): the settings
    checked, the mesh the target's (or ``mesh``, or this host's default one)."""
    mesh = mesh if mesh is not None else target_mesh(target) if target is not None else None
    return memory.planner_setup(config_or_name, dtype, mesh, strategy, max_length, offline, revision,
                                planner=lambda hf, dtype, where: Planner(hf, dtype, where, target))


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
    max_length) and max_length itself. ``target`` (lmprobe.planning.targets): compiled by the TPU
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
                         "(lmprobe.engine.memory.check_fits names the flag that fixes it)")
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


