"""Read safetensors files with numpy alone (no torch, no safetensors frontend).

Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {...}}, then the data buffer; offsets are relative
to the buffer. The header is validated on open; each tensor is a view of a read-only memmap,
so nothing is read from disk until used.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import NamedTuple

import ml_dtypes
import numpy as np

from lmprobe.checkpoints.base import IndexedSource, read_weight_map
from lmprobe.errors import CheckpointError

DTYPES = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the limit the safetensors library itself enforces


class _Entry(NamedTuple):
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int  # absolute, from the start of the file
    file: SafetensorsFile


def _corrupt(path: str, detail: str) -> CheckpointError:
    return CheckpointError(
        f"safetensors file '{path}' is truncated or corrupt ({detail}): re-download it"
    )


def _entry(path: str, name: str, info: object, base: int) -> tuple[np.dtype, tuple, int, int]:
    """Validate one header entry; return (dtype, shape, absolute begin, absolute end)."""
    if not isinstance(info, dict):
        raise _corrupt(path, f"header entry for '{name}' is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPES:
        raise CheckpointError(
            f"tensor '{name}' in safetensors file '{path}' has dtype {dtype!r}, which lmprobe "
            f"cannot read (known: {', '.join(DTYPES)}): convert the checkpoint to float16, "
            "bfloat16 or float32"
        )
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise _corrupt(path, f"tensor '{name}' has invalid shape {shape!r}")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(o) is int for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise _corrupt(path, f"tensor '{name}' has invalid data_offsets {offsets!r}")
    nbytes = math.prod(shape) * DTYPES[dtype].itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise _corrupt(
            path,
            f"tensor '{name}' spans {offsets[1] - offsets[0]} bytes but shape {shape} of "
            f"{dtype} needs {nbytes}",
        )
    return DTYPES[dtype], tuple(shape), base + offsets[0], base + offsets[1]


class SafetensorsFile:
    """One .safetensors file: header parsed and checked against the file size on open."""

    def __init__(self, path: str):
        self.path = path
        self._mmap: np.memmap | None = None
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _corrupt(path, f"expected at least 8 bytes, found {size}")
            (header_len,) = struct.unpack("<Q", head)
            if header_len > MAX_HEADER_BYTES:
                raise _corrupt(path, f"header length {header_len} is implausible")
            if 8 + header_len > size:
                raise _corrupt(path, f"expected {8 + header_len} bytes, found {size}")
            raw = f.read(header_len)
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _corrupt(path, f"header is not valid JSON: {e}") from None
        if not isinstance(header, dict):
            raise _corrupt(path, "header is not a JSON object")
        header.pop("__metadata__", None)
        self.entries: dict[str, _Entry] = {}
        end_of_data = 8 + header_len
        for name, info in header.items():
            dtype, shape, begin, end = _entry(path, name, info, 8 + header_len)
            self.entries[name] = _Entry(dtype, shape, begin, self)
            end_of_data = max(end_of_data, end)
        if end_of_data > size:
            raise _corrupt(path, f"expected {end_of_data} bytes, found {size}")

    def view(self, entry: _Entry) -> np.ndarray:
        """The tensor as a read-only array backed by the file."""
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        nbytes = math.prod(entry.shape) * entry.dtype.itemsize
        raw = self._mmap[entry.offset : entry.offset + nbytes]
        return np.asarray(raw).view(entry.dtype).reshape(entry.shape)


class SafetensorsSource(IndexedSource[_Entry]):
    """All tensors of a safetensors checkpoint (one file or a sharded index)."""

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entry(name).shape

    def read(self, name: str) -> np.ndarray:
        entry = self.entry(name)
        return entry.file.view(entry)


def open_file(path: str) -> SafetensorsSource:
    """A single model.safetensors."""
    return SafetensorsSource(dict(SafetensorsFile(path).entries), where=path)


def open_index(index_path: str) -> SafetensorsSource:
    """A sharded checkpoint: model.safetensors.index.json and the shards its weight_map names."""
    weight_map = read_weight_map(index_path)
    shards = {path: SafetensorsFile(path) for path in sorted(set(weight_map.values()))}
    index = {}
    for name, path in weight_map.items():
        if name not in shards[path].entries:
            raise _corrupt(path, f"'{index_path}' places tensor '{name}' in it, but it lacks it")
        index[name] = shards[path].entries[name]
    return SafetensorsSource(index, where=index_path)
