"""Compile-only runs: a front end's queries traced and compiled ahead of time, no weight read, nothing run.

    scorer = compile_only_scorer("opt-13b", target=targets.target("v5e-8"), batch_size=16)
    scorer.embed(texts, pooling="last")        # compiles each (step, batch shape) once; returns zeros
    report = compile_report(scorer)            # per step: shapes, calls, memory per device, fit, cost

The Scorer is the one a run builds (the same queries, tokenizer, buckets and batch geometry), over the
model built abstractly (``nnx.eval_shape``: jax.ShapeDtypeStruct parameters sharded on the mesh as a
run places them) on the mesh of a TPU target (lmprobe.planning.targets: libtpu's compiler, no TPU
needed) or of this host's devices. Its runner (``CompileOnlyRunner``) lowers every step a query
dispatches with abstract arguments, compiles each distinct (step, shapes) once through the memory
plan's path (``plan.Planner.compiled``: the compiler's memory analysis, RESOURCE_EXHAUSTED as 'does
not fit', the cost model's estimate on a target), counts its calls, and hands the query zeros of the
step's output shapes, so that a method's own code decides which steps, shapes and how many calls.
Host-side results are therefore meaningless: a compile-only run reports steps, never scores.

Without the model's tokenizer on this host (a hub model not in the cache), ``WordCountTokenizer``
stands in: token counts estimated from word counts, said in the report.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lmprobe import log as _log
from lmprobe.engine.memory import StepMemory, device_hbm, format_bytes
from lmprobe.engine.mesh import DATA, MODEL, batch_sharding, make_mesh, replicated
from lmprobe.engine.runner import Runner, Step
from lmprobe.engine.scorer import Scorer
from lmprobe.errors import LmprobeError
from lmprobe.planning.plan import Planner, base_plan, planner_setup
from lmprobe.planning.targets import Target, target_devices

log = _log.get("lmprobe.planning.aot")
NO_HEAD = ("embed", "embed_inputs", "hidden_at")  # steps that never run the LM head (cost: useful FLOPs)
TOKENS_PER_WORD = 1.5  # WordCountTokenizer: BPE tokens per word or punctuation mark, rounded up (an estimate)
_WORD = re.compile(r"\w+|[^\w\s]")


class WordCountTokenizer:
    """Stands in for a tokenizer this host does not have: ceil(TOKENS_PER_WORD x words) + 1 ids (all 1)
    per text, so that the batch geometry follows the texts' lengths; ids are never read."""

    eos_token_id = None
    pad_token_id = 0
    estimated = True

    def __call__(self, texts, **_):
        texts = [texts] if isinstance(texts, str) else list(texts)
        return {"input_ids": [[1] * (math.ceil(TOKENS_PER_WORD * len(_WORD.findall(t))) + 1) for t in texts]}

    def encode(self, text, **_):
        return self([text])["input_ids"][0]


@dataclasses.dataclass
class CompiledStep:
    """One (step, argument shapes) a compile-only run met: how many calls, the compiler's memory per
    device (``memory``; None where the backend gives no analysis) and, on a target, its cost."""

    name: str
    static: dict
    shapes: list[str]  # 'int32[128,32]' per array argument
    calls: int
    memory: StepMemory | None
    model_step: bool = True  # False: a method's own program (Runner.program), no hand count of useful FLOPs

    def fits(self, hbm: int | None) -> bool | None:
        m = self.memory
        if m is None or (hbm is None and not m.exhausted):
            return None
        return not m.exhausted and m.peak_bytes <= hbm

    @property
    def seconds(self) -> float | None:
        """The cost model's estimate of one call (None: no target, or a count not trusted)."""
        c = self.memory.cost if self.memory is not None else None
        return c.seconds if c is not None and self.model_step and 0.5 < c.overhead < 2 else None

    def to_dict(self, hbm: int | None) -> dict:
        out = {"step": self.name, "static": {k: repr(v) if not isinstance(v, int | float | str | bool | None)
                                             else v for k, v in self.static.items()},
               "shapes": self.shapes, "calls": self.calls, "fits": self.fits(hbm), "model_step": self.model_step}
        m = self.memory
        if m is not None:
            if self.model_step:  # a program's arguments are whatever it takes: no rows or length
                out.update(rows_per_device=m.rows, global_rows=m.global_rows, length=m.length)
            out.update(compile_seconds=round(m.compile_seconds, 3), exhausted=m.exhausted,
                       argument_bytes=m.argument_bytes, output_bytes=m.output_bytes, temp_bytes=m.temp_bytes,
                       peak_bytes=m.peak_bytes)
            if m.cost is not None:
                counted = self.model_step
                out["cost"] = {**dataclasses.asdict(m.cost), "overhead": m.cost.overhead if counted else None,
                               "mfu": m.cost.mfu if counted else None,
                               "estimate": "the TPU cost model's estimate, not a measurement"}
                out["estimated_seconds"] = self.seconds
                out["estimated_total_seconds"] = None if self.seconds is None else self.seconds * self.calls
        return out


