"""kernels.divergence against scipy/numpy, exact-zero handling, chunking and memory bounds."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy as scipy_entropy

from lmprobe.kernels import divergence as D
from tests.kernels.conftest import make_logits, probabilities

PROFILE = settings.get_profile("kernels")
SHAPE = (3, 4, 1000)
CHUNKS = [None, 128, 300, 1000, 5000]


@pytest.fixture(scope="module")
def pair():
    a = make_logits(0, SHAPE, zero_fraction=0.2)
    b = make_logits(1, SHAPE, zero_fraction=0.2)
    b[0, 0] = a[0, 0]  # identical pair
    a[0, 1, :500], b[0, 1, 500:] = -np.inf, -np.inf  # disjoint supports
    return a, b


@pytest.mark.parametrize("chunk_size", CHUNKS)
def test_jsd_matches_scipy_squared_jensenshannon(pair, chunk_size):
    a, b = pair
    expected = jensenshannon(probabilities(a), probabilities(b), axis=-1) ** 2  # natural log
    got = np.asarray(D.js_divergence(a, b, chunk_size=chunk_size))
    np.testing.assert_allclose(got, expected, atol=2e-6, rtol=1e-5)
    assert got[0, 0] == 0.0
    np.testing.assert_allclose(got[0, 1], math.log(2.0), rtol=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 300])
def test_entropy_and_kl_match_scipy(pair, chunk_size):
    a, b = pair
    p, q = probabilities(a), probabilities(b)
    np.testing.assert_allclose(
        D.entropy(a, chunk_size=chunk_size), scipy_entropy(p, axis=-1), atol=1e-5, rtol=1e-5
    )
    a_full, b_full = make_logits(2, SHAPE), make_logits(3, SHAPE)  # KL finite: full support
    np.testing.assert_allclose(
        D.kl_divergence(a_full, b_full, chunk_size=chunk_size),
        scipy_entropy(probabilities(a_full), probabilities(b_full), axis=-1),
        rtol=1e-5,
        atol=1e-5,
    )
    kl = np.asarray(D.kl_divergence(a, b, chunk_size=chunk_size))
    expected = scipy_entropy(p, q, axis=-1)  # +inf where q = 0 < p somewhere
    assert np.array_equal(np.isinf(kl), np.isinf(expected)) and np.isinf(expected).any()
    finite = np.isfinite(expected)
    np.testing.assert_allclose(kl[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_l1_and_cosine_match_numpy(pair):
    a, b = pair
    p, q = probabilities(a), probabilities(b)
    np.testing.assert_allclose(D.l1_distance(a, b, chunk_size=300), np.abs(p - q).sum(-1), atol=2e-6)
    cosine = (p * q).sum(-1) / np.linalg.norm(p, axis=-1) / np.linalg.norm(q, axis=-1)
    np.testing.assert_allclose(D.cosine_similarity(a, b, chunk_size=300), cosine, atol=2e-6)


def test_token_log_probs_both_id_layouts(pair):
    a, _ = pair
    with np.errstate(divide="ignore"):
        log_p = np.log(probabilities(a))
    rng = np.random.default_rng(4)
    finite_ids = np.argmax(a, axis=-1)  # always a finite logit
    np.testing.assert_allclose(
        D.token_log_probs(a, finite_ids, chunk_size=128),
        np.take_along_axis(log_p, finite_ids[..., None], -1)[..., 0],
        rtol=1e-5,
    )
    ids = rng.integers(0, SHAPE[-1], size=SHAPE[:-1] + (7,))
    got = np.asarray(D.token_log_probs(a, ids, chunk_size=None))
    expected = np.take_along_axis(log_p, ids, -1)
    assert got.shape == ids.shape
    assert np.array_equal(np.isneginf(got), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-5, atol=1e-5)
    assert np.isnan(np.asarray(D.token_log_probs(a, np.full(SHAPE[:-1], SHAPE[-1])))).all()


def test_token_set_mass_shared_and_per_row_sets(pair):
    a, _ = pair
    p = probabilities(a)
    rng = np.random.default_rng(5)
    shared = rng.random(SHAPE[-1]) < 0.1
    per_row = rng.random(SHAPE) < 0.3
    np.testing.assert_allclose(D.token_set_mass(a, shared, chunk_size=300), (p * shared).sum(-1), atol=1e-6)
    np.testing.assert_allclose(D.token_set_mass(a, per_row, chunk_size=300), (p * per_row).sum(-1), atol=1e-6)
    np.testing.assert_allclose(
        D.token_set_log_mass(a, shared, chunk_size=None), np.log((p * shared).sum(-1)), rtol=1e-5
    )
    empty = np.zeros(SHAPE[-1], bool)
    assert np.all(np.asarray(D.token_set_mass(a, empty)) == 0.0)
    np.testing.assert_allclose(D.token_set_mass(a, ~empty), 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    "name", ["entropy", "kl_divergence", "js_divergence", "l1_distance", "cosine_similarity"]
)
def test_chunked_equals_unchunked(pair, name):
    a, b = pair
    fn = getattr(D, name)
    args = (a,) if name == "entropy" else (a, b)
    reference = np.asarray(fn(*args, chunk_size=None))
    for chunk_size in [1, 7, 256, 999]:
        np.testing.assert_allclose(fn(*args, chunk_size=chunk_size), reference, rtol=2e-6, atol=2e-7)


def test_leading_axes_broadcast_and_vmap():
    a = make_logits(6, (5, 200))
    b = make_logits(7, (1, 200))
    batched = np.asarray(D.js_divergence(a, b, chunk_size=64))
    assert batched.shape == (5,)
    per_row = np.asarray(jax.vmap(lambda x: D.js_divergence(x, b[0], chunk_size=64))(a))
    np.testing.assert_allclose(batched, per_row, rtol=1e-6)
    assert D.entropy(a[0], chunk_size=64).shape == ()


def test_uniform_and_one_hot_extremes():
    vocab = 1000
    uniform = np.zeros((1, vocab), np.float32)
    np.testing.assert_allclose(D.entropy(uniform, chunk_size=128), math.log(vocab), rtol=1e-6)
    one_hot = np.full((2, vocab), -np.inf, np.float32)
    one_hot[0, 3], one_hot[1, 4] = 0.0, 0.0
    assert np.asarray(D.entropy(one_hot)).tolist() == [0.0, 0.0]
    np.testing.assert_allclose(D.js_divergence(one_hot[:1], one_hot[1:]), [math.log(2.0)], rtol=1e-7)
    assert np.asarray(D.js_divergence(one_hot, one_hot)).tolist() == [0.0, 0.0]
    assert np.isposinf(np.asarray(D.kl_divergence(one_hot[:1], one_hot[1:]))).all()


def test_chunking_bounds_compiled_temporary_memory():
    rows, vocab, chunk = 64, 50_000, 1024
    spec = jax.ShapeDtypeStruct((rows, vocab), jnp.float32)

    def temp_bytes(chunk_size):
        fn = functools.partial(D.js_divergence, chunk_size=chunk_size)
        return jax.jit(fn).lower(spec, spec).compile().memory_analysis().temp_size_in_bytes

    chunked, unchunked = temp_bytes(chunk), temp_bytes(None)
    assert chunked <= 4 * rows * chunk * 4  # a few [rows, chunk] float32 buffers at most
    assert unchunked >= rows * vocab * 4  # the naive path holds full-vocabulary arrays


@PROFILE
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.01, 30.0),
    zero_fraction=st.sampled_from([0.0, 0.5, 0.95]),
)
def test_jsd_symmetric_bounded_and_zero_on_identity(seed, scale, zero_fraction):
    a = make_logits(seed, (4, 257), scale, zero_fraction)
    b = make_logits(seed + 1, (4, 257), scale, zero_fraction)
    forward = np.asarray(D.js_divergence(a, b, chunk_size=64))
    backward = np.asarray(D.js_divergence(b, a, chunk_size=64))
    np.testing.assert_allclose(forward, backward, rtol=1e-5, atol=1e-7)
    assert np.all(forward >= 0.0) and np.all(forward <= math.log(2.0))
    assert np.all(np.asarray(D.js_divergence(a, a, chunk_size=64)) <= 1e-7)
    expected = jensenshannon(probabilities(a), probabilities(b), axis=-1) ** 2
    np.testing.assert_allclose(forward, expected, atol=3e-6, rtol=1e-4)
