"""The kernels' programs compiled for one TPU chip by libtpu on this host (no TPU needed): what the
eigen-decomposition costs to compile, and what SynTextBench's whitening holds, before and after.

    python -m experiments.bench.tpu_kernels [--target=v5e-8 --dims=512,1024 --width=5120 --levels=20 --n=8192]

Eigen-decomposition: jax's TPU default (QDWH divide and conquer) beside Jacobi rotations (what
kernels.symmetric_eigh asks for on TPU), one --dims matrix each: compile seconds and program size.
SynTextBench's accuracy and margin (Alg. 1 lines 4-7) at a model's --width, --levels x --n sentences
(90% train): all levels at once beside one level at a time (kernels.in_sequence_on_tpu): the TPU
compiler's memory per device, or its RESOURCE_EXHAUSTED. Compile times are this host's wall clock.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lmprobe import kernels
from lmprobe.engine.memory import format_bytes
from lmprobe.planning import targets


def compiled(fn, *args, **static):
    """(the compiled program or the compiler's out-of-memory message, wall seconds)."""
    start = time.perf_counter()
    try:
        out = jax.jit(fn, static_argnames=tuple(static)).lower(*args, **static).compile()
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        out = str(e).split("RESOURCE_EXHAUSTED: ")[-1].split("\n")[0]
    return out, time.perf_counter() - start


def all_levels_at_once(z, y, zt, yt, energy):
    params = kernels.fit_class_whitening(z, y, energy=energy)
    z_hat = kernels.apply_class_whitening(params, zt, yt)
    mu_1, mu_2 = params.centres[..., 0, :], params.centres[..., 1, :]
    half = 0.5 * (mu_1 - mu_2)
    return kernels.summarize_margins(kernels.linear_margins(z_hat, yt, 0.5 * (mu_1 + mu_2), half, half), yt)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="v5e-8")
    p.add_argument("--dims", default="512", help="comma-separated matrix sizes of the eigh comparison")
    p.add_argument("--width", type=int, default=5120, help="embedding width (opt-13b: 5120)")
    p.add_argument("--levels", type=int, default=20)
    p.add_argument("--n", type=int, default=8192, help="sentences a level, train and test")
    args = p.parse_args(argv)
    jax.config.update("jax_enable_compilation_cache", False)  # libtpu's compile-only client cannot read it back
    target = targets.target(args.target)
    mesh = Mesh(np.array(targets.target_devices(target)[:1]), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec())

    def arg(shape, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    print(f"compiled by libtpu for one {target.chip.prefix} chip ({format_bytes(target.chip.hbm_bytes)}), not run")
    jacobi = jax.lax.linalg.EighImplementation.JACOBI
    for d in map(int, args.dims.split(",")):
        for name, impl in (("QDWH (jax's TPU default)", None), ("Jacobi (lmprobe)", jacobi)):
            program, seconds = compiled(lambda x, impl=impl: jax.lax.linalg.eigh(x, implementation=impl),
                                        arg((d, d)))
            size = len(program.as_text()) / 1e6
            print(f"  eigh {d}x{d} by {name:<25} compile {seconds:7.1f} s, {size:.2f} MB of HLO")
    n_train = args.n * 9 // 10
    shapes = (arg((args.levels, n_train, args.width)), arg((args.levels, n_train), jnp.int32),
              arg((args.levels, args.n - n_train, args.width)), arg((args.levels, args.n - n_train), jnp.int32))
    for name, fn in (("all levels at once", all_levels_at_once),
                     ("one level at a time (lmprobe)", kernels.syntextbench_accuracy_margin)):
        program, seconds = compiled(fn, *shapes, energy=0.99)
        if isinstance(program, str):
            said = f"DOES NOT FIT: {program}"
        else:
            m = program.memory_analysis()
            said = (f"arguments {format_bytes(m.argument_size_in_bytes)}, temporaries "
                    f"{format_bytes(m.temp_size_in_bytes)}")
        print(f"  SynTextBench accuracy and margin, {args.levels} levels x {args.n} x {args.width}, {name}: "
              f"{said} (compile {seconds:.1f} s)")


if __name__ == "__main__":
    main()