@dataclasses.dataclass(frozen=True)
class _Step:
    """What ``CompileOnlyRunner.jit`` gives a query: the runner's step, its name and statics."""

    name: str
    static: dict
    step: Step

    def __call__(self, *args):
        raise LmprobeError(f"a compile-only run does not execute steps ({self.name}): it only compiles them")


class CompileOnlyRunner(Runner):
    """A Runner whose ``run`` compiles each step it is handed, once per (step, argument shapes), and
    returns zeros of its outputs; ``put`` makes abstract arrays sharded as a run's batches are."""

    @classmethod
    def of(cls, runner: Runner, planner: Planner) -> CompileOnlyRunner:
        new = cls.__new__(cls)
        new.__dict__.update(runner.__dict__)
        new.planner, new.compiled = planner, {}
        return new

    def jit(self, name: str, fn, **static):
        return _Step(name, dict(static), super().jit(name, fn, **static))

    def put(self, *arrays) -> tuple:
        return tuple(jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype,
                                          sharding=batch_sharding(self.mesh, np.ndim(a), self.data_axes))
                     for a in arrays)

    def run(self, step, calls, readback=None) -> list:
        return [self.compile(step, args) for args in calls]

    def fetch(self, outputs):
        """Zeros where an output is abstract (a ``mesh_program``'s); step outputs are zeros already."""
        return jax.tree.map(lambda o: np.zeros(o.shape, o.dtype) if isinstance(o, jax.ShapeDtypeStruct) else o,
                            outputs)

    def replicate(self, x):
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=replicated(self.mesh))

    def same_kind(self, runner: Runner) -> CompileOnlyRunner:
        new = CompileOnlyRunner.of(runner, self.planner)
        new.compiled = self.compiled  # one report: its steps are this model's run's
        return new

    def in_order(self, outputs: list, source: np.ndarray):
        return jax.tree.map(lambda *parts: np.zeros((len(source), *parts[0].shape[1:]), parts[0].dtype), *outputs)

    def compile(self, step: _Step, args: tuple):
        """Zeros of ``step``'s outputs for ``args``; the step compiled the first time these shapes come."""
        args = tuple(self._abstract(a) for a in args)
        arrays = [a for a in args if a is not None]
        key = (step.name, repr(sorted(step.static.items())), tuple(_shapes(arrays)))
        if key not in self.compiled:
            first = arrays[0] if arrays else None
            rows, length = (first.shape[0], first.shape[1]) if first is not None and len(first.shape) >= 2 else (
                (first.shape[0], 1) if first is not None and first.shape else (1, 1))
            self._record(key, step.name, step.static, lambda: step.step.lower(*args), self.mesh,
                         max(1, rows // self.data_parallel), length, global_rows=rows,
                         head=step.name not in NO_HEAD)
        return self._counted(key)

    def program(self, name: str, fn, *args, **static):
        """Zeros of ``fn``'s outputs; ``fn`` compiled the first time these shapes come, for one device
        of the mesh (where a run's host-sized programs go: its process's default device). Its cost has
        no hand count of useful FLOPs, so no estimate enters the run's total."""
        one = NamedSharding(Mesh(np.array(list(self.mesh.devices.flat)[:1]), ("one",)), PartitionSpec())
        args = jax.tree.map(lambda a: a if isinstance(a, int | float | bool) else
                            jax.ShapeDtypeStruct(np.shape(a), a.dtype, sharding=one), args)
        leaves = [a for a in jax.tree.leaves(args) if isinstance(a, jax.ShapeDtypeStruct)]
        jitted = fn if hasattr(fn, "lower") else jax.jit(fn, static_argnames=tuple(static))
        lowered = jitted.lower(*args, **static)  # Python scalars may be static: the program itself is the key
        key = (name, repr(sorted(static.items())), tuple(_shapes(leaves)), zlib.crc32(lowered.as_text().encode()))
        if key not in self.compiled:
            self._record(key, name, static, lambda: lowered, one.mesh, 1, 1, global_rows=1, model=False)
        return self._counted(key)

    def mesh_program(self, name: str, fn, *args):
        """``fn``'s outputs, abstract (jax.ShapeDtypeStruct sharded as its ``out_shardings`` say, else
        replicated; ``fetch`` reads them as zeros); ``fn`` compiled for the mesh, its arguments sharded as
        given (host arrays replicated), the first time these shapes come."""
        args = jax.tree.map(self._placed, args)
        leaves = jax.tree.leaves(args)
        key = (name, "", tuple(_shapes(leaves)))
        if key not in self.compiled:
            lowered = fn.lower(*args)
            self._record(key, name, {}, lambda: lowered, self.mesh, 1, 1, global_rows=1, model=False,
                         outputs=lambda o: jax.ShapeDtypeStruct(o.shape, o.dtype,
                                                                sharding=o.sharding or replicated(self.mesh)))
        return self._counted(key)

    def _placed(self, a):
        """``a`` abstract, where it is (its sharding), or replicated when it has none (a host array)."""
        sharding = getattr(a, "sharding", None)
        if not isinstance(a, jax.ShapeDtypeStruct | jax.Array) or sharding is None or (
                isinstance(a, jax.Array) and not a.committed):
            sharding = replicated(self.mesh)
        return jax.ShapeDtypeStruct(np.shape(a), a.dtype, sharding=sharding)

    def _record(self, key, name: str, static: dict, lower, mesh, rows: int, length: int,
                outputs=lambda o: np.zeros(o.shape, o.dtype), **how) -> None:
        """``lower()`` compiled through the plan's path (its memory and, on a target, cost), kept under ``key``
        with what calls get: ``outputs`` of each of its outputs' (abstract) leaves, zeros by default."""
        lowered = lower()
        cache = jax.config.jax_enable_compilation_cache
        if self.planner.target is not None:  # libtpu's compile-only client cannot read back cached programs
            jax.config.update("jax_enable_compilation_cache", False)
        try:
            memory = self.planner.compiled(lowered, mesh, rows, length, **how)
        finally:
            jax.config.update("jax_enable_compilation_cache", cache)
        self.compiled[key] = (CompiledStep(name, dict(static), list(key[2]), 0, memory, how.get("model", True)),
                              jax.tree.map(outputs, lowered.out_info))
        took = "" if memory is None else f" in {memory.compile_seconds:.1f} s"
        shapes = key[2] if len(key[2]) <= 4 else [*key[2][:4], f".. ({len(key[2])} arrays)"]
        log.info(f"compiled {name} {' '.join(shapes)}{took}"
                 + (": DOES NOT FIT (the compiler ran out of memory)" if memory is not None and memory.exhausted
                    else ""))

    def _counted(self, key):
        entry, zeros = self.compiled[key]
        entry.calls += 1
        return zeros

    def _abstract(self, a):
        if a is None or isinstance(a, jax.ShapeDtypeStruct):
            return a
        a = np.asarray(a)
        sharding = replicated(self.mesh) if a.ndim == 0 else batch_sharding(self.mesh, a.ndim, self.data_axes)
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)


