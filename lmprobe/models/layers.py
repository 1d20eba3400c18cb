"""Building blocks shared by the model families.

Every parameter carries logical axis names (``axes`` metadata, constants of
lmprobe.models.axes); the engine maps them to mesh axes. Kernels are stored as [in..., out...]
(torch's Linear weight transposed; attention projections keep heads as their own dimension).
Softmax, norms and logits run in fp32 whatever the compute dtype.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.core import spmd

from lmprobe.models.axes import BATCH, EMBED, HEADS, LAYERS, LENGTH, VOCAB

Array = jax.Array
_init = nnx.initializers.normal(0.02)


def param(rngs: nnx.Rngs, shape, axes, dtype, init=_init) -> nnx.Param:
    """A parameter of ``shape`` whose dimensions carry the logical names ``axes``."""
    return nnx.Param(init(rngs.params(), shape, dtype), axes=tuple(axes))


def _dims(d) -> tuple[int, ...]:
    return (d,) if isinstance(d, int) else tuple(d)


class Linear(nnx.Module):
    """y = x @ kernel + bias over x's trailing ``d_in`` dims; kernel [*d_in, *d_out], bias [*d_out].

    ``d_in`` / ``d_out`` are ints or tuples: a query projection maps embed -> (heads, head_dim),
    an output projection (heads, head_dim) -> embed.
    """

    def __init__(self, d_in, d_out, *, axes, use_bias=True, dtype, param_dtype, rngs):
        d_in, d_out = _dims(d_in), _dims(d_out)
        self.kernel = param(rngs, d_in + d_out, axes, param_dtype)
        self.bias = param(rngs, d_out, axes[len(d_in):], param_dtype, nnx.initializers.zeros) if use_bias else None
        self.num_in, self.dtype = len(d_in), dtype

    def __call__(self, x: Array) -> Array:
        y = jnp.tensordot(x.astype(self.dtype), self.kernel[...].astype(self.dtype), axes=self.num_in)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


class Embed(nnx.Module):
    """Token (or position) embedding table [num, dim]; ``attend`` is the tied output head."""

    def __init__(self, num, dim, *, axes=(VOCAB, EMBED), dtype, param_dtype, rngs):
        self.embedding = param(rngs, (num, dim), axes, param_dtype)
        self.dtype = dtype

    def __call__(self, ids: Array) -> Array:
        return jnp.take(self.embedding[...], ids, axis=0).astype(self.dtype)

    def attend(self, x: Array) -> Array:
        """Logits in fp32 against the embedding matrix (tied LM head)."""
        return jnp.einsum("...d,vd->...v", x, self.embedding[...].astype(x.dtype),
                          preferred_element_type=jnp.float32)


def lm_logits(hidden: Array, embed: Embed, head: Linear | None) -> Array:
    """fp32 logits from final hidden states: the untied ``head`` if any, else the tied ``embed``."""
    if head is None:
        return embed.attend(hidden)
    return jnp.einsum("...d,dv->...v", hidden, head.kernel[...].astype(hidden.dtype),
                      preferred_element_type=jnp.float32)


class RMSNorm(nnx.Module):
    """x / rms(x) * weight, in fp32 (Llama).

    ``unit_offset`` (Gemma): x / rms(x) * (1 + weight), the product taken in fp32 before the cast;
    ``axes``: the weight's logical axis (HEAD_DIM for a per-head q/k norm).
    """

    def __init__(self, dim, *, eps, dtype, param_dtype, rngs, unit_offset=False, axes=(EMBED,)):
        init = jnp.zeros if unit_offset else jnp.ones
        self.weight = nnx.Param(init((dim,), param_dtype), axes=tuple(axes))
        self.eps, self.dtype, self.unit_offset = eps, dtype, unit_offset

    def __call__(self, x: Array) -> Array:
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        if self.unit_offset:
            return (x32 * (1.0 + self.weight[...].astype(jnp.float32))).astype(self.dtype)
        return self.weight[...].astype(self.dtype) * x32.astype(self.dtype)


class LayerNorm(nnx.Module):
    """(x - mean) / std * weight + bias, in fp32."""

    def __init__(self, dim, *, eps, dtype, param_dtype, rngs, use_scale=True, use_bias=True):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype), axes=(EMBED,)) if use_scale else None
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype), axes=(EMBED,)) if use_bias else None
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


def apply_rope(x: Array, positions: Array, inv_freq: tuple[float, ...], *, interleaved: bool = False) -> Array:
    """Rotate the first 2*len(inv_freq) dims of x [B, T, H, D] by HF's rotate_half convention, or,
    ``interleaved``, GPT-J's rotate_every_two (frequency i rotates the pair of dims 2i, 2i+1)."""
    rot = 2 * len(inv_freq)
    angles = positions[..., None].astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)  # [B, T, rot/2]
    xr, xpass = x[..., :rot].astype(jnp.float32), x[..., rot:]
    if interleaved:
        angles = jnp.repeat(angles, 2, axis=-1)[:, :, None, :]
        rotated = jnp.stack([-xr[..., 1::2], xr[..., ::2]], axis=-1).reshape(xr.shape)
    else:
        angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
        half = rot // 2
        rotated = jnp.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    out = (xr * cos + rotated * sin).astype(x.dtype)
    return jnp.concatenate([out, xpass], axis=-1) if xpass.shape[-1] else out


