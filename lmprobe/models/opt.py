"""OPT family: Meta's OPT-125m ... OPT-66b, OPT-IML, Galactica-style OPT checkpoints.

Mirrors transformers' modeling_opt.py: learned absolute positions (offset 2, counted from the
attention mask), biased q/k/v projections with the query scaled before the dot product, LayerNorm
before (most sizes) or after (opt-350m) each sub-block, a ReLU MLP (fc1/fc2), optional
project_in/project_out around the decoder when word_embed_proj_dim != hidden_size (opt-350m),
and an LM head tied to the token embeddings.

With project_out, Hugging Face's last hidden state is the projected (word_embed_proj_dim) one;
here ``last_hidden_state`` and the last entry of ``hidden_states`` stay in hidden_size (before
project_out) so that all hidden states stack, and ``logits`` applies project_out.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, POSITIONS
from lmprobe.models.base import Family, HFNames
from lmprobe.models.causal_lm import DecoderLM, DecoderParts, untied_head
from lmprobe.models.layers import (
    Embed,
    LayerNorm,
    Linear,
    activation,
    attention,
    check_length,
    stacked,
    update_cache,
)

POSITION_OFFSET = 2  # OPT's position table has two leading rows (a fairseq padding-index relic)
LAYER_NORM_EPS = 1e-5  # torch's nn.LayerNorm default; OPT's config has no eps field


@dataclasses.dataclass(frozen=True)
class OPTConfig:
    vocab_size: int
    hidden_size: int
    ffn_dim: int
    num_hidden_layers: int
    num_attention_heads: int
    word_embed_proj_dim: int
    max_position_embeddings: int = 2048
    do_layer_norm_before: bool = True
    remove_final_layer_norm: bool = False
    layer_norm_elementwise_affine: bool = True
    enable_bias: bool = True
    activation_function: str = "relu"
    tie_word_embeddings: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def has_final_layer_norm(self) -> bool:
        return self.do_layer_norm_before and not self.remove_final_layer_norm

    @classmethod
    def from_hf(cls, c: dict) -> OPTConfig:
        return cls(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], ffn_dim=c["ffn_dim"],
            num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
            word_embed_proj_dim=c.get("word_embed_proj_dim") or c["hidden_size"],
            max_position_embeddings=c.get("max_position_embeddings", 2048),
            do_layer_norm_before=c.get("do_layer_norm_before", True),
            remove_final_layer_norm=c.get("_remove_final_layer_norm", False),
            layer_norm_elementwise_affine=c.get("layer_norm_elementwise_affine", True),
            enable_bias=c.get("enable_bias", True),
            activation_function=c.get("activation_function", "relu"),
            tie_word_embeddings=c.get("tie_word_embeddings", True))


def _layer_norm(cfg: OPTConfig, **kw) -> LayerNorm:
    affine = cfg.layer_norm_elementwise_affine
    return LayerNorm(cfg.hidden_size, eps=LAYER_NORM_EPS, use_scale=affine, use_bias=affine, **kw)


class OPTAttention(nnx.Module):
    def __init__(self, cfg: OPTConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(use_bias=cfg.enable_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.k_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.out_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.scale = hd ** -0.5

    def __call__(self, x, *, mask, positions, cache, cache_index):
        q = self.q_proj(x) * self.scale  # scaled before q.k, as HF does
        k, v, cache = update_cache(cache, self.k_proj(x), self.v_proj(x), cache_index)
        return self.out_proj(attention(q, k, v, mask, scale=1.0, heads_first=cache is not None)), cache


class OPTDecoderLayer(nnx.Module):
    def __init__(self, cfg: OPTConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.self_attn = OPTAttention(cfg, **kw)
        self.self_attn_layer_norm = _layer_norm(cfg, **kw)
        self.fc1 = Linear(cfg.hidden_size, cfg.ffn_dim, axes=(EMBED, MLP), use_bias=cfg.enable_bias, **kw)
        self.fc2 = Linear(cfg.ffn_dim, cfg.hidden_size, axes=(MLP, EMBED), use_bias=cfg.enable_bias, **kw)
        self.final_layer_norm = _layer_norm(cfg, **kw)
        self.act = activation(cfg.activation_function)
        self.do_layer_norm_before = cfg.do_layer_norm_before

    def __call__(self, x, *, mask, positions, cache, cache_index):
        pre = self.do_layer_norm_before  # False: post-norm (opt-350m)
        a, cache = self.self_attn(self.self_attn_layer_norm(x) if pre else x, mask=mask,
                                  positions=positions, cache=cache, cache_index=cache_index)
        x = x + a
        if not pre:
            x = self.self_attn_layer_norm(x)
        x = x + self.fc2(self.act(self.fc1(self.final_layer_norm(x) if pre else x)))
        if not pre:
            x = self.final_layer_norm(x)
        return x, cache


class OPT(DecoderLM):
    """OPTForCausalLM: project_in, then learned positions (offset 2) added; project_out before the head."""

    parts = DecoderParts(norm="final_layer_norm")

    def __init__(self, cfg: OPTConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        d, w = cfg.hidden_size, cfg.word_embed_proj_dim
        self.config = cfg
        self.embed_tokens = Embed(cfg.vocab_size, w, rngs=rngs, **kw)
        self.embed_positions = Embed(cfg.max_position_embeddings + POSITION_OFFSET, d,
                                     axes=(POSITIONS, EMBED), rngs=rngs, **kw)
        # word_embed_proj_dim and hidden_size are both model widths; only the latter is sharded.
        projected = w != d
        self.project_in = Linear(w, d, axes=(None, EMBED), use_bias=False, rngs=rngs, **kw) if projected else None
        self.project_out = Linear(d, w, axes=(EMBED, None), use_bias=False, rngs=rngs, **kw) if projected else None
        self.layers = stacked(lambda r: OPTDecoderLayer(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.final_layer_norm = _layer_norm(cfg, rngs=rngs, **kw) if cfg.has_final_layer_norm else None
        self.lm_head = untied_head(cfg, w, rngs=rngs, **kw)

    def block_input(self, h, mask, positions):
        check_length(mask.keys.shape[-1], self.config.max_position_embeddings)
        if self.project_in is not None:
            h = self.project_in(h)
        return h + self.embed_positions(positions + POSITION_OFFSET)

    def logits(self, hidden):
        """fp32 logits for final hidden states (call it only at the positions you need)."""
        if self.project_out is not None:
            hidden = self.project_out(hidden)
        return super().logits(hidden)


FAMILY = Family(
    name="opt",
    config_from_hf=OPTConfig.from_hf,
    model=OPT,
    base_prefix="model.",
    is_decoder=True,
    hf_names=HFNames("model.decoder.", {"layers": "model.decoder.layers.{i}", "lm_head": "lm_head"}),
)
