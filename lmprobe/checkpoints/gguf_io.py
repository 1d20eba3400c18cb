"""Read GGUF files (llama.cpp format) as Hugging Face checkpoints: llama, qwen2, gemma3, nomic-bert.

Each architecture is one ``Arch`` entry: its tensor names (llama.cpp's -> the names a Hugging
Face checkpoint of it stores, as transformers' save_pretrained writes them), the config.json it
synthesizes from the metadata, and how it undoes what llama.cpp's converter (convert_hf_to_gguf.py)
did to the weights, as transformers' GGUF loader does (modeling_gguf_pytorch_utils.py):

- llama: q_proj / k_proj rows permuted (interleaved -> half-split RoPE); ``unpermute`` undoes it
  (LlamaTensorProcessor). Only llama: qwen2, gemma3 and nomic-bert are stored unpermuted.
- gemma3: every ``*norm.weight`` stored as 1 + w (Gemma's RMSNorm scales by 1 + w); we subtract
  1 (Gemma2TensorProcessor, which transformers also uses for gemma3).
- nomic-bert: nothing to undo. Its checkpoints (nomic's, and transformers' nomic_bert when saved)
  name tensors nomic's way: a fused ``attn.Wqkv`` (rows [q; k; v]), ``mlp.fc11`` (up), ``fc12``
  (gate), ``fc2``, ``norm1`` / ``norm2``, ``emb_ln``; transformers renames and splits them on load.

Tensors are dequantized to float32 on read (``gguf.quants.dequantize``). GGUF lists dimensions
fastest-first, so a torch Linear [out, in] appears as [in, out] in the metadata; our arrays are
[out, in]. The config needs no tokenizer metadata: the vocabulary size comes from the embedding.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from lmprobe.checkpoints.base import IndexedSource
from lmprobe.errors import CheckpointError
from lmprobe.models.sizes import check_sizes

TOKEN_IDS = {
    "bos_token_id": "tokenizer.ggml.bos_token_id",
    "eos_token_id": "tokenizer.ggml.eos_token_id",
    "pad_token_id": "tokenizer.ggml.padding_token_id",
    "unk_token_id": "tokenizer.ggml.unknown_token_id",
}
HOW_TO_FALL_BACK = "use the model's Hugging Face directory (config.json + safetensors)"
GGUF_SIZES = {"layers": "block_count", "heads": "attention.head_count", "kv_heads": "attention.head_count_kv",
              "width": "embedding_length", "head_dim": "attention.key_length", "mlp": "feed_forward_length",
              "context": "context_length"}  # lmprobe.models.sizes' names -> the metadata keys under {arch}.


def _clean_float(x: float) -> float:
    """GGUF stores float32: 1e-5 comes back as 9.9999997e-06; give the value it was meant as."""
    return float(str(np.float32(x)))


class Meta:
    """A GGUF file's metadata and tensor shapes, read with clear errors."""

    def __init__(self, fields: dict, tensors: list, path: str):
        self.fields, self.path = fields, path
        self.arch = self.value("general.architecture")
        self.shapes = {t.name: tuple(int(d) for d in reversed(t.shape)) for t in tensors}

    def value(self, key: str, default=None, *, required: bool = True):
        field = self.fields.get(key)
        if field is None:
            if required and default is None:
                raise CheckpointError(
                    f"GGUF file '{self.path}' lacks metadata key '{key}': it was not written by a "
                    f"llama.cpp converter lmprobe understands; re-convert it or {HOW_TO_FALL_BACK}")
            return default
        return field

    def get(self, key: str, default=None, *, required: bool = True):
        """``{arch}.{key}``."""
        return self.value(f"{self.arch}.{key}", default, required=required)

    def integer(self, key: str, default=None) -> int:
        return int(self.get(key, default))

    def real(self, key: str, default=None) -> float:
        return _clean_float(self.get(key, default))

    def optional(self, key: str):
        return self.get(key, required=False)

    def rows(self, tensor: str) -> int:
        """The first HF dimension of a tensor (the vocabulary of an embedding)."""
        if tensor not in self.shapes:
            raise CheckpointError(f"GGUF file '{self.path}' has no tensor '{tensor}': the file is "
                                  f"incomplete; re-download or re-convert it")
        return self.shapes[tensor][0]

    def sizes(self) -> dict:
        """The sizes the metadata gives ({size: (key, value)}, lmprobe.models.sizes' names)."""
        values = {size: (f"{self.arch}.{key}", self.optional(key)) for size, key in GGUF_SIZES.items()}
        return {size: field for size, field in values.items() if field[1] is not None}

    def token_ids(self) -> dict:
        return {hf: int(self.fields[key]) for hf, key in TOKEN_IDS.items() if key in self.fields}