# ----------------------------------------------------------------------------- attention


class LayerCache(NamedTuple):
    """One layer's keys and values [B, kv_heads, S_max, head_dim], heads first: the layout the
    decoding attention reads (``attention(..., heads_first=True)``), so that no step transposes the
    cache; stacked over layers [L, B, kv_heads, S_max, head_dim] it is the KV cache."""

    k: Array
    v: Array


def init_cache(num_layers, batch, max_len, kv_heads, head_dim, dtype=jnp.float32) -> LayerCache:
    """An empty KV cache for ``num_layers`` layers (leading axis), filled by decoding."""
    shape = (num_layers, batch, kv_heads, max_len, head_dim)
    return LayerCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


@functools.partial(jax.tree_util.register_dataclass, data_fields=["keys", "offset", "positions"],
                   meta_fields=["causal"])
@dataclasses.dataclass(frozen=True)
class Mask:
    """Which keys each query may see, kept factored: nothing [T, S]-sized is built when avoidable.

    keys: [B, S] real (non-padding) key slots, None for all; or [B, T, S], which keys each query
        sees (packed rows; no cache).
    causal: a query sees no key in a later slot (static).
    offset: the slot of query 0 (the cache write index when decoding): the int 0 or traced.
    positions: [B, T] position ids: sliding windows over a [B, T, S] mask are measured in them.
    """

    keys: Array | None
    causal: bool = False
    offset: Any = 0
    positions: Array | None = None


_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("lmprobe_attention_target", default=None)


def platform_of(device) -> str:
    """'cpu', 'tpu', 'cuda' (an NVIDIA GPU), or another GPU's platform: what attention keys on."""
    if device.platform == "gpu":
        return "cuda" if "cuda" in getattr(device.client, "platform_version", "").lower() else "gpu"
    return device.platform


@contextlib.contextmanager
def traced_for(platform: str | None):
    """Trace attention for devices of ``platform`` (``platform_of``'s names): Pallas kernels for
    'tpu', cuDNN for 'cuda', whatever devices this process has. The engine sets it from its mesh
    (lmprobe.engine.mesh.tracing_on), so that a step compiled ahead of time for a TPU topology on a
    CPU host gets the TPU's kernels. None: the default backend's devices. jax caches traces by
    function, shapes and mesh, not by this setting: trace a function anew after changing it
    without changing the mesh."""
    token = _TARGET.set(platform)
    try:
        yield
    finally:
        _TARGET.reset(token)


_SEGMENTS: contextvars.ContextVar[Array | None] = contextvars.ContextVar("lmprobe_packed_segments", default=None)


