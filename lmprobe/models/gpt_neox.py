"""GPT-NeoX family: Pythia, Dolly-v2, GPT-NeoX-20B, RedPajama-INCITE.

Mirrors transformers' modeling_gpt_neox.py: LayerNorm blocks with a fused per-head q/k/v
projection (query_key_value, split into q_proj / k_proj / v_proj on load), partial rotary
embeddings (the first ``partial_rotary_factor`` of each head), parallel or sequential
residuals, a GELU MLP and an untied output head ``embed_out``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP
from lmprobe.models.base import HF, Family, HFNames, frozen, hf_rope
from lmprobe.models.causal_lm import DecoderLM, DecoderParts, untied_head
from lmprobe.models.layers import (
    Embed,
    LayerNorm,
    Linear,
    activation,
    apply_rope,
    attention,
    rope_inv_freq,
    stacked,
    update_cache,
)


@dataclasses.dataclass(frozen=True)
class GPTNeoXConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10000.0
    rope_scaling: tuple | None = None  # HF's rope scaling dict as sorted (key, value) items
    layer_norm_eps: float = 1e-5
    hidden_act: str = "gelu"
    use_parallel_residual: bool = True
    attention_bias: bool = True
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, c: dict) -> GPTNeoXConfig:
        # transformers 5 writes rope_parameters; older configs have rotary_pct / rotary_emb_base.
        theta, scaling = hf_rope(c, legacy_theta_key="rotary_emb_base")
        rope = c.get("rope_parameters") or {}
        return cls(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
            num_attention_heads=c["num_attention_heads"],
            partial_rotary_factor=rope.get("partial_rotary_factor", c.get("rotary_pct", 0.25)),
            rope_theta=theta, rope_scaling=frozen(scaling),
            layer_norm_eps=c.get("layer_norm_eps", 1e-5), hidden_act=c.get("hidden_act", "gelu"),
            use_parallel_residual=c.get("use_parallel_residual", True),
            attention_bias=c.get("attention_bias", True),
            tie_word_embeddings=c.get("tie_word_embeddings", False),
            max_position_embeddings=c.get("max_position_embeddings", 2048))


class GPTNeoXAttention(nnx.Module):
    def __init__(self, cfg: GPTNeoXConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(use_bias=cfg.attention_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.k_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.dense = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.scale = hd ** -0.5
        self.inv_freq = rope_inv_freq(int(hd * cfg.partial_rotary_factor), cfg.rope_theta,
                                      cfg.rope_scaling)  # static tuple; rotates the first dims only

    def __call__(self, x, *, mask, positions, cache, cache_index):
        q = apply_rope(self.q_proj(x), positions, self.inv_freq)
        k = apply_rope(self.k_proj(x), positions, self.inv_freq)
        k, v, cache = update_cache(cache, k, self.v_proj(x), cache_index)
        return self.dense(attention(q, k, v, mask, scale=self.scale, heads_first=cache is not None)), cache


class GPTNeoXMLP(nnx.Module):
    def __init__(self, cfg: GPTNeoXConfig, *, dtype, param_dtype, rngs):
        d, m = cfg.hidden_size, cfg.intermediate_size
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dense_h_to_4h = Linear(d, m, axes=(EMBED, MLP), **kw)
        self.dense_4h_to_h = Linear(m, d, axes=(MLP, EMBED), **kw)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x):
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(x)))


class GPTNeoXLayer(nnx.Module):
    def __init__(self, cfg: GPTNeoXConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.input_layernorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)
        self.post_attention_layernorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)
        self.attention = GPTNeoXAttention(cfg, **kw)
        self.mlp = GPTNeoXMLP(cfg, **kw)
        self.use_parallel_residual = cfg.use_parallel_residual

    def __call__(self, x, *, mask, positions, cache, cache_index):
        a, cache = self.attention(self.input_layernorm(x), mask=mask, positions=positions,
                                  cache=cache, cache_index=cache_index)
        if self.use_parallel_residual:  # x + attn(ln1(x)) + mlp(ln2(x))
            return self.mlp(self.post_attention_layernorm(x)) + a + x, cache
        a = a + x
        return self.mlp(self.post_attention_layernorm(a)) + a, cache


class GPTNeoX(DecoderLM):
    """GPTNeoXForCausalLM."""

    parts = DecoderParts(embed="embed_in", norm="final_layer_norm", head="embed_out")

    def __init__(self, cfg: GPTNeoXConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embed_in = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, **kw)
        self.layers = stacked(lambda r: GPTNeoXLayer(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.final_layer_norm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, rngs=rngs, **kw)
        self.embed_out = untied_head(cfg, cfg.hidden_size, rngs=rngs, **kw)


_L = "gpt_neox.layers.{i}."
FAMILY = Family(
    name="gpt_neox",
    config_from_hf=GPTNeoXConfig.from_hf,
    model=GPTNeoX,
    base_prefix="gpt_neox.",
    is_decoder=True,
    hf_names=HFNames("gpt_neox.", {
        "layers": _L.rstrip("."),
        # query_key_value's output features are laid out [heads, 3, head_dim]
        **{f"layers.attention.{x}_proj.kernel": HF(_L + "attention.query_key_value.weight", transpose=True,
                                                   qkv=i, per_head=True) for i, x in enumerate("qkv")},
        **{f"layers.attention.{x}_proj.bias": HF(_L + "attention.query_key_value.bias", qkv=i, per_head=True)
           for i, x in enumerate("qkv")},
        # The LM head sits outside the base model: "embed_out.weight" in checkpoints (transformers 5
        # renames it to lm_head when loading, and back when saving).
        "embed_out": "embed_out",
    }),
)
