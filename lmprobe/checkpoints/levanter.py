"""Levanter checkpoints (Llama, Gemma 3, GPT-2), read as a TensorSource under Hugging Face names.

Levanter's trainer saves ``RUN/step-<n>/``: ``metadata.json`` ({"step": ...}) and each array leaf of
its training state in its own TensorStore zarr array (jax.experimental.array_serialization, as
levanter.tensorstore_serialization writes it), at the leaf's path of equinox field names
(levanter.utils.jax_utils.leaf_key_paths: ``model/transformer/layers/stacked/self_attn/q_proj/weight``).
A haliax NamedArray is stored in its own axis order. The layouts below follow levanter's models
(src/levanter/models/{llama,gemma,gpt2}.py, layers/attention.py and haliax.nn at stanford-crfm/levanter
9263f81): ``hnn.Linear`` weights are [Out..., In...] (out_first, Llama and Gemma: q_proj is [KVHeads,
QHeadsPerGroup, HeadSize, Embed], o_proj [Embed, Heads, HeadSize]) or [In..., Out...] (GPT-2, as
HF's Conv1D); scanned layers (``Stacked``) carry the layer on axis 0 of ``layers/stacked/...``
(GPT-2: ``blocks/stacked/...``), unscanned ones (``BlockSeq``) sit under ``.../blocks/<i>/``.
Levanter converts to HF by reshaping only: norms (Gemma's 1 + w included), embeddings and the RoPE
layout are HF's.

Like MaxText's, a Levanter checkpoint carries no HF config: give the HF config.json (and tokenizer
files) in the step directory or one of its three parents, e.g. ``RUN/config.json`` for
``Scorer.load("RUN/step-1000")``. The path may be the run directory (its latest step) or a step.
"""

from __future__ import annotations

import math
import os
import re
from typing import NamedTuple

import numpy as np

from lmprobe.checkpoints.base import IndexedSource, beside_config, layout_of, nearest_config, unreadable
from lmprobe.errors import CheckpointError

ROOT = "model"  # the trainer state's model
META = "metadata.json"


class Rule(NamedTuple):
    """A Levanter leaf (below ``model/``, '/'-joined; relative to the layer for per-layer names) and
    how it becomes its HF tensor: ``lead`` None: as it is; else the array [a..., b...] reshaped to
    [prod(a), prod(b)] with ``lead`` leading axes (a Linear's outputs or, GPT-2, its inputs);
    ``flat``: reshaped to one axis (a bias over several axes)."""

    leaf: str
    lead: int | None = None
    flat: bool = False


