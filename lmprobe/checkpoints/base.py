"""Shared pieces of the checkpoint readers: the TensorSource protocol, a name-indexed base
class for sources, and JSON reading with one clear error."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
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


def beside_config(path: str, located: str | None, kind: str, source: Callable) -> tuple | None:
    """(HF config, TensorSource, tokenizer directory) of a checkpoint that carries no HF config
    (MaxText, Levanter) found at ``located`` for ``path`` (None: ``path`` is no such checkpoint):
    the nearest config.json (``nearest_config``), ``source(located, config)`` reading its weights."""
    if located is None:
        return None
    found = nearest_config(path)
    if found is None:
        raise CheckpointError(
            f"'{path}' is a {kind} checkpoint ({located}), which has no Hugging Face config: put the model's "
            "config.json (and tokenizer files) in that directory or in the run directory above it")
    config, where = found
    return config, source(located, config), os.path.dirname(where)


def layout_of(layouts: dict, config: dict, kind: str, where: str):
    """``layouts[config['model_type']]`` for a ``kind`` checkpoint (MaxText, Levanter) at ``where``, or
    a CheckpointError naming the model types lmprobe reads in that layout."""
    layout = layouts.get(config.get("model_type"))
    if layout is None:
        raise CheckpointError(f"{kind} checkpoint '{where}': its config.json has model_type "
                              f"{config.get('model_type')!r}; lmprobe reads {kind} layouts of {', '.join(layouts)}")
    return layout


def nearest_config(path: str, parents: int = 3) -> tuple[dict, str] | None:
    """(config.json, its path): the nearest config.json in ``path`` or its ``parents`` parents, or None."""
    path = os.path.abspath(path)
    for _ in range(parents + 1):
        candidate = os.path.join(path, "config.json")
        if os.path.isfile(candidate):
            return read_json(candidate, "model config"), candidate
        path = os.path.dirname(path)
    return None


def read_json(path: str, what: str) -> Any:
    """Parse a JSON file, raising CheckpointError naming `what` and the path if it is invalid."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{what} '{path}' is not valid JSON ({e}): re-download or repair it"
        ) from None


def reason(error: BaseException, most: int = 300) -> str:
    """'Type: first line' of the innermost exception behind ``error`` (a reader's own error, e.g.
    TensorStore's, which names the file and the byte range), at most ``most`` characters."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        error = inner
    text = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
    return text if len(text) <= most else text[:most - 3] + "..."


@contextlib.contextmanager
def unreadable(what: str):
    """A reader's own error on damaged files (orbax's, TensorStore's: a truncated array, a missing
    chunk) as one CheckpointError naming ``what`` was read ("Orbax checkpoint 'DIR'") and the cause."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as e:  # whatever the reader raises: its innermost message names the array and the bytes
        raise CheckpointError(f"{what} cannot be read ({reason(e)}): it is incomplete or damaged; re-save it") from e


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
