"""GPT-2 family: OpenAI GPT-2, DistilGPT-2 and other GPT2LMHeadModel checkpoints.

Mirrors transformers' modeling_gpt2.py: learned token (wte) and position (wpe) embeddings,
pre-norm blocks with LayerNorm, a fused q/k/v projection ``c_attn`` (a Conv1D, whose weights are
already [in, out]; split into q_proj / k_proj / v_proj on load), a GELU MLP, a final ``ln_f``
and an LM head tied to wte. Attention scores are scaled by 1/sqrt(head_dim)
(scale_attn_weights) and optionally by 1/(layer index + 1) (scale_attn_by_inverse_layer_idx), a
per-layer factor fed to the scanned layers as an input (applied to q).

GPT-Neo (gpt_neo.py) reuses this model with its own attention module and per-layer local
(sliding-window) attention: each layer also gets the index of its window as an input.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, POSITIONS
from lmprobe.models.base import HF, Family, HFNames
from lmprobe.models.causal_lm import DecoderLM, DecoderParts, SlidingWindows, untied_head
from lmprobe.models.layers import (
    Embed,
    LayerNorm,
    Linear,
    activation,
    check_length,
    layer_attention,
    stacked,
    update_cache,
)


@dataclasses.dataclass(frozen=True)
class GPT2Config(SlidingWindows):
    vocab_size: int
    hidden_size: int  # n_embd
    num_hidden_layers: int  # n_layer
    num_attention_heads: int  # n_head
    intermediate_size: int  # n_inner, 4 * n_embd by default
    max_position_embeddings: int  # n_positions
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    tie_word_embeddings: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, c: dict) -> GPT2Config:
        # reorder_and_upcast_attn only reorders fp32 arithmetic (our scores are fp32 anyway);
        # add_cross_attention weights are used only with encoder states, which a causal LM never has.
        d = c.get("n_embd", 768)
        return cls(
            vocab_size=c.get("vocab_size", 50257), hidden_size=d, num_hidden_layers=c.get("n_layer", 12),
            num_attention_heads=c.get("n_head", 12), intermediate_size=c.get("n_inner") or 4 * d,
            max_position_embeddings=c.get("n_positions", 1024),
            layer_norm_epsilon=c.get("layer_norm_epsilon", 1e-5),
            activation_function=c.get("activation_function", "gelu_new"),
            scale_attn_weights=c.get("scale_attn_weights", True),
            scale_attn_by_inverse_layer_idx=c.get("scale_attn_by_inverse_layer_idx", False),
            tie_word_embeddings=c.get("tie_word_embeddings", True))

    @property
    def attention_scale(self) -> float:
        """The attention-score scale every layer shares."""
        return self.head_dim ** -0.5 if self.scale_attn_weights else 1.0

    def layer_scales(self) -> tuple[float, ...]:
        """Each layer's further score factor: 1/(index + 1) with scale_attn_by_inverse_layer_idx."""
        return tuple(1 / (i + 1) if self.scale_attn_by_inverse_layer_idx else 1.0
                     for i in range(self.num_hidden_layers))

    def attention_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window; None is global causal attention (all of GPT-2's layers)."""
        return (None,) * self.num_hidden_layers


def attend(cfg: GPT2Config, q, k, v, mask, layer, heads_first: bool):
    """One layer's attention; ``layer`` = (window index, score factor), the layer's scanned inputs;
    ``heads_first``: k, v from a KV cache (``update_cache``)."""
    kind, factor = layer
    if cfg.scale_attn_by_inverse_layer_idx:
        q = q * factor.astype(q.dtype)
    return layer_attention(q, k, v, mask, scale=cfg.attention_scale, windows=cfg.window_kinds(), kind=kind,
                           heads_first=heads_first)


class GPT2Attention(nnx.Module):
    def __init__(self, cfg: GPT2Config, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)  # HF's c_attn, split
        self.k_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.c_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.config = cfg

    def __call__(self, x, *, mask, layer, cache, cache_index):
        k, v, cache = update_cache(cache, self.k_proj(x), self.v_proj(x), cache_index)
        return self.c_proj(attend(self.config, self.q_proj(x), k, v, mask, layer, cache is not None)), cache


class GPT2MLP(nnx.Module):
    def __init__(self, cfg: GPT2Config, *, dtype, param_dtype, rngs):
        d, m = cfg.hidden_size, cfg.intermediate_size
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.c_fc = Linear(d, m, axes=(EMBED, MLP), **kw)
        self.c_proj = Linear(m, d, axes=(MLP, EMBED), **kw)
        self.act = activation(cfg.activation_function)

    def __call__(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nnx.Module):
    def __init__(self, cfg: GPT2Config, attention: type, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.ln_1 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, **kw)
        self.attn = attention(cfg, **kw)
        self.ln_2 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, **kw)
        self.mlp = GPT2MLP(cfg, **kw)

    def __call__(self, x, *, mask, positions, layer, cache, cache_index):  # positions: unused (wpe is added before)
        a, cache = self.attn(self.ln_1(x), mask=mask, layer=layer, cache=cache, cache_index=cache_index)
        x = x + a
        return x + self.mlp(self.ln_2(x)), cache


class GPT2(DecoderLM):
    """GPT2LMHeadModel: learned positions added to the token embeddings; each layer is given its
    window's index and its score factor."""

    parts = DecoderParts(embed="wte", blocks="h", norm="ln_f")
    attention = GPT2Attention  # the attention module of each block (GPT-Neo has its own)

    def __init__(self, cfg: GPT2Config, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.wte = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, **kw)
        self.wpe = Embed(cfg.max_position_embeddings, cfg.hidden_size, axes=(POSITIONS, EMBED),
                         rngs=rngs, **kw)
        self.h = stacked(lambda r: GPT2Block(cfg, self.attention, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.ln_f = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, rngs=rngs, **kw)
        self.lm_head = untied_head(cfg, cfg.hidden_size, rngs=rngs, **kw)

    def block_input(self, h, mask, positions):
        check_length(mask.keys.shape[-1], self.config.max_position_embeddings)
        return h + self.wpe(positions)

    def layer_inputs(self):
        return self.config.window_indices(), jnp.asarray(self.config.layer_scales(), jnp.float32)


_H = "transformer.h.{i}."
FAMILY = Family(
    name="gpt2",
    config_from_hf=GPT2Config.from_hf,
    model=GPT2,
    base_prefix="transformer.",
    is_decoder=True,
    # Conv1D weights are already [in, out]; c_attn's output features are [q | k | v]
    hf_names=HFNames("transformer.", {
        "h": _H.rstrip("."),
        **{f"h.attn.{x}_proj.kernel": HF(_H + "attn.c_attn.weight", qkv=i) for i, x in enumerate("qkv")},
        **{f"h.attn.{x}_proj.bias": HF(_H + "attn.c_attn.bias", qkv=i) for i, x in enumerate("qkv")},
        "lm_head.kernel": HF("lm_head.weight", transpose=True),
    }, conv1d=True),
)
