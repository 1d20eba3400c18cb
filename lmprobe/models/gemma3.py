"""Gemma 3 family: the text model (Gemma3ForCausalLM, model_type "gemma3_text": Gemma 3 270M, 1B).

Mirrors transformers' modeling_gemma3.py: embeddings scaled by sqrt(hidden_size) (the scale in
the compute dtype); (1 + weight) RMSNorms in fp32, four per block (sandwich: before and after
attention and MLP); q/k RMSNorm on each head before RoPE; scores scaled by
query_pre_attn_scalar**-0.5; GeGLU MLP (Llama's, gelu_pytorch_tanh); layers of two kinds by
``layer_types``: "sliding_attention" (window ``sliding_window``, RoPE base rope_local_base_freq) and
"full_attention" (RoPE base rope_theta with its scaling); optional final logit softcapping (None
in Gemma 3; attn_logit_softcapping is read but never applied by transformers' Gemma 3, nor here);
tied LM head. The layer's kind is a scanned input: a window index (lax.switch) and its RoPE
frequencies.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS
from lmprobe.models.base import Family, HFNames, frozen
from lmprobe.models.causal_lm import DecoderLM, untied_head
from lmprobe.models.layers import (
    Embed,
    Linear,
    RMSNorm,
    apply_rope,
    layer_attention,
    rope_inv_freq,
    stacked,
    update_cache,
)
from lmprobe.models.llama import LlamaConfig, LlamaMLP, hf_layer_types


def _rope(c: dict, kind: str, default_theta: float) -> tuple[float, tuple | None]:
    """(theta, scaling items or None) of one layer kind: transformers 5's ``rope_parameters[kind]``,
    else the 4.x keys (rope_theta and rope_scaling: full layers; rope_local_base_freq: sliding)."""
    params = (c.get("rope_parameters") or {}).get(kind)
    if params is None:
        params = ({"rope_theta": c.get("rope_theta"), **(c.get("rope_scaling") or {})} if kind == "full_attention"
                  else {"rope_theta": c.get("rope_local_base_freq")})
    theta = params.get("rope_theta") or default_theta
    scaled = params.get("rope_type", params.get("type", "default")) != "default"
    return float(theta), frozen(params) if scaled else None


@dataclasses.dataclass(frozen=True)
class Gemma3Config(LlamaConfig):
    rope_local_theta: float = 10000.0  # RoPE of the sliding layers (rope_theta, rope_scaling: full layers)
    rope_local_scaling: tuple | None = None
    query_pre_attn_scalar: float = 256.0
    final_logit_softcapping: float | None = None

    @classmethod
    def from_hf(cls, c: dict) -> Gemma3Config:
        if c.get("use_bidirectional_attention"):
            raise CheckpointError("a Gemma 3 config with use_bidirectional_attention (an embedding model) is not "
                                  "supported: lmprobe's gemma3_text family is the causal LM")
        heads, num_layers = c.get("num_attention_heads", 8), c.get("num_hidden_layers", 26)
        # As Gemma3TextConfig: without layer_types, every sliding_window_pattern-th layer is full.
        pattern = c.get("sliding_window_pattern", c.get("_sliding_window_pattern", 6))
        types = hf_layer_types(dict(c, num_hidden_layers=num_layers), [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)])
        theta, scaling = _rope(c, "full_attention", 1_000_000.0)
        local_theta, local_scaling = _rope(c, "sliding_attention", 10_000.0)
        return cls(
            vocab_size=c.get("vocab_size", 262_208), hidden_size=c.get("hidden_size", 2304),
            intermediate_size=c.get("intermediate_size", 9216), num_hidden_layers=num_layers,
            num_attention_heads=heads, num_key_value_heads=c.get("num_key_value_heads") or heads,
            head_dim=c.get("head_dim", 256), rms_norm_eps=c.get("rms_norm_eps", 1e-6),
            rope_theta=theta, rope_scaling=scaling, rope_local_theta=local_theta, rope_local_scaling=local_scaling,
            max_position_embeddings=c.get("max_position_embeddings", 131_072),
            tie_word_embeddings=c.get("tie_word_embeddings", True), attention_bias=c.get("attention_bias", False),
            hidden_act=c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh",
            sliding_window=c.get("sliding_window", 4096), layer_types=types,
            query_pre_attn_scalar=float(c.get("query_pre_attn_scalar", 256)),
            final_logit_softcapping=c.get("final_logit_softcapping"))

    def layer_inv_freq(self) -> np.ndarray:
        """Each layer's RoPE inverse frequencies [layers, head_dim / 2], by its kind."""
        local = rope_inv_freq(self.head_dim, self.rope_local_theta, self.rope_local_scaling)
        full = rope_inv_freq(self.head_dim, self.rope_theta, self.rope_scaling)
        return np.asarray([local if kind == "sliding_attention" else full for kind in self.layer_types], np.float32)


