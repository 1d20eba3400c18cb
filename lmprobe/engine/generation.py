"""Batched generation with a KV cache: greedy or sampled (temperature, top-k, top-p), seeded.

One jitted program per (batch, prompt bucket, max_new_tokens): the prompt (left-padded) fills
the cache in one pass, then a while_loop decodes one token per step until every row has
emitted EOS or max_new_tokens are out. Row i draws from key fold_in(key(seed), index[i]), its
position in the caller's input list, so its tokens do not depend on the batch it sits in.
``picker`` and ``decode_loop`` serve encoder-decoders too (lmprobe.engine.seq2seq). A model
without a KV cache (Family.kv_cache False: a JAX callable) runs ``kv_cache=False``: each new token
recomputes the whole row, prompt and tokens so far, and is picked the same way (same tokens).

Constrained decoding: ``allowed`` [B, V] bool (an array argument, not a static: one program
serves every mask) sets the logits of the ids a row may not emit to -inf before the argmax or
the draw (temperature, top-k, top-p then act on the allowed ids only). EOS always stays allowed,
so every row can end. An all-True mask gives the unconstrained tokens.

Stop ids: ``stop`` [V] bool (an array argument too) marks ids that end a row as EOS does (kept in
its output, ``until_eos`` cuts after the first); e.g. every token whose text holds a stop string,
so a batch stops decoding once each row has one instead of running to max_new_tokens.

Batches (``prompt_batches``): the prompts longest first, cut into full batches across length
buckets: each decode step reads all the weights once per batch, so fewer batches beat less
prompt padding (smollm2-135m, 8 prompts of 21-86 tokens x 16 new: one batch 1.57x faster than
one per bucket, four).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe.engine.batching import Batch, batch_size_for, bucket_length, make_batches
from lmprobe.engine.steps import head_states
from lmprobe.models.base import empty_cache


def sample(key, logits, temperature, top_k: int, top_p):
    """One token id drawn from ``logits`` [V] scaled by 1/temperature, restricted to the top_k
    largest (0: all) and then to the top_p nucleus (1: all), renormalised (HF's warper order).

    The draw happens among the candidates sorted by probability: ``lax.top_k`` when top_k > 0, one
    sort of the vocabulary otherwise (two full-vocabulary sorts per step cost 100x the draw).
    """
    logits = logits.astype(jnp.float32) / temperature
    if top_k:
        candidates, ids = jax.lax.top_k(logits, top_k)
    else:
        ids = jnp.argsort(-logits)
        candidates = logits[ids]
    probs = jax.nn.softmax(candidates)
    before = jnp.cumsum(probs) - probs  # mass of strictly more likely candidates
    candidates = jnp.where(before < top_p, candidates, -jnp.inf)
    return ids[jax.random.categorical(key, candidates)]


def restrict(logits, allowed, eos):
    """``logits`` [B, V] with the ids a row's ``allowed`` [B, V] mask leaves out set to -inf;
    ``eos`` (when >= 0) is always allowed. ``allowed`` None: ``logits`` unchanged."""
    if allowed is None:
        return logits
    keep = allowed.astype(bool) | (jnp.arange(logits.shape[-1]) == eos)[None, :]
    return jnp.where(keep, logits, -jnp.inf)


def picker(index, seed, temperature, top_p, *, top_k: int, greedy: bool, allowed=None, eos=-1):
    """``pick(logits [B, V], step) -> ids [B]``: argmax, or a draw for row i from key
    fold_in(fold_in(key(seed), index[i]), step); among the ids ``allowed`` [B, V] (None: all)
    and ``eos`` (see ``restrict``)."""
    row_keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.maximum(index, 0))

    def pick(logits, step):
        logits = restrict(logits, allowed, eos)
        if greedy:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        keys = jax.vmap(lambda k: jax.random.fold_in(k, step))(row_keys)
        return jax.vmap(lambda k, l: sample(k, l, temperature, top_k, top_p))(keys, logits).astype(jnp.int32)

    return pick


def decode_loop(advance, first, state, eos, max_new_tokens: int, stop=None):
    """Tokens [B, max_new_tokens]: ``first``, then ``advance(token, state, step) -> (next token,
    state)`` in a while_loop until every row has emitted EOS (or an id ``stop`` [V] marks) or
    max_new_tokens are out; rows that stopped repeat EOS."""
    batch = first.shape[0]
    tokens = jnp.full((batch, max_new_tokens), jnp.maximum(eos, 0), jnp.int32)
    done = jnp.zeros((batch,), bool)

    def cond(loop):
        step, _, _, done, _ = loop
        return (step < max_new_tokens) & ~jnp.all(done)

    def body(loop):
        step, token, state, done, tokens = loop
        tokens = tokens.at[:, step].set(jnp.where(done, tokens[:, step], token))
        done = done | (token == eos) | (False if stop is None else stop[token])
        token, state = advance(token, state, step)
        return step + 1, token, state, done, tokens

    return jax.lax.while_loop(cond, body, (jnp.int32(0), first, state, done, tokens))[-1]


def generate(model, ids, mask, index, seed, temperature, top_p, eos, allowed=None, stop=None, *, max_new_tokens: int,
             top_k: int, greedy: bool, prompt_hidden: bool = False, kv_cache: bool = True):
    """New tokens [B, max_new_tokens] after left-padded prompts ``ids``; rows that stopped repeat
    EOS. ``allowed`` [B, V] bool restricts each row's tokens to its True ids and EOS (None: no
    restriction); ``stop`` [V] bool: ids that end a row like EOS (None: EOS only). With
    ``prompt_hidden``, also the prompts' states the head reads [B, T, D] (steps.head_states).
    ``kv_cache=False``: full recomputation per token (``recompute``)."""
    batch, prompt = ids.shape
    pick = picker(index, seed, temperature, top_p, top_k=top_k, greedy=greedy, allowed=allowed, eos=eos)
    slots = jnp.concatenate([mask, jnp.zeros((batch, max_new_tokens), mask.dtype)], axis=1)
    if not kv_cache:
        return recompute(model, ids, slots, pick, eos, max_new_tokens, prompt_hidden, stop)
    cache = empty_cache(model.config, batch, prompt + max_new_tokens, model.embed(ids).dtype)
    out = model(ids, slots, cache=cache, cache_index=0, compute_logits=False)
    first = pick(model.logits(out.last_hidden_state[:, -1]), 0)

    def advance(token, state, step):
        cache, slots = state
        slots = slots.at[:, prompt + step].set(1)
        out = model(token[:, None], slots, cache=cache, cache_index=prompt + step, compute_logits=False)
        return pick(model.logits(out.last_hidden_state[:, 0]), step + 1), (out.cache, slots)

    tokens = decode_loop(advance, first, (out.cache, slots), eos, max_new_tokens, stop)
    return (tokens, out.last_hidden_state) if prompt_hidden else tokens


def recompute(model, ids, slots, pick, eos, max_new_tokens: int, prompt_hidden: bool, stop=None):
    """``generate`` without a KV cache: one forward over the whole row (prompt, then the tokens so
    far; ``slots`` marks the real ones) for each new token."""
    prompt = ids.shape[1]
    states = head_states(model, ids, slots[:, :prompt])
    first = pick(model.logits(states[:, -1]), 0)
    row = jnp.concatenate([ids, jnp.zeros((ids.shape[0], max_new_tokens), ids.dtype)], axis=1)

    def advance(token, state, step):
        row, slots = state
        row, slots = row.at[:, prompt + step].set(token), slots.at[:, prompt + step].set(1)
        h = jax.lax.dynamic_index_in_dim(head_states(model, row, slots), prompt + step, axis=1, keepdims=False)
        return pick(model.logits(h), step + 1), (row, slots)

    tokens = decode_loop(advance, first, (row, slots), eos, max_new_tokens, stop)
    return (tokens, states) if prompt_hidden else tokens


def prompt_batches(runner, seqs, max_length: int) -> list[Batch]:
    """Left-padded batches of the prompts ``seqs`` for ``runner`` (its batch size, token budget,
    buckets up to ``max_length``, data shards): longest first, each batch as full as the bucket of
    its longest prompt allows, whatever the buckets of the others (padded to that bucket)."""
    if any(len(s) == 0 for s in seqs):  # make_batches' error, naming the input's own index
        return make_batches(seqs, batch_size=runner.batch_size, buckets=runner.bucket_lengths(max_length))
    order = np.argsort([-len(s) for s in seqs], kind="stable")
    batches, start = [], 0
    while start < len(order):
        length = bucket_length(len(seqs[order[start]]), runner.bucket_lengths(max_length))
        chunk = order[start:start + batch_size_for(length, runner.batch_size, runner.max_tokens, runner.data_parallel)]
        (batch,) = make_batches([seqs[i] for i in chunk], batch_size=runner.batch_size, max_tokens=runner.max_tokens,
                                buckets=(length,), left_pad=True, data_parallel=runner.data_parallel,
                                split=False)  # pieces would each run a decode loop that reads every weight per step
        batches.append(dataclasses.replace(batch, indices=chunk[batch.indices]))
        start += len(chunk)
    return batches


def until_eos(row, eos: int, stop=()) -> list[int]:
    """The ids of a generated ``row`` up to and with its first ``eos`` or id of ``stop`` (all of them
    when it has none)."""
    ends = {eos, *stop}
    row = [int(t) for t in row]
    return next((row[:k + 1] for k, t in enumerate(row) if t in ends), row)
