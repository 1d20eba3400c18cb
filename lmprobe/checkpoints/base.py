"""Shared pieces of the checkpoint readers: the TensorSource protocol, a name-indexed base
class for sources, and JSON reading with one clear error."""

from __future__ import annotations

import json
import os
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from lmprobe.errors import CheckpointError

Entry = TypeVar("Entry")


class TensorSource(Protocol):
    """Weights under their Hugging Face names, in Hugging Face layout, read one at a time."""

    def names(self) -> list[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def read(self, name: str) -> np.ndarray: ...


class IndexedSource(Generic[Entry]):
    """A TensorSource over a dict {HF name: reader-specific entry}; subclasses define
    `shape` and `read` from `self.entry(name)`."""

    def __init__(self, index: dict[str, Entry], where: str):
        self._index = index
        self.where = where

    def names(self) -> list[str]:
        return list(self._index)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def entry(self, name: str) -> Entry:
        try:
            return self._index[name]
        except KeyError:
            examples = ", ".join(repr(n) for n in list(self._index)[:3])
            raise CheckpointError(
                f"tensor '{name}' is not in checkpoint '{self.where}' (it has {len(self._index)} "
                f"tensors, e.g. {examples}): the checkpoint does not match the model lmprobe built "
                "for it; check that config.json's model_type matches the weights"
            ) from None


def read_json(path: str, what: str) -> Any:
    """Parse a JSON file, raising CheckpointError naming `what` and the path if it is invalid."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{what} '{path}' is not valid JSON ({e}): re-download or repair it"
        ) from None


def read_weight_map(index_path: str) -> dict[str, str]:
    """{tensor name: shard path} from a sharded-checkpoint index (*.index.json); every shard
    it names must exist next to it."""
    index = read_json(index_path, "checkpoint index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(
            f"checkpoint index '{index_path}' has no 'weight_map' of tensor name -> shard file: "
            "re-download it"
        )
    directory = os.path.dirname(index_path)
    for shard in sorted(set(weight_map.values())):
        if not os.path.isfile(os.path.join(directory, shard)):
            raise CheckpointError(
                f"shard '{shard}' listed in '{index_path}' is missing from '{directory}': "
                "re-download the checkpoint (all shards are needed)"
            )
    return {name: os.path.join(directory, shard) for name, shard in weight_map.items()}


def listing(directory: str, most: int = 10) -> str:
    """A short, human-readable list of what a directory holds."""
    names = sorted(os.listdir(directory))
    if not names:
        return "it is empty"
    shown = ", ".join(names[:most])
    more = f", ... ({len(names) - most} more)" if len(names) > most else ""
    return f"it holds {shown}{more}"
