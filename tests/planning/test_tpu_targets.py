"""Compile before you rent: TPU targets by name, the engine's step compiled by libtpu's compiler for
v5e-8 and a multi-host v5e-32 (no TPU needed), the plan's verdict against the compiler's, loop trip
counts in the cost, and the one-line errors. Tiny configs: a compile takes seconds."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lmprobe.engine import memory
from lmprobe.engine.mesh import make_mesh
from lmprobe.errors import LmprobeError
from lmprobe.planning import plan as P
from lmprobe.planning import targets
from lmprobe.planning.hlo_cost import program_cost

needs_libtpu = pytest.mark.skipif(not targets.libtpu_available(),
                                  reason="libtpu is not installed (the test extra installs it)")
TINY = dict(model_type="gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=128)
DECODER = dict(model_type="llama", vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True,
               max_position_embeddings=1024)
# one layer whose MLP is 2**21 wide: a row of 128 tokens holds 1.5 GiB of activations per device
WIDE = dict(model_type="gpt2", n_layer=1, n_embd=64, n_head=4, vocab_size=256, n_positions=128, n_inner=2**21)


@pytest.fixture(autouse=True)
def tpu_precision():
    """Matmuls at the TPU's default precision, as a run has them (tests/conftest.py asks for 'highest',
    which Pallas TPU kernels refuse for bf16 operands)."""
    with jax.default_matmul_precision("default"):
        yield


def test_names_as_maxtext_names_them():
    t = targets.target("v5e-8")
    assert (t.topology, t.devices, t.hosts) == ("v5e:2x4", 8, 1)
    assert (targets.target("v5e-32").hosts, targets.target("v5e-256").topology) == (8, "v5e:16x16")
    v4 = targets.target("v4-8")  # cores: 4 megacore chips
    assert (v4.topology, v4.devices, v4.chip.hbm_bytes) == ("v4:2x2x1", 4, int(30.75 * 2**30))
    assert targets.target("v5p-8", num_slices=2).devices == 8


def test_unknown_target_lists_the_known_names():
    with pytest.raises(LmprobeError, match=r"`target=v9-8` .*v4-8, .*v5e-8, .*v6e-256") as e:
        targets.target("v9-8")
    assert "\n" not in str(e.value)
    with pytest.raises(LmprobeError, match="v5e-8, v5e-16"):
        targets.target("v5e-12")
    with pytest.raises(LmprobeError, match="`num_slices=0`"):
        targets.target("v5e-8", num_slices=0)


def test_libtpu_missing_names_the_extra(monkeypatch):
    monkeypatch.setattr(targets, "libtpu_available", lambda: False)
    with pytest.raises(LmprobeError, match=r"libtpu, which is not installed: pip install 'lmprobe-jax\[tpu\]'"):
        targets.target_devices(targets.target("v5e-8"))


def test_parameters_that_never_fit_name_more_devices():
    with pytest.raises(LmprobeError, match=r"opt-13b does not fit: .* use at least \d+ devices"):
        memory.check_fits("opt-13b", dtype=jnp.bfloat16, mesh=make_mesh(1, jax.devices()[:1]),
                     hbm_bytes=targets.target("v5e-8").chip.hbm_bytes, offline=True)


@needs_libtpu
def test_a_scanned_loop_counts_every_trip():
    """XLA's cost_analysis counts a scan's body once; program_cost counts it 10 times (by hand)."""
    mesh = Mesh(np.array(targets.target_devices(targets.target("v5e-8"))).reshape(8), ("data",))
    x = jax.ShapeDtypeStruct((64, 256), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("data")))
    w = jax.ShapeDtypeStruct((10, 256, 256), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec()))
    compiled = jax.jit(lambda x, w: jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), x, w)[0]).lower(x, w).compile()
    chip = targets.CHIPS["v5e"]
    cost = program_cost(compiled.as_text(), peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth)
    by_hand = 10 * 2 * 8 * 256 * 256  # per device: 8 rows
    assert cost.flops == by_hand
    assert compiled.cost_analysis()["flops"] < 2 * by_hand / 10  # the trap: one trip
    assert cost.unknown_loops == 0 and cost.seconds > 0


# the TPU compiler's asynchronous slices of q, k, v into VMEM before splash attention (a scoring step's
# program), laid side by side again by ConcatBitcast; AllocateBuffer only reserves the buffer
SLICES = """HloModule slices

