"""Llama family: LLaMA, Llama-2/3, SmolLM2, Mistral-style grouped-query attention, and Qwen2 (Qwen2.5).

Mirrors transformers' modeling_llama.py: pre-norm blocks with RMSNorm, RoPE on q and k,
SwiGLU MLP, optional tied LM head, optional sliding-window attention (Mistral: every layer;
Qwen2: the layers its ``layer_types`` name). Qwen2 (modeling_qwen2.py) is a Llama with biases on
q/k/v only (``qkv_bias``).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP
from lmprobe.models.base import Family, HFNames, frozen, hf_rope
from lmprobe.models.causal_lm import DecoderLM, SlidingWindows, untied_head
from lmprobe.models.layers import (
    Embed,
    Linear,
    RMSNorm,
    activation,
    apply_rope,
    layer_attention,
    rope_inv_freq,
    stacked,
    update_cache,
)


@dataclasses.dataclass(frozen=True)
class LlamaConfig(SlidingWindows):
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: tuple | None = None  # HF's rope_scaling dict as sorted (key, value) items
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # on q, k, v and o
    qkv_bias: bool = False  # on q, k and v only (Qwen2)
    mlp_bias: bool = False
    hidden_act: str = "silu"
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None  # "full_attention" / "sliding_attention"; None: all sliding

    @classmethod
    def from_hf(cls, c: dict) -> LlamaConfig:
        heads, qwen2 = c["num_attention_heads"], c.get("model_type") == "qwen2"
        theta, scaling = hf_rope(c)
        # As Qwen2Config: no window unless use_sliding_window; then layers from max_window_layers on.
        window = c.get("sliding_window") if c.get("use_sliding_window", not qwen2) else None
        types = None
        if qwen2:
            start = c.get("max_window_layers", 28)
            types = hf_layer_types(c, ["sliding_attention" if window is not None and i >= start else "full_attention"
                                       for i in range(c["num_hidden_layers"])])
        return cls(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
            num_attention_heads=heads, num_key_value_heads=c.get("num_key_value_heads") or heads,
            head_dim=c.get("head_dim") or c["hidden_size"] // heads,
            rms_norm_eps=c.get("rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=frozen(scaling),
            max_position_embeddings=c.get("max_position_embeddings", 2048),
            tie_word_embeddings=c.get("tie_word_embeddings", False),
            attention_bias=c.get("attention_bias", False), qkv_bias=qwen2, mlp_bias=c.get("mlp_bias", False),
            hidden_act=c.get("hidden_act", "silu"), sliding_window=window, layer_types=types)

    def attention_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window; None is full causal attention."""
        types = self.layer_types or ("sliding_attention",) * self.num_hidden_layers
        return tuple(self.sliding_window if kind == "sliding_attention" else None for kind in types)


def hf_layer_types(c: dict, default: list[str]) -> tuple[str, ...]:
    """config.json's ``layer_types`` (else ``default``), checked: one of two kinds for each layer."""
    types = tuple(c.get("layer_types") or default)
    if len(types) != c["num_hidden_layers"] or not set(types) <= {"full_attention", "sliding_attention"}:
        raise CheckpointError(
            f"layer_types {list(types)!r} in the {c.get('model_type')} config must give 'full_attention' or "
            f"'sliding_attention' for each of its {c['num_hidden_layers']} layers; fix config.json")
    return types


class LlamaAttention(nnx.Module):
    def __init__(self, cfg: LlamaConfig, *, dtype, param_dtype, rngs):
        d, h, kv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        qkv_bias = cfg.attention_bias or cfg.qkv_bias
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), use_bias=qkv_bias, **kw)
        self.k_proj = Linear(d, (kv, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), use_bias=qkv_bias, **kw)
        self.v_proj = Linear(d, (kv, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), use_bias=qkv_bias, **kw)
        self.o_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), use_bias=cfg.attention_bias, **kw)
        self.scale, self.windows = hd ** -0.5, cfg.window_kinds()
        self.inv_freq = rope_inv_freq(hd, cfg.rope_theta, cfg.rope_scaling)  # static tuple

    def __call__(self, x, *, mask, positions, layer, cache, cache_index):
        q = apply_rope(self.q_proj(x), positions, self.inv_freq)
        k = apply_rope(self.k_proj(x), positions, self.inv_freq)
        k, v, cache = update_cache(cache, k, self.v_proj(x), cache_index)
        a = layer_attention(q, k, v, mask, scale=self.scale, windows=self.windows, kind=layer,
                            heads_first=cache is not None)
        return self.o_proj(a), cache


class LlamaMLP(nnx.Module):
    def __init__(self, cfg: LlamaConfig, *, dtype, param_dtype, rngs):
        d, m = cfg.hidden_size, cfg.intermediate_size
        kw = dict(use_bias=cfg.mlp_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.gate_proj = Linear(d, m, axes=(EMBED, MLP), **kw)
        self.up_proj = Linear(d, m, axes=(EMBED, MLP), **kw)
        self.down_proj = Linear(m, d, axes=(MLP, EMBED), **kw)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nnx.Module):
    def __init__(self, cfg: LlamaConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, **kw)
        self.self_attn = LlamaAttention(cfg, **kw)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, **kw)
        self.mlp = LlamaMLP(cfg, **kw)

    def __call__(self, x, *, mask, positions, layer, cache, cache_index):
        a, cache = self.self_attn(self.input_layernorm(x), mask=mask, positions=positions, layer=layer,
                                  cache=cache, cache_index=cache_index)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), cache


class Llama(DecoderLM):
    """LlamaForCausalLM (MistralForCausalLM, Qwen2ForCausalLM): each layer is given its window's index."""

    def __init__(self, cfg: LlamaConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, **kw)
        self.layers = stacked(lambda r: LlamaBlock(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, rngs=rngs, **kw)
        self.lm_head = untied_head(cfg, cfg.hidden_size, rngs=rngs, **kw)

    def layer_inputs(self):
        return self.config.window_indices()


FAMILY = Family(
    name="llama",
    config_from_hf=LlamaConfig.from_hf,
    model=Llama,
    base_prefix="model.",
    is_decoder=True,
    hf_names=HFNames("model.", {"layers": "model.layers.{i}", "lm_head": "lm_head"}),
)
