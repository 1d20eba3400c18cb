"""MaxText decoder checkpoints, read as a TensorSource under Hugging Face names.

A MaxText run saves ``RUN/checkpoints/<step>/items/``: an Orbax PyTree of its TrainState, the
weights under ``params/params/`` (``token_embedder``, ``decoder/decoder_norm``, ``decoder/logits_dense``,
``decoder/layers...``). The layouts below follow MaxText's own converter (src/maxtext/
checkpoint_conversion/utils/param_mapping.py, LLAMA31_* and GEMMA3_* mappings and hooks, at
AI-Hypercomputer/maxtext e591f30): kernels are [in..., out...] (query [embed, heads, head_dim], out
[heads, head_dim, embed]); scanned layers are stacked on ``param_scan_axis`` = 1; Llama's query
is scaled by head_dim**-0.5 and its q/k head_dim interleaved for RoPE; Gemma 3 stores its norm scales
+1 and its embedding times sqrt(hidden_size), scanning layers in blocks of 6 (remainder unscanned).

MaxText checkpoints carry no HF config: give the HF config.json (and tokenizer files) of the
architecture in the directory you pass or in one of its three parents (the run directory), e.g.
``Scorer.load("RUN/checkpoints/1000")`` with ``RUN/config.json``. The path may be the run's
``checkpoints`` directory (its latest step), a step, or a step's ``items``.
"""

from __future__ import annotations

import math
import os
import re
from typing import NamedTuple

import numpy as np

from lmprobe.checkpoints import orbax_io
from lmprobe.checkpoints.base import IndexedSource, beside_config, layout_of, nearest_config, read_json
from lmprobe.errors import CheckpointError

ROOT = ("params", "params")  # the TrainState's weights
SCAN_AXIS = 1  # MaxText's default param_scan_axis


class Rule(NamedTuple):
    """A MaxText leaf (below params/params, '/'-joined) and how it becomes its HF tensor: ``kind``
    'same', 'kernel' (``inputs`` leading dims are the input features: transposed to [out, in]),
    'query' / 'key' (Llama: unscaled / de-interleaved, then 'kernel'), 'norm1' (scale - 1),
    'embed_scaled' (divided by sqrt(hidden_size))."""

    leaf: str
    kind: str = "same"
    inputs: int = 1


# HF name (relative to the layer for those with "{layer}") -> Rule (relative to the layer's module)
LLAMA = {
    "model.embed_tokens.weight": Rule("token_embedder/embedding"),
    "model.norm.weight": Rule("decoder/decoder_norm/scale"),
    "lm_head.weight": Rule("decoder/logits_dense/kernel", "kernel"),
    "{layer}.self_attn.q_proj.weight": Rule("self_attention/query/kernel", "query"),
    "{layer}.self_attn.k_proj.weight": Rule("self_attention/key/kernel", "key"),
    "{layer}.self_attn.v_proj.weight": Rule("self_attention/value/kernel", "kernel"),
    "{layer}.self_attn.o_proj.weight": Rule("self_attention/out/kernel", "kernel", 2),
    "{layer}.mlp.gate_proj.weight": Rule("mlp/wi_0/kernel", "kernel"),
    "{layer}.mlp.up_proj.weight": Rule("mlp/wi_1/kernel", "kernel"),
    "{layer}.mlp.down_proj.weight": Rule("mlp/wo/kernel", "kernel"),
    "{layer}.input_layernorm.weight": Rule("pre_self_attention_layer_norm/scale"),
    "{layer}.post_attention_layernorm.weight": Rule("post_self_attention_layer_norm/scale"),
}
GEMMA3 = {
    "model.embed_tokens.weight": Rule("token_embedder/embedding", "embed_scaled"),
    "model.norm.weight": Rule("decoder/decoder_norm/scale", "norm1"),
    "{layer}.self_attn.q_proj.weight": Rule("self_attention/query/kernel", "kernel"),
    "{layer}.self_attn.k_proj.weight": Rule("self_attention/key/kernel", "kernel"),
    "{layer}.self_attn.v_proj.weight": Rule("self_attention/value/kernel", "kernel"),
    "{layer}.self_attn.o_proj.weight": Rule("self_attention/out/kernel", "kernel", 2),
    "{layer}.mlp.gate_proj.weight": Rule("mlp/wi_0/kernel", "kernel"),
    "{layer}.mlp.up_proj.weight": Rule("mlp/wi_1/kernel", "kernel"),
    "{layer}.mlp.down_proj.weight": Rule("mlp/wo/kernel", "kernel"),
    **{f"{{layer}}.{hf}.weight": Rule(f"{mt}/scale", "norm1") for hf, mt in (
        ("input_layernorm", "pre_self_attention_norm"), ("post_attention_layernorm", "post_self_attention_norm"),
        ("self_attn.q_norm", "self_attention/query_norm"), ("self_attn.k_norm", "self_attention/key_norm"),
        ("pre_feedforward_layernorm", "pre_ffw_norm"), ("post_feedforward_layernorm", "post_ffw_norm"))},
}
GEMMA3_BLOCK = 6  # Gemma 3's scanned block: 5 local + 1 global attention layers
LAYOUTS = {"llama": LLAMA, "mistral": LLAMA, "gemma3_text": GEMMA3}


