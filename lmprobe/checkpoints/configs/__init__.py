"""The config.json files of the models the papers use, shipped so that plans work offline.

Each ``<alias>.json`` is the model's Hugging Face config.json (aliases.py maps the alias to its
hub id). Only configs ship here, never weights: through ``shipped_config`` (read by
``model_config.hf_config``) the memory plan sizes opt-13b on a laptop with no network and no checkpoint.
"""

from __future__ import annotations

import json
import os

from lmprobe.checkpoints import aliases

_DIR = os.path.dirname(os.path.abspath(__file__))


def names() -> list[str]:
    """The aliases with a shipped config, sorted."""
    return sorted(f[:-len(".json")] for f in os.listdir(_DIR) if f.endswith(".json"))


def path_of(name: str) -> str | None:
    """The shipped config file of an alias or hub id (any case), or None."""
    key = name.strip().lower()
    shipped = names()
    if key in shipped:
        return os.path.join(_DIR, f"{key}.json")
    repo = (aliases.lookup(key) or key).lower()
    for alias in shipped:
        if (aliases.lookup(alias) or "").lower() == repo:
            return os.path.join(_DIR, f"{alias}.json")
    return None


def shipped_config(name: str) -> dict | None:
    """The config.json contents shipped for ``name`` (an alias such as 'opt-13b' or a hub id such
    as 'facebook/opt-13b'), a fresh dict per call; None when lmprobe ships none."""
    path = path_of(name)
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


__all__ = ["names", "path_of", "shipped_config"]