ENTRY %main (p: bf16[8,128]) -> (bf16[8,128], bf16[8,128]) {
  %p = bf16[8,128]{H} parameter(0)
  %slice-start = ((bf16[8,128]{H}), bf16[4,128]{V}, s32[]{:S(2)}) slice-start(%p), slice={[0:4], [0:128]}
  %slice-start.1 = ((bf16[8,128]{H}), bf16[4,128]{V}, s32[]{:S(2)}) slice-start(%p), slice={[4:8], [0:128]}
  %slice-done = bf16[4,128]{V} slice-done(%slice-start)
  %slice-done.1 = bf16[4,128]{V} slice-done(%slice-start.1)
  %custom-call = bf16[8,128]{V} custom-call(%slice-done, %slice-done.1), custom_call_target="ConcatBitcast"
  %custom-call.1 = bf16[8,128]{H} custom-call(), custom_call_target="AllocateBuffer"
  ROOT %tuple = (bf16[8,128]{V}, bf16[8,128]{H}) tuple(%custom-call, %custom-call.1)
}
""".replace("{H}", "{1,0:T(8,128)(2,1)}").replace("{V}", "{1,0:T(8,128)(2,1)S(1)}")  # layouts in HBM, VMEM


def test_an_asynchronous_slice_moves_its_slice_once():
    """Each slice-start reads its slice from HBM and writes it to VMEM; slice-done, ConcatBitcast and
    AllocateBuffer move nothing (counted as their operands and results, they made the copies of q, k, v
    for splash attention 18% of pythia-1b's estimated scoring step on v5e-8). ``ops`` breaks the total down."""
    chip = targets.CHIPS["v5e"]
    ops = []
    cost = program_cost(SLICES, peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth, ops=ops)
    half = 4 * 128 * 2
    assert (cost.bytes_accessed, cost.hbm_bytes) == (4 * half, 2 * half)
    assert [(o.name, o.bytes_accessed, o.hbm_bytes) for o in ops] == [("slice-start", 2 * half, half),
                                                                      ("slice-start.1", 2 * half, half)]
    assert sum(o.seconds for o in ops) == cost.seconds


@needs_libtpu
def test_a_batched_dot_written_as_a_dilated_convolution_counts_its_real_taps():
    """Attention scores over 16 rows x 12 heads a device: the TPU compiler writes them as a convolution over
    an input dilated by its window (lhs_dilate=16x12), whose taps mostly land on the dilation's zeros;
    counted as a full window, encoder attention at lengths outside the Pallas kernel read 2-9x useful."""
    mesh = Mesh(np.array(targets.target_devices(targets.target("v5e-8"))).reshape(8), ("data",))
    x = jax.ShapeDtypeStruct((128, 96, 12, 32), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("data")))
    compiled = jax.jit(lambda q, k: jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32)
                       ).lower(x, x).compile()
    text = compiled.as_text()
    chip = targets.CHIPS["v5e"]
    assert "lhs_dilate" in text  # the compiler's form this test is about
    assert program_cost(text, peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth).flops == (
        2 * 16 * 12 * 96 * 96 * 32)  # per device: 16 rows


@needs_libtpu
@pytest.mark.parametrize("name", ["v5e-8", "v5e-32"])
def test_the_step_compiles_for_the_target(name):
    t = targets.target(name)
    out = P.plan(TINY, dtype=jnp.bfloat16, target=t, batch_size=2, max_length=128, search=False)
    assert (out.platform, out.devices, out.target, out.hbm_bytes) == ("tpu", t.devices, name, t.chip.hbm_bytes)
    s = out.step_memory
    assert out.fits and not s.exhausted and 0 < s.peak_bytes < 2**30
    assert s.cost.useful_flops == P.Planner(TINY, jnp.bfloat16, "tiny").useful_flops(2 * t.devices, 128)
    assert s.cost.seconds > 0 and "ESTIMATE (TPU cost model, not measured)" in out.table()
    assert 0.9 < s.cost.overhead < 1.1  # the matmuls outside the attention kernel, by hand


