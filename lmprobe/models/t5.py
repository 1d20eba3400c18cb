"""T5 family: T5 v1.0, T5 v1.1 and Flan-T5, an encoder-decoder.

Mirrors transformers' modeling_t5.py: pre-norm blocks with T5LayerNorm (RMS, no bias), no bias
anywhere and no attention scaling; a relative position bias looked up by layer 0's table and
shared by every layer of a stack (bidirectional buckets in the encoder, causal in the decoder);
decoder blocks attend to the encoder output (no position bias); ReLU (v1.0) or gated-GELU (v1.1,
Flan) feed-forward; a final norm per stack. The head is the shared embedding applied to the decoder
output scaled by d_model**-0.5 (v1.0) or an untied ``lm_head`` (v1.1, Flan; used whenever the
checkpoint has one). A T5EncoderModel checkpoint (no decoder tensors) builds the encoder only.

Decoding caches the decoder's self-attention keys/values and, once per prompt, the
cross-attention keys/values of the encoder output (``T5.init_cache``); without a cache (teacher
forcing) they are projected from ``encoder_hidden`` in each layer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, VOCAB
from lmprobe.models.base import Family, HFNames, ModelOutput, hf_hidden_states
from lmprobe.models.layers import (
    Embed,
    LayerCache,
    Linear,
    Mask,
    RMSNorm,
    activation,
    attention,
    init_cache,
    lm_logits,
    scan_layers,
    stacked,
    update_cache,
    write_cache,
)


@dataclasses.dataclass(frozen=True)
class T5Config:
    vocab_size: int
    hidden_size: int  # d_model
    head_dim: int  # d_kv
    intermediate_size: int  # d_ff
    num_hidden_layers: int  # encoder layers
    num_decoder_layers: int
    num_attention_heads: int
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    dense_act_fn: str = "relu"
    is_gated_act: bool = False
    scale_decoder_outputs: bool = True  # v1.0: the decoder output times d_model**-0.5 before the head
    tie_word_embeddings: bool = True  # no lm_head: the shared embedding is the head
    has_decoder: bool = True  # False: a T5EncoderModel checkpoint
    decoder_start_token_id: int = 0
    eos_token_id: int = 1
    pad_token_id: int = 0
    max_position_embeddings: int = 512  # n_positions: the length T5 was trained at (positions are relative)

    @classmethod
    def from_hf(cls, c: dict) -> T5Config:
        kind = c.get("feed_forward_proj", "relu")
        parts = kind.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
            raise CheckpointError(f"feed_forward_proj {kind!r} in the model config is not supported; "
                                  "expected 'ACT' or 'gated-ACT' (T5: 'relu', Flan-T5: 'gated-gelu')")
        act = "gelu_new" if kind == "gated-gelu" else parts[-1]  # as transformers' T5Config
        activation(act)  # an unknown activation fails here, naming it
        buckets, distance = c.get("relative_attention_num_buckets", 32), c.get("relative_attention_max_distance", 128)
        if distance <= buckets // 2:
            raise CheckpointError(f"relative_attention_max_distance {distance} in the model config must exceed "
                                  f"half of relative_attention_num_buckets ({buckets})")
        eos = c.get("eos_token_id", 1)
        pad = c.get("pad_token_id", 0)
        start = c.get("decoder_start_token_id")
        # transformers 5 writes scale_decoder_outputs; older configs say tie_word_embeddings (absent: tied)
        scale = c.get("scale_decoder_outputs", c.get("tie_word_embeddings") is not False)
        return cls(
            vocab_size=c["vocab_size"], hidden_size=c["d_model"], head_dim=c["d_kv"], intermediate_size=c["d_ff"],
            num_hidden_layers=c["num_layers"], num_decoder_layers=c.get("num_decoder_layers") or c["num_layers"],
            num_attention_heads=c["num_heads"], relative_attention_num_buckets=buckets,
            relative_attention_max_distance=distance, layer_norm_epsilon=c.get("layer_norm_epsilon", 1e-6),
            dense_act_fn=act, is_gated_act=parts[0] == "gated" and len(parts) == 2,
            scale_decoder_outputs=bool(scale), tie_word_embeddings=c.get("tie_word_embeddings") is not False,
            decoder_start_token_id=int(pad if start is None else start),
            eos_token_id=int(eos[0] if isinstance(eos, list) else eos), pad_token_id=int(pad or 0),
            max_position_embeddings=c.get("n_positions") or 512)


def _bucket_table(num_buckets: int, max_distance: int) -> tuple[int, ...]:
    """The bucket of each distance 0 .. max_distance-1, as transformers computes it (fp32 log,
    truncated): exact below num_buckets // 2, then log-spaced; farther: num_buckets - 1."""
    exact = num_buckets // 2
    d = np.arange(max_distance)
    log_ratio = np.log(np.maximum(d, 1).astype(np.float32) / np.float32(exact))
    steps = log_ratio / np.float32(math.log(max_distance / exact)) * np.float32(num_buckets - exact)
    large = exact + steps.astype(np.int64)  # truncated before the sum, as transformers does
    return tuple(np.where(d < exact, d, np.minimum(large, num_buckets - 1)).tolist())