LLAMA = {
    "model.embed_tokens.weight": Rule("embeddings/token_embeddings/weight"),
    "model.norm.weight": Rule("transformer/norm/weight"),
    "lm_head.weight": Rule("lm_head/weight"),
    "{layer}.self_attn.q_proj.weight": Rule("self_attn/q_proj/weight", 3),
    "{layer}.self_attn.k_proj.weight": Rule("self_attn/k_proj/weight", 2),
    "{layer}.self_attn.v_proj.weight": Rule("self_attn/v_proj/weight", 2),
    "{layer}.self_attn.o_proj.weight": Rule("self_attn/o_proj/weight", 1),
    "{layer}.mlp.gate_proj.weight": Rule("mlp/gate_proj/weight"),
    "{layer}.mlp.up_proj.weight": Rule("mlp/up_proj/weight"),
    "{layer}.mlp.down_proj.weight": Rule("mlp/down_proj/weight"),
    "{layer}.input_layernorm.weight": Rule("input_layernorm/weight"),
    "{layer}.post_attention_layernorm.weight": Rule("post_attention_layernorm/weight"),
}
GEMMA3 = {  # Gemma3LMHeadModel: Gemma2DecoderLayer's four norms and QK norms; the LM head tied unless saved
    **LLAMA,
    **{f"{{layer}}.{name}.weight": Rule(f"{name.replace('.', '/')}/weight") for name in (
        "pre_feedforward_layernorm", "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.k_norm")},
}
GPT2 = {  # Gpt2LMHeadModel: Linear weights [In..., Out...] (HF's Conv1D), the LM head tied to wte
    "wte.weight": Rule("embeddings/token_embeddings/weight"),
    "wpe.weight": Rule("embeddings/position_embeddings/weight"),
    "ln_f.weight": Rule("transformer/ln_f/weight"),
    "ln_f.bias": Rule("transformer/ln_f/bias"),
    "{layer}.ln_1.weight": Rule("ln_1/weight"),
    "{layer}.ln_1.bias": Rule("ln_1/bias"),
    "{layer}.ln_2.weight": Rule("ln_2/weight"),
    "{layer}.ln_2.bias": Rule("ln_2/bias"),
    "{layer}.attn.c_attn.weight": Rule("attn/c_attn/weight", 1),
    "{layer}.attn.c_attn.bias": Rule("attn/c_attn/bias", flat=True),
    "{layer}.attn.c_proj.weight": Rule("attn/c_proj/weight", 2),
    "{layer}.attn.c_proj.bias": Rule("attn/c_proj/bias"),
    "{layer}.mlp.c_fc.weight": Rule("mlp/c_fc/weight"),
    "{layer}.mlp.c_fc.bias": Rule("mlp/c_fc/bias"),
    "{layer}.mlp.c_proj.weight": Rule("mlp/c_proj/weight"),
    "{layer}.mlp.c_proj.bias": Rule("mlp/c_proj/bias"),
}
# model_type -> (name table, the layers' module below model/, HF's per-layer prefix)
LAYOUTS = {"llama": (LLAMA, "transformer/layers", "model.layers.{i}"),
           "mistral": (LLAMA, "transformer/layers", "model.layers.{i}"),
           "gemma3_text": (GEMMA3, "transformer/layers", "model.layers.{i}"),
           "gpt2": (GPT2, "transformer/blocks", "h.{i}")}


class Entry(NamedTuple):
    leaf: str  # '/'-joined path below model/
    slot: int | None  # the layer on axis 0 of a scanned leaf, None otherwise
    rule: Rule


def find(path: str):
    """As ``maxtext.find``, for a Levanter checkpoint (a step, or a run directory: its latest step)."""
    return beside_config(path, step_dir(os.path.abspath(path)), "Levanter", LevanterSource)


def find_config(path: str) -> tuple[dict, str] | None:
    """As ``maxtext.find_config``, for a Levanter checkpoint."""
    return nearest_config(path) if step_dir(os.path.abspath(path)) is not None else None


def is_step(path: str) -> bool:
    """Whether ``path`` is a finished Levanter step (metadata.json, written on commit, and model/)."""
    return os.path.isfile(os.path.join(path, META)) and os.path.isdir(os.path.join(path, ROOT))


def step_dir(path: str) -> str | None:
    """The step directory of a Levanter checkpoint path (a run directory: its latest step), or None."""
    if not os.path.isdir(path):
        return None
    if is_step(path):
        return path
    steps = [(int(m.group(1)), n) for n in os.listdir(path)
             if (m := re.fullmatch(r"step-(\d+)", n)) and is_step(os.path.join(path, n))]
    return os.path.join(path, max(steps)[1]) if steps else None


