"""nomic-bert family (nomic-embed-text-v1 / v1.5).

Mirrors transformers' modeling_nomic_bert.py: word + token-type embeddings and a LayerNorm (no
position embeddings), then post-norm blocks (self-attention with rotary embeddings on q and k,
residual, norm1; SwiGLU MLP, residual, norm2), bidirectional attention over real tokens, no
biases in the projections. No final norm. Tensors are named as nomic's checkpoints store them
(and transformers saves them): a fused ``attn.Wqkv``, ``mlp.fc11`` (up), ``fc12`` (gate),
``fc2`` (down). Configs in transformers' form (hidden_size, rope_parameters) and in nomic's
original form (n_embd, rotary_emb_base, activation_function='swiglu') are both read.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP
from lmprobe.models.base import HF, Family, HFNames, hf_rope
from lmprobe.models.encoder import BertStyleEncoder
from lmprobe.models.layers import Embed, LayerNorm, Linear, activation, apply_rope, attention, rope_inv_freq, stacked

# nomic's activation_function -> the gate's activation (its gated MLPs)
_GATED = {"swiglu": "silu", "geglu": "gelu"}


@dataclasses.dataclass(frozen=True)
class NomicBertConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    head_dim: int
    max_position_embeddings: int = 2048
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "silu"
    rope_theta: float = 1000.0

    @classmethod
    def from_hf(cls, c: dict) -> NomicBertConfig:
        def get(key, original, default=None):  # transformers' key, else nomic's original one
            value = c.get(key)
            return c.get(original, default) if value is None else value

        unsupported = {"prenorm": False, "causal": False, "qkv_proj_bias": False, "mlp_fc1_bias": False,
                       "mlp_fc2_bias": False, "rotary_emb_interleaved": False, "rotary_emb_fraction": 1.0,
                       "rotary_scaling_factor": None}
        for key, supported in unsupported.items():
            if c.get(key, supported) != supported:
                raise CheckpointError(f"{key}={c[key]!r} in the nomic_bert model config is not supported "
                                      f"(only {supported!r}, as in nomic-embed-text-v1.5)")
        theta, scaling = hf_rope(c, legacy_theta_key="rotary_emb_base", default_theta=1000.0)
        if scaling:
            raise CheckpointError(f"rope scaling {dict(scaling)!r} in the nomic_bert model config is not supported")
        act = c.get("hidden_act") or _GATED.get(c.get("activation_function"))
        if act is None:
            raise CheckpointError(f"activation_function {c.get('activation_function')!r} in the nomic_bert model "
                                  f"config is not supported (supported: {sorted(_GATED)})")
        hidden, heads = get("hidden_size", "n_embd"), get("num_attention_heads", "n_head")
        intermediate = get("intermediate_size", "n_inner")
        if intermediate is None:
            raise CheckpointError("the nomic_bert model config gives no intermediate_size (n_inner)")
        head_dim = c.get("head_dim") or hidden // heads
        if not c.get("head_dim") and hidden % heads:
            raise CheckpointError(f"hidden size {hidden} is not a multiple of {heads} attention heads in the "
                                  "model config")
        return cls(
            vocab_size=c["vocab_size"], hidden_size=hidden, intermediate_size=intermediate,
            num_hidden_layers=get("num_hidden_layers", "n_layer"), num_attention_heads=heads, head_dim=head_dim,
            max_position_embeddings=get("max_position_embeddings", "n_positions", 2048),
            type_vocab_size=c.get("type_vocab_size", 2),
            layer_norm_eps=get("layer_norm_eps", "layer_norm_epsilon", 1e-12), hidden_act=act, rope_theta=theta)


class NomicBertEmbeddings(nnx.Module):
    def __init__(self, cfg: NomicBertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.word_embeddings = Embed(cfg.vocab_size, cfg.hidden_size, **kw)
        self.token_type_embeddings = (Embed(cfg.type_vocab_size, cfg.hidden_size, axes=(None, EMBED), **kw)
                                      if cfg.type_vocab_size else None)

    def __call__(self, inputs_embeds, token_type_ids):
        if self.token_type_embeddings is None:
            return inputs_embeds
        return inputs_embeds + self.token_type_embeddings(token_type_ids)


class NomicBertAttention(nnx.Module):
    """q, k, v (the thirds of the checkpoint's fused Wqkv), rotary on q and k, out_proj."""

    def __init__(self, cfg: NomicBertConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), **kw)
        self.k = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.v = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), **kw)
        self.out_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.inv_freq = rope_inv_freq(hd, cfg.rope_theta)
        self.scale = hd ** -0.5

    def __call__(self, x, mask, positions):
        q = apply_rope(self.q(x), positions, self.inv_freq)
        k = apply_rope(self.k(x), positions, self.inv_freq)
        return self.out_proj(attention(q, k, self.v(x), mask, scale=self.scale))


class NomicBertMLP(nnx.Module):
    """fc2(act(fc12(x)) * fc11(x)): fc12 is the gate."""

    def __init__(self, cfg: NomicBertConfig, *, dtype, param_dtype, rngs):
        kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc11 = Linear(cfg.hidden_size, cfg.intermediate_size, axes=(EMBED, MLP), **kw)
        self.fc12 = Linear(cfg.hidden_size, cfg.intermediate_size, axes=(EMBED, MLP), **kw)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size, axes=(MLP, EMBED), **kw)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x):
        return self.fc2(self.act(self.fc12(x)) * self.fc11(x))


class NomicBertLayer(nnx.Module):
    def __init__(self, cfg: NomicBertConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attn = NomicBertAttention(cfg, **kw)
        self.norm1 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)
        self.mlp = NomicBertMLP(cfg, **kw)
        self.norm2 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)

    def __call__(self, x, *, mask, positions):
        x = self.norm1(x + self.attn(x, mask, positions))
        return self.norm2(x + self.mlp(x))


class NomicBert(BertStyleEncoder):
    """NomicBertModel: word + token-type embeddings, then emb_ln; every block is given the positions.
    ``max_length`` is the context it was trained for (rotary embeddings have no table to overrun)."""

    blocks_path = "layers"
    learned_positions = False

    def __init__(self, cfg: NomicBertConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embeddings = NomicBertEmbeddings(cfg, rngs=rngs, **kw)
        self.emb_ln = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, rngs=rngs, **kw)
        self.layers = stacked(lambda r: NomicBertLayer(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)

    def embedding_output(self, x, token_type_ids, positions):
        return self.emb_ln(self.embeddings(x, token_type_ids))

    def block_inputs(self, t, positions):
        return {"positions": positions}


_WQKV = "encoder.layers.{i}.attn.Wqkv.weight"  # [q; k; v] rows

FAMILY = Family(
    name="nomic_bert", config_from_hf=NomicBertConfig.from_hf, model=NomicBert,
    hf_names=HFNames("", {"layers": "encoder.layers.{i}",
                          "layers.attn.q.kernel": HF(_WQKV, transpose=True, qkv=0),
                          "layers.attn.k.kernel": HF(_WQKV, transpose=True, qkv=1),
                          "layers.attn.v.kernel": HF(_WQKV, transpose=True, qkv=2)}),
    base_prefix="nomic_bert.", is_decoder=False)