class Entry(NamedTuple):
    leaf: str  # '/'-joined path below params/params
    slot: int | None  # index on the scan axis, None for an unscanned leaf
    rule: Rule


def find(path: str):
    """(HF config, TensorSource, tokenizer directory) for a MaxText checkpoint at ``path``, or None
    when ``path`` is not one. CheckpointError when it is one without a config.json beside it."""
    return beside_config(path, _items_dir(os.path.abspath(path)), "MaxText", MaxTextSource)


def find_config(path: str) -> tuple[dict, str] | None:
    """(config.json, its path) for a MaxText checkpoint at ``path``: the nearest config.json in ``path``
    or its three parents; None when ``path`` is not a MaxText checkpoint or has none."""
    return nearest_config(path) if _items_dir(os.path.abspath(path)) is not None else None


def _items_dir(path: str) -> str | None:
    """The ``items`` PyTree directory of a MaxText checkpoint path (root: its latest finished step), or
    None; CheckpointError for a step that orbax has not finished (orbax_io.not_finished)."""
    if not os.path.isdir(path):
        return None
    steps = [os.path.join(path, str(n)) for n in sorted((int(n) for n in os.listdir(path) if re.fullmatch(r"\d+", n)),
                                                         reverse=True)]
    latest = next((os.path.join(s, "items") for s in steps
                   if _is_items(os.path.join(s, "items")) and not orbax_io.not_finished(s)), None)
    for items in (path, os.path.join(path, "items"), latest):
        if items is not None and _is_items(items):
            why = orbax_io.not_finished(os.path.dirname(items))
            if why:
                raise CheckpointError(f"MaxText step '{os.path.dirname(items)}' is not finished ({why}): load it "
                                      "once its writer has finished it, or load a finished step")
            return items
    return None


def _is_items(items: str) -> bool:
    """Whether ``items`` is a MaxText step's PyTree: _METADATA naming params/params leaves."""
    meta = os.path.join(items, "_METADATA")
    if not os.path.isfile(meta):
        return False
    tree = read_json(meta, "Orbax checkpoint metadata")
    tree = tree.get("tree_metadata") if isinstance(tree, dict) else None
    return isinstance(tree, dict) and any(k.startswith("('params', 'params', ") for k in tree)


