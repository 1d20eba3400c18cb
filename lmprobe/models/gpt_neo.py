"""GPT-Neo family: EleutherAI's GPT-Neo 125M / 1.3B / 2.7B.

Mirrors transformers' modeling_gpt_neo.py. The network is GPT-2's (gpt2.py: wte + learned wpe,
LayerNorm pre-norm blocks, GELU MLP, ln_f, tied LM head) with a different attention: separate
q/k/v projections without bias, out_proj with bias, scores accumulated in fp32 with *no*
1/sqrt(head_dim) scaling, and layers alternating between "global" (causal) and "local" attention
(causal within a sliding window of ``window_size`` slots, positions for packed rows), per
config.attention_types.
"""

from __future__ import annotations

import dataclasses

from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS
from lmprobe.models.base import Family, HFNames
from lmprobe.models.gpt2 import GPT2, GPT2Config, attend
from lmprobe.models.layers import Linear, update_cache


@dataclasses.dataclass(frozen=True)
class GPTNeoConfig(GPT2Config):
    scale_attn_weights: bool = False  # GPT-Neo never scales its attention scores
    attention_layers: tuple[str, ...] = ()  # "global" or "local", one per layer
    window_size: int = 256

    @classmethod
    def from_hf(cls, c: dict) -> GPTNeoConfig:
        d, num_layers = c.get("hidden_size", 2048), c.get("num_layers", 24)
        # As GPTNeoConfig: attention_types [[["global", "local"], 12]] expands to 24 layer types.
        types = c.get("attention_types") or [[["global", "local"], 12]]
        layers = tuple(kind for kinds, repeat in types for _ in range(repeat) for kind in kinds)
        if len(layers) != num_layers or not set(layers) <= {"global", "local"}:
            raise CheckpointError(
                f"attention_types {types!r} in the GPT-Neo config must give 'global' or 'local' for "
                f"each of its {num_layers} layers; fix config.json")
        return cls(
            vocab_size=c.get("vocab_size", 50257), hidden_size=d, num_hidden_layers=num_layers,
            num_attention_heads=c.get("num_heads", 16), intermediate_size=c.get("intermediate_size") or 4 * d,
            max_position_embeddings=c.get("max_position_embeddings", 2048),
            layer_norm_epsilon=c.get("layer_norm_epsilon", 1e-5),
            activation_function=c.get("activation_function", "gelu_new"),
            tie_word_embeddings=c.get("tie_word_embeddings", True),
            attention_layers=layers, window_size=c.get("window_size", 256))

    def attention_windows(self) -> tuple[int | None, ...]:
        return tuple(self.window_size if kind == "local" else None for kind in self.attention_layers)


class GPTNeoSelfAttention(nnx.Module):
    def __init__(self, cfg: GPTNeoConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), use_bias=False, **kw)
        self.k_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), use_bias=False, **kw)
        self.v_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), use_bias=False, **kw)
        self.out_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.config = cfg

    def __call__(self, x, *, mask, layer, cache, cache_index):
        # Unscaled scores (attention_scale is 1), accumulated in fp32 as HF's upcast q.k does.
        k, v, cache = update_cache(cache, self.k_proj(x), self.v_proj(x), cache_index)
        return self.out_proj(attend(self.config, self.q_proj(x), k, v, mask, layer, cache is not None)), cache


class GPTNeo(GPT2):
    """Causal LM: ``model(input_ids, attention_mask) -> ModelOutput`` with fp32 logits."""

    attention = GPTNeoSelfAttention


FAMILY = Family(
    name="gpt_neo",
    config_from_hf=GPTNeoConfig.from_hf,
    model=GPTNeo,
    base_prefix="transformer.",
    is_decoder=True,
    # HF wraps the self-attention in GPTNeoAttention
    hf_names=HFNames("transformer.", {"h": "transformer.h.{i}", "h.attn": "transformer.h.{i}.attn.attention",
                                      "lm_head": "lm_head"}),
)
