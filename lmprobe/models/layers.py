"""Building blocks shared by the model families.

Every parameter carries logical axis names (``axes`` metadata: 'vocab', 'embed', 'heads',
'kv_heads', 'mlp', 'layers', 'positions'); the engine maps them to mesh axes. Kernels are stored
as [in, out] (the transpose of torch's Linear weight). Softmax, norms and logits run in fp32
whatever the compute dtype.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

Array = jax.Array
_init = nnx.initializers.normal(0.02)
# Additive bias for masked attention scores: finite, so fully masked rows (padding) stay NaN-free.
MASKED = float(np.finfo(np.float32).min)


def param(rngs: nnx.Rngs, shape, axes, dtype, init=_init) -> nnx.Param:
    """A parameter of ``shape`` whose dimensions carry the logical names ``axes``."""
    return nnx.Param(init(rngs.params(), shape, dtype), axes=tuple(axes))


class Linear(nnx.Module):
    """y = x @ kernel + bias, kernel [d_in, d_out]."""

    def __init__(self, d_in, d_out, *, axes, use_bias=True, dtype, param_dtype, rngs):
        self.kernel = param(rngs, (d_in, d_out), axes, param_dtype)
        self.bias = param(rngs, (d_out,), axes[1:], param_dtype, nnx.initializers.zeros) if use_bias else None
        self.dtype = dtype

    def __call__(self, x: Array) -> Array:
        y = x.astype(self.dtype) @ self.kernel[...].astype(self.dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


class Embed(nnx.Module):
    """Token (or position) embedding table [num, dim]; ``attend`` is the tied output head."""

    def __init__(self, num, dim, *, axes=("vocab", "embed"), dtype, param_dtype, rngs):
        self.embedding = param(rngs, (num, dim), axes, param_dtype)
        self.dtype = dtype

    def __call__(self, ids: Array) -> Array:
        return jnp.take(self.embedding[...], ids, axis=0).astype(self.dtype)

    def attend(self, x: Array) -> Array:
        """Logits in fp32 against the embedding matrix (tied LM head)."""
        return jnp.einsum("...d,vd->...v", x, self.embedding[...].astype(x.dtype),
                          preferred_element_type=jnp.float32)


def lm_logits(hidden: Array, embed: Embed, head: "Linear | None") -> Array:
    """fp32 logits from final hidden states: the untied ``head`` if any, else the tied ``embed``."""
    if head is None:
        return embed.attend(hidden)
    return jnp.einsum("...d,dv->...v", hidden, head.kernel[...].astype(hidden.dtype),
                      preferred_element_type=jnp.float32)


class RMSNorm(nnx.Module):
    """x / rms(x) * weight, in fp32 (Llama)."""

    def __init__(self, dim, *, eps, dtype, param_dtype, rngs):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype), axes=("embed",))
        self.eps, self.dtype = eps, dtype

    def __call__(self, x: Array) -> Array:
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.weight[...].astype(self.dtype) * x32.astype(self.dtype)


class LayerNorm(nnx.Module):
    """(x - mean) / std * weight + bias, in fp32."""

    def __init__(self, dim, *, eps, dtype, param_dtype, rngs, use_scale=True, use_bias=True):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype), axes=("embed",)) if use_scale else None
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype), axes=("embed",)) if use_bias else None
        self.eps, self.dtype = eps, dtype

    def __call__(self, x: Array) -> Array:
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight[...].astype(jnp.float32)
        if self.bias is not None:
            y = y + self.bias[...].astype(jnp.float32)
        return y.astype(self.dtype)


ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_fast": lambda x: jax.nn.gelu(x, approximate=True),
    "tanh": jnp.tanh,
}


def activation(name: str) -> Callable[[Array], Array]:
    """The activation function a Hugging Face config names (``hidden_act``)."""
    from lmprobe.errors import CheckpointError

    if name not in ACTIVATIONS:
        raise CheckpointError(
            f"activation {name!r} in the model config is not supported; supported: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


# ----------------------------------------------------------------------------- positions


def default_positions(attention_mask: Array, start=0, length: int | None = None) -> Array:
    """Position ids that count only real tokens: correct for left and right padding.

    ``attention_mask`` [B, S] covers every slot (the whole KV cache when decoding); the ids of
    slots ``start .. start+length`` are returned.
    """
    positions = jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)
    if length is None:
        return positions
    return jax.lax.dynamic_slice_in_dim(positions, start, length, axis=1)


def check_length(num_tokens: int, limit: int) -> None:
    """Refuse sequences longer than learned position embeddings cover (a lookup past them gives NaN)."""
    from lmprobe.errors import LmprobeError

    if num_tokens > limit:
        raise LmprobeError(f"a sequence of {num_tokens} tokens is longer than this model's limit of "
                           f"{limit} tokens; truncate the input")


def rope_inv_freq(rotary_dim: int, theta: float, scaling=None) -> tuple[float, ...]:
    """Inverse frequencies of rotary embeddings, with HF's 'linear' and 'llama3' scalings.

    ``scaling`` is HF's rope_scaling as a dict or as (key, value) items. Returned as a tuple so
    that modules can hold it as static data.
    """
    from lmprobe.errors import CheckpointError

    scaling = dict(scaling) if scaling else None
    inv = 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        return tuple(inv.astype(np.float32).tolist())
    if kind == "linear":
        return tuple((inv / scaling["factor"]).astype(np.float32).tolist())
    if kind == "llama3":
        factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = np.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        return tuple(np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled).astype(np.float32).tolist())
    raise CheckpointError(f"rope scaling {kind!r} in the model config is not supported "
                          "(supported: default, linear, llama3)")


def apply_rope(x: Array, positions: Array, inv_freq: tuple[float, ...]) -> Array:
    """Rotate the first 2*len(inv_freq) dims of x [B, T, H, D] by HF's rotate_half convention."""
    rot = 2 * len(inv_freq)
    angles = positions[..., None].astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)  # [B, T, rot/2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    xr, xpass = x[..., :rot].astype(jnp.float32), x[..., rot:]
    half = rot // 2
    rotated = jnp.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    out = (xr * cos + rotated * sin).astype(x.dtype)
    return jnp.concatenate([out, xpass], axis=-1) if xpass.shape[-1] else out


