"""Tokenizers for checkpoints: transformers' AutoTokenizer on a directory, or the tokenizer a GGUF
file describes, rebuilt from its metadata by gguf_tokenizer.py (torch-free) and cached on disk as a
tokenizer.json."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

from lmprobe.cache import cache_root
from lmprobe.checkpoints.base import read_json
from lmprobe.errors import CheckpointError

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def _from_pretrained(location: str, **kwargs):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(location, local_files_only=True, **kwargs)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds; one message for all
        raise CheckpointError(f"cannot build the tokenizer of '{location}' ({type(e).__name__}: {e}): "
                              f"{_tokenizer_fix(e)}") from None


def _tokenizer_fix(error: Exception) -> str:
    """What to do about a tokenizer that transformers could not build from a checkpoint's files."""
    missing = getattr(error, "name", None) if isinstance(error, ImportError) else None
    if missing:
        return f"the tokenizer needs the package '{missing.split('.')[0]}': pip install {missing.split('.')[0]}"
    return ("its tokenizer files are incomplete or damaged: download the checkpoint again (for a hub model, "
            "delete its snapshot from the hub cache first)")


def directory_tokenizer(directory: str):
    """transformers' tokenizer for a local checkpoint directory."""
    if not any(os.path.isfile(os.path.join(directory, f)) for f in TOKENIZER_FILES):
        raise CheckpointError(
            f"checkpoint directory '{directory}' has no tokenizer files (looked for "
            f"{', '.join(TOKENIZER_FILES)}): a checkpoint saved without its tokenizer needs the original "
            "model's tokenizer files beside its weights (tokenizer.save_pretrained(directory))"
        )
    return _from_pretrained(directory)


def gguf_tokenizer(path: str):
    """The tokenizer stored in a GGUF file: built once from its metadata (gguf_tokenizer.py), then
    loaded from the disk cache, keyed by the file and lmprobe's builder version."""
    from lmprobe.checkpoints.gguf_tokenizer import BUILDER_VERSION, build_gguf_tokenizer

    stat = os.stat(path)
    key = f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}|lmprobe-gguf-tokenizer-{BUILDER_VERSION}"
    cached = os.path.join(cache_root(), "gguf-tokenizers", hashlib.sha256(key.encode()).hexdigest()[:24])
    tokenizer = _load_cached(cached)
    if tokenizer is None:
        tokenizer = build_gguf_tokenizer(path)
        _store(tokenizer, cached)
    return tokenizer


LOAD_ARGS = "lmprobe_load_args.json"  # what save_pretrained leaves out: add_bos_token / add_eos_token


def _load_cached(directory: str):
    """A tokenizer saved in the cache, or None when there is none or it does not load (then it is rebuilt)."""
    if not os.path.isfile(os.path.join(directory, "tokenizer.json")):
        return None
    from transformers import PreTrainedTokenizerFast

    try:
        args_path = os.path.join(directory, LOAD_ARGS)
        kwargs = read_json(args_path, "cached tokenizer arguments") if os.path.isfile(args_path) else {}
        return PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True, **kwargs)
    except Exception:  # noqa: BLE001 - a damaged cache entry only costs a rebuild
        return None


def _load_args(tokenizer) -> dict:
    """The BOS/EOS flags to pass back on load when one is on (both off: the saved post-processor says it all,
    and passing them would replace a BERT template)."""
    flags = {k: bool(getattr(tokenizer, k, False)) for k in ("add_bos_token", "add_eos_token")}
    return flags if any(flags.values()) else {}


def _store(tokenizer, target: str) -> None:
    """save_pretrained into `target` atomically; an unwritable cache only costs a reconversion."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staging = tempfile.mkdtemp(dir=os.path.dirname(target))
    except OSError:
        return
    try:
        tokenizer.save_pretrained(staging)
        with open(os.path.join(staging, LOAD_ARGS), "w", encoding="utf-8") as f:
            json.dump(_load_args(tokenizer), f)
        os.replace(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
