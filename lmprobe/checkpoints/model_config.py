"""A model argument's Hugging Face config.json, reading no weights: ``hf_config``.

Accepts what ``resolve`` accepts (path, embedded or PyPI model, alias, hub id), plus a
config.json file or a config dict; hub models fall back to the configs lmprobe ships (configs/).
"""

from __future__ import annotations

import os

from lmprobe.checkpoints import aliases, hub, levanter, maxtext, orbax_io
from lmprobe.checkpoints.base import read_json
from lmprobe.checkpoints.configs import path_of, shipped_config
from lmprobe.checkpoints.embedded import embedded_path
from lmprobe.checkpoints.gguf_io import open_gguf
from lmprobe.checkpoints.pypi_models import pypi_model_path
from lmprobe.checkpoints.resolve import HOW_TO, HUB_ID
from lmprobe.errors import CheckpointError

__all__ = ["hf_config"]


def hf_config(model: str | os.PathLike | dict, *, offline: bool | None = None,
              revision: str | None = None) -> tuple[dict, str]:
    """(config.json contents, where they came from) for a model argument, reading no weights.

    Local directory (its config.json; an Orbax checkpoint's saved config; a MaxText checkpoint's
    config.json beside it), a config.json file, a .gguf file (the config its metadata
    gives) or an embedded model; an alias or hub id: its hub-cache config.json (of ``revision``),
    else the config lmprobe ships (default revision only), else (online) config.json alone from the hub.
    """
    if isinstance(model, dict):
        config, where = dict(model), "the given config"
    else:
        name = os.fspath(model)
        path = os.path.expanduser(name)
        local = path if os.path.exists(path) else embedded_path(name) or pypi_model_path(name)
        if local is not None and revision is not None:
            raise CheckpointError(f"`revision={revision}` applies to hub models; '{name}' is a local model")
        if local is not None:
            config, where = _local_config(name, local)
        else:
            repo = aliases.lookup(name) or (name if HUB_ID.fullmatch(name) else None)
            if repo is None:
                raise CheckpointError(f"unknown model '{name}': {HOW_TO}")
            snapshot = hub.cached_snapshot(repo, revision)  # never touches the network
            if snapshot is not None and os.path.isfile(os.path.join(snapshot, "config.json")):
                where = os.path.join(snapshot, "config.json")
                config = read_json(where, "model config")
            elif revision is None and (shipped := shipped_config(name)) is not None:
                config, where = shipped, path_of(name)
            elif not hub.is_offline(offline):
                where = _download_config(name, repo, revision)
                config = read_json(where, "model config")
            else:
                raise hub.not_cached(name, repo, f"revision '{revision}' is not cached (offline mode is on)"
                                     if revision else "lmprobe ships no config for it (offline mode is on)")
    if not isinstance(config, dict) or not config.get("model_type"):
        raise CheckpointError(f"model config from {where} has no 'model_type': add the architecture "
                              "(e.g. \"model_type\": \"llama\") or re-download it")
    return config, where


def _local_config(name: str, local: str) -> tuple[dict, str]:
    if os.path.isdir(local):
        step = orbax_io.find(local)
        if step is not None:  # the config saved with the step
            return step.meta["hf_config"], os.path.join(step.path, orbax_io.META)
        found = maxtext.find_config(local) or levanter.find_config(local)
        if found is not None:
            return found
        path = os.path.join(local, "config.json")
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint directory '{local}' has no config.json: pass a Hugging "
                                  "Face model directory, a config.json file or a .gguf file")
        return read_json(path, "model config"), path
    if local.lower().endswith(".json"):
        return read_json(local, "model config"), local
    if local.lower().endswith(".gguf"):
        config, _ = open_gguf(local)  # metadata only; tensors are read lazily, and never here
        return config, local
    raise CheckpointError(f"model path '{name}' is neither a directory, a config.json nor a .gguf file")


def _download_config(name: str, repo: str, revision: str | None) -> str:
    """config.json alone, downloaded into the hub cache; its path."""
    from huggingface_hub import hf_hub_download  # imported on use, as in hub.py: a slow import

    try:
        return hf_hub_download(repo, "config.json", revision=revision, cache_dir=hub.cache_dir())
    except Exception as e:  # network, gated or missing repository: one line
        raise hub.not_cached(name, repo, f"its config.json could not be downloaded ({type(e).__name__})") from None