# --- config.json synthesis, one function per architecture -----------------------------------------


def _rope(meta: Meta, default_theta: float) -> dict:
    """HF rope_parameters for the (global) RoPE: default, or linear scaling."""
    theta = meta.real("rope.freq_base", default_theta)
    scaling = meta.get("rope.scaling.type", "none")
    if scaling == "none":
        return {"rope_type": "default", "rope_theta": theta}
    if scaling == "linear":
        return {"rope_type": "linear", "rope_theta": theta, "factor": meta.real("rope.scaling.factor")}
    raise CheckpointError(
        f"GGUF file '{meta.path}' uses RoPE scaling '{scaling}', which lmprobe does not read from "
        f"GGUF (only none and linear): {HOW_TO_FALL_BACK}")


def _decoder(meta: Meta, *, default_theta: float = 10000.0) -> dict:
    """The fields every llama-like decoder config shares."""
    hidden, heads = meta.integer("embedding_length"), meta.integer("attention.head_count")
    head_dim = meta.optional("attention.key_length") or meta.optional("rope.dimension_count") or hidden // heads
    rope = _rope(meta, default_theta)
    return {
        "vocab_size": meta.rows("token_embd.weight"),
        "hidden_size": hidden,
        "intermediate_size": meta.integer("feed_forward_length"),
        "num_hidden_layers": meta.integer("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": meta.integer("attention.head_count_kv", heads),
        "head_dim": int(head_dim),
        "max_position_embeddings": meta.integer("context_length"),
        "rms_norm_eps": meta.real("attention.layer_norm_rms_epsilon"),
        "rope_theta": rope["rope_theta"],
        "rope_parameters": rope,
        "tie_word_embeddings": "output.weight" not in meta.shapes,
        **meta.token_ids(),
    }


def llama_config(meta: Meta) -> dict:
    c = _decoder(meta)
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **c, "hidden_act": "silu",
            "attention_bias": "blk.0.attn_q.bias" in meta.shapes, "mlp_bias": False}


def qwen2_config(meta: Meta) -> dict:
    """Qwen2Config: llama's fields; q/k/v always carry a bias (hard-wired in modeling_qwen2)."""
    c = _decoder(meta)
    layers = c["num_hidden_layers"]
    return {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], **c, "hidden_act": "silu",
            "use_sliding_window": False, "sliding_window": None, "max_window_layers": layers,
            "layer_types": ["full_attention"] * layers, "attention_dropout": 0.0}


def gemma3_config(meta: Meta) -> dict:
    """Gemma3TextConfig. GGUF stores the global RoPE base, the window and head_dim; llama.cpp hard-
    codes the rest for gemma3 (llama-model.cpp): every 6th layer global, the others sliding with
    RoPE base 10000; queries scaled by 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 62-layer 27B)."""
    c = _decoder(meta, default_theta=1_000_000.0)
    layers = c["num_hidden_layers"]
    window = meta.optional("attention.sliding_window") or None
    pattern = meta.optional("attention.sliding_window_pattern")
    if window is None:
        layer_types = ["full_attention"] * layers
    elif isinstance(pattern, list):  # per layer: True = sliding
        layer_types = ["sliding_attention" if p else "full_attention" for p in pattern]
    else:
        n = int(pattern or 6)
        layer_types = ["sliding_attention" if (i + 1) % n else "full_attention" for i in range(layers)]
    local_theta = meta.real("rope.freq_base_swa", 10000.0)
    scalar = c["hidden_size"] // c["num_attention_heads"] if layers == 62 else c["head_dim"]
    softcap = {}
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):  # gemma2's keys; absent for gemma3
        value = meta.optional(key)
        softcap[key] = _clean_float(value) if value else None
    return {
        "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], **c,
        "hidden_activation": "gelu_pytorch_tanh",
        "rope_local_base_freq": local_theta,
        "rope_parameters": {"full_attention": c["rope_parameters"],
                            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta}},
        "query_pre_attn_scalar": int(scalar),
        "sliding_window": int(window) if window else None,
        "sliding_window_pattern": int(pattern) if isinstance(pattern, int) else 6,
        "layer_types": layer_types,
        **softcap,
        "attention_bias": False, "attention_dropout": 0.0, "use_bidirectional_attention": False,
    }


