"""What every model family provides: the model interfaces, its HF name table, its registry entry.

Three kinds of model, each a Flax NNX module with a frozen ``config`` dataclass:

- a causal LM (``Family.is_decoder``): ``embed(ids)``, ``logits(hidden)`` (fp32, called only where
  needed) and ``model(input_ids, attention_mask, *, inputs_embeds=, positions=, cache=,
  cache_index=, output_hidden_states=, compute_logits=) -> ModelOutput`` with a KV cache;
- an encoder: ``embed(ids)`` and ``model(input_ids, attention_mask, *, inputs_embeds=,
  output_hidden_states=) -> ModelOutput`` (no logits, no cache);
- an encoder-decoder (``Family.is_encoder_decoder``): ``encode(input_ids, attention_mask, *,
  output_hidden_states=) -> ModelOutput`` (the encoder, used for embeddings), ``decode(ids,
  encoder_hidden, encoder_mask, attention_mask, *, cache=, cache_index=, output_hidden_states=,
  compute_logits=) -> ModelOutput`` and ``logits(hidden)``.

Those protocols are written out below (``CausalLM``, ``Encoder``, ``EncoderDecoder``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from lmprobe.models.layers import LayerCache, init_cache

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
class HFNames:
    """Our parameter paths -> their Hugging Face tensors, derived from the module names.

    A parameter's HF name is ``root`` + its path, with Flax's ``kernel`` written as torch's
    ``weight`` (transposed: torch's Linear is [out, in]; ``conv1d`` checkpoints store [in, out])
    and ``embedding`` as ``weight``. ``renames`` lists only what differs, keyed by a prefix of our
    path (a module or a whole parameter): a string replaces that prefix with a full HF name
    (the stacked layers: ``{"layers": "model.layers.{i}"}``), an ``HF`` rule gives a parameter's
    tensor outright (fused q/k/v, names outside the pattern). The longest matching key wins.
    """

    root: str
    renames: Mapping[str, str | HF] = dataclasses.field(default_factory=dict)
    conv1d: bool = False

    def __call__(self, path: str) -> HF:
        parts = path.split(".")
        for n in range(len(parts), 0, -1):
            rule = self.renames.get(".".join(parts[:n]))
            if isinstance(rule, HF):
                if n != len(parts):
                    raise AssertionError(f"HF rule for {'.'.join(parts[:n])!r} names a module, not a parameter")
                return rule
            if rule is not None:
                return self._leaf(rule, parts[n:])
        return self._leaf(self.root.rstrip("."), parts)

    def _leaf(self, prefix: str, rest: list[str]) -> HF:
        *module, leaf = rest
        transpose = leaf == "kernel" and not self.conv1d
        leaf = {"kernel": "weight", "embedding": "weight"}.get(leaf, leaf)
        return HF(".".join(p for p in (prefix, *module, leaf) if p), transpose=transpose)


CAUSAL_LM, ENCODER, ENCODER_DECODER = "causal LM", "encoder", "encoder-decoder"  # Family.kind


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family: how to read its config, build it, and name its parameters in HF files.

    ``hf_names`` maps our parameter path ("layers.attn.q_proj.kernel") to its HF tensor. Tensor
    names are written as in the base model class; ``base_prefix`` ("model.", "transformer.",
    ...) is what task heads (ForCausalLM, ...) put in front of them, tried when a name is absent.
    ``is_decoder``: a causal LM (scores and generates from tokens); ``is_encoder_decoder``: an
    encoder-decoder (T5); neither: an encoder.

    What a causal LM supports beyond ``model(ids, mask)`` (the engine falls back where it does not,
    with the same numbers): ``packing``, packed rows (a [B, T, T] visibility mask and explicit
    ``positions``: shared prefixes run once); ``kv_cache``, generation with a KV cache (``cache=``,
    ``cache_index=``; else each new token recomputes the whole prefix); ``lm_head``, ``logits(h)``
    is an LM head on the final hidden states (False: the model gives logits only, which then stand
    in for the states the head reads, and ``logits`` is the identity: lmprobe.models.callable_lm).
    """

    name: str
    config_from_hf: Callable[[dict], Any]
    model: type
    hf_names: HFNames
    base_prefix: str
    is_decoder: bool
    is_encoder_decoder: bool = False
    packing: bool = True
    kv_cache: bool = True
    lm_head: bool = True

    @property
    def kind(self) -> str:
        """What the family's models are: CAUSAL_LM, ENCODER_DECODER or ENCODER."""
        return CAUSAL_LM if self.is_decoder else ENCODER_DECODER if self.is_encoder_decoder else ENCODER


class CausalLM(Protocol):
    """A decoder-only language model (llama, gpt2, opt, ...)."""

    config: Any

    def embed(self, input_ids: Array) -> Array: ...

    def logits(self, hidden: Array) -> Array: ...

    def __call__(self, input_ids: Array | None = None, attention_mask: Array | None = None, *,
                 inputs_embeds: Array | None = None, positions: Array | None = None,
                 cache: LayerCache | None = None, cache_index=0, output_hidden_states: bool = False,
                 compute_logits: bool = True) -> ModelOutput: ...


class Encoder(Protocol):
    """A bidirectional encoder (bert, mpnet, ...): hidden states only."""

    config: Any

    def embed(self, input_ids: Array) -> Array: ...

    def __call__(self, input_ids: Array | None = None, attention_mask: Array | None = None, *,
                 inputs_embeds: Array | None = None, output_hidden_states: bool = False) -> ModelOutput: ...


class EncoderDecoder(Protocol):
    """An encoder-decoder (T5): the encoder's states, and decoder log-likelihoods given them."""

    config: Any

    def encode(self, input_ids: Array, attention_mask: Array | None = None, *,
               output_hidden_states: bool = False) -> ModelOutput: ...

    def decode(self, input_ids: Array, encoder_hidden: Array, encoder_mask: Array | None,
               attention_mask: Array | None = None, *, cache: Any = None, cache_index=0,
               output_hidden_states: bool = False, compute_logits: bool = True) -> ModelOutput: ...

    def logits(self, hidden: Array) -> Array: ...


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


def empty_cache(config, batch: int, length: int, dtype) -> LayerCache:
    """An empty KV cache for a decoder with this config: ``batch`` rows of ``length`` slots."""
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return init_cache(config.num_hidden_layers, batch, length, kv_heads, config.head_dim, dtype)
