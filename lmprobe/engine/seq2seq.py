"""Encoder-decoder (T5) bodies and batching for the Scorer: log p(target | source), generation.

A source runs through the encoder once. Its target is read teacher-forced by the decoder,
shifted right behind the model's decoder_start_token_id, so every target token is predicted (the
first one too). Generation feeds the start token, then each new token, through a KV-cached
decoder whose cross-attention keys/values over the prompt are computed once
(``T5.init_cache``); sampling and stopping are lmprobe.engine.generation's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from lmprobe.engine import generation
from lmprobe.engine.batching import bucket_length, make_batches
from lmprobe.engine.packing import padded
from lmprobe.errors import LmprobeError


@dataclasses.dataclass(frozen=True)
class PairBatch:
    """Rows ``0 .. len(indices)-1`` hold pairs ``indices``; each side right-padded to its bucket."""

    indices: np.ndarray
    source_ids: np.ndarray  # [rows, S]
    source_mask: np.ndarray
    target_ids: np.ndarray  # [rows, T]
    target_mask: np.ndarray
    target_lengths: np.ndarray


def pair_batches(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], *, buckets: Sequence[int],
                 **batching) -> list[PairBatch]:
    """Batches of (source, target) pairs, grouped by the bucket of their longer side
    (``make_batches``'s rows and token budget); ``batching``: make_batches' batch_size,
    max_tokens, data_parallel."""
    for side, seqs in (("source", sources), ("target", targets)):
        empty = next((i for i, s in enumerate(seqs) if not len(s)), None)
        if empty is not None:
            raise LmprobeError(f"{side} {empty} is empty (no tokens): drop it, or let the tokenizer add "
                               "its special tokens (T5's appends </s>)")
    longer = [s if len(s) >= len(t) else t for s, t in zip(sources, targets)]
    out = []
    for b in make_batches(longer, buckets=buckets, **batching):
        sides = []
        for seqs in (sources, targets):
            lengths = np.asarray([len(seqs[i]) for i in b.indices])
            ids = padded(seqs, b.indices, (b.shape[0], bucket_length(lengths.max(), buckets)), 0)
            mask = np.zeros_like(ids)
            mask[:len(lengths)] = np.arange(ids.shape[1]) < lengths[:, None]
            sides += [ids, mask]
        out.append(PairBatch(b.indices, *sides, np.asarray([len(targets[i]) for i in b.indices])))
    return out


def shift_right(model, ids):
    """Decoder inputs for targets ``ids`` [B, T]: decoder_start_token_id, then ids[:, :-1]."""
    start = jnp.full_like(ids[:, :1], model.config.decoder_start_token_id)
    return jnp.concatenate([start, ids[:, :-1]], axis=1)


def target_logprobs(model, source_ids, source_mask, target_ids, target_mask):
    """[B, T]: ln p(target[t] | target[<t], source), the LM head over slices of positions."""
    from lmprobe.engine.scorer import _logprobs  # the decoders' chunked head, shared

    encoded = model.encode(source_ids, source_mask).last_hidden_state
    h = model.decode(shift_right(model, target_ids), encoded, source_mask, target_mask,
                     compute_logits=False).last_hidden_state
    return _logprobs(model, h, target_ids)


def generate(model, ids, mask, index, seed, temperature, top_p, eos, *, max_new_tokens: int, top_k: int,
             greedy: bool):
    """New tokens [B, max_new_tokens] for prompts ``ids`` (the encoder's input, padded either
    side); rows that stopped repeat EOS. Row seeds and sampling as generation.generate's."""
    pick = generation.picker(index, seed, temperature, top_p, top_k=top_k, greedy=greedy)
    encoded = model.encode(ids, mask).last_hidden_state
    cache = model.init_cache(encoded, max_new_tokens + 1)  # the start token, then each new one
    start = jnp.full((ids.shape[0], 1), model.config.decoder_start_token_id, jnp.int32)
    out = model.decode(start, None, mask, cache=cache, cache_index=0, compute_logits=False)
    first = pick(model.logits(out.last_hidden_state[:, 0]), 0)

    def advance(token, cache, step):
        out = model.decode(token[:, None], None, mask, cache=cache, cache_index=step + 1, compute_logits=False)
        return pick(model.logits(out.last_hidden_state[:, 0]), step + 1), out.cache

    return generation.decode_loop(advance, first, out.cache, eos, max_new_tokens)
