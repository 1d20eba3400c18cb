"""The pure functions a Runner jits: ``step(model, *arrays, **static)`` over one padded batch.

Each is traceable and reusable inside a larger jitted function (the memory plan compiles
``token_logprobs`` and ``pooled_embedding``; a classifier wraps ``pooled_embedding``). No step
returns a full-vocabulary array: the LM head runs inside, over slices of positions, on the states
``head_states`` gives (a JAX callable's logits, where it has no head to call). Steps over packed rows
take ``packed=False`` for a model without them (Family.packing): each row then holds one sequence,
under the causal mask of its real tokens. Encoder-decoder bodies are lmprobe.engine.seq2seq's.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax.core import spmd

from lmprobe import kernels
from lmprobe.engine.packing import PADDING, visibility
from lmprobe.errors import LmprobeError
from lmprobe.models import family_of
from lmprobe.models.axes import BATCH
from lmprobe.models.layers import packed_segments, target_platform

# Positions per LM-head slice when scoring every token, at most: slices of ~128 rows run the head's matmul
# near its best rate on CPU, 32-row slices well below it (docs/performance.md).
TIME_CHUNK = 128
LOGITS_BYTES = 32 << 20  # and a slice's float32 logits, [B, slice, V], at most this (one row's at least)
# Traced for a TPU or GPU, a slice of at least HEAD_TOKENS rows x positions where its logits fit
# ACCELERATOR_LOGITS_BYTES: each slice reads the whole head (under fsdp, gathers it), so a slice's matmul
# is bound by those bytes below ~250 tokens (v5e: 240 FLOPs a byte); 128 tokens held pythia-1b's head
# to half the chip's FLOPs on v5e-8 (docs/performance.md)
HEAD_TOKENS = 512
ACCELERATOR_LOGITS_BYTES = 128 << 20
NO_HIDDEN = ("embeddings need hidden states, and this model gives logits only (a CallableLM whose apply returns "
             "logits): return (logits, hidden [B, T, D]) from apply")


def head_states(model, ids, mask, **kwargs):
    """[B, T, ...]: what ``model.logits`` reads at each position: the final hidden states, or the
    logits of a model whose LM head the engine cannot call (Family.lm_head False: a JAX callable)."""
    family = family_of(model)
    if family is not None and not family.lm_head:
        return model(ids, mask, **kwargs).logits
    return model(ids, mask, compute_logits=False, **kwargs).last_hidden_state


def token_logprobs(model, ids, mask):
    """[B, T]: ln p(ids[t+1] | ids[<=t]) of a causal LM."""
    return logprobs(model, head_states(model, ids, mask), jnp.roll(ids, -1, axis=1))


def logprobs(model, h, targets):
    """ln p(targets[b, t, ...] | h[b, t]): targets [B, T] or [B, T, K] (K tokens scored against
    each distribution), the LM head run once per position, over slices of positions."""
    b, t, d = h.shape
    chunk = head_slice(model, b, t)
    hs = h.reshape(b, t // chunk, chunk, d).swapaxes(0, 1)
    ts = targets.reshape(b, t // chunk, chunk, *targets.shape[2:]).swapaxes(0, 1)
    lp = jax.lax.map(lambda x: kernels.token_log_probs(model.logits(x[0]), x[1]), (hs, ts))
    return lp.swapaxes(0, 1).reshape(targets.shape)


def head_slice(model, batch: int, length: int) -> int:
    """Positions per LM-head slice over ``length`` positions of ``batch`` rows: a power of two dividing
    ``length`` (buckets are multiples of 4: powers of two and 1.5x), at most TIME_CHUNK, and small enough that
    the slice's float32 logits stay within LOGITS_BYTES on a device (smollm2-135m, 16 rows: 8 positions,
    25 MB, where 32 held 100 MB). Traced on a mesh, a device holds its share of the rows: each slice reads
    the whole head, so slices sized for all rows would read it once per device per few positions. Traced
    for a TPU or GPU (layers.target_platform), a slice holds at least HEAD_TOKENS rows x positions where
    ACCELERATOR_LOGITS_BYTES allows."""
    rows = -(-batch // batch_split())
    fits = max(1, LOGITS_BYTES // (4 * rows * model.config.vocab_size))
    if target_platform() != "cpu":
        enough = 1 << (-(-HEAD_TOKENS // rows) - 1).bit_length()  # a power of two
        fits = max(fits, min(enough, ACCELERATOR_LOGITS_BYTES // (4 * rows * model.config.vocab_size)))
    return math.gcd(length, min(TIME_CHUNK, 1 << (fits.bit_length() - 1)))


def batch_split() -> int:
    """How many ways the rows being traced are split over devices: the mesh axes the engine's rules
    put the batch on (lmprobe.engine.mesh.tracing_on), 1 outside them."""
    mesh = jax.sharding.get_abstract_mesh()
    axes = dict(spmd.get_logical_axis_rules()).get(BATCH)
    if mesh.empty or axes is None:
        return 1
    return math.prod(mesh.shape[a] for a in ((axes,) if isinstance(axes, str) else axes))


def packed_hidden(model, ids, segments, positions, *, packed=True):
    """``head_states`` [B, T, D] of packed rows (lmprobe.engine.packing); not ``packed``: rows of one
    sequence each (its segments PREFIX), run under the causal mask of their real tokens."""
    if not packed:
        return head_states(model, ids, (segments != PADDING).astype(jnp.int32))
    with packed_segments(segments):  # on TPU, attention reads the segments, not the [B, T, T] visibility
        return head_states(model, ids, visibility(segments), positions=positions)


def packed_logprobs(model, ids, segments, positions, targets, *, packed=True):
    """``logprobs`` of ``targets`` [B, T, K] after each slot of packed rows."""
    return logprobs(model, packed_hidden(model, ids, segments, positions, packed=packed), targets)


def packed_hidden_at(model, ids, segments, positions, gather, *, packed=True):
    """``head_states`` [B, K, D] of packed rows at the slots ``gather`` [B, K]."""
    h = packed_hidden(model, ids, segments, positions, packed=packed)
    return jnp.take_along_axis(h, gather[..., None], axis=1)


def scores_at(model, h, gather, targets):
    """ln p(target) and whether it is the argmax, [B, W] each, at slots ``gather`` [B, W] of hidden
    states ``h`` (W a length bucket or a power of two), the LM head over slices of slots."""
    h = jnp.take_along_axis(h, gather[..., None], axis=1)
    b, w, d = h.shape
    chunk = head_slice(model, b, w)

    def head(x):
        logits = model.logits(x[0])
        return kernels.token_log_probs(logits, x[1]), jnp.argmax(logits, axis=-1) == x[1]

    sliced = (h.reshape(b, w // chunk, chunk, d).swapaxes(0, 1), targets.reshape(b, w // chunk, chunk).swapaxes(0, 1))
    lp, greedy = jax.lax.map(head, sliced)
    return lp.swapaxes(0, 1).reshape(b, w), greedy.swapaxes(0, 1).reshape(b, w)


def packed_scores_at(model, ids, segments, positions, gather, targets):
    """``scores_at`` of packed rows (lmprobe.engine.packing.pack_continuations)."""
    return scores_at(model, packed_hidden(model, ids, segments, positions), gather, targets)


def causal_scores_at(model, ids, mask, gather, targets):
    """``scores_at`` of rows that hold one sequence each: the causal mask, no [T, T] visibility."""
    return scores_at(model, head_states(model, ids, mask), gather, targets)


def pair_stats(model, ha, hb, token_mask, *, top_k, with_mass):
    """Next-token statistics of hidden states ``ha`` and ``hb`` [n, D] side by side: JSD, both KLs,
    both entropies; the mass on ``token_mask`` [V] (``with_mass``); the ``top_k`` ids and log-probs."""
    la, lb = model.logits(ha), model.logits(hb)  # [n, P, V], on device only
    out = {"jsd": kernels.js_divergence(la, lb), "kl_ab": kernels.kl_divergence(la, lb),
           "kl_ba": kernels.kl_divergence(lb, la), "entropy_a": kernels.entropy(la),
           "entropy_b": kernels.entropy(lb)}
    if with_mass:
        out["mass_a"] = kernels.token_set_mass(la, token_mask)
        out["mass_b"] = kernels.token_set_mass(lb, token_mask)
    if top_k:
        for name, logits in (("a", la), ("b", lb)):
            logp, ids = jax.lax.top_k(jax.nn.log_softmax(logits, axis=-1), top_k)
            out[f"topk_{name}"], out[f"topk_logp_{name}"] = ids, logp
    return out


def pooled_embedding(model, x, mask, *, pooling, layer, continuous=False):
    """[B, D] sentence embeddings of one padded batch of ids (or of inputs_embeds [B, T, D],
    ``continuous``): ``Scorer.embed``'s body, reusable inside a larger jitted function (e.g. an
    encoder plus a classification head)."""
    kwargs = dict(inputs_embeds=x) if continuous else dict(input_ids=x)
    family = family_of(model)
    if family is not None and family.is_decoder:
        kwargs["compute_logits"] = False
    need_all = pooling == "first_last_avg" or layer != -1
    out = model(attention_mask=mask, output_hidden_states=need_all, **kwargs)
    if out.last_hidden_state is None:
        raise LmprobeError(NO_HIDDEN)
    if need_all and out.hidden_states is None:
        raise LmprobeError(f"pooling={pooling!r} with layer={layer} needs every layer's hidden states, and this "
                           "model gives the last layer's only (a CallableLM whose hidden output is [B, T, D]): "
                           "use layer=-1 with mean/cls/last pooling, or return hidden [L+1, B, T, D] from apply")
    if pooling == "first_last_avg":
        h = 0.5 * (out.hidden_states[1] + out.hidden_states[-1])
    else:
        h = out.hidden_states[layer] if need_all else out.last_hidden_state
    h = h.astype(jnp.float32)
    m = mask.astype(jnp.float32)[..., None]
    if pooling in ("mean", "first_last_avg"):
        return (h * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
    if pooling == "cls":
        return h[:, 0]
    last = jnp.maximum(mask.sum(1) - 1, 0)  # right padding: last real token
    return jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]
