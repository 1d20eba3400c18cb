"""Attention traced for TPU is Pallas' splash attention inside shard_map: its numerics on CPU in Pallas'
interpreter against the XLA path, the choice keyed on the platform the step is traced for (a TPU
topology's on this CPU host), and the compiled v5e program's memory: no [T, T] scores at 8k tokens."""

import contextlib
import os

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from lmprobe.engine.mesh import make_mesh, tracing_on
from lmprobe.models.layers import Mask, attention, pallas_attention, traced_for

pytestmark = pytest.mark.multi_device  # meshes over several of the 8 CPU devices

B, T, N, D = 4, 128, 4, 32
BF16_TOL = 2e-2  # bf16 inputs: both paths round q.k and the probabilities to bf16 at different points


def inputs(kv: int, left: bool, dtype):
    rng = np.random.default_rng(kv)
    q = rng.normal(size=(B, T, N, D))
    k, v = (rng.normal(size=(B, T, kv, D)) for _ in range(2))
    lengths = np.array([T, 70, 5, 128 - 17])
    slots = np.arange(T)[None, :]
    keys = slots >= T - lengths[:, None] if left else slots < lengths[:, None]
    return (*(jnp.asarray(x, dtype) for x in (q, k, v)), jnp.asarray(keys))


CASES = {  # name -> (kv heads, left padding, causal, window)
    "causal_left_padding_gqa": (2, True, True, None),
    "causal_right_padding_window_mha": (4, False, True, 37),
    "encoder_padding_gqa": (2, False, False, None),
}


def primitives(fn, *args):
    def walk(jpr):
        for eqn in jpr.eqns:
            yield eqn.primitive.name
            for sub in jex.core.jaxprs_in_params(eqn.params):
                yield from walk(sub)

    return set(walk(jax.make_jaxpr(fn)(*args).jaxpr))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_splash_matches_xla_in_interpret_mode(case, dtype):
    kv, left, causal, window = CASES[case]
    q, k, v, keys = inputs(kv, left, dtype)
    mask = Mask(keys, causal=causal)
    want = jax.jit(lambda q, k, v: attention(q, k, v, mask, scale=D ** -0.5, window=window))(q, k, v)
    got = jax.jit(lambda q, k, v: pallas_attention(q, k, v, mask, scale=D ** -0.5, window=window,
                                                   interpret=True))(q, k, v)
    real = np.asarray(keys)  # padding queries' outputs are unused (they differ: see pallas_attention)
    tol = 1e-5 if dtype == "float32" else BF16_TOL
    got, want = (np.asarray(x, np.float32)[real] for x in (got, want))
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


def test_sharded_over_batch_and_heads_on_the_mesh():
    """Under tracing_on a (data 4, model 2) mesh: shard_map, rows over 'data', heads over 'model';
    keys heads first (a cache's layout) too."""
    mesh = make_mesh(model_parallel=2)
    q, k, v, keys = inputs(2, True, "float32")
    want = attention(q, k, v, Mask(keys, causal=True), scale=0.2)
    q, k, v, keys = (jax.device_put(x, NamedSharding(mesh, P("data"))) for x in (q, k, v, keys))

    def fn(q, k, v, keys):
        return pallas_attention(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), Mask(keys, causal=True),
                                scale=0.2, heads_first=True, interpret=True)

    with tracing_on(mesh):
        assert "shard_map" in primitives(fn, q, k, v, keys)
        got = jax.jit(fn)(q, k, v, keys)
    np.testing.assert_allclose(np.asarray(got)[np.asarray(keys)], np.asarray(want)[np.asarray(keys)], atol=1e-5)


