"""Read llama-architecture GGUF files (llama.cpp format) as Hugging Face checkpoints.

Tensors are renamed to Hugging Face names and dequantized to float32 on read. GGUF lists
dimensions fastest-first (ne order), so a torch Linear [out, in] appears as [in, out] in the
metadata; the reader's arrays (and ours) are [out, in]. llama.cpp's converter permutes the
rows of q_proj and k_proj (interleaved -> half-split RoPE); `unpermute` undoes it exactly as
transformers' GGUF loader does (LlamaTensorProcessor._reverse_permute_weights).
"""

from __future__ import annotations

import os
import re

import numpy as np

from lmprobe.checkpoints.base import IndexedSource
from lmprobe.errors import CheckpointError

LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
TOKEN_IDS = {
    "bos_token_id": "tokenizer.ggml.bos_token_id",
    "eos_token_id": "tokenizer.ggml.eos_token_id",
    "pad_token_id": "tokenizer.ggml.padding_token_id",
    "unk_token_id": "tokenizer.ggml.unknown_token_id",
}


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a llama GGUF tensor ('blk.3.attn_q.weight' ->
    'model.layers.3.self_attn.q_proj.weight'), or None if it has none."""
    stem, _, suffix = gguf_name.rpartition(".")
    layer = re.fullmatch(r"blk\.(\d+)\.(\w+)", stem)
    if layer:
        base = LAYER_NAMES.get(layer[2])
        return base and f"model.layers.{layer[1]}.{base}.{suffix}"
    base = GLOBAL_NAMES.get(stem)
    return base and f"{base}.{suffix}"


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (n_head: query heads for q, KV heads for k)."""
    d = w.shape[0]
    return w.reshape(n_head, d // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _open_reader(path: str):
    import gguf

    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError) as e:
        raise CheckpointError(
            f"'{path}' is not a readable GGUF file ({e}): re-download it or pass a Hugging Face "
            "directory instead"
        ) from None


def _value(reader, path: str, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise CheckpointError(
                f"GGUF file '{path}' lacks metadata key '{key}': it was not written by a "
                "llama.cpp converter lmprobe understands; re-convert or use the HF checkpoint"
            )
        return default
    return field.contents()


def _clean_float(x: float) -> float:
    """GGUF stores float32: 1e-5 comes back as 9.9999997e-06; give the value it was meant as."""
    return float(str(np.float32(x)))


def gguf_config(reader, path: str) -> dict:
    """A Hugging Face LlamaConfig dict synthesized from the GGUF metadata."""
    arch = _value(reader, path, "general.architecture")
    if arch != "llama":
        raise CheckpointError(
            f"GGUF file '{path}' has architecture '{arch}'; lmprobe reads only llama-architecture "
            "GGUF files: use the model's Hugging Face directory (config.json + safetensors)"
        )
    scaling = _value(reader, path, "llama.rope.scaling.type", "none")
    if scaling != "none":
        raise CheckpointError(
            f"GGUF file '{path}' uses RoPE scaling '{scaling}', which lmprobe does not read from "
            "GGUF: use the model's Hugging Face directory (config.json + safetensors)"
        )
    get = lambda key, default=None: _value(reader, path, f"llama.{key}", default)  # noqa: E731
    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    rope_theta = _clean_float(get("rope.freq_base", 10000.0))
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": len(tokens.data) if tokens is not None else int(get("vocab_size")),
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("rope.dimension_count", hidden // heads)),
        "hidden_act": "silu",
        "max_position_embeddings": int(get("context_length")),
        "rms_norm_eps": _clean_float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": all(t.name != "output.weight" for t in reader.tensors),
    }
    for hf_key, gguf_key in TOKEN_IDS.items():
        if gguf_key in reader.fields:
            config[hf_key] = int(reader.fields[gguf_key].contents())
    return config


class GGUFSource(IndexedSource):
    """The tensors of a llama GGUF file under Hugging Face names, dequantized on read."""

    def __init__(self, reader, path: str, config: dict):
        index = {}
        for tensor in reader.tensors:
            name = hf_name(tensor.name)
            if name is None:
                raise CheckpointError(
                    f"GGUF file '{path}' holds tensor '{tensor.name}', which has no Hugging Face "
                    "Llama equivalent lmprobe knows: only plain llama GGUF files are supported"
                )
            index[name] = tensor
        super().__init__(index, where=path)
        self._heads = {
            "q_proj": config["num_attention_heads"],
            "k_proj": config["num_key_value_heads"],
        }

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(self.entry(name).shape))

    def read(self, name: str) -> np.ndarray:
        import gguf

        tensor = self.entry(name)
        w = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        w = w.astype(np.float32, copy=False).reshape(self.shape(name))
        proj = name.split(".")[-2]
        return unpermute(w, self._heads[proj]) if proj in self._heads else w


def open_gguf(path: str) -> tuple[dict, GGUFSource]:
    """(config, tensors) of a llama GGUF file."""
    if not os.path.isfile(path):
        raise CheckpointError(f"GGUF file '{path}' does not exist: check the path")
    reader = _open_reader(path)
    config = gguf_config(reader, path)
    return config, GGUFSource(reader, path, config)
