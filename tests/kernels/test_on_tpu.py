"""The kernels' programs compiled for a TPU chip by libtpu (no TPU needed): eigen-decompositions by
Jacobi rotations (jax's TPU default, QDWH, makes a program libtpu takes minutes to compile at d = 512),
and SynTextBench's levels one at a time (a large model's [levels, 2, d, d] whitening does not fit
one chip at once). On CPU both paths keep LAPACK and the batched program."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lmprobe import kernels
from lmprobe.planning import targets

needs_libtpu = pytest.mark.skipif(not targets.libtpu_available(),
                                  reason="libtpu is not installed (the test extra installs it)")


@pytest.fixture(autouse=True)
def no_compilation_cache():
    """libtpu's compile-only client cannot read cached programs back (it has no device client)."""
    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    yield
    jax.config.update("jax_enable_compilation_cache", enabled)


def _one_chip():
    mesh = Mesh(np.array(targets.target_devices(targets.target("v5e-8"))[:1]), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec())
    return lambda shape, dtype=jnp.float32: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def _tasks(levels, n, d, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(levels, n, d)).astype(np.float32) + np.linspace(0, 1, d, dtype=np.float32)
    y = np.where(rng.random((levels, n)) < 0.5, 1, -1).astype(np.int32)
    return z, y


def test_in_sequence_is_the_batched_result():
    """The TPU path's mapping over tasks, run here: each level's accuracy and margin as all at once."""
    z, y = _tasks(3, 120, 16)
    zt, yt = _tasks(3, 40, 16, seed=1)

    def level(z, y, zt, yt):
        return kernels.syntextbench_accuracy_margin(z, y, zt, yt, energy=0.9)

    at_once = level(z, y, zt, yt)
    one_by_one = kernels.in_sequence(level, z, y, zt, yt, task_axes=1)
    np.testing.assert_allclose(one_by_one.accuracy, at_once.accuracy, atol=1e-6)
    np.testing.assert_allclose(one_by_one.mean_scaled_margin, at_once.mean_scaled_margin, rtol=1e-5)
    assert 0 < float(at_once.accuracy.min()) <= 1


@needs_libtpu
def test_eigh_compiles_by_jacobi_for_a_tpu():
    """One EighTpu call (Jacobi), a small program; QDWH's for one 512 x 512 matrix was 3.3 MB of HLO
    and 46 s of compiling on this host."""
    arg = _one_chip()
    for vectors in (True, False):
        text = jax.jit(lambda x, v=vectors: kernels.symmetric_eigh(x, vectors=v)).lower(
            arg((2, 512, 512))).compile().as_text()
        assert re.findall(r'custom_call_target="([^"]+)"', text) == ["EighTpu"]
        assert len(text) < 200_000


@needs_libtpu
def test_syntextbench_levels_take_one_level_of_memory_on_a_tpu():
    """Twenty levels' temporaries are about one level's [2, d, d] class covariances (the levels in
    sequence), not twenty levels' (10.5 MB)."""
    arg = _one_chip()

    def temp_bytes(levels):
        compiled = kernels.syntextbench_accuracy_margin.lower(
            arg((levels, 512, 256)), arg((levels, 512), jnp.int32), arg((levels, 64, 256)),
            arg((levels, 64), jnp.int32), energy=0.99).compile()
        assert "EighTpu" in compiled.as_text()
        return compiled.memory_analysis().temp_size_in_bytes

    covariances = 2 * 256 * 256 * 4
    assert temp_bytes(20) < 2 * covariances


@needs_libtpu
def test_the_benchmark_prints_both_paths(capsys):
    from experiments.bench import tpu_kernels

    tpu_kernels.main(["--dims=128", "--width=64", "--levels=2", "--n=64"])
    out = capsys.readouterr().out
    assert re.search(r"eigh 128x128 by QDWH .* compile +[\d.]+ s", out)
    assert re.search(r"eigh 128x128 by Jacobi .* compile +[\d.]+ s", out)
    assert re.search(r"all levels at once: arguments .*, temporaries", out)
    assert re.search(r"one level at a time \(lmprobe\): arguments", out)
