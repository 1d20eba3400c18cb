"""MPNet family (sentence-transformers all-mpnet-base-v2).

Mirrors transformers' modeling_mpnet.py: word + position embeddings (RoBERTa's position ids,
counted from padding_idx + 1; no token types) and a LayerNorm, then post-norm blocks
(self-attention, residual, LayerNorm; MLP, residual, LayerNorm). Attention scores get a
relative position bias: T5's bidirectional buckets (32, max_distance 128) of the key-query
distance in slots, looked up in one learned table [buckets, heads] shared by every layer. No
final norm; the pooler is not used.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, POSITIONS
from lmprobe.models.base import Family, HFNames
from lmprobe.models.bert import BertIntermediate, BertOutput
from lmprobe.models.encoder import BertStyleEncoder, roberta_positions
from lmprobe.models.layers import Embed, LayerNorm, Linear, attention, stacked

PADDING_IDX = 1  # HF's MPNetEmbeddings fixes it, whatever pad_token_id says
NUM_BUCKETS, MAX_DISTANCE = 32, 128  # HF's compute_position_bias fixes them too


@dataclasses.dataclass(frozen=True)
class MPNetConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int = 514
    relative_attention_num_buckets: int = 32
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    classifier_dropout: float = 0.1  # HF's MPNetClassificationHead: hidden_dropout_prob

    @classmethod
    def from_hf(cls, c: dict) -> MPNetConfig:
        buckets = c.get("relative_attention_num_buckets", 32)
        if buckets < NUM_BUCKETS:
            raise CheckpointError(f"relative_attention_num_buckets {buckets} in the model config is fewer than "
                                  f"the {NUM_BUCKETS} buckets MPNet's position bias looks up")
        return cls(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
            num_attention_heads=c["num_attention_heads"],
            max_position_embeddings=c.get("max_position_embeddings", 514),
            relative_attention_num_buckets=buckets, layer_norm_eps=c.get("layer_norm_eps", 1e-12),
            hidden_act=c.get("hidden_act", "gelu"), classifier_dropout=c.get("hidden_dropout_prob", 0.1))


def relative_position_bucket(relative_position: np.ndarray) -> np.ndarray:
    """T5's bidirectional bucket of each key-minus-query distance, as HF's MPNetEncoder computes it
    (fp32 log, truncated): exact up to 8 slots either way, then log-spaced up to 128."""
    n = -relative_position
    half = NUM_BUCKETS // 2
    exact = half // 2
    n_abs = np.abs(n)
    large = exact + (np.log(np.maximum(n_abs, 1).astype(np.float32) / np.float32(exact))
                     / np.float32(math.log(MAX_DISTANCE / exact)) * np.float32(half - exact)).astype(np.int64)
    return (n < 0) * half + np.where(n_abs < exact, n_abs, np.minimum(large, half - 1))


class MPNetEmbeddings(nnx.Module):
    def __init__(self, cfg: MPNetConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.word_embeddings = Embed(cfg.vocab_size, cfg.hidden_size, **kw)
        self.position_embeddings = Embed(cfg.max_position_embeddings, cfg.hidden_size,
                                         axes=(POSITIONS, EMBED), **kw)
        self.LayerNorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)

    def __call__(self, inputs_embeds, positions):
        return self.LayerNorm(inputs_embeds + self.position_embeddings(positions))


class MPNetSelfAttention(nnx.Module):
    def __init__(self, cfg: MPNetConfig, *, dtype, param_dtype, rngs):
        d, h = cfg.hidden_size, cfg.num_attention_heads
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q = Linear(d, (h, d // h), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.k = Linear(d, (h, d // h), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v = Linear(d, (h, d // h), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.o = Linear((h, d // h), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.scale = (d // h) ** -0.5

    def __call__(self, x, mask, bias):
        return self.o(attention(self.q(x), self.k(x), self.v(x), mask, scale=self.scale, bias=bias))


class MPNetAttention(nnx.Module):
    def __init__(self, cfg: MPNetConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attn = MPNetSelfAttention(cfg, **kw)
        self.LayerNorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)

    def __call__(self, x, mask, bias):
        return self.LayerNorm(self.attn(x, mask, bias) + x)


class MPNetLayer(nnx.Module):
    def __init__(self, cfg: MPNetConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attention = MPNetAttention(cfg, **kw)
        self.intermediate = BertIntermediate(cfg, **kw)  # as HF's MPNetIntermediate / MPNetOutput, copies of BERT's
        self.output = BertOutput(cfg, cfg.intermediate_size, (MLP,), **kw)

    def __call__(self, x, *, mask, bias):
        x = self.attention(x, mask, bias)
        return self.output(self.intermediate(x), x)


class MPNetEncoder(nnx.Module):
    """The stacked layers and the relative position bias table they share."""

    def __init__(self, cfg: MPNetConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.layer = stacked(lambda r: MPNetLayer(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.relative_attention_bias = Embed(cfg.relative_attention_num_buckets, cfg.num_attention_heads,
                                             axes=(None, HEADS), rngs=rngs, **kw)

    def position_bias(self, t: int):
        """[1, heads, T, T] fp32: the bias of key slot j for query slot i, from j - i."""
        buckets = relative_position_bucket(np.arange(t)[None, :] - np.arange(t)[:, None])
        table = self.relative_attention_bias.embedding[...].astype(jnp.float32)
        return jnp.take(table, jnp.asarray(buckets, jnp.int32), axis=0).transpose(2, 0, 1)[None]


class MPNet(BertStyleEncoder):
    """MPNetModel: word + position embeddings (no token types: ``token_type_ids`` is ignored); every
    block is given the relative position bias."""

    blocks_path = "encoder.layer"

    def __init__(self, cfg: MPNetConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embeddings = MPNetEmbeddings(cfg, rngs=rngs, **kw)
        self.encoder = MPNetEncoder(cfg, rngs=rngs, **kw)

    @property
    def max_length(self) -> int:
        """The longest sequence the position embeddings cover."""
        return self.config.max_position_embeddings - PADDING_IDX - 1

    def default_positions(self, input_ids, key_mask):
        """RoBERTa's, counted from padding_idx + 1."""
        return roberta_positions(input_ids, key_mask, PADDING_IDX)

    def embedding_output(self, x, token_type_ids, positions):
        return self.embeddings(x, positions)

    def block_inputs(self, t, positions):
        return {"bias": self.encoder.position_bias(t)}


FAMILY = Family(name="mpnet", config_from_hf=MPNetConfig.from_hf, model=MPNet,
                hf_names=HFNames("mpnet.", {"encoder.layer": "mpnet.encoder.layer.{i}"}),
                base_prefix="mpnet.", is_decoder=False)