@needs_libtpu
def test_a_decoding_step_reads_the_weights_and_cache_about_once():
    """One trip of generate's decoding loop, compiled for v5e-8 (rows over the 8 chips, weights
    replicated), moves at most 1.3x the bytes of the weights plus the KV cache a device holds, in all
    memories (experiments/bench/decode_bytes.py; smollm2-135m: 1.02-1.21x). Writing each new token into
    its layer's cache slice inside the layer scan (layers.DECODE_PAIR_MAX = 0) read 1.51x here."""
    from flax import nnx

    from experiments.bench.decode_bytes import decoding_loop
    from lmprobe.engine import generation
    from lmprobe.engine.mesh import batch_sharding, tracing_on
    from lmprobe.models.base import empty_cache

    t = targets.target("v5e-8")
    planner, mesh = P.Planner(DECODER, jnp.bfloat16, "decoder", t), P.target_mesh(t)
    state = planner.sharded_state(mesh, "tp")
    rows, prompt, new = 32, 224, 32

    def arg(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh, len(shape)) if shape else
                                    NamedSharding(mesh, PartitionSpec()))

    def generate(state, *a):
        with tracing_on(mesh):
            return generation.generate(nnx.merge(planner.graphdef, state), *a, max_new_tokens=new, top_k=0,
                                       greedy=True)

    ids = arg((rows, prompt), jnp.int32)
    text = jax.jit(generate).lower(state, ids, ids, arg((rows,), jnp.int32), arg((), jnp.int32),
                                   arg((), jnp.float32), arg((), jnp.float32), arg((), jnp.int32)).compile().as_text()
    cache = jax.eval_shape(lambda: empty_cache(planner.cfg, rows, prompt + new, jnp.bfloat16))
    weights = planner.bytes_per_device(mesh, "tp")
    held = weights + sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(cache)) / t.devices
    loop = decoding_loop(text, DECODER["num_hidden_layers"])
    chip = t.chip
    step = program_cost(text, peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth, computation=loop.body)
    assert loop.trips == new and step.unknown_loops == 0
    assert weights < step.bytes_accessed <= 1.3 * held  # every layer's weights: the layer scan counted per layer
    assert step.hbm_bytes <= step.bytes_accessed and step.collective_bytes == 0


@needs_libtpu
def test_the_plan_agrees_with_the_compiler():
    """The largest batch the search finds compiles within HBM; one more row does not (the compiler
    refuses: RESOURCE_EXHAUSTED is 'does not fit', never a traceback)."""
    t = targets.target("v5e-8")
    planner, mesh = P.Planner(WIDE, jnp.bfloat16, "wide", t), P.target_mesh(t)
    fit = planner.largest_rows(mesh, "fsdp", 128, t.chip.hbm_bytes, probe=8, cap=16)
    assert 1 <= fit.rows < 16 and fit.peak_bytes <= t.chip.hbm_bytes
    over = planner.step(mesh, "fsdp", fit.rows + 1, 128)
    assert over.exhausted or over.peak_bytes > t.chip.hbm_bytes
    assert planner.step(mesh, "fsdp", 32, 128).exhausted  # 48 GiB of activations a device


@pytest.mark.parametrize(("argv", "says"), [
    (["--model=opt-125m", "--target=v9-8"], r"^error: --target=v9-8 is not a TPU slice lmprobe knows: use one of v4-8"),
    (["--model=opt-125m", "--target=v5e-8", "--devices=8"], r"^error: --devices=8 with --target=v5e-8: .*drop one"),
])
def test_plan_front_end_bad_targets_are_one_line(argv, says, capsys):
    from lmprobe.cli import plan as front_end

    with pytest.raises(SystemExit) as e:
        front_end.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and re.search(says, err)
