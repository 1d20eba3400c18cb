"""What every model family provides: its output type, its HF name table, its registry entry."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from lmprobe.models.layers import LayerCache, Mask, default_positions, init_cache, scan_layers

Array = jax.Array


class ModelOutput(NamedTuple):
    """What a forward pass returns.

    last_hidden_state: [B, T, D] after the final norm (if the family has one).
    hidden_states: [L+1, B, T, D] or None; Hugging Face's convention: entry 0 is the embedding
        output, entry i the output of layer i, and the last entry equals last_hidden_state.
    logits: [B, T, V] fp32 (decoders), or None.
    cache: the updated KV cache (decoding), or None.
    """

    last_hidden_state: Array
    hidden_states: Array | None = None
    logits: Array | None = None
    cache: LayerCache | None = None


class HF(NamedTuple):
    """Where a parameter comes from in a Hugging Face checkpoint.

    ``name`` may contain ``{i}``, the layer index: the loader stacks the L tensors on a leading
    axis. ``transpose`` turns torch's Linear weight [out, in] into our kernel [in, out]. The loader
    then reshapes to the parameter's shape: HF's one heads*head_dim dimension becomes our
    (heads, head_dim). ``qkv`` (0, 1, 2) takes the q, k or v third of a fused projection's output
    features, laid out [3, heads, head_dim] (GPT-2's c_attn) or, ``per_head``, [heads, 3, head_dim]
    (GPT-NeoX's query_key_value).
    """

    name: str
    transpose: bool = False
    qkv: int | None = None
    per_head: bool = False


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family: how to read its config, build it, and name its parameters in HF files.

    hf_params maps our parameter path ("layers.attn.q_proj.kernel") to its HF tensor. Tensor
    names are written as in the base model class; ``base_prefix`` ("model.", "transformer.",
    ...) is what task heads (ForCausalLM, ...) put in front of them, tried when a name is absent.
    """

    name: str
    config_from_hf: Callable[[dict], Any]
    model: type
    hf_params: dict[str, HF]
    base_prefix: str
    is_decoder: bool


def run_blocks(blocks, h: Array, *, mask: Mask, positions: Array, cache: LayerCache | None,
               cache_index, output_hidden_states: bool):
    """Apply the stacked blocks with one scan; returns (h, per-layer outputs or None, cache).

    Each block is called as ``block(h, mask=, positions=, cache=, cache_index=) -> (h, cache)``.
    """

    def step(block, carry, layer_cache):
        out, new_cache = block(carry, mask=mask, positions=positions, cache=layer_cache,
                               cache_index=cache_index)
        return out, (out if output_hidden_states else None, new_cache)

    h, (per_layer, new_cache) = scan_layers(blocks, step, h, cache)
    return h, per_layer, new_cache


def hf_hidden_states(first: Array, per_layer: Array | None, last: Array) -> Array | None:
    """Stack [embedding output, layer 1..L-1 outputs, final (normed) output], HF's convention."""
    if per_layer is None:
        return None
    return jnp.concatenate([first[None], per_layer[:-1], last[None]], axis=0)


def hf_rope(config: dict, *, legacy_theta_key: str = "rope_theta", default_theta: float = 10000.0):
    """(theta, scaling dict or None) from a config in transformers 5 ("rope_parameters") or 4 form."""
    params = config.get("rope_parameters") or {}
    theta = params.get("rope_theta", config.get(legacy_theta_key, default_theta))
    scaling = params if params.get("rope_type", "default") != "default" else config.get("rope_scaling")
    return float(theta), scaling


def frozen(d: dict | None) -> tuple | None:
    """A dict as sorted (key, value) items: hashable, so it can sit in a frozen config."""
    return None if d is None else tuple(sorted((k, v) for k, v in d.items() if not isinstance(v, (dict, list))))


def mask_and_positions(h: Array, attention_mask, positions, cache_index) -> tuple[Mask, Array]:
    """A decoder call's causal Mask and the position ids of its T tokens.

    ``attention_mask`` [B, S] marks real slots (all, when None); a [B, T, S] mask (which key each
    query sees: packed sequences) needs explicit positions.
    """
    b, t = h.shape[:2]
    keys = jnp.ones((b, t), bool) if attention_mask is None else attention_mask
    if keys.ndim == 3 and positions is None:
        raise ValueError("a [batch, queries, keys] attention mask needs explicit positions")
    positions = default_positions(keys, cache_index, t) if positions is None else positions
    return Mask(keys, causal=True, offset=cache_index, positions=positions), positions


def empty_cache(config, batch: int, length: int, dtype) -> LayerCache:
    """An empty KV cache for a decoder with this config: ``batch`` rows of ``length`` slots."""
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return init_cache(config.num_hidden_layers, batch, length, kv_heads, config.head_dim, dtype)