def nomic_bert_config(meta: Meta) -> dict:
    """NomicBertConfig (transformers' nomic_bert): post-norm BERT with RoPE and SwiGLU."""
    if meta.optional("attention.causal"):
        raise CheckpointError(f"GGUF file '{meta.path}' is a causal nomic-bert, which lmprobe does not read: "
                              f"{HOW_TO_FALL_BACK}")
    hidden, heads = meta.integer("embedding_length"), meta.integer("attention.head_count")
    theta = meta.real("rope.freq_base", 1000.0)
    ids = meta.token_ids()
    return {
        "model_type": "nomic_bert", "architectures": ["NomicBertModel"],
        "vocab_size": meta.rows("token_embd.weight"),
        "hidden_size": hidden,
        "intermediate_size": meta.integer("feed_forward_length"),
        "num_hidden_layers": meta.integer("block_count"),
        "num_attention_heads": heads,
        "head_dim": hidden // heads,
        "hidden_act": "silu",
        "max_position_embeddings": meta.integer("context_length"),
        "type_vocab_size": meta.rows("token_types.weight") if "token_types.weight" in meta.shapes else 2,
        "layer_norm_eps": meta.real("attention.layer_norm_epsilon"),
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        **ids,
        "pad_token_id": ids.get("pad_token_id", 0),
    }