class MaxTextSource(IndexedSource[Entry]):
    """A MaxText checkpoint's weights under HF names; each leaf read from the checkpoint on demand
    (the last one kept, so the layers of a scanned leaf are read once)."""

    def __init__(self, items: str, config: dict):
        import orbax.checkpoint as ocp

        layout = layout_of(LAYOUTS, config, "MaxText", items)
        with ocp.PyTreeCheckpointer() as checkpointer, orbax_io.reading(f"MaxText checkpoint '{items}'"):
            saved = checkpointer.metadata(items).item_metadata
            if saved is None:
                raise CheckpointError(f"MaxText checkpoint '{items}' has no readable _METADATA: the step is "
                                      "incomplete or damaged; re-save it")
            tree = saved.tree
        for key in ROOT:
            tree = tree.get(key, {}) if isinstance(tree, dict) else {}
        self.shapes = {"/".join(p): tuple(m.shape) for p, m in _leaves(tree)}
        self.items, self.config, self._last = items, config, (None, None)
        super().__init__(self._index(layout), items)

    def _index(self, layout: dict) -> dict[str, Entry]:
        n = self.config["num_hidden_layers"]
        scanned = "decoder/layers/" + next(r.leaf for k, r in layout.items() if k.startswith("{layer}"))
        index = {}
        for hf, rule in layout.items():
            if not hf.startswith("{layer}"):
                if rule.leaf in self.shapes or hf != "lm_head.weight":
                    index[hf] = Entry(rule.leaf, None, rule)
                continue
            for i in range(n):
                name = hf.format(layer=f"model.layers.{i}")
                if layout is GEMMA3 and any(k.startswith("decoder/layers/layers_0/") for k in self.shapes):
                    block, slot = i % GEMMA3_BLOCK, i // GEMMA3_BLOCK
                    if i >= n - n % GEMMA3_BLOCK:
                        index[name] = Entry(f"decoder/layers_remainder/layers_{i - (n - n % GEMMA3_BLOCK)}/{rule.leaf}",
                                            None, rule)
                    else:
                        index[name] = Entry(f"decoder/layers/layers_{block}/{rule.leaf}", slot, rule)
                elif scanned in self.shapes:
                    index[name] = Entry(f"decoder/layers/{rule.leaf}", i, rule)
                else:
                    index[name] = Entry(f"decoder/layers_{i}/{rule.leaf}", None, rule)
        return index

    def shape(self, name: str) -> tuple[int, ...]:
        entry = self.entry(name)
        shape = self._leaf_shape(entry.leaf)
        if entry.slot is not None:
            if len(shape) <= SCAN_AXIS or shape[SCAN_AXIS] <= entry.slot:
                raise CheckpointError(f"leaf 'params/params/{entry.leaf}' in '{self.items}' has shape {shape}: a "
                                      f"scanned leaf needs layer {entry.slot} on axis {SCAN_AXIS}; the config.json "
                                      "beside it has more layers than the checkpoint")
            shape = shape[:SCAN_AXIS] + shape[SCAN_AXIS + 1:]
        if entry.rule.kind in ("kernel", "query", "key"):
            k = entry.rule.inputs
            return (math.prod(shape[k:]), math.prod(shape[:k]))
        return shape

    def describe(self, name: str) -> str:
        """``name`` and the MaxText leaf it comes from, for error messages (shapes are given in HF layout)."""
        entry = self.entry(name)
        slot = f", layer {entry.slot} on axis {SCAN_AXIS}" if entry.slot is not None else ""
        return f"{name!r} (MaxText leaf 'params/params/{entry.leaf}'{slot}, shape {self._leaf_shape(entry.leaf)})"

    def read(self, name: str) -> np.ndarray:
        entry = self.entry(name)
        array = self._leaf(entry.leaf)
        if entry.slot is not None:
            array = np.take(array, entry.slot, axis=SCAN_AXIS)
        return _to_hf(array, entry.rule, self.config)

    def _leaf_shape(self, leaf: str) -> tuple[int, ...]:
        if leaf not in self.shapes:
            examples = ", ".join(sorted(self.shapes)[:4])
            raise CheckpointError(
                f"leaf 'params/params/{leaf}' is missing from MaxText checkpoint '{self.items}' (it has "
                f"{len(self.shapes)} leaves, e.g. {examples}): the checkpoint's model does not match the "
                f"config.json beside it (model_type {self.config.get('model_type')!r}, "
                f"{self.config.get('num_hidden_layers')} layers)")
        return self.shapes[leaf]

    def _leaf(self, leaf: str) -> np.ndarray:
        if self._last[0] != leaf:
            import orbax.checkpoint as ocp

            self._leaf_shape(leaf)
            self._last = (None, None)  # drop the previous leaf before reading the next
            item = restore = {}
            parts = [*ROOT, *leaf.split("/")]
            for part in parts[:-1]:
                item = item.setdefault(part, {})
            item[parts[-1]] = 0
            restore_args = _nest_like(restore, ocp.RestoreArgs(restore_type=np.ndarray))
            with ocp.PyTreeCheckpointer() as checkpointer, orbax_io.reading(f"MaxText checkpoint '{self.items}'"):
                got = checkpointer.restore(self.items, args=ocp.args.PyTreeRestore(
                    item=restore, restore_args=restore_args, partial_restore=True))
            for part in parts:
                got = got[part]
            self._last = (leaf, np.asarray(got))
        return self._last[1]


def _to_hf(x: np.ndarray, rule: Rule, config: dict) -> np.ndarray:
    """A MaxText array (one layer) in HF layout: MaxText's hooks with saving_to_hf=True."""
    if rule.kind == "norm1":
        return x - np.asarray(1, x.dtype)
    if rule.kind == "embed_scaled":  # MaxText's normalizer is a bfloat16 scalar
        import ml_dtypes

        return (x / np.asarray(ml_dtypes.bfloat16(config["hidden_size"] ** 0.5), np.float32)).astype(x.dtype)
    if rule.kind == "query":
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        x = (x.astype(np.float32) * np.float32(np.sqrt(head_dim))).astype(x.dtype)
    if rule.kind in ("query", "key"):  # MaxText's interleaved RoPE pairs -> HF's two halves
        x = np.concatenate((x[..., ::2], x[..., 1::2]), axis=-1)
    if rule.kind in ("kernel", "query", "key"):
        k = rule.inputs
        return x.reshape(math.prod(x.shape[:k]), -1).T
    return x


def _leaves(tree, prefix=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*prefix, str(key)))
    elif hasattr(tree, "shape"):
        yield prefix, tree


def _nest_like(tree: dict, value):
    return {k: _nest_like(v, value) if isinstance(v, dict) else value for k, v in tree.items()}
