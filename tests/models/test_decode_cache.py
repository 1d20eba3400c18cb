"""The KV cache is stored heads first [L, B, K, S, D], as the decoding attention reads it: a decoding
step compiled by XLA transposes no cache-sized array (with the cache [L, B, S, K, D], each layer's
slice was transposed for the attention's dots every step), and attends to the cache as the
[B, S, K, D] path does."""

import re

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.models.base import empty_cache
from lmprobe.models.layers import LayerCache, Mask, attention, update_cache
from lmprobe.models.llama import Llama, LlamaConfig
from lmprobe.models.t5 import T5, T5Config

B, S, K, N, D = 2, 24, 2, 6, 8


def cache_transposes(fn, *args, slots: int, head_dim: int) -> list[str]:
    """The transposes in ``fn``'s program as XLA compiled it (its dot layouts chosen) of an array with
    dimensions of ``slots`` and ``head_dim``: a cache's (the sizes are distinct from the tests' others)."""
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    found = []
    for line in hlo.splitlines():
        shape = re.search(r"= \w+\[([\d,]+)\]\S* transpose\(", line)
        if shape and {str(slots), str(head_dim)} <= set(shape.group(1).split(",")):
            found.append(line.strip())
    return found


def test_cache_layout_and_decoding_step_without_transposes():
    cfg = LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=40, num_hidden_layers=2,
                      num_attention_heads=N, num_key_value_heads=K, head_dim=D, sliding_window=5)
    model = Llama(cfg, rngs=nnx.Rngs(0))
    cache = empty_cache(cfg, B, S, jnp.float32)
    assert cache.k.shape == (2, B, K, S, D)

    def step(token, slots, cache, index):
        return model(token, slots, cache=cache, cache_index=index, compute_logits=False).cache

    args = (jnp.zeros((B, 1), jnp.int32), jnp.ones((B, S), jnp.int32), cache, jnp.int32(5))
    assert not cache_transposes(step, *args, slots=S, head_dim=D)
    assert jax.eval_shape(step, *args).k.shape == cache.k.shape


def test_t5_decoding_step_without_transposes():
    cfg = T5Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_decoder_layers=2,
                   num_attention_heads=4, head_dim=8)
    model = T5(cfg, rngs=nnx.Rngs(0))
    encoded = jnp.zeros((B, 11, 32))
    cache = model.init_cache(encoded, S)
    assert cache.self.k.shape == (2, B, 4, S, 8) and cache.cross.k.shape == (2, B, 4, 11, 8)

    def step(token, cache, index):
        return model.decode(token, encoded, jnp.ones((B, 11)), jnp.ones((B, S)), cache=cache, cache_index=index).cache

    assert not cache_transposes(step, jnp.zeros((B, 1), jnp.int32), cache, jnp.int32(3), slots=S, head_dim=8)


def test_heads_first_keys_attend_as_the_slot_major_ones():
    """One query at a traced slot over a heads-first cache, against the same keys [B, S, K, D]
    (jax.nn.dot_product_attention): padding, a sliding window, grouped heads, a score bias."""
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(B, 1, N, D)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(B, S, K, D)), jnp.float32) for _ in range(2))
    keys = jnp.asarray(np.arange(S)[None, :] >= np.array([[3], [0]]))
    bias = jnp.asarray(rng.normal(size=(1, N, 1, S)), jnp.float32)
    mask = Mask(keys, causal=True, offset=jnp.int32(9))
    layer = LayerCache(k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
    new_k, new_v = k[:, 9:10], v[:, 9:10]
    stale = LayerCache(layer.k.at[:, :, 9].set(0), layer.v.at[:, :, 9].set(0))  # slot 9 not written yet
    hk, hv, written = update_cache(stale, new_k, new_v, 9)  # one token: the cache and its entries apart
    assert hk[0].shape == (B, K, S, D) and written.k.shape == (B, K, 1, D)
    wk, wv, _ = update_cache(stale, k[:, 9:11], v[:, 9:11], 9)  # two: written into the slots
    assert wk.shape == (B, K, S, D)
    np.testing.assert_array_equal(np.asarray(wk[:, :, :10]), np.asarray(layer.k[:, :, :10]))
    for window, b in ((None, None), (4, None), (None, bias)):
        got = attention(q, hk, hv, mask, scale=0.3, window=window, bias=b, heads_first=True)
        want = attention(q, k, v, mask, scale=0.3, window=window, bias=b)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=1e-6)
