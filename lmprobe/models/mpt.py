"""MPT family: MosaicML's MPT-7B / MPT-30B and their fine-tunes.

Mirrors transformers' modeling_mpt.py: pre-norm blocks with bias-free LayerNorms, a fused q/k/v
projection ``Wqkv`` (split into q_proj / k_proj / v_proj on load; optionally clipped to
±clip_qkv), no position embeddings but an ALiBi score bias (per-head slopes, ``alibi_bias_max``),
a GELU MLP, bias-free linear layers and an LM head tied to wte.

ALiBi penalises a key by slope * its distance back from the query: in slots, as transformers does
(within one sequence, padded left or right or decoded from a cache, that equals the distance in
positions), and in positions for a [B, T, S] mask (packed rows, whose slots are not contiguous).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP
from lmprobe.models.base import HF, Family, HFNames
from lmprobe.models.causal_lm import DecoderLM, DecoderParts, untied_head
from lmprobe.models.layers import (
    Embed,
    LayerNorm,
    Linear,
    Mask,
    activation,
    attention,
    stacked,
    update_cache,
)


@dataclasses.dataclass(frozen=True)
class MPTConfig:
    vocab_size: int
    hidden_size: int  # d_model
    num_hidden_layers: int  # n_layers
    num_attention_heads: int  # n_heads
    expansion_ratio: int = 4
    max_position_embeddings: int = 2048  # max_seq_len: what it was trained on (ALiBi does not stop there)
    layer_norm_epsilon: float = 1e-5
    alibi_bias_max: float = 8.0
    clip_qkv: float | None = None
    softmax_scale: float | None = None  # None: 1/sqrt(head_dim)
    logit_scale: float | None = None
    tie_word_embeddings: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, c: dict) -> MPTConfig:
        attn = c.get("attn_config") or {}
        ffn_type = (c.get("ffn_config") or {}).get("ffn_type", "mptmlp")
        unsupported = [what for what, bad in [
            ("alibi=false (learned position embeddings)", not attn.get("alibi", True)),
            ("qk_ln=true", attn.get("qk_ln", False)),
            ("attn_type=" + str(attn.get("attn_type")), attn.get("attn_type", "multihead_attention")
             != "multihead_attention"),
            ("no_bias=false", not c.get("no_bias", True)),
            (f"ffn_type={ffn_type}", ffn_type != "mptmlp"),
        ] if bad]
        if unsupported:
            raise CheckpointError(f"MPT with {', '.join(unsupported)} is not supported (neither is it by "
                                  "transformers' MPT)")
        d = c.get("d_model", 2048)
        logit_scale = c.get("logit_scale")
        if logit_scale == "inv_sqrt_d_model":
            logit_scale = 1 / math.sqrt(d)
        return cls(
            vocab_size=c.get("vocab_size", 50368), hidden_size=d, num_hidden_layers=c.get("n_layers", 24),
            num_attention_heads=c.get("n_heads", 16), expansion_ratio=c.get("expansion_ratio", 4),
            max_position_embeddings=c.get("max_seq_len", 2048),
            layer_norm_epsilon=c.get("layer_norm_epsilon", 1e-5),
            alibi_bias_max=attn.get("alibi_bias_max", 8), clip_qkv=attn.get("clip_qkv") or None,
            softmax_scale=attn.get("softmax_scale"), logit_scale=logit_scale,
            tie_word_embeddings=c.get("tie_word_embeddings", True))


def alibi_slopes(num_heads: int, alibi_bias_max: float) -> tuple[float, ...]:
    """Per-head ALiBi slopes as transformers' build_mpt_alibi_tensor computes them (fp32): for a
    head count that is not a power of two, every other slope of the next power of two."""
    n = 2 ** math.ceil(math.log2(num_heads))
    slopes = 1.0 / np.power(np.float32(2), np.arange(1, n + 1, dtype=np.float32) * np.float32(alibi_bias_max / n))
    if n != num_heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:num_heads]
    return tuple(slopes.astype(np.float32).tolist())


def alibi_bias(slopes: tuple[float, ...], mask: Mask, t: int, s: int):
    """The fp32 score bias [B or 1, heads, T, S]: -slope * (query - key), in slots, or in positions
    for a [B, T, S] mask."""
    if mask.keys is not None and mask.keys.ndim == 3:
        distance = mask.positions[:, :, None] - mask.positions[:, None, :]
    else:
        distance = (mask.offset + jnp.arange(t)[:, None] - jnp.arange(s)[None, :])[None]
    return -jnp.asarray(slopes, jnp.float32)[None, :, None, None] * distance[:, None].astype(jnp.float32)


class MPTAttention(nnx.Module):
    def __init__(self, cfg: MPTConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)  # HF's Wqkv, split
        self.k_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.out_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.scale = cfg.softmax_scale or hd ** -0.5
        self.clip = cfg.clip_qkv
        self.slopes = alibi_slopes(h, cfg.alibi_bias_max)  # static tuple

    def __call__(self, x, *, mask, positions, cache, cache_index):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.clip:
            q, k, v = (jnp.clip(y, -self.clip, self.clip) for y in (q, k, v))
        slots = k.shape[1] if cache is None else cache.k.shape[2]
        k, v, cache = update_cache(cache, k, v, cache_index)
        cached = cache is not None  # keys heads first [B, K, S, D] (or the cache and this step's entries)
        bias = alibi_bias(self.slopes, mask, q.shape[1], slots)
        return self.out_proj(attention(q, k, v, mask, scale=self.scale, bias=bias, heads_first=cached)), cache


class MPTMLP(nnx.Module):
    def __init__(self, cfg: MPTConfig, *, dtype, param_dtype, rngs):
        d, m = cfg.hidden_size, cfg.expansion_ratio * cfg.hidden_size
        kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.up_proj = Linear(d, m, axes=(EMBED, MLP), **kw)
        self.down_proj = Linear(m, d, axes=(MLP, EMBED), **kw)
        self.act = activation("gelu")  # exact (erf) GELU

    def __call__(self, x):
        return self.down_proj(self.act(self.up_proj(x)))


class MPTBlock(nnx.Module):
    def __init__(self, cfg: MPTConfig, *, dtype, param_dtype, rngs):
        kw = dict(eps=cfg.layer_norm_epsilon, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm_1 = LayerNorm(cfg.hidden_size, **kw)
        self.attn = MPTAttention(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm_2 = LayerNorm(cfg.hidden_size, **kw)
        self.ffn = MPTMLP(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x, *, mask, positions, cache, cache_index):
        a, cache = self.attn(self.norm_1(x), mask=mask, positions=positions, cache=cache, cache_index=cache_index)
        x = x + a
        return x + self.ffn(self.norm_2(x)), cache


class MPT(DecoderLM):
    """MptForCausalLM (ALiBi, in each block's attention: no position embeddings)."""

    parts = DecoderParts(embed="wte", blocks="blocks", norm="norm_f")

    def __init__(self, cfg: MPTConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.wte = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, **kw)
        self.blocks = stacked(lambda r: MPTBlock(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.norm_f = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, use_bias=False, rngs=rngs, **kw)
        self.lm_head = untied_head(cfg, cfg.hidden_size, rngs=rngs, **kw)

    def logits(self, hidden):
        """fp32 logits for final hidden states (call it only at the positions you need); times
        ``logit_scale`` where the config sets one (MosaicML's code; transformers ignores it)."""
        logits = super().logits(hidden)
        return logits if self.config.logit_scale is None else logits * self.config.logit_scale


_B = "transformer.blocks.{i}."
FAMILY = Family(
    name="mpt",
    config_from_hf=MPTConfig.from_hf,
    model=MPT,
    base_prefix="transformer.",
    is_decoder=True,
    # Wqkv's output features are laid out [3, heads, head_dim]
    hf_names=HFNames("transformer.", {
        "blocks": _B.rstrip("."),
        **{f"blocks.attn.{x}_proj.kernel": HF(_B + "attn.Wqkv.weight", transpose=True, qkv=i)
           for i, x in enumerate("qkv")},
        "lm_head": "lm_head",
    }),
)
