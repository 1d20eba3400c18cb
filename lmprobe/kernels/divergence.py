"""Divergences and statistics of next-token distributions, computed from logits.

Every function takes unnormalised logits with the vocabulary on the last axis, any leading
batch axes, and reduces the vocabulary away. The maths is in log space with the natural
log, so exact zeros (logits of -inf) are handled exactly: 0 log 0 = 0, and KL(P||Q) = +inf
when Q puts zero mass where P does not. Logits must be < +inf; a row whose logits are all
-inf is not a distribution and gives NaN.

Chunking: with ``chunk_size=C`` the vocabulary is walked in C-wide slices with ``lax.scan``
(two passes: running log-normalisers, then the sums), so no float intermediate larger than
``[rows, C]`` is created besides the inputs. ``chunk_size=None`` reduces the whole
vocabulary at once. Both give the same result to fp32 rounding.

Sources: BYOD (Jain et al., 001) Sec. 6 (JSD with M = (P+Q)/2, natural log) and the
entropy H = -sum p log p of its Sec. 8; the probability mass on profane tokens (BYOD
Sec. 5); SCoPE (002) Eq. 1 (L1 between output distributions) and App. G (cosine
similarity of next-token distributions).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

DEFAULT_CHUNK_SIZE = 4096
LOG_2 = math.log(2.0)

_chunked_jit = functools.partial(jax.jit, static_argnames=("chunk_size",))


# --------------------------------------------------------------------------------------
# Chunked walking of the vocabulary axis
# --------------------------------------------------------------------------------------


def _scan_vocab(step: Callable, init, arrays: Sequence[jax.Array], chunk_size: int | None):
    """Folds ``step(carry, chunks, valid)`` over vocabulary slices of ``arrays``.

    ``chunks`` are the arrays sliced to the same C columns of their last axis and ``valid``
    a [C] mask. The last slice is shifted left to stay in bounds (no padding copy of the
    inputs); the columns it shares with the previous slice are masked out.
    """
    vocab = arrays[0].shape[-1]
    if chunk_size is None or chunk_size >= vocab:
        return step(init, tuple(arrays), jnp.ones((vocab,), bool))
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive or None, got {chunk_size}")
    num_chunks = -(-vocab // chunk_size)

    def body(carry, index):
        start = jnp.minimum(index * chunk_size, vocab - chunk_size)
        chunks = tuple(lax.dynamic_slice_in_dim(a, start, chunk_size, axis=-1) for a in arrays)
        valid = start + jnp.arange(chunk_size) >= index * chunk_size
        return step(carry, chunks, valid), None

    carry, _ = lax.scan(body, init, jnp.arange(num_chunks))
    return carry


def _log_normalizers(
    logits: Sequence[jax.Array], chunk_size: int | None, masks: Sequence[jax.Array | None] | None = None
) -> list[jax.Array]:
    """logsumexp over the last axis of each array (restricted to ``masks`` where given),
    by the online recursion on (running max, running sum of exp)."""
    masks = list(masks) if masks is not None else [None] * len(logits)
    rows = logits[0].shape[:-1]
    init = tuple((jnp.full(rows, -jnp.inf), jnp.zeros(rows)) for _ in logits)
    mask_slots = [i for i, m in enumerate(masks) if m is not None]

    def step(carry, chunks, valid):
        xs, mask_chunks = chunks[: len(logits)], dict(zip(mask_slots, chunks[len(logits):]))
        out = []
        for i, ((running_max, running_sum), x) in enumerate(zip(carry, xs)):
            keep = valid & mask_chunks[i] if i in mask_chunks else valid
            x = jnp.where(keep, x, -jnp.inf)
            new_max = jnp.maximum(running_max, jnp.max(x, axis=-1))
            shift = jnp.where(jnp.isfinite(new_max), new_max, 0.0)
            running_sum = running_sum * jnp.exp(running_max - shift) + jnp.sum(
                jnp.exp(x - shift[..., None]), axis=-1
            )
            out.append((new_max, running_sum))
        return tuple(out)

    arrays = list(logits) + [masks[i] for i in mask_slots]
    final = _scan_vocab(step, init, arrays, chunk_size)
    return [jnp.where(jnp.isfinite(m), m, 0.0) + jnp.log(s) for m, s in final]


def _vocab_sum(term: Callable, arrays: Sequence[jax.Array], chunk_size: int | None, count: int = 1):
    """Sums ``term(*chunks) -> tuple of count [rows, C] arrays`` over the vocabulary."""
    rows = arrays[0].shape[:-1]
    init = tuple(jnp.zeros(rows) for _ in range(count))

    def step(carry, chunks, valid):
        values = term(*chunks)
        return tuple(acc + jnp.sum(jnp.where(valid, v, 0.0), axis=-1) for acc, v in zip(carry, values))

    return _scan_vocab(step, init, arrays, chunk_size)


def _normalised(logits_list, chunk_size):
    """Broadcasts the logits to one shape, flattened to [rows, vocab], with log-normalisers."""
    logits_list = [jnp.asarray(x, jnp.float32) for x in logits_list]
    shape = jnp.broadcast_shapes(*(x.shape for x in logits_list))
    flat = [jnp.broadcast_to(x, shape).reshape(-1, shape[-1]) for x in logits_list]
    lse = [n[:, None] for n in _log_normalizers(flat, chunk_size)]
    return shape[:-1], flat, lse


def _xlogy_terms(log_p):
    """p * log p with 0 log 0 = 0."""
    return jnp.where(log_p > -jnp.inf, jnp.exp(log_p) * log_p, 0.0)


# --------------------------------------------------------------------------------------
# Public kernels
# --------------------------------------------------------------------------------------


@_chunked_jit
def entropy(logits: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE) -> jax.Array:
    """Shannon entropy H(P) = -sum_v p_v ln p_v of softmax(logits), in nats (BYOD Sec. 8).

    logits: [..., V] -> [...]. Zero-probability tokens contribute 0.
    """
    batch, (x,), (lse,) = _normalised([logits], chunk_size)
    (h,) = _vocab_sum(lambda c: (-_xlogy_terms(c - lse),), [x], chunk_size)
    return jnp.maximum(h, 0.0).reshape(batch)


@_chunked_jit
def kl_divergence(
    logits_p: jax.Array, logits_q: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> jax.Array:
    """KL(P||Q) = sum_v p_v (ln p_v - ln q_v) in nats, P = softmax(logits_p), Q = softmax(logits_q).

    Shapes broadcast: [..., V] x [..., V] -> [...]. Terms with p_v = 0 are 0; p_v > 0 = q_v
    gives +inf.
    """
    batch, (xp, xq), (lse_p, lse_q) = _normalised([logits_p, logits_q], chunk_size)

    def term(cp, cq):
        log_p, log_q = cp - lse_p, cq - lse_q
        return (jnp.where(log_p > -jnp.inf, jnp.exp(log_p) * (log_p - log_q), 0.0),)

    (kl,) = _vocab_sum(term, [xp, xq], chunk_size)
    return jnp.maximum(kl, 0.0).reshape(batch)


@_chunked_jit
def js_divergence(
    logits_p: jax.Array, logits_q: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> jax.Array:
    """Jensen-Shannon divergence JSD = KL(P||M)/2 + KL(Q||M)/2, M = (P+Q)/2, natural log.

    BYOD (001) Sec. 6. Shapes broadcast: [..., V] x [..., V] -> [...], and 0 <= JSD <= ln 2.
    Each token contributes p ln(p/m) + q ln(q/m) = -(p+q) g - |d| min(p, q) with
    d = ln q - ln p and g = ln((1 + e^{-|d|})/2), a form that stays accurate for P ~ Q and
    is exact when p or q is 0 (the token then contributes max(p, q) ln 2).
    """
    batch, (xp, xq), (lse_p, lse_q) = _normalised([logits_p, logits_q], chunk_size)

    def term(cp, cq):
        log_p, log_q = cp - lse_p, cq - lse_q
        both_zero = (log_p == -jnp.inf) & (log_q == -jnp.inf)
        abs_d = jnp.abs(jnp.where(both_zero, 0.0, log_q - log_p))
        g = jnp.log1p(0.5 * jnp.expm1(-abs_d))
        p, q = jnp.exp(log_p), jnp.exp(log_q)
        smaller = jnp.minimum(p, q)
        return (-(p + q) * g - jnp.where(smaller > 0, abs_d * smaller, 0.0),)

    (twice_jsd,) = _vocab_sum(term, [xp, xq], chunk_size)
    return jnp.clip(0.5 * twice_jsd, 0.0, LOG_2).reshape(batch)


@_chunked_jit
def l1_distance(
    logits_p: jax.Array, logits_q: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> jax.Array:
    """||P - Q||_1 = sum_v |p_v - q_v| in [0, 2] (the SCoPE objective, 002 Eq. 1)."""
    batch, (xp, xq), (lse_p, lse_q) = _normalised([logits_p, logits_q], chunk_size)
    (dist,) = _vocab_sum(
        lambda cp, cq: (jnp.abs(jnp.exp(cp - lse_p) - jnp.exp(cq - lse_q)),), [xp, xq], chunk_size
    )
    return jnp.clip(dist, 0.0, 2.0).reshape(batch)


@_chunked_jit
def cosine_similarity(
    logits_p: jax.Array, logits_q: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> jax.Array:
    """<P, Q> / (||P||_2 ||Q||_2) of the two distributions (SCoPE 002 App. G), in [0, 1]."""
    batch, (xp, xq), (lse_p, lse_q) = _normalised([logits_p, logits_q], chunk_size)

    def term(cp, cq):
        p, q = jnp.exp(cp - lse_p), jnp.exp(cq - lse_q)
        return p * q, p * p, q * q

    pq, pp, qq = _vocab_sum(term, [xp, xq], chunk_size, count=3)
    return jnp.clip(pq / jnp.sqrt(pp * qq), 0.0, 1.0).reshape(batch)


@_chunked_jit
def token_log_probs(
    logits: jax.Array, token_ids: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> jax.Array:
    """ln softmax(logits)[token]: the log-probability gather.

    logits [..., V]; token_ids either [...] (one token per distribution -> [...]) or
    [..., K] (K tokens per distribution -> [..., K]). Ids outside [0, V) give NaN.
    """
    logits = jnp.asarray(logits, jnp.float32)
    token_ids = jnp.asarray(token_ids)
    one_per_row = token_ids.ndim == logits.ndim - 1
    ids = token_ids[..., None] if one_per_row else token_ids
    batch = logits.shape[:-1]
    (lse,) = _log_normalizers([logits.reshape(-1, logits.shape[-1])], chunk_size)
    picked = jnp.take_along_axis(logits, ids, axis=-1, mode="fill", fill_value=jnp.nan)
    out = picked - lse.reshape(batch)[..., None]
    return out[..., 0] if one_per_row else out


@_chunked_jit
def token_set_log_mass(
    logits: jax.Array, token_mask: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> jax.Array:
    """ln sum_{v in S} p_v: log of the probability mass on a token set S.

    The set is a boolean vocabulary mask ``token_mask`` of shape [V] (one set for all rows)
    or broadcastable to logits [..., V]. An empty set gives -inf. Used for BYOD's mass on
    profane tokens (001 Sec. 5).
    """
    logits = jnp.asarray(logits, jnp.float32)
    batch, vocab = logits.shape[:-1], logits.shape[-1]
    mask = jnp.asarray(token_mask, bool)
    if mask.ndim > 1:  # one set per row: align the mask with the flattened rows
        mask = jnp.broadcast_to(mask, logits.shape).reshape(-1, vocab)
    flat = logits.reshape(-1, vocab)
    lse_all, lse_set = _log_normalizers([flat, flat], chunk_size, masks=[None, mask])
    return jnp.minimum(lse_set - lse_all, 0.0).reshape(batch)


@_chunked_jit
def token_set_mass(
    logits: jax.Array, token_mask: jax.Array, *, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> jax.Array:
    """sum_{v in S} p_v, the probability mass on a token set; see ``token_set_log_mass``."""
    return jnp.exp(token_set_log_mass(logits, token_mask, chunk_size=chunk_size))