# ----------------------------------------------------------------------------- attention


class LayerCache(NamedTuple):
    """One layer's keys and values [B, S_max, kv_heads, head_dim]; stacked over layers it is the KV cache."""

    k: Array
    v: Array


def init_cache(num_layers, batch, max_len, kv_heads, head_dim, dtype=jnp.float32) -> LayerCache:
    """An empty KV cache for ``num_layers`` layers (leading axis), filled by decoding."""
    shape = (num_layers, batch, max_len, kv_heads, head_dim)
    return LayerCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def attention_bias(key_mask: Array, num_queries: int, *, causal: bool, query_offset=0,
                   sliding_window: int | None = None, positions: Array | None = None) -> Array:
    """Additive fp32 bias [B, 1, T, S]: 0 where query slot i may see key slot j, MASKED elsewhere.

    Slots index the (padded) sequence; query i sits in slot ``query_offset + i`` (the cache write
    index when decoding). ``key_mask`` [B, S] marks real (non-padding) keys; or, [B, T, S], which
    key each query may see (packed sequences, no cache): then the sliding window is measured in
    ``positions`` [B, T], not slots.
    """
    q_slot = query_offset + jnp.arange(num_queries)[:, None]
    k_slot = jnp.arange(key_mask.shape[-1])[None, :]
    if key_mask.ndim == 3:
        allowed = key_mask[:, None].astype(bool)
        distance = (positions[:, :, None] - positions[:, None, :])[:, None]
    else:
        allowed = key_mask[:, None, None, :].astype(bool)
        distance = q_slot - k_slot
    if causal:
        allowed = allowed & (k_slot <= q_slot)
    if sliding_window is not None:
        allowed = allowed & (distance < sliding_window)
    return jnp.where(allowed, 0.0, MASKED).astype(jnp.float32)


def dot_product_attention(q: Array, k: Array, v: Array, bias: Array, *, scale: float) -> Array:
    """Softmax attention with grouped-query heads, softmax in fp32.

    q [B, T, H, D]; k, v [B, S, K, D] with H a multiple of K; bias [B, 1, T, S]. Returns [B, T, H*D].
    """
    b, t, h, d = q.shape
    kv = k.shape[2]
    q = q.reshape(b, t, kv, h // kv, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) * scale
    probs = jax.nn.softmax(scores + bias[:, :, None], axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h * d)


def update_cache(cache: LayerCache | None, k: Array, v: Array, index) -> tuple[Array, Array, LayerCache | None]:
    """Write this step's k, v into the cache at slot ``index``; return the keys/values to attend to."""
    if cache is None:
        return k, v, None
    start = (0, index, 0, 0)
    new = LayerCache(jax.lax.dynamic_update_slice(cache.k, k.astype(cache.k.dtype), start),
                     jax.lax.dynamic_update_slice(cache.v, v.astype(cache.v.dtype), start))
    return new.k, new.v, new


# ----------------------------------------------------------------------------- layer stacks


def stacked(make: Callable[[nnx.Rngs], nnx.Module], num_layers: int, rngs: nnx.Rngs) -> nnx.Module:
    """``num_layers`` copies of a block with parameters stacked on a leading 'layers' axis."""

    @nnx.split_rngs(splits=num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(r):
        return make(r)

    blocks = create(rngs)
    for _, var in nnx.iter_graph(blocks):
        if isinstance(var, nnx.Param):
            var.set_metadata(axes=("layers",) + tuple(var.get_metadata()["axes"]))
    return blocks


def scan_layers(blocks: nnx.Module, step, carry, xs=None):
    """Run ``step(block, carry, x) -> (carry, y)`` over the stacked blocks with one lax.scan.

    The program is compiled once for one layer, so compile time does not grow with depth.
    """
    graphdef, state = nnx.split(blocks)

    def body(c, inputs):
        layer_state, x = inputs
        return step(nnx.merge(graphdef, layer_state), c, x)

    return jax.lax.scan(body, carry, (state, xs))
