"""BERT family: BERT, RoBERTa and BERT-style sentence encoders (all-MiniLM-L6-v2).

Mirrors transformers' modeling_bert.py and modeling_roberta.py: word + position + token-type
embeddings and a LayerNorm, then post-norm blocks (self-attention, residual, LayerNorm; MLP,
residual, LayerNorm) with bidirectional attention over real tokens. No final norm. A pooler
(BertPooler: dense + tanh over [CLS]) is built iff the checkpoint holds one (``Bert.pooled``;
SCoPE's BERT classification head uses it). RoBERTa differs only in its position ids (counted
from ``pad_token_id + 1``) and in the prefix of its tensor names.
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
from flax import nnx

from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, POSITIONS
from lmprobe.models.base import Family, HFNames, ModelOutput
from lmprobe.models.encoder import BertStyleEncoder, roberta_positions
from lmprobe.models.layers import Embed, LayerNorm, Linear, activation, attention, stacked


@dataclasses.dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    position_padding_idx: int | None = None  # RoBERTa: pad_token_id; positions start after it
    add_pooling_layer: bool = False  # set by Bert.fit_config when the checkpoint holds a pooler
    classifier_dropout: float = 0.1  # HF's sequence-classification head: classifier_dropout or hidden_dropout_prob

    @classmethod
    def from_hf(cls, c: dict, *, roberta: bool = False) -> BertConfig:
        kind = c.get("position_embedding_type") or "absolute"
        if kind != "absolute":
            raise CheckpointError(
                f"position_embedding_type {kind!r} in the model config is not supported "
                "(only 'absolute' position embeddings are)")
        if c.get("is_decoder"):
            raise CheckpointError("is_decoder=true in the model config (a causal BERT/RoBERTa decoder) is not "
                                  "supported; only the bidirectional encoder is")
        if roberta and c.get("pad_token_id", 1) is None:
            raise CheckpointError("pad_token_id is null in the RoBERTa model config; its position ids need it")
        return cls(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
            num_attention_heads=c["num_attention_heads"],
            max_position_embeddings=c.get("max_position_embeddings", 512),
            type_vocab_size=c.get("type_vocab_size", 2), layer_norm_eps=c.get("layer_norm_eps", 1e-12),
            hidden_act=c.get("hidden_act", "gelu"),
            position_padding_idx=c.get("pad_token_id", 1) if roberta else None,
            classifier_dropout=_first(c.get("classifier_dropout"), c.get("hidden_dropout_prob"), 0.1))


def _first(*values):
    return next(v for v in values if v is not None)


class BertEmbeddings(nnx.Module):
    def __init__(self, cfg: BertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.word_embeddings = Embed(cfg.vocab_size, cfg.hidden_size, **kw)
        self.position_embeddings = Embed(cfg.max_position_embeddings, cfg.hidden_size,
                                         axes=(POSITIONS, EMBED), **kw)
        self.token_type_embeddings = Embed(cfg.type_vocab_size, cfg.hidden_size, axes=(None, EMBED), **kw)
        self.LayerNorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)

    def __call__(self, inputs_embeds, token_type_ids, positions):
        return self.LayerNorm(inputs_embeds + self.token_type_embeddings(token_type_ids)
                              + self.position_embeddings(positions))


class BertSelfAttention(nnx.Module):
    def __init__(self, cfg: BertConfig, *, dtype, param_dtype, rngs):
        d, h = cfg.hidden_size, cfg.num_attention_heads
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.query = Linear(d, (h, d // h), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.key = Linear(d, (h, d // h), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.value = Linear(d, (h, d // h), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.scale = (d // h) ** -0.5

    def __call__(self, x, mask):
        return attention(self.query(x), self.key(x), self.value(x), mask, scale=self.scale)


class BertOutput(nnx.Module):
    """LayerNorm(dense(x) + residual): HF's BertSelfOutput (input [heads, head_dim]) and BertOutput
    (input [intermediate])."""

    def __init__(self, cfg: BertConfig, d_in, in_axes: tuple, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dense = Linear(d_in, cfg.hidden_size, axes=(*in_axes, EMBED), **kw)
        self.LayerNorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)

    def __call__(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nnx.Module):
    def __init__(self, cfg: BertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.self = BertSelfAttention(cfg, **kw)
        h = cfg.num_attention_heads
        self.output = BertOutput(cfg, (h, cfg.hidden_size // h), (HEADS, HEAD_DIM), **kw)

    def __call__(self, x, mask):
        return self.output(self.self(x, mask), x)


class BertIntermediate(nnx.Module):
    def __init__(self, cfg: BertConfig, *, dtype, param_dtype, rngs):
        self.dense = Linear(cfg.hidden_size, cfg.intermediate_size, axes=(EMBED, MLP),
                            dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x):
        return self.act(self.dense(x))


class BertLayer(nnx.Module):
    def __init__(self, cfg: BertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attention = BertAttention(cfg, **kw)
        self.intermediate = BertIntermediate(cfg, **kw)
        self.output = BertOutput(cfg, cfg.intermediate_size, (MLP,), **kw)

    def __call__(self, x, *, mask):
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertPooler(nnx.Module):
    def __init__(self, cfg: BertConfig, *, dtype, param_dtype, rngs):
        self.dense = Linear(cfg.hidden_size, cfg.hidden_size, axes=(EMBED, None),
                            dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, last_hidden_state):
        return jnp.tanh(self.dense(last_hidden_state[:, 0]))


class Bert(BertStyleEncoder):
    """BertModel / RobertaModel: word + position + token-type embeddings; an optional pooler."""

    def __init__(self, cfg: BertConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg, rngs=rngs, **kw)
        self.layer = stacked(lambda r: BertLayer(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.pooler = BertPooler(cfg, rngs=rngs, **kw) if cfg.add_pooling_layer else None

    @staticmethod
    def fit_config(cfg: BertConfig, has_tensor) -> BertConfig:
        """The config with a pooler iff the checkpoint has one (BertModel, BertForSequenceClassification)."""
        return dataclasses.replace(cfg, add_pooling_layer=has_tensor("pooler.dense.weight"))

    @property
    def max_length(self) -> int:
        """The longest sequence the position embeddings cover."""
        pad = self.config.position_padding_idx
        return self.config.max_position_embeddings - (0 if pad is None else pad + 1)

    def default_positions(self, input_ids, key_mask):
        """BERT: 0, 1, ... over real tokens. RoBERTa: counted from pad_token_id + 1 (roberta_positions)."""
        pad = self.config.position_padding_idx
        return super().default_positions(input_ids, key_mask) if pad is None else roberta_positions(
            input_ids, key_mask, pad)

    def pooled(self, output: ModelOutput):
        """BertPooler's output [B, D] (dense + tanh over [CLS]) for checkpoints that have a pooler."""
        if self.pooler is None:
            raise LmprobeError("this BERT checkpoint has no pooler (saved without add_pooling_layer): "
                               "use output.last_hidden_state[:, 0]")
        return self.pooler(output.last_hidden_state)


def hf_names(prefix: str) -> HFNames:
    """The HF names of a BERT-layout checkpoint whose base-model tensors start with ``prefix``."""
    return HFNames(prefix, {"layer": f"{prefix}encoder.layer.{{i}}"})


FAMILY = Family(name="bert", config_from_hf=BertConfig.from_hf, model=Bert, hf_names=hf_names("bert."),
                base_prefix="bert.", is_decoder=False)
ROBERTA_FAMILY = Family(name="roberta", config_from_hf=functools.partial(BertConfig.from_hf, roberta=True),
                        model=Bert, hf_names=hf_names("roberta."), base_prefix="roberta.", is_decoder=False)
