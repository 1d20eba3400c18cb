"""Tokenizers for checkpoints: transformers' AutoTokenizer on a directory, or built from a
GGUF file's own vocabulary (a slow conversion, cached on disk as a tokenizer.json)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

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


def cache_root() -> str:
    """lmprobe's own cache: $LMPROBE_CACHE, else $XDG_CACHE_HOME/lmprobe (~/.cache/lmprobe)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("LMPROBE_CACHE") or os.path.join(xdg, "lmprobe")


def _from_pretrained(location: str, **kwargs):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(location, local_files_only=True, **kwargs)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds; one message for all
        raise CheckpointError(
            f"cannot build the tokenizer of '{location}' ({type(e).__name__}: {e}): copy the "
            "original model's tokenizer files (tokenizer.json, ...) into it"
        ) from None


def directory_tokenizer(directory: str):
    """transformers' tokenizer for a local checkpoint directory."""
    if not any(os.path.isfile(os.path.join(directory, f)) for f in TOKENIZER_FILES):
        raise CheckpointError(
            f"checkpoint directory '{directory}' has no tokenizer files (looked for "
            f"{', '.join(TOKENIZER_FILES)}): copy the original model's tokenizer files into it"
        )
    return _from_pretrained(directory)


def gguf_tokenizer(path: str):
    """The tokenizer stored in a GGUF file; converted once, then loaded from the disk cache."""
    import transformers

    stat = os.stat(path)
    key = f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    cached = os.path.join(cache_root(), "gguf-tokenizers", hashlib.sha256(key.encode()).hexdigest()[:24])
    if os.path.isfile(os.path.join(cached, "tokenizer.json")):
        return _from_pretrained(cached)
    tokenizer = _from_pretrained(os.path.dirname(path) or ".", gguf_file=os.path.basename(path))
    _store(tokenizer, cached)
    return tokenizer


def _store(tokenizer, target: str) -> None:
    """save_pretrained into `target` atomically; an unwritable cache only costs a reconversion."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staging = tempfile.mkdtemp(dir=os.path.dirname(target))
    except OSError:
        return
    try:
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
