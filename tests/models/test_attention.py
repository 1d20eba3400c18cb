"""layers.attention against a plain numpy softmax attention, for every mask form the models use; the
blocked path of long causal rows against the unblocked one; the models build no float [.., T, S] bias."""

import dataclasses

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import MistralConfig, MistralForCausalLM

from lmprobe.checkpoints import load
from lmprobe.models import layers
from lmprobe.models.layers import Mask, attention, attention_implementation
from lmprobe.models.llama import Llama, LlamaConfig
from tests.models.parity import padded_batch, save_random

B, T, N, K, D = 3, 7, 4, 2, 8


def reference(q, k, v, allowed, scale):
    """numpy attention in float64; allowed [B, T, S] bool; a fully masked row averages its keys."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    scores = np.einsum("btnd,bsnd->bnts", q, k) * scale
    scores = np.where(allowed[:, None], scores, -1e30)
    scores = np.where(allowed[:, None].any(-1, keepdims=True), scores, 0.0)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnd->btnd", p, v)


def avals(jpr):
    """The abstract values of every equation's outputs in a jaxpr, sub-jaxprs included."""
    for eqn in jpr.eqns:
        yield from (v.aval for v in eqn.outvars)
        for sub in jex.core.jaxprs_in_params(eqn.params):
            yield from avals(sub)


def qkv(seed=0, t=T, s=T, kv=K):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(B, t, N, D)).astype(np.float32), rng.normal(size=(B, s, kv, D)).astype(np.float32),
            rng.normal(size=(B, s, kv, D)).astype(np.float32))


def padding(left: bool, s=T, lengths=(7, 4, 1)):
    keys = np.zeros((B, s), bool)
    for row, n in enumerate(lengths):
        if left:
            keys[row, s - n:] = True
        else:
            keys[row, :n] = True
    return keys


def causal(t, s, offset=0):
    return (np.arange(s)[None, :] <= offset + np.arange(t)[:, None])[None]


def packed():
    """Row layout [prefix 3 | first 2 | second 2]: the second sequence sees the prefix and itself."""
    seg = np.array([0, 0, 0, 1, 1, 2, 2])
    pos = np.array([0, 1, 2, 3, 4, 3, 4])
    vis = (seg[None, :] == 0) | (seg[:, None] == seg[None, :])
    vis = vis & (np.arange(T)[None, :] <= np.arange(T)[:, None])
    return np.broadcast_to(vis, (B, T, T)), np.broadcast_to(pos, (B, T))


CASES = {  # name -> (Mask, window, allowed [B, T, S])
    "causal_right_padding": lambda: (Mask(padding(False), causal=True), None, padding(False)[:, None] & causal(T, T)),
    "causal_left_padding": lambda: (Mask(padding(True), causal=True), None, padding(True)[:, None] & causal(T, T)),
    "encoder_padding": lambda: (Mask(padding(False)), None, np.broadcast_to(padding(False)[:, None], (B, T, T))),
    "no_mask": lambda: (Mask(None), None, np.ones((B, T, T), bool)),
    "sliding_window_slots": lambda: (
        Mask(padding(True), causal=True), 3,
        padding(True)[:, None] & causal(T, T) & (np.arange(T)[:, None] - np.arange(T)[None, :] < 3)),
    "packed_window_positions": lambda: (
        Mask(packed()[0], causal=True, positions=packed()[1]), 2,
        packed()[0] & (packed()[1][:, :, None] - packed()[1][:, None, :] < 2)),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kv", [K, N], ids=["gqa", "mha"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_matches_numpy(case, kv, dtype):
    mask, window, allowed = CASES[case]()
    q, k, v = qkv(kv=kv)
    cast = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    mask = dataclasses.replace(mask, keys=None if mask.keys is None else jnp.asarray(mask.keys),
                               positions=None if mask.positions is None else jnp.asarray(mask.positions))
    # mask closed over: its offset stays the int 0, so [B, S] keys take the is_causal path
    out = jax.jit(lambda q, k, v: attention(q, k, v, mask, scale=D ** -0.5, window=window))(cast(q), cast(k), cast(v))
    assert out.shape == (B, T, N, D) and out.dtype == jnp.dtype(dtype)
    out = np.asarray(out, np.float32)
    assert np.isfinite(out).all()  # fully masked rows (left padding) included
    rounded = [np.asarray(cast(x), np.float32) for x in (q, k, v)]
    want = reference(*rounded, allowed, D ** -0.5)
    real = allowed.any(-1)  # rows with at least one visible key
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(out[real], want[real], atol=tol, rtol=tol)


def test_decoding_offset_and_fully_masked_rows():
    """One query at a traced cache slot, against keys beyond it; a row with no real key gives no NaN."""
    q, k, v = qkv(t=1, s=T)
    keys = padding(True, lengths=(5, 2, 0))
    out = jax.jit(lambda i: attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                      Mask(jnp.asarray(keys), causal=True, offset=i), scale=0.5, window=2))(4)
    allowed = keys[:, None] & causal(1, T, offset=4) & (4 - np.arange(T) < 2)[None, None]
    out = np.asarray(out)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[:2], reference(q, k, v, allowed, 0.5)[:2], atol=1e-5)


