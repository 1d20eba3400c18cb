"""GPT-J family: EleutherAI's GPT-J-6B and its fine-tunes.

Mirrors transformers' modeling_gptj.py: one LayerNorm (ln_1) per block feeding attention and the
MLP in parallel (x + attn(ln_1(x)) + mlp(ln_1(x))), q/k/v/out projections without bias, rotary
embeddings on the first ``rotary_dim`` dims of each head in GPT-J's interleaved convention
(rotate_every_two), a GELU MLP (fc_in / fc_out), a final ``ln_f`` and an untied LM head with a
bias.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, VOCAB
from lmprobe.models.base import Family, HFNames
from lmprobe.models.causal_lm import DecoderLM, DecoderParts
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
class GPTJConfig:
    vocab_size: int
    hidden_size: int  # n_embd
    num_hidden_layers: int  # n_layer
    num_attention_heads: int  # n_head
    intermediate_size: int  # n_inner, 4 * n_embd by default
    rotary_dim: int  # None in HF: the whole head
    max_position_embeddings: int = 2048  # n_positions
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, c: dict) -> GPTJConfig:
        if c.get("tie_word_embeddings", False):
            raise CheckpointError("a GPT-J config with tie_word_embeddings=true is not supported (GPT-J's LM head "
                                  "is its own weight and bias)")
        d, heads = c.get("n_embd", 4096), c.get("n_head", 16)
        return cls(
            vocab_size=c.get("vocab_size", 50400), hidden_size=d, num_hidden_layers=c.get("n_layer", 28),
            num_attention_heads=heads, intermediate_size=c.get("n_inner") or 4 * d,
            rotary_dim=c.get("rotary_dim") or d // heads,
            max_position_embeddings=c.get("n_positions", 2048),
            layer_norm_epsilon=c.get("layer_norm_epsilon", 1e-5),
            activation_function=c.get("activation_function", "gelu_new"))


class GPTJAttention(nnx.Module):
    def __init__(self, cfg: GPTJConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.k_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.out_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.scale = hd ** -0.5
        self.inv_freq = rope_inv_freq(cfg.rotary_dim, 10000.0)  # static tuple; rotates the first dims only

    def __call__(self, x, *, mask, positions, cache, cache_index):
        q = apply_rope(self.q_proj(x), positions, self.inv_freq, interleaved=True)
        k = apply_rope(self.k_proj(x), positions, self.inv_freq, interleaved=True)
        k, v, cache = update_cache(cache, k, self.v_proj(x), cache_index)
        return self.out_proj(attention(q, k, v, mask, scale=self.scale, heads_first=cache is not None)), cache


class GPTJMLP(nnx.Module):
    def __init__(self, cfg: GPTJConfig, *, dtype, param_dtype, rngs):
        d, m = cfg.hidden_size, cfg.intermediate_size
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc_in = Linear(d, m, axes=(EMBED, MLP), **kw)
        self.fc_out = Linear(m, d, axes=(MLP, EMBED), **kw)
        self.act = activation(cfg.activation_function)

    def __call__(self, x):
        return self.fc_out(self.act(self.fc_in(x)))


class GPTJBlock(nnx.Module):
    def __init__(self, cfg: GPTJConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.ln_1 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, **kw)
        self.attn = GPTJAttention(cfg, **kw)
        self.mlp = GPTJMLP(cfg, **kw)

    def __call__(self, x, *, mask, positions, cache, cache_index):
        n = self.ln_1(x)
        a, cache = self.attn(n, mask=mask, positions=positions, cache=cache, cache_index=cache_index)
        return a + self.mlp(n) + x, cache


class GPTJ(DecoderLM):
    """GPTJForCausalLM: an untied LM head with a bias."""

    parts = DecoderParts(embed="wte", blocks="h", norm="ln_f")

    def __init__(self, cfg: GPTJConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.wte = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, **kw)
        self.h = stacked(lambda r: GPTJBlock(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.ln_f = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, rngs=rngs, **kw)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, axes=(EMBED, VOCAB), rngs=rngs, **kw)

    def logits(self, hidden):
        """fp32 logits for final hidden states (call it only at the positions you need)."""
        return super().logits(hidden) + self.lm_head.bias[...].astype(jnp.float32)


FAMILY = Family(
    name="gptj",
    config_from_hf=GPTJConfig.from_hf,
    model=GPTJ,
    base_prefix="transformer.",
    is_decoder=True,
    hf_names=HFNames("transformer.", {"h": "transformer.h.{i}", "lm_head": "lm_head"}),
)
