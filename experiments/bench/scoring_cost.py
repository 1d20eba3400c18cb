"""The scoring step's efficiency by the TPU compiler's program, and where its estimated time goes.

    python -m experiments.bench.scoring_cost --model=pythia-1b --target=v5e-8 [--rows=8 --length=2048 --top=12]

Compiles (ahead of time, libtpu's compiler on this host; no TPU needed) the step ``experiments.plan
--target`` plans, ``token_logprobs`` (an encoder's embedding), bf16, fsdp, at ``--rows`` a device x
``--length`` tokens, once, and prints what the plan prints of its cost (compiled / useful FLOPs, the
cost model's ESTIMATE of a step, tokens/s and MFU: a roofline, never a measurement), the bytes a
device accessed in all memories and in HBM, then the estimate split by the JAX operation each
compiled operation came from (its metadata's op_name, the path's last names), costliest first.
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import jax.numpy as jnp

from lmprobe.planning import targets
from lmprobe.planning.hlo_cost import program_cost
from lmprobe.planning.plan import planner_setup

GiB = 2**30


def source_key(source: str) -> str:
    """A compiled operation's JAX origin, short: the op_name's last two names, without jit(...) wrappers."""
    names = [n for n in re.sub(r"\bjit\([^)]*\)/?", "", source).split("/") if n]
    return "/".join(names[-2:]) or "(no metadata)"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pythia-1b")
    ap.add_argument("--target", default="v5e-8")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--sharding", default="fsdp")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)

    target = targets.target(args.target)
    planner, mesh, length, _, _ = planner_setup(args.model, jnp.bfloat16, None, args.sharding, args.length, True,
                                                target=target)
    start = time.perf_counter()
    compiled = planner.lower(mesh, args.sharding, args.rows, length).compile()
    seconds = time.perf_counter() - start
    devices = mesh.devices.size
    cost = planner.cost(compiled, args.rows * mesh.shape["data"], length, devices)
    chip = target.chip
    ops: list = []
    program = program_cost(compiled.as_text(), peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth, ops=ops)
    memory = compiled.memory_analysis()
    print(f"{args.model} on {args.target} ({devices} devices, {args.sharding}), bf16, {args.rows} rows a device x "
          f"{length} tokens, {planner.step_name} (compiled in {seconds:.0f} s); "
          f"temporaries {memory.temp_size_in_bytes / GiB:.2f} GiB a device")
    print(f"compiled / useful FLOPs {cost.overhead:.3f}; per device {cost.bytes_accessed / GiB:.1f} GiB accessed, "
          f"{program.hbm_bytes / GiB:.1f} GiB of them in HBM, {cost.collective_bytes / GiB:.2f} GiB by collectives")
    print(f"ESTIMATE (TPU cost model, not measured): {cost.seconds * 1e3:.0f} ms a step, "
          f"{cost.tokens / cost.seconds:,.0f} tokens/s, MFU {cost.mfu:.0%}"
          + (f" ({cost.kernel_flops / devices / chip.peak_flops * 1e3:.0f} ms of it Pallas attention at peak)"
             if cost.kernel_flops else ""))
    groups: dict = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
    for op in ops:
        g = groups[source_key(op.source)]
        g[0] += op.seconds
        g[1] += op.flops
        g[2] += op.bytes_accessed
        g[3] += op.hbm_bytes
        g[4] += 1
    bound = sum(op.seconds for op in ops if op.bytes_accessed / chip.hbm_bandwidth > op.flops / chip.peak_flops)
    print(f"of the {program.seconds * 1e3:.0f} ms outside Pallas kernels, {bound * 1e3:.0f} ms in operations bound "
          f"by bytes; by JAX operation (ms, TFLOP, GiB accessed, GiB in HBM, compiled ops):")
    for key, (s, f, b, h, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {s * 1e3:8.1f} ms {f / 1e12:8.2f} {b / GiB:8.1f} {h / GiB:8.1f} {n:5d}  {key}")


if __name__ == "__main__":
    main()
