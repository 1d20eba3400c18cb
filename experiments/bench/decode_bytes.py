"""Bytes a decoding step moves in the TPU cost model, against the bytes of weights plus KV cache.

    python -m experiments.bench.decode_bytes [--model=smollm2-135m --target=v5e-8 --devices=1 --rows=16
        --prompt=990 --new_tokens=49 --sharding=tp --standalone]

Compiles (ahead of time, libtpu's compiler on this host; no TPU needed) the program lmprobe runs for
``Scorer.generate``: ``engine.generation.generate`` on ``--rows`` left-padded prompts of ``--prompt``
tokens and ``--new_tokens`` new ones (a cache of prompt + new slots), bf16, on the first ``--devices``
devices of ``--target`` (rows split over them; ``--sharding=tp`` with one model shard: weights
replicated). One decoding step is one trip of its decoding loop, counted by ``lmprobe.planning.hlo_cost`` (each
layer of the inner layer scan counted, not once): bytes accessed in all memories, of them in HBM (the
compiler keeps some buffers in on-chip VMEM), and by collectives. ``--standalone`` compiles one step
alone instead ([rows, 1] tokens, the cache donated): the loop's hoisted work (the tied embedding's
transpose for the token lookup) and the cache's round trip through VMEM fall on the step.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from lmprobe.checkpoints.model_config import hf_config
from lmprobe.engine import generation
from lmprobe.engine.mesh import batch_sharding, make_mesh, tracing_on
from lmprobe.models.base import empty_cache
from lmprobe.planning import targets
from lmprobe.planning.hlo_cost import program_cost, while_loops
from lmprobe.planning.plan import Planner


def decoding_loop(text: str, layers: int):
    """The decoding loop of a compiled generation program: the loop whose body runs the layer scan."""
    loops = while_loops(text)
    return next(loop for loop in loops if any(i.computation == loop.body and i.trips == layers for i in loops))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--target", default="v5e-8")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=990)
    ap.add_argument("--new_tokens", type=int, default=49)
    ap.add_argument("--sharding", default="tp", choices=("tp", "fsdp"))
    ap.add_argument("--standalone", action="store_true")
    args = ap.parse_args(argv)

    target = targets.target(args.target)
    mesh = make_mesh(1, targets.target_devices(target)[:args.devices])
    hf, _ = hf_config(args.model, offline=True)
    planner = Planner(hf, jnp.bfloat16, args.model, target)
    state, graphdef = planner.sharded_state(mesh, args.sharding), planner.graphdef
    rows, slots = args.rows, args.prompt + args.new_tokens

    def arg(shape, dtype, spec=None):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh, len(shape)) if spec is None
                                    else NamedSharding(mesh, spec))

    cache = jax.eval_shape(lambda: empty_cache(planner.cfg, rows, slots, jnp.bfloat16))
    layers = jax.tree.leaves(cache)[0].shape[0]
    start = time.perf_counter()
    if args.standalone:
        cache = jax.tree.map(lambda a: arg(a.shape, a.dtype, PartitionSpec(None, "data")), cache)

        def step(state, token, mask, cache, index):
            with tracing_on(mesh):
                model = nnx.merge(graphdef, state)
                out = model(token, mask, cache=cache, cache_index=index, compute_logits=False)
                return model.logits(out.last_hidden_state[:, 0]), out.cache

        compiled = jax.jit(step, donate_argnums=(3,)).lower(
            state, arg((rows, 1), jnp.int32), arg((rows, slots), jnp.int32), cache,
            arg((), jnp.int32, PartitionSpec())).compile()
        body = None
    else:
        def generate(state, *a):
            with tracing_on(mesh):
                return generation.generate(nnx.merge(graphdef, state), *a, max_new_tokens=args.new_tokens, top_k=0,
                                           greedy=True)

        ids, scalar = arg((rows, args.prompt), jnp.int32), PartitionSpec()
        compiled = jax.jit(generate).lower(state, ids, ids, arg((rows,), jnp.int32), arg((), jnp.int32, scalar),
                                           arg((), jnp.float32, scalar), arg((), jnp.float32, scalar),
                                           arg((), jnp.int32, scalar)).compile()
        body = decoding_loop(compiled.as_text(), layers).body
    seconds = time.perf_counter() - start
    chip = target.chip
    cost = program_cost(compiled.as_text(), peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth,
                        computation=body)
    weights = planner.bytes_per_device(mesh, args.sharding)
    kv = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(cache)) / args.devices
    ref = weights + kv
    print(f"{args.model} on {args.devices} device(s) of {args.target} ({args.sharding}), {rows} rows, {slots} cache "
          f"slots, {'one step compiled alone' if args.standalone else 'one trip of generate decoding loop'} "
          f"(compiled in {seconds:.1f} s)")
    print(f"per device: weights {weights / 1e6:.1f} MB + KV cache {kv / 1e6:.1f} MB = {ref / 1e6:.1f} MB")
    print(f"bytes accessed {cost.bytes_accessed / 1e6:.1f} MB = {cost.bytes_accessed / ref:.2f}x, of them in HBM "
          f"{cost.hbm_bytes / 1e6:.1f} MB = {cost.hbm_bytes / ref:.2f}x; collectives {cost.collective_bytes / 1e6:.1f} "
          f"MB; ESTIMATE (TPU cost model, not measured) {cost.seconds * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
