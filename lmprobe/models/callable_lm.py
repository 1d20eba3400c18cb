"""Any JAX callable as a causal LM, for a Scorer: a trainer's own model, without an lmprobe family.

    model = CallableLM(apply, params, max_length=2048)    # apply(params, input_ids, attention_mask)
    scorer = Scorer(model, tokenizer, mesh=mesh)           # every query; Scorer.update(new_params) later

``apply`` returns logits [B, T, V], or (logits, hidden) with hidden [B, T, D] (the final states) or
[L+1, B, T, D] (every layer in Hugging Face's order: the embeddings first, the final states last),
which embeddings need. One abstract call (jax.eval_shape) at construction infers V, D and L and
checks the outputs' shapes and dtypes; another, on [1, max_length] ids, checks that the model takes
``max_length`` tokens (else the error names the longest length it takes). ``CallableLM.of_module``
wraps a Flax NNX module of the user's own (``__call__(input_ids, attention_mask)``). ``params`` is the
module's one nnx.Param (any pytree, given back to ``apply`` as it is), so a Runner splits and jits it
like any model's state.

The engine cannot run a callable's LM head at chosen positions, so its logits stand in for the
states the head reads (``Family.lm_head`` False: ``logits`` is the identity, and a HiddenMemo holds
[V] vectors); it has no packed rows nor KV cache (the engine runs one sequence per row and recomputes
the prefix for each generated token). ``embed_apply(params, inputs_embeds [B, T, D], attention_mask)``,
optional, returns what ``apply`` does for continuous inputs (Scorer.embed_inputs: SynBench).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.models.base import Family, HFNames, ModelOutput

PROBE = (2, 8)  # [B, T] of the abstract call that checks a callable


@dataclasses.dataclass(frozen=True)
class CallableConfig:
    """What the engine reads of a CallableLM: sizes inferred from one abstract call."""

    vocab_size: int
    max_position_embeddings: int
    hidden_size: int | None  # None: apply gives logits only (no embeddings)
    num_hidden_layers: int | None  # None: apply gives the final states only
    model_type: str = "callable"
    apply_name: str = ""


class CallableLM(nnx.Module):
    """A causal LM around ``apply(params, input_ids, attention_mask) -> logits | (logits, hidden)``."""

    def __init__(self, apply: Callable, params, *, max_length: int, embed_apply: Callable | None = None,
                 name: str | None = None):
        if not isinstance(max_length, int) or max_length < 1:
            raise LmprobeError(f"CallableLM(max_length={max_length!r}): give the model's context length in tokens")
        self.apply_fn, self.embed_apply = apply, embed_apply
        self.params = nnx.Param(params)
        name = name or f"{getattr(apply, '__module__', '')}.{getattr(apply, '__qualname__', type(apply).__name__)}"
        ids = jax.ShapeDtypeStruct(PROBE, jnp.int32)
        logits, hidden = _outputs("apply", apply, params, ids, ids)
        _check_context(apply, params, max_length)
        self.config = CallableConfig(
            vocab_size=logits.shape[-1], max_position_embeddings=max_length,
            hidden_size=None if hidden is None else hidden.shape[-1],
            num_hidden_layers=hidden.shape[0] - 1 if hidden is not None and hidden.ndim == 4 else None,
            apply_name=name)
        if embed_apply is not None:
            if hidden is None:
                raise LmprobeError("CallableLM(embed_apply=...) needs apply to return (logits, hidden): the hidden "
                                   "size is the width of the inputs_embeds it takes")
            x = jax.ShapeDtypeStruct((*PROBE, hidden.shape[-1]), jnp.float32)
            _outputs("embed_apply", embed_apply, params, x, ids, vocab=logits.shape[-1])

    @classmethod
    def of_module(cls, module: nnx.Module, *, max_length: int | None = None) -> CallableLM:
        """A Flax NNX module of the user's own whose ``__call__(input_ids, attention_mask)`` returns
        logits or (logits, hidden), as a CallableLM: its params are the module's nnx.State (every
        variable), merged back into the module inside each step. ``max_length``: default the module's
        ``max_length`` or ``config.max_position_embeddings``."""
        what = type(module).__name__
        max_length = max_length or getattr(module, "max_length", None) or getattr(
            getattr(module, "config", None), "max_position_embeddings", None)
        if not max_length:
            raise LmprobeError(f"Scorer({what}(...)): the module has no max_length nor config.max_position_"
                               "embeddings: pass max_length=... (the longest input in tokens it takes)")
        graphdef, state = nnx.split(module)

        def apply(state, input_ids, attention_mask):
            return nnx.merge(graphdef, state)(input_ids, attention_mask)

        try:
            return cls(apply, state, max_length=int(max_length), name=f"{type(module).__module__}.{what}")
        except LmprobeError as e:
            said = str(e).replace("CallableLM: apply(params", f"{what}.__call__(").replace("(, ", "(")
            hint = "" if "max_length" in said else ("; a module of your own needs __call__(input_ids, attention_"
                                                    "mask) returning logits [B, T, V] or (logits, hidden [B, T, D])")
            raise LmprobeError(f"Scorer({what}(...)): {said}{hint}") from e

    def embed(self, input_ids):
        """A callable has no token-embedding table lmprobe can read: a clear error for what asks
        (SynBench scales its Gaussian inputs to the token embeddings' RMS)."""
        raise LmprobeError("a CallableLM has no token embeddings lmprobe can read: give SynBench the scale of "
                           "the model's input embeddings (input_scale=..., the RMS of a token embedding)")

    def logits(self, states):
        """The identity, in fp32: the states the engine hands the head are the callable's logits."""
        return states.astype(jnp.float32)

    def __call__(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, positions=None, cache=None,
                 cache_index=0, output_hidden_states=False, compute_logits=True) -> ModelOutput:
        """ModelOutput(final states or None, every layer's states or None, logits); the states are
        the callable's hidden output, which it may not give."""
        if positions is not None or cache is not None:
            raise LmprobeError("a CallableLM has no packed rows and no KV cache: run it through a Scorer, which "
                               "falls back to unpacked rows and full recomputation")
        x = input_ids if inputs_embeds is None else inputs_embeds
        mask = jnp.ones(x.shape[:2], jnp.int32) if attention_mask is None else attention_mask
        if inputs_embeds is None:
            out = self.apply_fn(self.params.get_value(), input_ids, mask)
        elif self.embed_apply is None:
            raise LmprobeError("embed_inputs on a CallableLM needs embed_apply=(params, inputs_embeds, "
                               "attention_mask) -> what apply returns: pass it to CallableLM(...)")
        else:
            out = self.embed_apply(self.params.get_value(), inputs_embeds, mask)
        logits, hidden = out if isinstance(out, tuple | list) else (out, None)
        layers = hidden if hidden is not None and hidden.ndim == 4 else None
        last = layers[-1] if layers is not None else hidden
        return ModelOutput(last, layers if output_hidden_states else None, logits)


def _outputs(name: str, fn, params, x, mask, vocab: int | None = None):
    """``fn``'s abstract (logits, hidden or None) on ``x`` [2, 8(, D)], checked: one clear error otherwise."""
    call = f"{name}(params, {_shape(x)}, {_shape(mask)})"
    try:
        out = jax.eval_shape(fn, params, x, mask)
    except Exception as e:  # the user's code: say where it failed, keep the cause
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise LmprobeError(f"CallableLM: {call} fails: {type(e).__name__}: {first}") from e
    expected = "logits [2, 8, V] or (logits [2, 8, V], hidden [2, 8, D] or [L+1, 2, 8, D]), floating point"
    pair = isinstance(out, tuple | list)
    parts = tuple(out) if pair else (out,)
    if len(parts) not in (1, 2) or not all(isinstance(p, jax.ShapeDtypeStruct) for p in parts):
        got = f"({', '.join(map(_shape, parts))})" if pair else _shape(out)
        raise LmprobeError(f"CallableLM: {call} returned {got}; expected {expected}")
    logits, hidden = parts if pair and len(parts) == 2 else (parts[0], None)
    good = (logits.ndim == 3 and logits.shape[:2] == PROBE and (vocab is None or logits.shape[2] == vocab)
            and jnp.issubdtype(logits.dtype, jnp.floating))
    if hidden is not None:
        good &= jnp.issubdtype(hidden.dtype, jnp.floating) and (
            (hidden.ndim == 3 and hidden.shape[:2] == PROBE) or (hidden.ndim == 4 and hidden.shape[1:3] == PROBE))
    if not good:
        got = _shape(logits) if hidden is None else f"({_shape(logits)}, {_shape(hidden)})"
        raise LmprobeError(f"CallableLM: {call} returned {got}; expected {expected}"
                           + (f" with V = {vocab}" if vocab else ""))
    return logits, hidden


def _check_context(apply, params, max_length: int) -> None:
    """One abstract call of ``apply`` on [1, max_length] ids; when it fails (a position table shorter
    than ``max_length``), an error naming the longest length it takes (bisection, abstract calls)."""
    def fails(length: int) -> Exception | None:
        ids = jax.ShapeDtypeStruct((1, length), jnp.int32)
        try:
            jax.eval_shape(apply, params, ids, ids)
        except Exception as e:  # the user's code at that length
            return e
        return None

    error = fails(max_length)
    if error is None:
        return
    good, bad = 0, max_length  # the longest length that works is in [good, bad)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (good, mid) if fails(mid) else (mid, bad)
    first = (str(error).strip().splitlines() or [""])[0]
    longest = f"the longest it takes is {good} tokens: pass max_length={good}" if good else "it takes no length"
    raise LmprobeError(f"CallableLM(max_length={max_length}): apply fails on {max_length} tokens "
                       f"({type(error).__name__}: {first}); {longest}")


def _shape(x) -> str:
    return f"{jnp.dtype(x.dtype).name}{list(x.shape)}" if isinstance(x, jax.ShapeDtypeStruct) else type(x).__name__


def _no_config(config: dict):
    raise CheckpointError("a CallableLM is built from a JAX callable in memory, not from a config.json")


FAMILY = Family(name="callable", config_from_hf=_no_config, model=CallableLM, hf_names=HFNames(root=""),
                base_prefix="", is_decoder=True, packing=False, kv_cache=False, lm_head=False)