def test_implementation_choice():
    assert attention_implementation(jnp.float32, 64) == "xla"
    assert attention_implementation(jnp.bfloat16, 64, num_queries=1) == "xla"
    assert attention_implementation(jnp.bfloat16, 12) == "xla"  # head_dim not a multiple of 8
    gpu = jax.local_devices()[0].platform == "gpu"
    assert attention_implementation(jnp.bfloat16, 64) == ("cudnn" if gpu else "xla")


def test_llama_builds_no_float_bias(monkeypatch):
    """With padding + causal only, the model hands jax.nn.dot_product_attention a [B, 1, 1, S]
    boolean and is_causal, and nothing in its program is a float array ending in [T, S]."""
    calls = []

    def stub(q, k, v, bias=None, mask=None, **kw):
        calls.append((bias, mask, kw))
        return q

    monkeypatch.setattr(layers.jax.nn, "dot_product_attention", stub)
    cfg = LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=40, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, head_dim=8, sliding_window=4)
    model = Llama(cfg, rngs=nnx.Rngs(0))
    b, t = 2, 11
    ids, mask = jnp.zeros((b, t), jnp.int32), jnp.ones((b, t), jnp.int32)
    jaxpr = jax.make_jaxpr(lambda i, m: model(i, m, output_hidden_states=True).logits)(ids, mask)
    bias, bool_mask, kw = calls[0]
    assert bias is None and bool_mask.dtype == jnp.bool_ and bool_mask.shape == (b, 1, 1, t)
    assert kw["is_causal"] and kw["local_window_size"] == (3, 0)

    scores = [a for a in avals(jaxpr.jaxpr) if a.shape[-2:] == (t, t)]
    assert not scores, scores


# ----------------------------------------------------------------------------- blocked causal attention (long rows)

LONG, BLOCK = 19, 8  # a row of 3 query blocks, the last one partial


def forced(monkeypatch, blocked: bool, block: int = BLOCK):
    """Send every causal row of the 'xla' path through the blocked attention (or none), on any device: the
    blocked path is the CPU's, so attention is traced as for a CPU (on a GPU, bf16 would take cuDNN)."""
    monkeypatch.setattr(layers, "target_platform", lambda: "cpu")
    monkeypatch.setattr(layers, "BLOCKED_FROM", 0 if blocked else 10 ** 9)
    monkeypatch.setattr(layers, "BLOCK", block)


