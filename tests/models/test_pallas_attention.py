"""Attention traced for TPU is Pallas' splash attention inside shard_map: its numerics on CPU in Pallas'
interpreter against the XLA path, the choice keyed on the platform the step is traced for (a TPU
topology's on this CPU host), and the compiled v5e program's memory: no [T, T] scores at 8k tokens."""

import os

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from experiments.bench.tpu_attention import temporaries
from lmprobe.engine.mesh import make_mesh, tracing_on
from lmprobe.engine.packing import PADDING, visibility
from lmprobe.engine.steps import packed_hidden
from lmprobe.models.layers import Mask, attention, packed_segments, pallas_attention, traced_for

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


def packed_segments_rows() -> np.ndarray:
    """Segments of packed rows (lmprobe.engine.packing): a prefix and two sequences, two sequences with no
    prefix, one sequence filling the row, a prefix and one sequence then padding."""
    rows = [[0] * 50 + [1] * 30 + [2] * 20, [1] * 60 + [2] * 68, [0] * T, [0] * 10 + [1] * 5]
    return np.asarray([r + [PADDING] * (T - len(r)) for r in rows], np.int32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_packed_rows_match_xla_in_interpret_mode(dtype):
    """Packed rows: the two passes (prefix, own segment) joined by their log-sum-exps give XLA's attention over
    the [B, T, T] visibility, on every real query (grouped-query heads)."""
    q, k, v, _ = inputs(2, False, dtype)
    segments = jnp.asarray(packed_segments_rows())
    mask = Mask(visibility(segments), causal=True, positions=jnp.zeros((B, T), jnp.int32))
    want = jax.jit(lambda q, k, v: attention(q, k, v, mask, scale=D ** -0.5))(q, k, v)

    def packed(q, k, v, segments):
        with packed_segments(segments):
            return pallas_attention(q, k, v, Mask(visibility(segments), causal=True), scale=D ** -0.5, interpret=True)

    got = jax.jit(packed)(q, k, v, segments)
    real = np.asarray(segments) != PADDING
    tol = 1e-5 if dtype == "float32" else BF16_TOL
    np.testing.assert_allclose(*(np.asarray(x, np.float32)[real] for x in (got, want)), atol=tol, rtol=tol)


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
        assert not uses_pallas(lambda q, k, v: attention(q, k, v, packed, scale=1.0), q, k, v)  # segments unknown

        def with_segments(q, k, v, window=None):
            with packed_segments(jnp.zeros((B, T), jnp.int32)):
                return attention(q, k, v, packed, scale=1.0, window=window)

        assert uses_pallas(with_segments, q, k, v)
        assert not uses_pallas(lambda q, k, v: with_segments(q, k, v, window=8), q, k, v)  # windows: in positions


def v5e_mesh():
    pytest.importorskip("libtpu", reason="libtpu is not installed (the TPU compiler: pip install libtpu)")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # another process on this host may hold libtpu
    from jax.experimental import topologies

    return make_mesh(1, devices=topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices)


def test_v5e_program_holds_no_scores_at_8k_tokens():
    """The TPU compiler's temporaries for 8,192 tokens stay well below one head's [T, T] fp32 scores
    (T * T * 4 bytes); XLA's attention, compiled the same way, holds them (the check can fail). Packed rows
    too: neither their scores nor their [T, T] visibility (T * T bytes) is built."""
    mesh = v5e_mesh()
    assert mesh.devices.flat[0].platform == "tpu"
    t = 8192

    def compiled_temporaries(xla: bool, packed: bool = False) -> int:  # one row a chip, 8 heads of 128, bf16
        return temporaries(mesh, t, 8, 128, xla=xla, packed=packed)

    assert compiled_temporaries(xla=False) < t * t * 4 / 8
    assert compiled_temporaries(xla=True) > t * t * 4
    assert compiled_temporaries(xla=False, packed=True) < t * t / 8
    assert compiled_temporaries(xla=True, packed=True) > t * t * 4


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

    def packed(state, ids, segments, positions):  # the engine's packed rows: the full-attention layer's kernel
        return packed_hidden(nnx.merge(graphdef, state), ids, segments, positions)

    def lowered(mesh, fn=forward, arrays=2):
        sharded = NamedSharding(mesh, P("data"))
        params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P())),
                              state)
        with tracing_on(mesh):
            return jax.jit(fn).lower(params, *(jax.ShapeDtypeStruct((4, 256), jnp.int32, sharding=sharded),) * arrays)

    assert "tpu_custom_call" in lowered(v5e_mesh()).as_text()
    assert "tpu_custom_call" in lowered(v5e_mesh(), packed, 3).as_text()
    assert "tpu_custom_call" not in lowered(make_mesh(1, devices=jax.devices()[:4])).as_text()