def _shapes(arrays) -> list[str]:
    """'int32[128,32]' per array."""
    return [f"{jnp.dtype(a.dtype).name}[{','.join(map(str, a.shape))}]" for a in arrays]


def tokenizer_for(name: str, *, offline: bool | None = None, revision: str | None = None):
    """The model's own tokenizer where this host has it without downloading (a local or embedded model,
    a hub-cache snapshot), else a WordCountTokenizer. Reads no weights."""
    from lmprobe.checkpoints import hub
    from lmprobe.checkpoints.aliases import lookup
    from lmprobe.checkpoints.resolve import HUB_ID, resolve
    from lmprobe.checkpoints.variants import split_name

    base = split_name(name)[0]
    repo = lookup(base) or (base if HUB_ID.fullmatch(base) else None)
    local = os.path.exists(os.path.expanduser(base)) or repo is None
    if local or hub.cached_snapshot(repo, revision) is not None:
        try:
            return resolve(base, offline=True, revision=revision).tokenizer()
        except LmprobeError as e:
            log.warning(f"{name}: no tokenizer here ({e}); token counts estimated from word counts")
    return WordCountTokenizer()


def compile_only_scorer(name: str, *, target: Target | None = None, dtype=None, model_parallel: int = 1,
                        strategy: str = "fsdp", batch_size: int = 16, max_tokens: int | None = None,
                        max_length: int | None = None, hbm_bytes: int | None = None,
                        offline: bool | None = None, revision: str | None = None, tokenizer=None) -> Scorer:
    """A Scorer of ``name`` whose queries compile their steps for ``target`` (None: this host's devices)
    instead of running them: the model from its config alone, bfloat16 on a target unless ``dtype``.
    ``compile_report(scorer)`` then says what was compiled."""
    from lmprobe.checkpoints.variants import split_name

    base, variants = split_name(name)
    mesh = make_mesh(model_parallel, target_devices(target) if target is not None else None)  # None: a run's own
    devices = list(mesh.devices.flat)
    dtype = jnp.dtype(dtype if dtype is not None else jnp.bfloat16 if target is not None or
                      devices[0].platform != "cpu" else jnp.float32)
    planner, mesh, max_length, label, source = planner_setup(base, dtype, mesh, strategy, max_length, offline, revision,
                                                      target)
    model = nnx.merge(planner.graphdef, planner.sharded_state(mesh, strategy))
    if tokenizer is None:
        tokenizer = tokenizer_for(name, offline=offline, revision=revision)
    scorer = Scorer(model, tokenizer, mesh=mesh, batch_size=batch_size, max_tokens=max_tokens, max_length=max_length,
                    strategy=strategy, identity={"name": name, "config": source, "dtype": dtype.name,
                                                 "variants": [f"@{v}" for v in variants]})
    scorer.runner = CompileOnlyRunner.of(scorer.runner, planner)
    hbm = hbm_bytes if hbm_bytes is not None else target.chip.hbm_bytes if target is not None else device_hbm(devices)
    scorer.compile_only = dict(name=name, label=label, source=source, planner=planner, target=target, hbm=hbm,
                               strategy=strategy, variants=variants, started=time.perf_counter())
    return scorer


