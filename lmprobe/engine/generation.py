"""Batched generation with a KV cache: greedy or sampled (temperature, top-k, top-p), seeded.

One jitted program per (batch, prompt bucket, max_new_tokens): the prompt (left-padded) fills
the cache in one pass, then a while_loop decodes one token per step until every row has
emitted EOS or max_new_tokens are out. Row i draws from key fold_in(key(seed), index[i]), its
position in the caller's input list, so its tokens do not depend on the batch it sits in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lmprobe.models.base import empty_cache


def filter_logits(logits, temperature, top_k: int, top_p):
    """Scale by 1/temperature, keep the top_k largest (0: all) and the top_p nucleus (1: all)."""
    logits = logits.astype(jnp.float32) / temperature
    if top_k:
        kth = jax.lax.top_k(logits, top_k)[0][..., -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    order = jnp.argsort(-logits, axis=-1)
    sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly more likely tokens
    sorted_logits = jnp.where(before < top_p, sorted_logits, -jnp.inf)
    inverse = jnp.argsort(order, axis=-1)
    return jnp.take_along_axis(sorted_logits, inverse, axis=-1)


def generate(model, ids, mask, index, seed, temperature, top_p, eos, *, max_new_tokens: int,
             top_k: int, greedy: bool):
    """New tokens [B, max_new_tokens] after left-padded prompts ``ids``; rows that stopped repeat EOS."""
    batch, prompt = ids.shape
    row_keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.maximum(index, 0))

    def pick(logits, step):
        if greedy:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        keys = jax.vmap(lambda k: jax.random.fold_in(k, step))(row_keys)
        filtered = filter_logits(logits, temperature, top_k, top_p)
        return jax.vmap(jax.random.categorical)(keys, filtered).astype(jnp.int32)

    slots = jnp.concatenate([mask, jnp.zeros((batch, max_new_tokens), mask.dtype)], axis=1)
    cache = empty_cache(model.config, batch, prompt + max_new_tokens, model.embed(ids).dtype)
    out = model(ids, slots, cache=cache, cache_index=0, compute_logits=False)
    first = pick(model.logits(out.last_hidden_state[:, -1]), 0)
    tokens = jnp.full((batch, max_new_tokens), jnp.maximum(eos, 0), jnp.int32)
    done = jnp.zeros((batch,), bool)

    def cond(state):
        step, _, _, _, done, _ = state
        return (step < max_new_tokens) & ~jnp.all(done)

    def body(state):
        step, token, cache, slots, done, tokens = state
        tokens = tokens.at[:, step].set(jnp.where(done, tokens[:, step], token))
        done = done | (token == eos)
        slots = slots.at[:, prompt + step].set(1)
        out = model(token[:, None], slots, cache=cache, cache_index=prompt + step, compute_logits=False)
        return step + 1, pick(model.logits(out.last_hidden_state[:, 0]), step + 1), out.cache, slots, done, tokens

    state = (jnp.int32(0), first, out.cache, slots, done, tokens)
    return jax.lax.while_loop(cond, body, state)[-1]
