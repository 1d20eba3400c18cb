"""Encoder-decoders (T5): their Scorer, its jitted bodies and batching: ln p(target | source), generation.

``Scorer(model)`` and ``Scorer.load`` give a ``Seq2SeqScorer`` for an encoder-decoder: ``embed``
pools the encoder, ``score_targets`` scores targets given sources, ``score`` / ``score_pairs``
score each text as the target of an empty source (just EOS: the decoder as a language model),
``generate`` decodes from the encoded prompt; ``next_token_stats`` (the next token after a text)
is for decoders only.

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

from lmprobe.engine import generation, steps
from lmprobe.engine.batching import bucket_length, make_batches, restore
from lmprobe.engine.packing import padded
from lmprobe.engine.scorer import HiddenMemo, Scorer, Scores
from lmprobe.errors import LmprobeError
from lmprobe.models import ENCODER_DECODER


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
    encoded = model.encode(source_ids, source_mask).last_hidden_state
    h = model.decode(shift_right(model, target_ids), encoded, source_mask, target_mask,
                     compute_logits=False).last_hidden_state
    return steps.logprobs(model, h, target_ids)


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


class Seq2SeqScorer(Scorer, kind=ENCODER_DECODER):
    """The Scorer of an encoder-decoder: a text is scored as the target of an empty source."""

    def require_decoder(self, what: str) -> None:
        raise LmprobeError(f"{what} needs a causal language model; {type(self.model).__name__} is an "
                           "encoder-decoder: score it with score_targets (ln p(target | source)), score "
                           "or generate, or use a decoder checkpoint (llama, gpt2, opt, ...)")

    def score(self, inputs) -> Scores:
        """Each text or id list scored as the target of an empty source (EOS alone): every token
        is predicted, the first one too."""
        seqs = self.encode(inputs)
        self.report_cuts()
        return self.score_targets([[self.config.eos_token_id]] * len(seqs), seqs)

    def score_pairs(self, a, b) -> tuple[Scores, Scores]:
        """``score(a)`` and ``score(b)``, unpacked."""
        if len(a) != len(b):
            raise LmprobeError(f"score_pairs needs as many a ({len(a)}) as b ({len(b)})")
        return self.score(list(a) + list(b)).split(len(a))

    def score_targets(self, sources, targets) -> Scores:
        """ln p(target | source) per target token: token_logprobs[i][t] = ln p(target_i token t |
        its tokens before t, source_i), every target token predicted. Texts or id lists; texts get
        the tokenizer's special tokens (T5's </s> ends a target, as lm-eval scores seq2seq
        continuations)."""
        if len(sources) != len(targets):
            raise LmprobeError(f"score_targets needs as many sources ({len(sources)}) as targets ({len(targets)})")
        sources, targets = self.encode(list(sources)), self.encode(list(targets))
        self.report_cuts()
        if not targets:
            return Scores.of([])
        runner = self.runner
        batches = pair_batches(sources, targets, buckets=runner.bucket_lengths(), batch_size=self.batch_size,
                               max_tokens=self.max_tokens, data_parallel=runner.data_parallel)
        calls = (runner.put(b.source_ids, b.source_mask, b.target_ids, b.target_mask) for b in batches)
        per_batch = runner.run(runner.jit("score_targets", target_logprobs), calls)
        return Scores.of(restore(batches, [[lp[r, :n] for r, n in enumerate(b.target_lengths)]
                                           for b, lp in zip(batches, per_batch)], len(targets)))

    def generate(self, prompts, *, max_new_tokens: int = 20, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, eos_id: int | None = None,
                 decode: bool = True, memo: HiddenMemo | None = None, allowed=None) -> list:
        """The decoder's answer to each prompt, the prompt encoded up to the whole context (see
        Scorer.generate); stops at the config's EOS when there is no tokenizer; a ``memo`` is left
        as is (its states are a decoder's); ``allowed`` is refused."""
        if allowed is not None:
            self.allowed_rows(allowed, len(prompts))
            raise LmprobeError("generate(allowed=...) constrains causal LMs only: this model is an "
                               "encoder-decoder; generate without a mask, or use a decoder model")
        if eos_id is None and self.tokenizer is not None:
            eos_id = self.tokenizer.eos_token_id
        if eos_id is None:
            eos_id = self.config.eos_token_id
        step = self.runner.jit("generate_seq2seq", generate, max_new_tokens=max_new_tokens, top_k=top_k,
                               greedy=temperature <= 0)
        return self.generate_with(step, prompts, room=self.max_length, eos_id=eos_id, seed=seed,
                                  temperature=temperature, top_p=top_p, decode=decode)