def test_choice_keys_on_the_platform_traced_for():
    q, k, v, keys = inputs(2, True, "float32")
    full = Mask(keys, causal=True)

    def uses_pallas(fn, *args):
        return "pallas_call" in primitives(fn, *args)

    # a new function per trace: jax caches traces by function and shapes, not by traced_for's setting
    assert not uses_pallas(lambda q, k, v: attention(q, k, v, full, scale=1.0), q, k, v)  # traced for this CPU
    with traced_for("tpu"):
        assert uses_pallas(lambda q, k, v: attention(q, k, v, full, scale=1.0), q, k, v)
        assert uses_pallas(lambda q, k, v: attention(q, k, v, full, scale=1.0, window=8), q, k, v)
        # the XLA path: decoding at a traced slot, a score bias, rows not a multiple of 128, packed rows
        decode = Mask(keys, causal=True, offset=jnp.int32(T - 1))
        assert not uses_pallas(lambda q, k, v: attention(q[:, :1], k, v, decode, scale=1.0), q, k, v)
        assert not uses_pallas(lambda q, k, v: attention(q, k, v, full, scale=1.0, bias=jnp.zeros((1, N, T, T))),
                               q, k, v)
        assert not uses_pallas(lambda q, k, v: attention(q[:, :100], k[:, :100], v[:, :100],
                                                         Mask(keys[:, :100], causal=True), scale=1.0), q, k, v)
        packed = Mask(jnp.ones((B, T, T), bool), causal=True, positions=jnp.zeros((B, T), jnp.int32))
        assert not uses_pallas(lambda q, k, v: attention(q, k, v, packed, scale=1.0), q, k, v)


def v5e_mesh():
    pytest.importorskip("libtpu", reason="libtpu is not installed (the TPU compiler: pip install libtpu)")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # another process on this host may hold libtpu
    from jax.experimental import topologies

    return make_mesh(1, devices=topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices)


def compiled_temporaries(mesh, t: int, *, xla: bool) -> int:
    """Bytes of temporaries per device of causal attention over padded rows of ``t`` tokens, bf16,
    one row and 8 heads of 128 per v5e chip, as the TPU compiler plans them."""
    sharded = NamedSharding(mesh, P("data"))
    arrays = [jax.ShapeDtypeStruct((4, t, 8, 128), jnp.bfloat16, sharding=sharded) for _ in range(3)]

    def fn(q, k, v, keys):
        with traced_for("another") if xla else contextlib.nullcontext():  # "another": XLA's attention
            return attention(q, k, v, Mask(keys, causal=True), scale=128 ** -0.5)

    with tracing_on(mesh):
        lowered = jax.jit(fn).lower(*arrays, jax.ShapeDtypeStruct((4, t), jnp.int32, sharding=sharded))
    return lowered.compile().memory_analysis().temp_size_in_bytes


def test_v5e_program_holds_no_scores_at_8k_tokens():
    """The TPU compiler's temporaries for 8,192 tokens stay well below one head's [T, T] fp32 scores
    (T * T * 4 bytes); XLA's attention, compiled the same way, holds them (the check can fail)."""
    mesh = v5e_mesh()
    assert mesh.devices.flat[0].platform == "tpu"
    t = 8192
    assert compiled_temporaries(mesh, t, xla=False) < t * t * 4 / 8
    assert compiled_temporaries(mesh, t, xla=True) > t * t * 4


def test_a_model_traced_on_a_tpu_mesh_attends_with_the_kernel():
    """tracing_on(a v5e topology's mesh), as the engine compiles for a target, and nothing else: a
    Llama's scanned layers (sliding windows among them) lower to the Mosaic kernel on TPU, not on CPU."""
    from flax import nnx

    from lmprobe.models.llama import Llama, LlamaConfig

    cfg = LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=128,
                      layer_types=("sliding_attention", "full_attention"))
    graphdef, state = nnx.split(Llama(cfg, rngs=nnx.Rngs(0)))

    def forward(state, ids, mask):
        return nnx.merge(graphdef, state)(ids, mask).logits

    def lowered(mesh):
        sharded = NamedSharding(mesh, P("data"))
        params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P())),
                              state)
        with tracing_on(mesh):
            return jax.jit(forward).lower(params, *(jax.ShapeDtypeStruct((4, 256), jnp.int32, sharding=sharded),) * 2)

    assert "tpu_custom_call" in lowered(v5e_mesh()).as_text()
    assert "tpu_custom_call" not in lowered(make_mesh(1, devices=jax.devices()[:4])).as_text()
