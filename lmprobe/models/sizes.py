"""A model config's sizes checked before anything is built from them: layer and head counts, widths,
context length and vocabulary positive integers; key/value heads dividing the heads; the width a
multiple of the heads unless the head width is given. Each failure is one line naming the file and
the field as the file names it (config.json's ``n_layer`` or ``num_hidden_layers``, GGUF's
``llama.block_count``).
"""

from __future__ import annotations

import os

from lmprobe.errors import CheckpointError

# what a size means -> the config.json keys that hold it, across the families (transformers' attribute_map)
HF_SIZES = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads",),
    "width": ("hidden_size", "n_embd", "d_model", "dim"),
    "head_dim": ("head_dim", "d_kv"),
    "mlp": ("intermediate_size", "ffn_dim", "n_inner", "d_ff", "hidden_dim"),
    "context": ("max_position_embeddings", "n_positions", "max_seq_len"),
    "vocab": ("vocab_size",),
}


def check_hf_sizes(config: dict, where: str) -> None:
    """``check_sizes`` of a Hugging Face config (config.json contents) read from ``where`` (its
    file, the checkpoint directory holding it, or a description)."""
    fields = {}
    for size, keys in HF_SIZES.items():
        given = [(key, config[key]) for key in keys if config.get(key) is not None]
        for key, value in given[1:]:  # a second key of the same size: checked, never used for the pairs below
            check_sizes({size: (key, value)}, where)
        if given:
            fields[size] = given[0]
    check_sizes(fields, where)


def check_sizes(fields: dict[str, tuple[str, object]], where: str,
                fix: str = "correct it, or re-download the model") -> None:
    """CheckpointError, one line naming ``where`` and the field, unless every given size (HF_SIZES'
    names -> (field name, value)) is a positive integer and the heads agree. ``where``: a path (a
    directory: its config.json) or a description."""
    source = _source(where)
    for name, value in fields.values():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{name} = {value!r} in {source} must be a positive integer: {fix}")
    heads, kv_heads, width = fields.get("heads"), fields.get("kv_heads"), fields.get("width")
    if heads and kv_heads and heads[1] % kv_heads[1]:
        raise CheckpointError(f"{kv_heads[0]} = {kv_heads[1]} in {source} does not divide {heads[0]} = {heads[1]} "
                              f"(each key/value head serves a whole group of query heads): {fix}")
    if heads and width and "head_dim" not in fields and width[1] % heads[1]:
        raise CheckpointError(f"{width[0]} = {width[1]} in {source} is not a multiple of {heads[0]} = {heads[1]} "
                              f"(the heads split the width): {fix}")


def _source(where: str) -> str:
    """``where`` as an error names it: a checkpoint directory by its config.json, a path quoted."""
    config = os.path.join(where, "config.json")
    if os.path.isdir(where) and os.path.isfile(config):
        return f"'{config}'"
    return f"'{where}'" if os.path.exists(where) else where