@contextlib.contextmanager
def packed_segments(segments: Array):
    """Trace attention over packed rows knowing their segments [B, T] (lmprobe.engine.packing: the
    shared prefix 0, each packed sequence its own id from 1, padding -1), whose [B, T, T] visibility
    the models' Masks hold: on TPU, ``attention`` then takes the splash kernel in two passes (prefix,
    own segment) instead of XLA's attention over that mask, which is then never built."""
    token = _SEGMENTS.set(segments)
    try:
        yield
    finally:
        _SEGMENTS.reset(token)


def _segments_of(mask: Mask, t: int, s: int) -> Array | None:
    """The segments (``packed_segments``) behind a packed rows' [B, T, T] mask, or None."""
    segments = _SEGMENTS.get()
    keys = mask.keys
    if segments is None or keys is None or keys.ndim != 3 or t != s or segments.shape != keys.shape[:2]:
        return None
    return segments


def target_platform() -> str:
    """The platform attention is traced for: ``traced_for``'s, else the default backend's."""
    return _TARGET.get() or platform_of(jax.devices()[0])


def attention_implementation(dtype, head_dim: int, num_queries: int = 2) -> str:
    """The jax.nn.dot_product_attention implementation for these inputs: 'cudnn' or 'xla'.

    'cudnn' (fused flash attention: no [T, S] scores in memory) on CUDA GPUs for bf16/fp16 inputs
    with head_dim a multiple of 8 and <= 128 and more than one query (decoding steps attend from
    one query, cheap anyway); 'xla' otherwise: CPU, TPU, fp32. Both softmax in fp32. (On TPU,
    ``attention`` takes Pallas' splash attention where ``pallas_applies``.)
    """
    if num_queries < 2 or head_dim % 8 or head_dim > 128 or jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
        return "xla"
    return "cudnn" if target_platform() == "cuda" else "xla"


def _visible(mask: Mask, t: int, s: int, window: int | None, q_start=0, k_start=0) -> Array:
    """Boolean [B or 1, t, s]: query ``q_start + i`` (slot offset + q_start + i) may see key slot
    ``k_start + j``; the starts may be traced (they must keep the slices inside the mask)."""
    q_slot = mask.offset + q_start + jnp.arange(t)[:, None]
    k_slot = k_start + jnp.arange(s)[None, :]
    if mask.keys is not None and mask.keys.ndim == 3:
        allowed = jax.lax.dynamic_slice(mask.keys, (0, q_start, k_start), (mask.keys.shape[0], t, s)).astype(bool)
        distance = (jax.lax.dynamic_slice_in_dim(mask.positions, q_start, t, 1)[:, :, None]
                    - jax.lax.dynamic_slice_in_dim(mask.positions, k_start, s, 1)[:, None, :])
    else:
        allowed = (jnp.ones((1, 1, s), bool) if mask.keys is None
                   else jax.lax.dynamic_slice_in_dim(mask.keys, k_start, s, 1)[:, None, :].astype(bool))
        distance = q_slot - k_slot
    if mask.causal:
        allowed = allowed & (k_slot <= q_slot)
    if window is not None:
        allowed = allowed & (distance < window)
    return allowed


# Causal rows of at least BLOCKED_FROM tokens on the CPU's 'xla' path attend in BLOCK x BLOCK tiles
# (_blocked_causal): faster than the full [T, T] scores from 256 tokens on (figures: commit 6c1cdb6's message).
BLOCKED_FROM = 256
BLOCK = 128
_MASKED = -0.7 * float(np.finfo(np.float32).max)  # the score of a hidden key, as jax.nn.dot_product_attention's


def blocked_causal_applies(impl: str, bias, causal_same_slots: bool, t: int) -> bool:
    """Whether ``attention`` goes by tiles: a causal row of at least BLOCKED_FROM tokens on the CPU's
    'xla' path without a bias. Only the CPU's: on GPU (fp32) and TPU the tiled scan is unmeasured, so
    XLA's own attention stays."""
    return (impl == "xla" and bias is None and causal_same_slots and t >= BLOCKED_FROM
            and target_platform() == "cpu")