# --- tensor processors: undo llama.cpp's converter ----------------------------------------------


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (n_head: query heads for q, KV heads for k)."""
    d = w.shape[0]
    return w.reshape(n_head, d // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama_unpermute(name: str, w: np.ndarray, config: dict) -> np.ndarray:
    proj = name.split(".")[-2]
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}.get(proj)
    return w if heads is None else unpermute(w, heads)


def _gemma_norm(name: str, w: np.ndarray, config: dict) -> np.ndarray:
    return w - np.float32(1.0) if name.endswith("norm.weight") else w


# --- the architectures --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arch:
    """One llama.cpp architecture: names, config and converter inverse.

    ``layer_names``: block tensor stem ('attn_q') -> HF module under ``layers`` ('self_attn.q_proj');
    ``global_names``: stem -> HF module. ``process(hf_name, array, config)`` undoes the converter.
    """

    gguf: str
    model_type: str
    config: Callable[[Meta], dict]
    layers: str
    layer_names: Mapping[str, str]
    global_names: Mapping[str, str]
    process: Callable[[str, np.ndarray, dict], np.ndarray] | None = None


LLAMA_LAYER = {
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
DECODER_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

ARCHS: dict[str, Arch] = {a.gguf: a for a in (
    Arch("llama", "llama", llama_config, "model.layers", LLAMA_LAYER, DECODER_GLOBAL, _llama_unpermute),
    Arch("qwen2", "qwen2", qwen2_config, "model.layers", LLAMA_LAYER, DECODER_GLOBAL),
    Arch("gemma3", "gemma3_text", gemma3_config, "model.layers", {
        **LLAMA_LAYER,
        "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm",
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    }, DECODER_GLOBAL, _gemma_norm),
    Arch("nomic-bert", "nomic_bert", nomic_bert_config, "encoder.layers", {
        "attn_qkv": "attn.Wqkv",
        "attn_output": "attn.out_proj",
        "attn_output_norm": "norm1",
        "ffn_up": "mlp.fc11",
        "ffn_gate": "mlp.fc12",
        "ffn_down": "mlp.fc2",
        "layer_output_norm": "norm2",
    }, {
        "token_embd": "embeddings.word_embeddings",
        "token_types": "embeddings.token_type_embeddings",
        "token_embd_norm": "emb_ln",
    }),
)}


def arch_for(meta_or_name) -> Arch:
    """The Arch of a GGUF architecture name, or an error listing the supported ones."""
    name = meta_or_name.arch if isinstance(meta_or_name, Meta) else meta_or_name
    where = f"GGUF file '{meta_or_name.path}'" if isinstance(meta_or_name, Meta) else "a GGUF file"
    if name not in ARCHS:
        raise CheckpointError(
            f"{where} has architecture '{name}'; lmprobe reads only {', '.join(ARCHS)} GGUF files: "
            f"{HOW_TO_FALL_BACK}")
    return ARCHS[name]


def hf_name(gguf_name: str, arch: str = "llama") -> str | None:
    """The Hugging Face name of a GGUF tensor ('blk.3.attn_q.weight' -> 'model.layers.3.self_attn.
    q_proj.weight' for llama), or None if it has none."""
    spec = arch_for(arch)
    stem, _, suffix = gguf_name.rpartition(".")
    layer = re.fullmatch(r"blk\.(\d+)\.(\w+)", stem)
    if layer:
        base = spec.layer_names.get(layer[2])
        return base and f"{spec.layers}.{layer[1]}.{base}.{suffix}"
    base = spec.global_names.get(stem)
    return base and f"{base}.{suffix}"


class Skipped(int):
    """A string array left unread (its length): the tokenizer's vocabulary and merges, by default."""


class TensorInfo(NamedTuple):
    """One tensor of a GGUF file, as gguf.GGUFReader's ReaderTensor: ``shape`` in GGUF (fastest-
    first) order, ``data`` a memory-mapped array in the form ``gguf.quants.dequantize`` takes."""

    name: str
    tensor_type: object  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_PLAIN = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16,
          "I32": np.int32, "I64": np.int64}


class _Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self, decode: bool = True):
        n = self.take("<Q")
        start, self.pos = self.pos, self.pos + n
        return bytes(self.buf[start:self.pos]).decode("utf-8", errors="replace") if decode else None

    def value(self, kind: int, key: str, strings):
        if kind in _SCALARS:
            value = self.take(_SCALARS[kind])
            return bool(value) if kind == 7 else value
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown value type {kind} for key '{key}'")
        item, count = self.take("<I"), self.take("<Q")
        if item in _SCALARS:
            dtype = np.dtype(_SCALARS[item][1]).newbyteorder("<")
            values = np.frombuffer(self.buf, dtype, count, self.pos)
            self.pos += dtype.itemsize * count
            return [bool(v) for v in values] if item == 7 else values.tolist()
        if item == _STRING and key not in strings:
            for _ in range(count):
                self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]
            return Skipped(count)
        return [self.value(item, key, strings) for _ in range(count)]


