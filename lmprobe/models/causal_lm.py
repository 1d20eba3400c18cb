"""The shell every decoder family shares: token embedding, causal mask and positions, the scanned
blocks, the final norm, the LM head and the outputs. A family builds its modules under its own
(Hugging Face) names, says which is which in ``parts``, and overrides a hook for what is its own.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from lmprobe.models.axes import EMBED, VOCAB
from lmprobe.models.base import ModelOutput, hf_hidden_states
from lmprobe.models.layers import (
    LayerCache,
    Linear,
    Mask,
    default_positions,
    lm_logits,
    scan_layers,
    write_cache,
)

Array = jax.Array


class DecoderParts(NamedTuple):
    """The attributes that hold a decoder's parts; their names are parameter paths (HF's names).

    An attribute set to None means: no final norm (``norm``), an LM head tied to the embedding (``head``).
    """

    embed: str = "embed_tokens"
    blocks: str = "layers"
    norm: str = "norm"
    head: str = "lm_head"


class SlidingWindows:
    """What a decoder config whose layers may attend within sliding windows derives from
    ``attention_windows()`` (each layer's window; None: full causal attention)."""

    def window_kinds(self) -> tuple[int | None, ...]:
        """The distinct windows; a layer's window is given to it as an index into these."""
        return tuple(dict.fromkeys(self.attention_windows()))

    def window_indices(self) -> Array:
        """Each layer's window as an index into ``window_kinds()``: a scanned layer input."""
        kinds = self.window_kinds()
        return jnp.asarray([kinds.index(w) for w in self.attention_windows()])


def untied_head(cfg, width: int, **kw) -> Linear | None:
    """The LM head [width, vocab] without bias, or None when the config ties it to the token embedding."""
    return None if cfg.tie_word_embeddings else Linear(width, cfg.vocab_size, axes=(EMBED, VOCAB), use_bias=False,
                                                      **kw)


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


def run_blocks(blocks, h: Array, *, mask: Mask, positions: Array, cache: LayerCache | None,
               cache_index, output_hidden_states: bool, layer_inputs=None):
    """Apply a decoder's stacked blocks with one scan; returns (h, per-layer outputs or None, the
    cache with this call's keys and values written).

    Each block is called as ``block(h, mask=, positions=, cache=, cache_index=) -> (h, written)``,
    ``written`` the keys and values ``update_cache`` gave it to store, plus ``layer=`` its slice of
    ``layer_inputs`` (arrays with a leading layer axis: a layer's attention window, its rope table)
    when given.
    """

    def step(block, carry, inputs):
        layer_cache, layer = inputs
        extra = {} if layer_inputs is None else {"layer": layer}
        out, written = block(carry, mask=mask, positions=positions, cache=layer_cache,
                             cache_index=cache_index, **extra)
        return out, (out if output_hidden_states else None, written)

    h, (per_layer, written) = scan_layers(blocks, step, h, (cache, layer_inputs))
    return h, per_layer, write_cache(cache, written, cache_index)


class DecoderLM(nnx.Module):
    """Causal LM: ``model(input_ids, attention_mask) -> ModelOutput`` with fp32 logits.

    embed -> ``block_input`` -> the blocks (one scan, each given ``layer_inputs()``) -> final norm
    -> head. A family sets ``config`` and the modules ``parts`` names in its ``__init__``.
    """

    parts = DecoderParts()

    def embed(self, input_ids):
        """Token embeddings (HF's inputs_embeds)."""
        return getattr(self, self.parts.embed)(input_ids)

    def logits(self, hidden):
        """fp32 logits for final hidden states (call it only at the positions you need)."""
        return lm_logits(hidden, getattr(self, self.parts.embed), getattr(self, self.parts.head))

    def block_input(self, h, mask: Mask, positions):
        """The first block's input (HF's hidden_states[0]) from the token embeddings ``h``: ``h``
        itself, unless the family adds learned positions or projects it."""
        return h

    def layer_inputs(self):
        """Arrays with a leading layer axis, each block given its slice as ``layer=``; None: no such input."""
        return None

    def __call__(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, positions=None,
                 cache=None, cache_index=0, output_hidden_states=False, compute_logits=True):
        h = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        mask, positions = mask_and_positions(h, attention_mask, positions, cache_index)
        h = self.block_input(h, mask, positions)
        out, per_layer, cache = run_blocks(getattr(self, self.parts.blocks), h, mask=mask, positions=positions,
                                           cache=cache, cache_index=cache_index,
                                           output_hidden_states=output_hidden_states,
                                           layer_inputs=self.layer_inputs())
        norm = getattr(self, self.parts.norm)
        last = out if norm is None else norm(out)
        return ModelOutput(last, hf_hidden_states(h, per_layer, last),
                           self.logits(last) if compute_logits else None, cache)
