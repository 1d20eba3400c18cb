"""The local Hugging Face hub cache and, when allowed, downloads, through huggingface_hub.

huggingface_hub reads HF_HOME / HF_HUB_CACHE / HF_HUB_OFFLINE / HF_ENDPOINT once, at import;
these are read here at call time and passed explicitly, so a changed environment counts.
"""

from __future__ import annotations

import os

from lmprobe.checkpoints.tokenizer import TOKENIZER_FILES
from lmprobe.errors import CheckpointError

CONFIG_AND_TOKENIZER = [
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",  # image models: input normalisation (image_processor.image_normalization)
    "special_tokens_map.json",
    "added_tokens.json",
    *TOKENIZER_FILES,
]
SAFETENSORS = ["model.safetensors", "model.safetensors.index.json", "model-*.safetensors"]
PICKLE = ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*.bin"]
_TRUE = {"1", "on", "yes", "true"}


def cache_dir() -> str:
    """The hub cache directory, resolved from the environment as huggingface_hub does."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return os.path.expandvars(os.path.expanduser(hub or os.path.join(home, "hub")))


def is_offline(offline: bool | None) -> bool:
    """offline if given, else whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set."""
    if offline is not None:
        return offline
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return env.strip().lower() in _TRUE


def _label(model: str, repo_id: str) -> str:
    return f"'{model}'" if model == repo_id else f"'{model}' ({repo_id})"


def not_cached(model: str, repo_id: str, reason: str) -> CheckpointError:
    return CheckpointError(
        f"model {_label(model, repo_id)} is not in the local Hugging Face cache "
        f"(HF_HUB_CACHE={cache_dir()}) and {reason}: download it on a machine with network "
        f"(hf download {repo_id}; older huggingface_hub: huggingface-cli download {repo_id}) and "
        "copy the cache, or pass a local directory"
    )


def cached_snapshot(repo_id: str, revision: str | None) -> str | None:
    """The cached snapshot directory of a hub model, or None; never touches the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return snapshot_download(
            repo_id, revision=revision, cache_dir=cache_dir(), local_files_only=True
        )
    except LocalEntryNotFoundError:
        return None
    except HFValidationError as e:
        raise CheckpointError(f"'{repo_id}' is not a valid Hugging Face hub id: {e}") from None


def download(model: str, repo_id: str, revision: str | None, *, pickle: bool = False) -> str:
    """Download config, tokenizer and weights files (pickles only if `pickle`); the snapshot
    directory. Fails fast with one clear message when the hub cannot be reached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    label = _label(model, repo_id)
    try:
        return snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache_dir(),
            allow_patterns=CONFIG_AND_TOKENIZER + (PICKLE if pickle else SAFETENSORS),
            endpoint=os.environ.get("HF_ENDPOINT") or None,
            etag_timeout=10,
        )
    except LocalEntryNotFoundError:
        raise not_cached(model, repo_id, "the hub is unreachable") from None
    except GatedRepoError:
        raise CheckpointError(
            f"model {label} is gated on the Hugging Face hub: accept its license at "
            f"https://huggingface.co/{repo_id} and log in (hf auth login, or set HF_TOKEN)"
        ) from None
    except RepositoryNotFoundError:
        raise CheckpointError(
            f"model {label} was not found on the Hugging Face hub: check the spelling, or log in "
            "(hf auth login / HF_TOKEN) if it is private"
        ) from None
    except RevisionNotFoundError:
        raise CheckpointError(
            f"revision '{revision}' of model {label} does not exist on the hub: check `revision`"
        ) from None
    except (HfHubHTTPError, OSError) as e:
        raise CheckpointError(f"downloading model {label} from the hub failed: {e}") from None
