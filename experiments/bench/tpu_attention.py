"""Attention's memory on a TPU chip, by libtpu's compiler on this host (no TPU needed): Pallas' splash
kernel (what lmprobe traces for TPU) beside XLA's attention, over padded rows and over packed rows (a
shared prefix and its sequences: lmprobe.engine.packing), where the kernel runs twice, prefix then own
sequence, joined by log-sum-exps.

    python -m experiments.bench.tpu_attention [--target=v5e-8 --lengths=2048,8192 --heads=8 --head_dim=128]

One row a chip, bf16, causal; per program the TPU compiler's temporaries per device. A [T, T] fp32 score
matrix of one head is T * T * 4 bytes (8192: 256 MiB); packed rows' visibility T * T bytes.
"""

from __future__ import annotations

import argparse
import contextlib

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from lmprobe.engine.memory import format_bytes
from lmprobe.engine.mesh import make_mesh, tracing_on
from lmprobe.engine.packing import visibility
from lmprobe.models.layers import Mask, attention, packed_segments, traced_for
from lmprobe.planning import targets


def temporaries(mesh, t: int, heads: int, head_dim: int, *, xla: bool, packed: bool) -> int:
    """Bytes of temporaries per device of one row of ``t`` tokens a device (keys: padding, or packed
    rows' segments whose visibility the program builds)."""
    sharded = NamedSharding(mesh, PartitionSpec("data"))
    rows = mesh.shape["data"]
    qkv = [jax.ShapeDtypeStruct((rows, t, heads, head_dim), jnp.bfloat16, sharding=sharded) for _ in range(3)]

    def fn(q, k, v, keys):
        with traced_for("xla") if xla else contextlib.nullcontext(), \
                packed_segments(keys) if packed else contextlib.nullcontext():
            mask = (Mask(visibility(keys), causal=True, positions=jnp.zeros(keys.shape, jnp.int32)) if packed
                    else Mask(keys, causal=True))
            return attention(q, k, v, mask, scale=head_dim ** -0.5)

    with tracing_on(mesh):
        lowered = jax.jit(fn).lower(*qkv, jax.ShapeDtypeStruct((rows, t), jnp.int32, sharding=sharded))
    return lowered.compile().memory_analysis().temp_size_in_bytes


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="v5e-8")
    p.add_argument("--lengths", default="2048,8192")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head_dim", type=int, default=128)
    args = p.parse_args(argv)
    mesh = make_mesh(1, targets.target_devices(targets.target(args.target)))
    print(f"{args.target}: one row of T tokens a chip, {args.heads} heads of {args.head_dim}, bf16, causal; "
          "the TPU compiler's temporaries per device")
    print(f"{'T':>6} {'rows':<7} {'splash (Pallas)':>16} {'XLA':>12}")
    for t in map(int, args.lengths.split(",")):
        for packed in (False, True):
            pallas, xla = (temporaries(mesh, t, args.heads, args.head_dim, xla=x, packed=packed) for x in (False, True))
            print(f"{t:>6} {'packed' if packed else 'padded':<7} {format_bytes(pallas):>16} {format_bytes(xla):>12}")


if __name__ == "__main__":
    main()
