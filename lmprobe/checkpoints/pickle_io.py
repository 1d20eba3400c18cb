"""Pickled PyTorch weights (pytorch_model.bin, sharded .bin index, *.pt): refused unless the
user opts in, since unpickling can run code; then read with torch.load(weights_only=True)."""

from __future__ import annotations

import glob
import os

import ml_dtypes
import numpy as np

from lmprobe.checkpoints.base import IndexedSource, read_weight_map
from lmprobe.errors import CheckpointError

INDEX = "pytorch_model.bin.index.json"
SINGLE = "pytorch_model.bin"
PATTERNS = ("*.pt", "*.pth")


def find_pickle(directory: str) -> str | None:
    """The pickled-weights file of a directory: the .bin index, pytorch_model.bin, or a
    *.pt / *.pth file."""
    for name in (INDEX, SINGLE):
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    found = sorted(p for pattern in PATTERNS for p in glob.glob(os.path.join(directory, pattern)))
    return found[0] if found else None


def refusal(path: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint '{os.path.dirname(path)}' only has pickled weights ('{os.path.basename(path)}'), "
        "which can run arbitrary code when loaded: convert them to safetensors (e.g. with "
        "transformers: from_pretrained(dir).save_pretrained(dir, safe_serialization=True)), or, if "
        "you trust the file, pass `allow_pickle=True`"
    )


def _torch(path: str):
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"reading the pickled weights '{path}' needs PyTorch, which is not installed: "
            "pip install torch (the CPU build is enough), or convert the checkpoint to safetensors"
        ) from None
    return torch


def _state_dict(path: str) -> dict:
    """torch.load one file (memory-mapped where the format allows) into {name: tensor}."""
    torch = _torch(path)
    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (pre-zip) format cannot be memory-mapped
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for bad pickles
        raise CheckpointError(
            f"cannot read pickled weights '{path}' with torch.load(weights_only=True) "
            f"({type(e).__name__}: {e}): convert the checkpoint to safetensors"
        ) from None
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(torch.is_tensor(v) for v in obj.values()):
        raise CheckpointError(
            f"'{path}' does not hold a flat state dict of tensors: save the model's state_dict() "
            "or convert the checkpoint to safetensors"
        )
    return obj


def _to_numpy(tensor) -> np.ndarray:
    import torch  # importable: the tensor came from it
    bits = {
        torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
        torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
        torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
    }
    tensor = tensor.detach().contiguous()
    if tensor.dtype in bits:
        carrier, dtype = bits[tensor.dtype]
        return tensor.view(carrier).numpy().view(dtype)
    return tensor.numpy()


class PickleSource(IndexedSource[str]):
    """Tensors of pickled checkpoint files; each file is loaded once, on first use."""

    def __init__(self, index: dict[str, str], where: str, loaded: dict[str, dict] | None = None):
        super().__init__(index, where)
        self._loaded = loaded or {}

    def _tensor(self, name: str):
        path = self.entry(name)
        if path not in self._loaded:
            self._loaded[path] = _state_dict(path)
        if name not in self._loaded[path]:
            raise CheckpointError(
                f"'{self.where}' places tensor '{name}' in '{path}', but that file lacks it: "
                "re-download the checkpoint"
            )
        return self._loaded[path][name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._tensor(name).shape)

    def read(self, name: str) -> np.ndarray:
        return _to_numpy(self._tensor(name))


def open_pickle(path: str) -> PickleSource:
    """A pickled checkpoint: an index.json (sharded) or a single weights file."""
    if path.endswith(".index.json"):
        return PickleSource(read_weight_map(path), where=path)
    state = _state_dict(path)
    return PickleSource(dict.fromkeys(state, path), where=path, loaded={path: state})
