"""DistilBERT family.

Mirrors transformers' modeling_distilbert.py: word + position embeddings and a LayerNorm (no
token types), then post-norm blocks (self-attention, residual, sa_layer_norm; FFN, residual,
output_layer_norm) with bidirectional attention over real tokens. No final norm.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, POSITIONS
from lmprobe.models.base import Family, HFNames
from lmprobe.models.encoder import BertStyleEncoder
from lmprobe.models.layers import Embed, LayerNorm, Linear, activation, attention, stacked

_EPS = 1e-12  # DistilBERT's LayerNorms have a fixed eps


@dataclasses.dataclass(frozen=True)
class DistilBertConfig:
    vocab_size: int
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    max_position_embeddings: int = 512
    activation: str = "gelu"
    classifier_dropout: float = 0.2  # HF's sequence-classification head: seq_classif_dropout

    @property
    def hidden_size(self) -> int:
        """``dim`` under the name the other families use."""
        return self.dim

    @classmethod
    def from_hf(cls, c: dict) -> DistilBertConfig:
        # sinusoidal_pos_embds only changes how position_embeddings is initialised; checkpoints
        # store the table, so it is read like a learned one.
        return cls(vocab_size=c["vocab_size"], dim=c["dim"], hidden_dim=c["hidden_dim"],
                   n_layers=c["n_layers"], n_heads=c["n_heads"],
                   max_position_embeddings=c.get("max_position_embeddings", 512),
                   activation=c.get("activation", "gelu"),
                   classifier_dropout=c.get("seq_classif_dropout", 0.2))


class Embeddings(nnx.Module):
    def __init__(self, cfg: DistilBertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.word_embeddings = Embed(cfg.vocab_size, cfg.dim, **kw)
        self.position_embeddings = Embed(cfg.max_position_embeddings, cfg.dim, axes=(POSITIONS, EMBED), **kw)
        self.LayerNorm = LayerNorm(cfg.dim, eps=_EPS, **kw)

    def __call__(self, inputs_embeds, positions):
        return self.LayerNorm(inputs_embeds + self.position_embeddings(positions))


class DistilBertSelfAttention(nnx.Module):
    def __init__(self, cfg: DistilBertConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.dim, cfg.n_heads, cfg.dim // cfg.n_heads
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_lin = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.k_lin = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v_lin = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.out_lin = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.scale = hd ** -0.5

    def __call__(self, x, mask):
        q, k, v = self.q_lin(x), self.k_lin(x), self.v_lin(x)
        return self.out_lin(attention(q, k, v, mask, scale=self.scale))


class FFN(nnx.Module):
    def __init__(self, cfg: DistilBertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.lin1 = Linear(cfg.dim, cfg.hidden_dim, axes=(EMBED, MLP), **kw)
        self.lin2 = Linear(cfg.hidden_dim, cfg.dim, axes=(MLP, EMBED), **kw)
        self.activation = activation(cfg.activation)

    def __call__(self, x):
        return self.lin2(self.activation(self.lin1(x)))


class TransformerBlock(nnx.Module):
    def __init__(self, cfg: DistilBertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attention = DistilBertSelfAttention(cfg, **kw)
        self.sa_layer_norm = LayerNorm(cfg.dim, eps=_EPS, **kw)
        self.ffn = FFN(cfg, **kw)
        self.output_layer_norm = LayerNorm(cfg.dim, eps=_EPS, **kw)

    def __call__(self, x, *, mask):
        x = self.sa_layer_norm(self.attention(x, mask) + x)
        return self.output_layer_norm(self.ffn(x) + x)


class DistilBert(BertStyleEncoder):
    """DistilBertModel: word + position embeddings (no token types: ``token_type_ids`` is ignored)."""

    def __init__(self, cfg: DistilBertConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embeddings = Embeddings(cfg, rngs=rngs, **kw)
        self.layer = stacked(lambda r: TransformerBlock(cfg, rngs=r, **kw), cfg.n_layers, rngs)

    def embedding_output(self, x, token_type_ids, positions):
        return self.embeddings(x, positions)


FAMILY = Family(
    name="distilbert",
    config_from_hf=DistilBertConfig.from_hf,
    model=DistilBert,
    base_prefix="distilbert.",
    is_decoder=False,
    hf_names=HFNames("distilbert.", {"layer": "distilbert.transformer.layer.{i}"}),
)
