"""The shell the BERT-style text encoders share (bert, distilbert, mpnet, nomic_bert): embeddings,
the scanned blocks over real tokens, the outputs; and what encoders' configs and scans share (ViT too).
A family builds its modules under its own (Hugging Face) names and overrides a hook for what is its own.
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
from flax import nnx

from lmprobe.models.base import ModelOutput, hf_hidden_states
from lmprobe.models.layers import Mask, check_length, default_positions, scan_layers

Array = jax.Array


def roberta_positions(input_ids, key_mask, pad: int):
    """RoBERTa's position ids (fairseq's make_positions): real tokens count from ``pad`` + 1, pad
    tokens sit at ``pad``; as HF does from input_ids, and from the mask alone for inputs_embeds."""
    real = key_mask.astype(bool) if input_ids is None else key_mask.astype(bool) & (input_ids != pad)
    return jnp.where(real, pad + jnp.cumsum(real, axis=-1), pad)


def run_encoder_blocks(blocks, h: Array, *, output_hidden_states: bool, **inputs):
    """Apply an encoder's stacked blocks with one scan; returns (h, per-layer outputs or None).

    Each block is called as ``block(h, **inputs) -> h`` (``inputs``: the mask, a position bias...).
    """

    def step(block, carry, _):
        out = block(carry, **inputs)
        return out, out if output_hidden_states else None

    return scan_layers(blocks, step, h)


class BertStyleEncoder(nnx.Module):
    """Encoder: ``model(input_ids, attention_mask) -> ModelOutput(last_hidden_state, hidden_states)``.

    ``embedding_output`` of the token embeddings (``embeddings.word_embeddings``) -> the blocks at
    ``blocks_path`` (one scan; each called as ``block(h, mask=, **block_inputs(...))``); no final
    norm. With ``learned_positions`` (a position table), sequences beyond ``max_length`` are
    refused. ``token_type_ids`` count only in families with token types (zeros when None).
    """

    blocks_path = "layer"
    learned_positions = True

    @property
    def max_length(self) -> int:
        """The longest sequence the position embeddings cover."""
        return self.config.max_position_embeddings

    def embed(self, input_ids):
        """Token embeddings (HF's inputs_embeds)."""
        return self.embeddings.word_embeddings(input_ids)

    def default_positions(self, input_ids, key_mask):
        """0, 1, ... over real tokens."""
        return default_positions(key_mask)

    def embedding_output(self, x, token_type_ids, positions):
        """The first block's input (HF's hidden_states[0]) from the token embeddings ``x``."""
        return self.embeddings(x, token_type_ids, positions)

    def block_inputs(self, t: int, positions) -> dict:
        """What each block is given besides the mask (a position bias, the positions): nothing here."""
        return {}

    def __call__(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, token_type_ids=None,
                 positions=None, output_hidden_states=False):
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        b, t = x.shape[:2]
        if self.learned_positions:
            check_length(t, self.max_length)
        key_mask = jnp.ones((b, t), bool) if attention_mask is None else attention_mask
        positions = self.default_positions(input_ids, key_mask) if positions is None else positions
        token_type_ids = jnp.zeros((b, t), jnp.int32) if token_type_ids is None else token_type_ids
        h = self.embedding_output(x, token_type_ids, positions)
        out, per_layer = run_encoder_blocks(operator.attrgetter(self.blocks_path)(self), h, mask=Mask(attention_mask),
                                            output_hidden_states=output_hidden_states,
                                            **self.block_inputs(t, positions))
        return ModelOutput(out, hf_hidden_states(h, per_layer, out))