def relative_buckets(relative: jax.Array, *, bidirectional: bool, num_buckets: int, max_distance: int) -> jax.Array:
    """transformers' T5Attention._relative_position_bucket of key-minus-query distances (int arrays,
    traced offsets allowed): half the buckets for keys after the query when ``bidirectional``,
    else every later key in bucket 0 (the causal mask hides it)."""
    n = num_buckets // 2 if bidirectional else num_buckets
    table = jnp.asarray(_bucket_table(n, max_distance), jnp.int32)
    distance = jnp.abs(relative) if bidirectional else jnp.maximum(-relative, 0)
    bucket = jnp.where(distance < max_distance, table[jnp.minimum(distance, max_distance - 1)], n - 1)
    return bucket + (n * (relative > 0) if bidirectional else 0)


class T5Attention(nnx.Module):
    """q, k, v, o without bias; scores unscaled, plus the position bias (self-attention)."""

    def __init__(self, cfg: T5Config, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.k = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.o = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)

    def __call__(self, x, k, v, mask: Mask, bias=None, heads_first=False):
        return self.o(attention(self.q(x), k, v, mask, scale=1.0, bias=bias, heads_first=heads_first))


class T5LayerSelfAttention(nnx.Module):
    def __init__(self, cfg: T5Config, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.SelfAttention = T5Attention(cfg, **kw)
        self.layer_norm = RMSNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, **kw)

    def __call__(self, x, *, mask, bias, cache=None, cache_index=0):
        h = self.layer_norm(x)
        attn = self.SelfAttention
        k, v, cache = update_cache(cache, attn.k(h), attn.v(h), cache_index)
        return x + attn(h, k, v, mask, bias, heads_first=cache is not None), cache


class T5LayerCrossAttention(nnx.Module):
    def __init__(self, cfg: T5Config, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.EncDecAttention = T5Attention(cfg, **kw)
        self.layer_norm = RMSNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, **kw)

    def keys_values(self, encoder_hidden) -> LayerCache:
        """The encoder output's keys and values, heads first [B, N, S_enc, D] as a cache holds them."""
        attn = self.EncDecAttention
        return LayerCache(attn.k(encoder_hidden).transpose(0, 2, 1, 3), attn.v(encoder_hidden).transpose(0, 2, 1, 3))

    def __call__(self, x, *, cross: LayerCache, encoder_mask: Mask):
        return x + self.EncDecAttention(self.layer_norm(x), cross.k, cross.v, encoder_mask, heads_first=True)


class T5DenseActDense(nnx.Module):
    """wo(act(wi(x))) (v1.0), or wo(act(wi_0(x)) * wi_1(x)) when gated (v1.1, Flan)."""

    def __init__(self, cfg: T5Config, *, dtype, param_dtype, rngs):
        d, m = cfg.hidden_size, cfg.intermediate_size
        kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        if cfg.is_gated_act:
            self.wi_0 = Linear(d, m, axes=(EMBED, MLP), **kw)
            self.wi_1 = Linear(d, m, axes=(EMBED, MLP), **kw)
        else:
            self.wi = Linear(d, m, axes=(EMBED, MLP), **kw)
        self.wo = Linear(m, d, axes=(MLP, EMBED), **kw)
        self.act, self.gated = activation(cfg.dense_act_fn), cfg.is_gated_act

    def __call__(self, x):
        h = self.act(self.wi_0(x)) * self.wi_1(x) if self.gated else self.act(self.wi(x))
        return self.wo(h)