def _blocked_causal(q: Array, k: Array, v: Array, mask: Mask, scale: float, window: int | None,
                    block: int) -> Array:
    """Causal attention of a long row by ``block`` x ``block`` tiles, flash style: each block of
    queries runs an online softmax (fp32 running max, sum and output) over the key tiles up to its
    own, from the first its window reaches (the others are skipped: half the T^2 scores of the full
    row), and no [T, S] array is built. ``mask.keys`` is None or [B, S]. A query that sees no key
    (padding) averages the values of all keys, as the unblocked 'xla' path does: its running max
    stays the masked score. One scan over query blocks, one over key tiles: the program's size does
    not grow with T."""
    b, t, n, d = q.shape
    heads, tiles = k.shape[2], -(-t // block)
    average = jnp.mean(v.astype(jnp.float32), axis=1)[:, :, None, None, :]  # [B, K, 1, 1, D]
    q, k, v = (jnp.pad(x, ((0, 0), (0, tiles * block - t), (0, 0), (0, 0))) for x in (q, k, v))
    if mask.keys is not None:  # padding slots: keys nobody sees, queries dropped below
        mask = dataclasses.replace(mask, keys=jnp.pad(mask.keys, ((0, 0), (0, tiles * block - t))))

    def query_block(_, i):
        q_start = i * block
        q_block = jax.lax.dynamic_slice_in_dim(q, q_start, block, 1).reshape(b, block, heads, n // heads, d)
        first = 0 if window is None else jnp.maximum(q_start - window + 1, 0) // block

        def add_tile(carry, j):  # carry: running max and sum [B, K, G, block], output [B, K, G, block, D]
            top, total, acc = carry
            k_tile, v_tile = (jax.lax.dynamic_slice_in_dim(x, j * block, block, 1) for x in (k, v))
            scores = jnp.einsum("btkgd,bskd->bkgts", q_block, k_tile, preferred_element_type=jnp.float32) * scale
            allowed = _visible(mask, block, block, window, q_start, j * block)[:, None, None]
            scores = jnp.where(allowed, scores, jnp.float32(_MASKED))
            new_top = jnp.maximum(top, scores.max(-1))
            probs = jnp.exp(scores - new_top[..., None])
            rescale = jnp.exp(top - new_top)
            acc = acc * rescale[..., None] + jnp.einsum("bkgts,bskd->bkgtd", probs.astype(v.dtype), v_tile,
                                                        preferred_element_type=jnp.float32)
            return new_top, total * rescale + probs.sum(-1), acc

        def tile(carry, j):
            return jax.lax.cond((j >= first) & (j <= i), add_tile, lambda c, _: c, carry, j), None

        top = jnp.full((b, heads, n // heads, block), _MASKED, jnp.float32)
        init = (top, jnp.zeros_like(top), jnp.zeros(top.shape + (d,), jnp.float32))
        (top, total, acc), _ = jax.lax.scan(tile, init, jnp.arange(tiles))
        return None, jnp.where((top > _MASKED)[..., None], acc / total[..., None], average)

    _, out = jax.lax.scan(query_block, None, jnp.arange(tiles))  # [tiles, B, K, G, block, D]
    return out.transpose(1, 0, 4, 2, 3, 5).reshape(b, tiles * block, n, d)[:, :t].astype(q.dtype)


PALLAS_BLOCKS = (512, 256, 128)  # splash attention's tile sizes, the largest dividing both lengths


def pallas_applies(q: Array, k: Array, mask: Mask, window: int | None, bias, heads_first: bool) -> bool:
    """Whether ``attention`` takes Pallas' splash attention (``pallas_attention``): traced for TPU
    (``traced_for``), no score bias, queries from slot 0 (``mask.offset`` the int 0) over keys in
    slots (``mask.keys`` [B, S] or None: padding as segment ids; or packed rows' [B, T, T] with their
    ``packed_segments``, causal, no window), a window only with causality, both lengths multiples of
    128. Else the XLA path (shorter rows, ALiBi / T5 biases, decoding steps, other [B, T, S] masks)."""
    s = k.shape[2] if heads_first else k.shape[1]
    packed = _segments_of(mask, q.shape[1], s) is not None and mask.causal and window is None
    return (target_platform() == "tpu" and bias is None and isinstance(mask.offset, int) and mask.offset == 0
            and (mask.keys is None or mask.keys.ndim == 2 or packed) and (window is None or mask.causal)
            and q.shape[1] % PALLAS_BLOCKS[-1] == 0 and s % PALLAS_BLOCKS[-1] == 0)


def _mesh_axes(batch: int, heads: int, kv_heads: int):
    """The abstract mesh a step is traced on and the mesh axes of the batch and of the heads (the
    activation rules' BATCH and HEADS, where they divide): None when there is no mesh."""
    mesh = jax.sharding.get_abstract_mesh()
    rules = dict(spmd.get_logical_axis_rules())
    if mesh.empty or not rules:
        return None, None, None

    def size(axis):
        names = (axis,) if isinstance(axis, str) else tuple(axis or ())
        return int(np.prod([mesh.shape[a] for a in names])) if all(a in mesh.axis_names for a in names) else 0

    batch_axis, head_axis = rules.get(BATCH), rules.get(HEADS)
    batch_axis = batch_axis if batch_axis and size(batch_axis) and batch % size(batch_axis) == 0 else None
    head_axis = (head_axis if head_axis and size(head_axis) and heads % size(head_axis) == 0
                 and kv_heads % size(head_axis) == 0 else None)
    return mesh, batch_axis, head_axis


def pallas_attention(q: Array, k: Array, v: Array, mask: Mask, *, scale: float, window: int | None = None,
                     heads_first: bool = False, interpret: bool = False) -> Array:
    """``attention`` by Pallas' TPU splash attention kernel (flash style: no [T, S] scores in
    memory), inside shard_map on the traced-on mesh: batch over the activation rules' BATCH axes,
    heads over their HEADS axis ('model'). Causality and a sliding window are the kernel's static
    mask; padding (``mask.keys`` [B, S]) goes in as segment ids (1 real, 0 padding: a padding query
    sees padding keys only, its output unused). Grouped-query heads natively. ``interpret``: run
    the kernel in Pallas' interpreter (any backend; tests on CPU). Inputs as ``pallas_applies``
    admits them.

    Packed rows (``packed_segments``: a query sees the prefix and its own sequence, causally) take two
    causal passes whose segment ids select the prefix's keys, then the query's own sequence's, joined
    by their log-sum-exps: softmax over the union. A query with no key in a pass (a prefix query's own
    sequence, a row without prefix) gets a log-sum-exp near the mask value, so that pass weighs 0."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    b, t, n, d = q.shape
    k, v = (x if heads_first else x.transpose(0, 2, 1, 3) for x in (k, v))  # [B, K, S, D], the kernel's layout
    s, kv_heads = k.shape[2], k.shape[1]
    q = (q.astype(jnp.float32) * jnp.float32(scale)).astype(q.dtype).transpose(0, 2, 1, 3)  # [B, N, T, D]
    segments = _segments_of(mask, t, s)
    keys = (segments if segments is not None else mask.keys if mask.keys is None or mask.keys.ndim == 2
            else None)
    keys = None if keys is None else keys.astype(jnp.int32)
    block_q = next(x for x in PALLAS_BLOCKS if t % x == 0)
    block_kv = next(x for x in PALLAS_BLOCKS if s % x == 0)
    blocks = splash.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv,
                               block_q_dkv=block_q, block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv,
                               block_q_dq=block_q, block_kv_dq=block_kv)
    mesh, batch_axis, head_axis = _mesh_axes(b, n, kv_heads)

    def local(q, k, v, keys):  # one device's rows and heads
        if window is not None:
            one = masks.LocalMask((t, s), window_size=(window - 1, 0), offset=0)
        elif mask.causal:
            one = masks.CausalMask((t, s))
        else:
            one = masks.FullMask((t, s))
        kernel = splash.make_splash_mha(masks.MultiHeadMask([one] * q.shape[1]), block_sizes=blocks,
                                        head_shards=1, q_seq_shards=1, interpret=interpret,
                                        save_residuals=segments is not None)
        if keys is None:
            return jax.vmap(kernel)(q, k, v)
        with_ids = jax.vmap(lambda q, k, v, ids: kernel(q, k, v, segment_ids=ids))
        if segments is None:
            return with_ids(q, k, v, splash.SegmentIds(keys[:, :t], keys))
        # the prefix (id 0) for every query; then each sequence's own keys (prefix and padding queries: none)
        passes = [splash.SegmentIds(jnp.ones_like(keys), (keys == 0).astype(jnp.int32)),
                  splash.SegmentIds(jnp.where(keys > 0, keys, -1), jnp.where(keys > 0, keys, -2))]
        (o1, (l1,)), (o2, (l2,)) = (with_ids(q, k, v, ids) for ids in passes)
        total = jnp.logaddexp(l1, l2)
        out = (o1.astype(jnp.float32) * jnp.exp(l1 - total)[..., None]
               + o2.astype(jnp.float32) * jnp.exp(l2 - total)[..., None])
        return out.astype(q.dtype)

    if q.dtype == jnp.bfloat16:  # bf16 dots take the default precision (Mosaic refuses an fp32 one on them)
        kernel_call = local

        def local(*args):
            with jax.default_matmul_precision("default"):
                return kernel_call(*args)

    if mesh is not None:
        heads_spec = jax.sharding.PartitionSpec(batch_axis, head_axis, None, None)
        keys_spec = jax.sharding.PartitionSpec(batch_axis, None)
        local = jax.shard_map(local, mesh=mesh, in_specs=(heads_spec, heads_spec, heads_spec,
                                                          None if keys is None else keys_spec),
                              out_specs=heads_spec, check_vma=False)
    return local(q, k, v, keys).transpose(0, 2, 1, 3)


def _attention_heads_first(q: Array, k, v, mask: Mask, window, scale: float, bias) -> Array:
    """jax.nn.dot_product_attention's 'xla' numerics for keys and values heads first [B, K, S, D]
    (a KV cache): both contractions take the cache as it is stored, with no transpose of it. k, v
    may be pairs (the cache's slots, the T new entries [B, K, T, D] that go in at ``mask.offset``):
    the new entries are attended to beside the slots they replace, so the cache is not copied to
    write them first. ``bias`` [B or 1, N or 1, T, S] fp32 or None."""
    b, t, n, d = q.shape
    pair = isinstance(k, tuple)
    s = (k[0] if pair else k).shape[2]
    heads = (k[0] if pair else k).shape[1]
    allowed = _visible(mask, t, s, window)  # [B or 1, T, S]
    if pair:  # slots offset .. offset + T come from the new entries, the rest from the cache
        fresh = jax.lax.dynamic_slice_in_dim(allowed, mask.offset, t, 2)
        stale = (jnp.arange(s) >= mask.offset) & (jnp.arange(s) < mask.offset + t)
        allowed = jnp.concatenate([allowed & ~stale, fresh], axis=-1)
        if bias is not None:
            bias = jnp.concatenate([bias, jax.lax.dynamic_slice_in_dim(bias, mask.offset, t, 3)], axis=-1)
    precision = jax.lax.DotAlgorithmPreset.BF16_BF16_F32 if q.dtype == jnp.bfloat16 else None
    g = n // heads
    # queries as [B, K, G*T, D]: both dots are plain batched matmuls over (B, K), as XLA's CPU dots run
    # fastest (a T axis between the batch and the contracted dims was slower: commit 575927d's message)
    grouped = q.reshape(b, t, heads, g, d).transpose(0, 2, 3, 1, 4).reshape(b, heads, g * t, d)

    def scores_of(keys):
        return jnp.einsum("bkmd,bksd->bkms", grouped, keys, precision=precision, preferred_element_type=jnp.float32)

    scores = jnp.concatenate([scores_of(k[0]), scores_of(k[1])], axis=-1) if pair else scores_of(k)
    scores = scores.reshape(b, heads, g, t, -1) * jnp.float32(scale)
    if bias is not None:
        split = (heads, g) if bias.shape[1] == n else (1, 1)
        scores = scores + bias.reshape(bias.shape[0], *split, *bias.shape[2:]).astype(jnp.float32)
    scores = jnp.where(allowed[:, None, None], scores, jnp.float32(_MASKED))
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype).reshape(b, heads, g * t, -1)
    if pair:
        out = (jnp.einsum("bkms,bksd->bkmd", probs[..., :s], v[0])
               + jnp.einsum("bkms,bksd->bkmd", probs[..., s:], v[1]))
    else:
        out = jnp.einsum("bkms,bksd->bkmd", probs, v)
    return out.reshape(b, heads, g, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, n, d).astype(q.dtype)


def attention(q: Array, k: Array, v: Array, mask: Mask, *, scale: float, window: int | None = None,
              bias: Array | None = None, heads_first: bool = False) -> Array:
    """softmax(scale * q.k) v over the keys ``mask`` lets each query see (jax.nn.dot_product_attention).

    q [B, T, N, D]; k, v [B, S, K, D], or [B, K, S, D] when ``heads_first`` (a KV cache's layout,
    ``update_cache``'s keys), N a multiple of K (grouped-query heads, natively); returns
    [B, T, N, D]. ``window``: a causal sliding window, a query sees keys fewer than ``window`` slots
    back (positions back, for a [B, T, S] mask). Scores and softmax are fp32; fully masked rows
    (padding) average over their keys, finite. Padding and causality go in as a [B, 1, 1, S]
    boolean with is_causal / local_window_size when queries and keys are the same slots (``keys``
    [B, S] or None, no cache offset, T == S); otherwise (decoding, packed rows) as one boolean
    [B, 1, T, S]. No float bias is built here (cuDNN turns a boolean mask into one, in the compute
    dtype). ``bias``: an fp32 score bias [B or 1, N or 1, T, S] added after scaling (ALiBi); it
    takes the 'xla' implementation, which adds it to fp32 scores. On CPU, causal rows of at least
    ``BLOCKED_FROM`` tokens that would take the 'xla' path without a bias (same slots, ``keys``
    [B, S] or None) go by tiles instead, without [T, S] scores: the same result to fp32 rounding.
    Traced for TPU (``traced_for``; the engine's ``tracing_on`` a TPU mesh), what ``pallas_applies``
    admits goes to Pallas' splash attention (``pallas_attention``), the rest to XLA's.
    """
    k, v = jax.tree.map(lambda x: x.astype(q.dtype), (k, v))
    if not isinstance(k, tuple) and pallas_applies(q, k, mask, window, bias, heads_first):
        return pallas_attention(q, k, v, mask, scale=scale, window=window, heads_first=heads_first)
    if heads_first:  # a cache's keys (decoding: with the new entries beside them, update_cache)
        return _attention_heads_first(q, k, v, mask, window, scale, bias)
    t, s = q.shape[1], k.shape[1]
    impl = "xla" if bias is not None else attention_implementation(q.dtype, q.shape[-1], t)
    same_slots = isinstance(mask.offset, int) and mask.offset == 0 and t == s
    slot_keys = mask.keys is None or mask.keys.ndim == 2
    if blocked_causal_applies(impl, bias, same_slots and slot_keys and mask.causal, t):
        return _blocked_causal(q, k, v, mask, scale, window, BLOCK)
    if same_slots and slot_keys:
        allowed = None if mask.keys is None else mask.keys[:, None, None, :].astype(bool)
        kw = dict(is_causal=mask.causal, local_window_size=None if window is None else (window - 1, 0))
    else:
        allowed, kw = _visible(mask, t, s, window)[:, None], {}
    if impl == "cudnn" and allowed is not None:
        allowed = jnp.broadcast_to(allowed, (allowed.shape[0], 1, t, s))
    return jax.nn.dot_product_attention(q, k, v, bias, mask=allowed, scale=scale, implementation=impl, **kw)


def layer_attention(q, k, v, mask: Mask, *, scale: float, windows: tuple, kind, heads_first: bool = False) -> Array:
    """``attention`` with the sliding window ``windows[kind]``, ``kind`` traced (a scanned layer's
    input): one lax.switch branch per distinct window, only the layer's own runs."""
    branches = [functools.partial(attention, mask=mask, scale=scale, window=w, heads_first=heads_first)
                for w in windows]
    return branches[0](q, k, v) if len(branches) == 1 else jax.lax.switch(kind, branches, q, k, v)


DECODE_PAIR_MAX = 1  # steps of at most this many tokens attend to the cache and their entries apart (update_cache)


def update_cache(cache: LayerCache | None, k: Array, v: Array, index) -> tuple[Array, Array, LayerCache | None]:
    """Keys and values to attend to and the entries written, for ``write_cache`` to store.

    Without a ``cache``: k and v [B, T, K, D] as given, and None. With one: this layer's cache with
    this step's k, v written at slot ``index``, heads first [B, K, S, D] (attend with
    ``heads_first=True``), and the entries written [B, K, T, D] (only the T new tokens transposed).
    A decoding step (T <= ``DECODE_PAIR_MAX``) gets k and v as pairs (the cache as it is, the
    entries written) instead: writing them into the layer's cache slice first copied the slice.

    A scanned layer returns only what it wrote: returning its whole updated cache would copy the
    cache once per step (read and write) and hold it twice.
    """
    if cache is None:
        return k, v, None
    written = LayerCache(k.astype(cache.k.dtype).transpose(0, 2, 1, 3), v.astype(cache.v.dtype).transpose(0, 2, 1, 3))
    if k.shape[1] <= DECODE_PAIR_MAX:
        return (cache.k, written.k), (cache.v, written.v), written
    start = (0, 0, index, 0)
    return (jax.lax.dynamic_update_slice(cache.k, written.k, start),
            jax.lax.dynamic_update_slice(cache.v, written.v, start), written)


def write_cache(cache: LayerCache | None, written: LayerCache | None, index) -> LayerCache | None:
    """The stacked cache [L, B, K, S, D] with every layer's ``written`` entries [L, B, K, T, D]
    (``update_cache``'s, stacked by the layer scan) stored at slot ``index``: in place, when the
    cache is not used afterwards (a decoding loop's carry)."""
    if cache is None:
        return None
    start = (0, 0, 0, index, 0)
    return LayerCache(jax.lax.dynamic_update_slice(cache.k, written.k, start),
                      jax.lax.dynamic_update_slice(cache.v, written.v, start))


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
            var.set_metadata(axes=(LAYERS,) + tuple(var.get_metadata()["axes"]))
    return blocks


def constrain(x: Array, axes: tuple) -> Array:
    """Pin activation ``x``'s dims (logical names, lmprobe.models.axes) to mesh axes by the rules the
    engine set with ``flax.nnx.logical_axis_rules`` under a mesh; a no-op outside them.

    Without it XLA may keep the layer input of an FSDP-sharded model gathered over the batch and
    shard weights' activations instead (twice the activation memory at 8 x 2048 tokens, opt-13b).
    """
    rules = dict(spmd.get_logical_axis_rules())
    if not rules or jax.sharding.get_abstract_mesh().empty:
        return x
    return jax.lax.with_sharding_constraint(x, jax.sharding.PartitionSpec(*(rules.get(a) for a in axes)))


def scan_layers(blocks: nnx.Module, step, carry, xs=None):
    """Run ``step(block, carry, x) -> (carry, y)`` over the stacked blocks with one lax.scan.

    The program is compiled once for one layer, so compile time does not grow with depth. The
    carry (the hidden states [B, T, D]) is kept split over the batch (``constrain``).
    """
    graphdef, state = nnx.split(blocks)

    def body(c, inputs):
        layer_state, x = inputs
        return step(nnx.merge(graphdef, layer_state), constrain(c, (BATCH, LENGTH, EMBED)), x)

    return jax.lax.scan(body, carry, (state, xs))