def counted_dot_product_attention(monkeypatch) -> list:
    """Count the calls of jax.nn.dot_product_attention (the unblocked path)."""
    calls, original = [], jax.nn.dot_product_attention
    monkeypatch.setattr(layers.jax.nn, "dot_product_attention", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    return calls


LONG_CASES = {  # name -> (key mask [B, S] or None, window, kv heads, dtype); padded rows: some slots see no key
    "no_padding_mha": (None, None, N, "float32"),
    "right_padding_bf16": (padding(False, LONG, (19, 11, 3)), None, K, "bfloat16"),
    "left_padding_empty_row": (padding(True, LONG, (19, 9, 0)), None, K, "float32"),
    "window_inside_block": (padding(True, LONG, (19, 15, 2)), 5, K, "float32"),  # the last block skips tile 0
    "window_across_blocks": (padding(False, LONG, (19, 15, 2)), 11, N, "float32"),
}


@pytest.mark.parametrize("case", sorted(LONG_CASES))
def test_blocked_matches_unblocked_and_numpy(monkeypatch, case):
    """Every query, those that see no key included (they average all keys), as the unblocked path and numpy;
    bf16 inputs with fp32 scores and softmax."""
    keys, window, kv, dtype = LONG_CASES[case]
    q, k, v = (jnp.asarray(x, dtype) for x in qkv(seed=1, t=LONG, s=LONG, kv=kv))
    mask = Mask(None if keys is None else jnp.asarray(keys), causal=True)
    calls = counted_dot_product_attention(monkeypatch)
    outs = {}
    for blocked in (True, False):
        forced(monkeypatch, blocked)
        out = jax.jit(lambda q, k, v: attention(q, k, v, mask, scale=0.3, window=window))(q, k, v)
        assert out.dtype == jnp.dtype(dtype)
        outs[blocked] = np.asarray(out, np.float32)
    assert len(calls) == 1  # the unblocked run only
    allowed = causal(LONG, LONG) & (np.ones((B, LONG), bool) if keys is None else keys)[:, None]
    if window is not None:
        allowed = allowed & (np.arange(LONG)[:, None] - np.arange(LONG)[None, :] < window)
    want = reference(*(np.asarray(x, np.float32) for x in (q, k, v)), allowed, 0.3)
    tol = dict(atol=2e-6, rtol=1e-5) if dtype == "float32" else dict(atol=2e-2, rtol=2e-2)
    assert np.isfinite(outs[True]).all()
    np.testing.assert_allclose(outs[True], outs[False], **tol)
    np.testing.assert_allclose(outs[True], want, **tol)


def test_blocked_gradients(monkeypatch):
    """Gradients through the blocked path (training differentiates the model) are the unblocked path's,
    a row of padding only included."""
    q, k, v = (jnp.asarray(x) for x in qkv(seed=2, t=LONG, s=LONG))
    mask = Mask(jnp.asarray(padding(True, LONG, (19, 9, 0))), causal=True)
    weights = jnp.asarray(np.random.default_rng(3).normal(size=(B, LONG, N, D)), jnp.float32)
    loss = lambda q, k, v: jnp.sum(attention(q, k, v, mask, scale=0.3) * weights)  # noqa: E731
    grads = {}
    for blocked in (True, False):
        forced(monkeypatch, blocked)
        grads[blocked] = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    for ours, theirs in zip(grads[True], grads[False]):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-5, rtol=1e-5)


def test_llama_long_rows_blocked(monkeypatch, tmp_path):
    """A tiny random Mistral (sliding window) on long right-padded rows: the blocked forward gives the
    unblocked forward's logits at every slot and transformers' at real tokens; its program holds
    nothing [T, T]-sized."""
    config = MistralConfig(vocab_size=151, hidden_size=48, intermediate_size=80, num_hidden_layers=1,
                           num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64, sliding_window=6)
    hf = save_random(MistralForCausalLM, config, tmp_path)
    ids, mask = padded_batch(config.vocab_size, lengths=(LONG, 12, 4))
    model = load(str(tmp_path), tokenizer=False).model
    logits = {}
    for blocked in (True, False):
        forced(monkeypatch, blocked)
        logits[blocked] = np.asarray(nnx.jit(lambda m, i, a: m(i, a).logits)(model, ids, mask))
    np.testing.assert_allclose(logits[True], logits[False], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        want = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    real = mask.astype(bool)
    np.testing.assert_allclose(logits[True][real], want[real], atol=1e-4)
    forced(monkeypatch, True)
    jaxpr = jax.make_jaxpr(lambda i, a: model(i, a).logits)(ids, mask)
    assert not [a for a in avals(jaxpr.jaxpr) if a.shape[-2:] == (LONG, LONG)]