@dataclasses.dataclass
class CompileReport:
    """Every (step, shapes) a compile-only run compiled, per device; ``table()`` for a terminal,
    ``to_dict()`` for results.json."""

    model: str
    config: str
    target: str | None
    platform: str
    devices: int
    hosts: int
    mesh_shape: dict
    strategy: str
    dtype: str
    batch_size: int
    hbm_bytes: int | None
    param_bytes_per_device: int
    steps: list[CompiledStep]
    seconds: float
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        verdicts = [s.fits(self.hbm_bytes) for s in self.steps]
        if any(v is False for v in verdicts):
            return False
        return True if verdicts and all(v is True for v in verdicts) else None

    @property
    def estimated_seconds(self) -> float | None:
        """The estimated time of every call of the steps that have an estimate (the TPU cost model's)."""
        timed = [s for s in self.steps if s.seconds is not None]
        return sum(s.seconds * s.calls for s in timed) if timed else None

    @property
    def untimed(self) -> list[CompiledStep]:
        """Model steps without a trusted estimate (compiled FLOPs far from the hand count)."""
        return [s for s in self.steps if s.model_step and s.seconds is None]

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "steps"}
        d.update(compile_only=True, fits=self.fits, steps=[s.to_dict(self.hbm_bytes) for s in self.steps],
                 estimated_seconds=self.estimated_seconds,
                 estimate="times are the TPU cost model's estimates, not measurements")
        return d

    def table(self) -> str:
        g = format_bytes
        where = self.target or f"{self.devices} {self.platform} device(s)"
        mesh = " x ".join(f"{k}={v}" for k, v in self.mesh_shape.items())
        hbm = f"{g(self.hbm_bytes)} per device" if self.hbm_bytes else "no memory limit known (report only)"
        width = max([15] + [len(s.name) + 3 for s in self.steps])  # room for a '#2' label
        lines = [f"compiled, not run: {self.model} for {where} ({self.devices} devices on {self.hosts} "
                 f"host{'s' * (self.hosts > 1)}; mesh {mesh}, sharding {self.strategy}, {self.dtype}; {hbm}; "
                 f"config {self.config})",
                 f"  parameters {g(self.param_bytes_per_device)} per device; batch_size {self.batch_size} rows per "
                 f"device; {len(self.steps)} step shape{'s' * (len(self.steps) != 1)} compiled in {self.seconds:.0f} s",
                 f"  {'step':<{width}} {'arguments (global shapes)':<34} {'calls':>6} {'compile':>8} {'temp/dev':>11} "
                 f"{'peak/dev':>11} {'fits':>4} {'FLOPs/useful':>12} {'est. ms':>8} {'est. total':>10}"]
        variants: dict[str, list[str]] = {}  # a step jitted with several statics: each its own label
        for s in self.steps:
            statics = ", ".join(f"{k}={v}" for k, v in sorted(s.static.items()))
            if statics not in variants.setdefault(s.name, []):
                variants[s.name].append(statics)
        for s in self.steps:
            m, fit, est = s.memory, s.fits(self.hbm_bytes), s.seconds
            c = m.cost if m is not None else None
            shapes = " ".join(s.shapes) if len(s.shapes) < 3 else f"{s.shapes[0]} .. {s.shapes[-1]}"
            kinds = variants[s.name]
            label = s.name if len(kinds) == 1 else (
                f"{s.name}#{kinds.index(', '.join(f'{k}={v}' for k, v in sorted(s.static.items()))) + 1}")
            lines.append(
                f"  {label:<{width}} {shapes if len(shapes) <= 34 else shapes[:31] + '...':<34} {s.calls:>6} "
                f"{(m.compile_seconds if m else 0):>7.1f}s {g(m.temp_bytes if m else None):>11} "
                f"{('OOM' if m and m.exhausted else g(m.peak_bytes if m else None)):>11} "
                f"{'-' if fit is None else 'yes' if fit else 'NO':>4} "
                f"{'-' if c is None else 'n/a' if not s.model_step else f'{c.overhead:.2f}x':>12} "
                f"{'-' if est is None else f'{est * 1e3:.3g}':>8} "
                f"{'-' if est is None else f'{est * s.calls:.3g} s':>10}")
        lines += [f"  {name}#{i + 1}: {statics}" for name, kinds in variants.items() if len(kinds) > 1
                  for i, statics in enumerate(kinds)]
        total = self.estimated_seconds
        if total is not None:
            missing = self.untimed
            lines.append(f"  ESTIMATE (TPU cost model, not measured): the steps' calls take {total:.3g} s of device "
                         "time (compute and memory traffic; no host work, input feeding or compiles)"
                         + (f", {len(missing)} step shape(s) without an estimate (compiled FLOPs not within 0.5-2x "
                            "of the hand count)" if missing else ""))
        verdict = self.fits
        lines.append("  verdict: " + ("every step fits" if verdict else "some step DOES NOT FIT" if verdict is False
                                      else "no memory limit known: report only"))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def compile_report(scorer: Scorer, notes=()) -> CompileReport:
    """What ``scorer`` (compile_only_scorer) compiled so far."""
    info = scorer.compile_only
    runner: CompileOnlyRunner = scorer.runner
    mesh, target = runner.mesh, info["target"]
    planner: Planner = info["planner"]
    base = base_plan(planner, mesh, info["label"], info["source"], info["strategy"], scorer.batch_size,
                      scorer.max_length, info["hbm"])
    devices = list(mesh.devices.flat)
    notes = list(notes)
    if isinstance(scorer.tokenizer, WordCountTokenizer):
        notes.append(f"{info['name']}'s tokenizer is not on this host: token counts estimated as "
                     f"{TOKENS_PER_WORD} x words + 1, so the length buckets are estimates")
    if info["variants"]:
        notes.append(f"variants {', '.join('@' + v for v in info['variants'])} are not applied: the steps are "
                     "compiled for the base model's parameters")
    if target is None and devices[0].platform == "cpu":
        notes.append("compiled by XLA's CPU compiler for this host's devices: pass --target=v5e-8 (or another "
                     "TPU slice) for the TPU compiler's verdict and cost")
    return CompileReport(model=info["name"], config=info["source"], target=None if target is None else target.label,
                         platform=devices[0].platform, devices=len(devices),
                         hosts=target.hosts if target is not None else jax.process_count(),
                         mesh_shape={DATA: mesh.shape[DATA], MODEL: mesh.shape[MODEL]}, strategy=info["strategy"],
                         dtype=planner.dtype.name, batch_size=scorer.batch_size, hbm_bytes=info["hbm"],
                         param_bytes_per_device=base.param_bytes_per_device,
                         steps=[entry for entry, _ in runner.compiled.values()],
                         seconds=time.perf_counter() - info["started"], notes=notes)