class T5LayerFF(nnx.Module):
    def __init__(self, cfg: T5Config, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.DenseReluDense = T5DenseActDense(cfg, **kw)
        self.layer_norm = RMSNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, **kw)

    def __call__(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


class T5Block(nnx.Module):
    """HF's T5Block: ``layer`` is [self-attention, (cross-attention,) feed-forward]."""

    def __init__(self, cfg: T5Config, *, decoder: bool, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        parts = [T5LayerSelfAttention(cfg, **kw)] + ([T5LayerCrossAttention(cfg, **kw)] if decoder else [])
        self.layer = nnx.List(parts + [T5LayerFF(cfg, **kw)])

    def __call__(self, x, *, mask, bias, cache=None, cache_index=0, cross=None, encoder_mask=None):
        x, cache = self.layer[0](x, mask=mask, bias=bias, cache=cache, cache_index=cache_index)
        if cross is not None:
            x = self.layer[1](x, cross=cross, encoder_mask=encoder_mask)
        return self.layer[-1](x), cache


class T5Stack(nnx.Module):
    """The encoder or the decoder: blocks, the shared position-bias table, the final norm."""

    def __init__(self, cfg: T5Config, *, decoder: bool, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        layers = cfg.num_decoder_layers if decoder else cfg.num_hidden_layers
        self.block = stacked(lambda r: T5Block(cfg, decoder=decoder, rngs=r, **kw), layers, rngs)
        self.relative_attention_bias = Embed(cfg.relative_attention_num_buckets, cfg.num_attention_heads,
                                             axes=(None, HEADS), rngs=rngs, **kw)
        self.final_layer_norm = RMSNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon, rngs=rngs, **kw)
        self.decoder = decoder
        self.buckets = (cfg.relative_attention_num_buckets, cfg.relative_attention_max_distance)

    def position_bias(self, t: int, s: int, offset=0) -> jax.Array:
        """[1, N, T, S] fp32: the bias of key slot j for the query in slot offset + i."""
        relative = jnp.arange(s)[None, :] - (offset + jnp.arange(t))[:, None]
        buckets = relative_buckets(relative, bidirectional=not self.decoder, num_buckets=self.buckets[0],
                                   max_distance=self.buckets[1])
        table = self.relative_attention_bias.embedding[...].astype(jnp.float32)
        return jnp.take(table, buckets, axis=0).transpose(2, 0, 1)[None]

    def __call__(self, h, *, mask: Mask, bias, cache=None, cache_index=0, cross=None, encoder_hidden=None,
                 encoder_mask=None, output_hidden_states=False):
        """(final normed states, HF's hidden_states or None, the updated self-attention cache)."""

        def step(block, carry, layer):
            layer_cache, layer_cross = layer
            if self.decoder and layer_cross is None:  # teacher forcing: project the encoder output here
                layer_cross = block.layer[1].keys_values(encoder_hidden)
            out, written = block(carry, mask=mask, bias=bias, cache=layer_cache, cache_index=cache_index,
                                 cross=layer_cross, encoder_mask=encoder_mask)
            return out, (out if output_hidden_states else None, written)

        out, (per_layer, written) = scan_layers(self.block, step, h, (cache, cross))
        last = self.final_layer_norm(out)
        return last, hf_hidden_states(h, per_layer, last), write_cache(cache, written, cache_index)


class T5Cache(NamedTuple):
    """The decoder's state while decoding: self-attention keys/values [L, B, N, S, D] written step by
    step, and the encoder output's cross-attention keys/values [L, B, N, S_enc, D], fixed (heads
    first, as the decoding attention reads them)."""

    self: LayerCache
    cross: LayerCache


class T5(nnx.Module):
    """Encoder-decoder: ``encode`` (and ``__call__``, the encoder alone), ``decode``, ``logits``."""

    def __init__(self, cfg: T5Config, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.shared = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, **kw)
        self.encoder = T5Stack(cfg, decoder=False, rngs=rngs, **kw)
        self.decoder = T5Stack(cfg, decoder=True, rngs=rngs, **kw) if cfg.has_decoder else None
        self.lm_head = None if cfg.tie_word_embeddings or not cfg.has_decoder else Linear(
            cfg.hidden_size, cfg.vocab_size, axes=(EMBED, VOCAB), use_bias=False, rngs=rngs, **kw)

    @staticmethod
    def fit_config(cfg: T5Config, has) -> T5Config:
        """What the checkpoint holds decides: an lm_head (untied, whatever the config says; as
        transformers 5 loads it) and a decoder (none in a T5EncoderModel checkpoint)."""
        return dataclasses.replace(cfg, tie_word_embeddings=not has("lm_head.weight"),
                                   has_decoder=has("decoder.final_layer_norm.weight"))

    @property
    def max_length(self) -> int:
        """The length T5 was trained at (its relative positions allow longer inputs)."""
        return self.config.max_position_embeddings

    def embed(self, input_ids):
        return self.shared(input_ids)

    def logits(self, hidden):
        """fp32 logits of decoder output states (call it only at the positions you need)."""
        if self.config.scale_decoder_outputs:
            hidden = hidden * self.config.hidden_size ** -0.5
        return lm_logits(hidden, self.shared, self.lm_head)

    def encode(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, output_hidden_states=False):
        """The encoder over ``input_ids`` [B, S] (``attention_mask``: 1 on real tokens)."""
        h = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        t = h.shape[1]
        last, hidden, _ = self.encoder(h, mask=Mask(attention_mask), bias=self.encoder.position_bias(t, t),
                                       output_hidden_states=output_hidden_states)
        return ModelOutput(last, hidden)

    def __call__(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, output_hidden_states=False):
        """The encoder (``encode``): T5 where an encoder is expected (ST5-style embeddings)."""
        return self.encode(input_ids, attention_mask, inputs_embeds=inputs_embeds,
                           output_hidden_states=output_hidden_states)

    def init_cache(self, encoder_hidden, length: int, dtype=None) -> T5Cache:
        """A decoding cache of ``length`` decoder slots over ``encoder_hidden`` [B, S_enc, D]: the
        cross-attention keys/values are computed here, once."""
        decoder = self._decoder()
        cfg = self.config
        cross = scan_layers(decoder.block, lambda block, h, _: (h, block.layer[1].keys_values(h)), encoder_hidden)[1]
        empty = init_cache(cfg.num_decoder_layers, encoder_hidden.shape[0], length, cfg.num_attention_heads,
                           cfg.head_dim, dtype or encoder_hidden.dtype)
        return T5Cache(empty, cross)

    def decode(self, input_ids, encoder_hidden, encoder_mask, attention_mask=None, *, cache: T5Cache | None = None,
               cache_index=0, output_hidden_states=False, compute_logits=True):
        """The decoder over ``input_ids`` [B, T] (shifted right: decoder_start_token_id first) in
        slots cache_index .. cache_index + T, attending to the encoder output (``encoder_hidden``,
        or the cross keys/values of ``cache``; ``encoder_mask`` [B, S_enc]). ``attention_mask``
        [B, S] marks real decoder slots (all of the cache when decoding; None: all)."""
        decoder = self._decoder()
        h = self.embed(input_ids)
        t = h.shape[1]
        s = t if cache is None else cache.self.k.shape[3]
        mask = Mask(attention_mask, causal=True, offset=cache_index)
        last, hidden, self_cache = decoder(
            h, mask=mask, bias=decoder.position_bias(t, s, cache_index),
            cache=None if cache is None else cache.self, cache_index=cache_index,
            cross=None if cache is None else cache.cross,
            encoder_hidden=encoder_hidden, encoder_mask=Mask(encoder_mask), output_hidden_states=output_hidden_states)
        return ModelOutput(last, hidden, self.logits(last) if compute_logits else None,
                           None if cache is None else T5Cache(self_cache, cache.cross))

    def _decoder(self) -> T5Stack:
        if self.decoder is None:
            raise LmprobeError("this T5 checkpoint has no decoder (a T5EncoderModel): it gives embeddings "
                               "only; load a T5ForConditionalGeneration checkpoint to score or generate")
        return self.decoder


def _names() -> HFNames:
    renames = {}
    for stack in ("encoder", "decoder"):
        renames[f"{stack}.block"] = f"{stack}.block.{{i}}"
        renames[f"{stack}.relative_attention_bias"] = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias"
    return HFNames("", renames)


FAMILY = Family(name="t5", config_from_hf=T5Config.from_hf, model=T5, hf_names=_names(), base_prefix="",
                is_decoder=False, is_encoder_decoder=True)