class Gemma3Attention(nnx.Module):
    def __init__(self, cfg: Gemma3Config, *, dtype, param_dtype, rngs):
        d, h, kv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        kw = dict(use_bias=cfg.attention_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.k_proj = Linear(d, (kv, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v_proj = Linear(d, (kv, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.o_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        norm = dict(eps=cfg.rms_norm_eps, unit_offset=True, axes=(HEAD_DIM,), dtype=dtype, param_dtype=param_dtype)
        self.q_norm = RMSNorm(hd, rngs=rngs, **norm)
        self.k_norm = RMSNorm(hd, rngs=rngs, **norm)
        self.scale, self.windows = cfg.query_pre_attn_scalar ** -0.5, cfg.window_kinds()

    def __call__(self, x, *, mask, positions, layer, cache, cache_index):
        kind, inv_freq = layer  # the layer's window index and RoPE frequencies
        q = apply_rope(self.q_norm(self.q_proj(x)), positions, inv_freq)
        k = apply_rope(self.k_norm(self.k_proj(x)), positions, inv_freq)
        k, v, cache = update_cache(cache, k, self.v_proj(x), cache_index)
        return self.o_proj(layer_attention(q, k, v, mask, scale=self.scale, windows=self.windows, kind=kind,
                                           heads_first=cache is not None)), cache


class Gemma3Block(nnx.Module):
    def __init__(self, cfg: Gemma3Config, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        norm = dict(eps=cfg.rms_norm_eps, unit_offset=True, **kw)
        self.input_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.self_attn = Gemma3Attention(cfg, **kw)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.pre_feedforward_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.mlp = LlamaMLP(cfg, **kw)
        self.post_feedforward_layernorm = RMSNorm(cfg.hidden_size, **norm)

    def __call__(self, x, *, mask, positions, layer, cache, cache_index):
        a, cache = self.self_attn(self.input_layernorm(x), mask=mask, positions=positions, layer=layer,
                                  cache=cache, cache_index=cache_index)
        x = x + self.post_attention_layernorm(a)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x))), cache


class Gemma3(DecoderLM):
    """Gemma3ForCausalLM: each layer is given its window's index and its RoPE frequencies."""

    def __init__(self, cfg: Gemma3Config, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, **kw)
        self.layers = stacked(lambda r: Gemma3Block(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, unit_offset=True, rngs=rngs, **kw)
        self.lm_head = untied_head(cfg, cfg.hidden_size, rngs=rngs, **kw)

    def embed(self, input_ids):
        """Token embeddings times sqrt(hidden_size) (HF's inputs_embeds), the scale rounded to the compute dtype."""
        h = self.embed_tokens(input_ids)
        return h * jnp.asarray(self.config.hidden_size ** 0.5, h.dtype)

    def logits(self, hidden):
        """fp32 logits for final hidden states (call it only at the positions you need), softcapped if set."""
        logits, cap = super().logits(hidden), self.config.final_logit_softcapping
        return logits if cap is None else cap * jnp.tanh(logits / cap)

    def layer_inputs(self):
        return self.config.window_indices(), jnp.asarray(self.config.layer_inv_freq())


FAMILY = Family(
    name="gemma3",
    config_from_hf=Gemma3Config.from_hf,
    model=Gemma3,
    base_prefix="model.",
    is_decoder=True,
    hf_names=HFNames("model.", {"layers": "model.layers.{i}", "lm_head": "lm_head"}),
)