def read_header(path: str, strings=frozenset()) -> tuple[dict, list[TensorInfo]]:
    """(metadata, tensors) of a GGUF file (v2/v3, little-endian), tensor data memory-mapped.

    String arrays are read only for the keys in ``strings``; the others come back as ``Skipped``
    (their length): gguf.GGUFReader parses every token of a 262k vocabulary into Python objects,
    which took 19 s of Gemma 3's 34 s load.
    """
    import gguf

    try:
        buf = np.memmap(path, np.uint8, mode="r")
        cur = _Cursor(buf)
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError("no GGUF magic number")
        version = cur.take("<4xI")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} (byte-swapped or too old; lmprobe reads v2 and v3, "
                             "little-endian)")
        n_tensors, n_fields = cur.take("<Q"), cur.take("<Q")
        fields = {}
        for _ in range(n_fields):
            key = cur.string()
            fields[key] = cur.value(cur.take("<I"), key, strings)
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            dims = [cur.take("<Q") for _ in range(cur.take("<I"))]
            infos.append((name, dims, gguf.GGMLQuantizationType(cur.take("<I")), cur.take("<Q")))
        align = int(fields.get("general.alignment", 32))
        start = -(-cur.pos // align) * align
        tensors = []
        for name, dims, qtype, offset in infos:
            shape = tuple(reversed(dims))
            if qtype.name in _PLAIN:
                dtype = np.dtype(_PLAIN[qtype.name])
            else:
                dtype, shape = np.dtype(np.uint8), gguf.quants.quant_shape_to_byte_shape(shape, qtype)
            count = int(np.prod(shape))
            data = np.frombuffer(buf, dtype, count, start + offset).reshape(shape)
            tensors.append(TensorInfo(name, qtype, tuple(dims), data))
    except (ValueError, OSError, IndexError, KeyError, struct.error, TypeError) as e:
        raise CheckpointError(
            f"'{path}' is not a readable GGUF file ({e}): re-download it or pass a Hugging Face "
            "directory instead"
        ) from None
    return fields, tensors


class GGUFSource(IndexedSource):
    """The tensors of a GGUF file under Hugging Face names, dequantized and un-converted on read."""

    def __init__(self, tensors: list[TensorInfo], path: str, config: dict, arch: Arch | None = None):
        self.arch = arch or ARCHS["llama"]
        index = {}
        for tensor in tensors:
            name = hf_name(tensor.name, self.arch.gguf)
            if name is None:
                raise CheckpointError(
                    f"GGUF file '{path}' holds tensor '{tensor.name}', which has no Hugging Face "
                    f"{self.arch.model_type} equivalent lmprobe knows: only plain {self.arch.gguf} GGUF files "
                    f"are supported; {HOW_TO_FALL_BACK}")
            index[name] = tensor
        super().__init__(index, where=path)
        self._config = config

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(self.entry(name).shape))

    def read(self, name: str) -> np.ndarray:
        w = _dequantize(self.entry(name))
        return self.arch.process(name, w, self._config) if self.arch.process else w


CHUNK = 1 << 24  # values dequantized at a time (64 MB of float32): bounds the dequantizer's temporaries


def _dequantize(tensor: TensorInfo) -> np.ndarray:
    """A GGUF tensor as float32 in HF layout (dimensions slowest-first), dequantized a block of
    rows at a time into one output array (the gguf package's dequantizers use several times the
    output's memory in temporaries: 2.4 GB for Gemma 3's 671 MB embedding in one go)."""
    import gguf

    shape = tuple(int(d) for d in reversed(tensor.shape))
    data, qtype = tensor.data, tensor.tensor_type
    if data.ndim < 2 or qtype == gguf.GGMLQuantizationType.F32 or int(np.prod(shape)) <= CHUNK:
        out = gguf.quants.dequantize(data, qtype).astype(np.float32, copy=False).reshape(shape)
        # a float32 tensor comes back as a view of the memory-mapped file: a copy, or the model's
        # (zero-copy) CPU array of it keeps the whole file mapped and resident (93 MB for smollm2-135m)
        return out.copy() if np.may_share_memory(out, data) else out
    rows = data.reshape(-1, data.shape[-1])
    out = np.empty(shape, np.float32)
    flat = out.reshape(rows.shape[0], -1)
    step = max(1, CHUNK // flat.shape[1])
    for start in range(0, rows.shape[0], step):
        flat[start:start + step] = gguf.quants.dequantize(rows[start:start + step], qtype)
    return out


def open_gguf(path: str) -> tuple[dict, GGUFSource]:
    """(config, tensors) of a GGUF file of a supported architecture."""
    if not os.path.isfile(path):
        raise CheckpointError(f"GGUF file '{path}' does not exist: check the path")
    fields, tensors = read_header(path)
    meta = Meta(fields, tensors, path)
    arch = arch_for(meta)
    check_sizes(meta.sizes(), path, fix=f"re-convert the file, or {HOW_TO_FALL_BACK}")
    config = arch.config(meta)
    return config, GGUFSource(tensors, path, config, arch)