class LevanterSource(IndexedSource[Entry]):
    """A Levanter checkpoint's weights under HF names, each leaf read with TensorStore on demand
    (the last one kept, so the layers of a scanned leaf are read once)."""

    def __init__(self, step: str, config: dict):
        layout = layout_of(LAYOUTS, config, "Levanter", step)
        self.step, self.config, self._last = step, config, (None, None)
        root = os.path.join(step, ROOT)
        self.leaves = sorted(os.path.relpath(d, root).replace(os.sep, "/") for d, _, files in os.walk(root)
                             if ".zarray" in files)
        super().__init__(self._index(*layout), step)

    def _index(self, table: dict, layers: str, prefix: str) -> dict[str, Entry]:
        present, index = set(self.leaves), {}
        scanned = f"{layers}/stacked/" + next(r.leaf for k, r in table.items() if k.startswith("{layer}"))
        for hf, rule in table.items():
            if not hf.startswith("{layer}"):
                index[hf] = Entry(rule.leaf, None, rule)
                continue
            for i in range(self.config["num_hidden_layers" if "num_hidden_layers" in self.config else "n_layer"]):
                name = hf.format(layer=prefix.format(i=i))
                if scanned in present:
                    index[name] = Entry(f"{layers}/stacked/{rule.leaf}", i, rule)
                else:
                    index[name] = Entry(f"{layers}/blocks/{i}/{rule.leaf}", None, rule)
        return {k: e for k, e in index.items() if not _optional(k, e, present)}

    def shape(self, name: str) -> tuple[int, ...]:
        entry = self.entry(name)
        shape = self._leaf_shape(entry.leaf)
        if entry.slot is not None:
            if not shape or shape[0] <= entry.slot:
                raise CheckpointError(f"leaf 'model/{entry.leaf}' in '{self.step}' has shape {shape}: a scanned "
                                      f"leaf needs layer {entry.slot} on axis 0; the config.json beside it has more "
                                      "layers than the checkpoint")
            shape = shape[1:]
        return _hf_shape(shape, entry.rule)

    def describe(self, name: str) -> str:
        """``name`` and the Levanter leaf it comes from, for error messages (shapes in HF layout)."""
        entry = self.entry(name)
        slot = f", layer {entry.slot} on axis 0" if entry.slot is not None else ""
        return f"{name!r} (Levanter leaf 'model/{entry.leaf}'{slot}, shape {self._leaf_shape(entry.leaf)})"

    def read(self, name: str) -> np.ndarray:
        leaf, slot, rule = self.entry(name)
        array = self._leaf(leaf) if slot is None else self._leaf(leaf)[slot]  # a scanned leaf: its layer
        return array.reshape(_hf_shape(array.shape, rule))

    def _leaf_shape(self, leaf: str) -> tuple[int, ...]:
        if leaf not in self.leaves:
            raise CheckpointError(
                f"leaf 'model/{leaf}' is missing from Levanter checkpoint '{self.step}' (it has {len(self.leaves)} "
                f"leaves, e.g. {', '.join(self.leaves[:4])}): the checkpoint's model does not match the config.json "
                f"beside it (model_type {self.config.get('model_type')!r})")
        return tuple(_open(os.path.join(self.step, ROOT, leaf)).shape)

    def _leaf(self, leaf: str) -> np.ndarray:
        if self._last[0] != leaf:
            self._leaf_shape(leaf)
            self._last = (None, None)  # drop the previous leaf before reading the next
            path = os.path.join(self.step, ROOT, leaf)
            with unreadable(f"Levanter array '{path}'"):  # a chunk missing or cut short
                self._last = (leaf, np.asarray(_open(path).read().result()))
        return self._last[1]


def _optional(name: str, entry: Entry, present: set) -> bool:
    """A leaf a model may lack: the LM head, tied to the embeddings."""
    return name == "lm_head.weight" and entry.leaf not in present


def _hf_shape(shape: tuple, rule: Rule) -> tuple:
    if rule.flat:
        return (math.prod(shape),)
    if rule.lead is None:
        return tuple(shape)
    return (math.prod(shape[:rule.lead]), math.prod(shape[rule.lead:]))


def _open(path: str):
    """The TensorStore array levanter wrote at ``path`` (its metadata only, until read)."""
    import tensorstore as ts
    from jax.experimental.array_serialization.serialization import get_tensorstore_spec

    with unreadable(f"Levanter array '{path}'"):  # tensorstore's own errors
        return ts.open(get_tensorstore_spec(path), open=True).result()
