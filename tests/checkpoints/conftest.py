"""Fixtures for the checkpoint tests: tiny Hugging Face directories written on the fly, and an
environment that can never reach the network or the user's caches."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

TINY_CONFIG = {
    "model_type": "llama",
    "vocab_size": 10,
    "hidden_size": 4,
    "intermediate_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def tiny_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "model.embed_tokens.weight": rng.standard_normal((10, 4)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((4, 4)).astype(np.float16),
        "model.norm.weight": np.ones(4, np.float32),
    }


def write_model_dir(directory, tensors=None, config=TINY_CONFIG) -> str:
    """config.json + model.safetensors in `directory`; returns it as a str."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    save_file(tiny_tensors() if tensors is None else tensors, os.path.join(directory, "model.safetensors"))
    return str(directory)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """No test touches ~/.cache or the network: caches in tmp, hub endpoint a closed port."""
    root = tmp_path_factory.mktemp("env")
    monkeypatch.setenv("HF_HOME", str(root / "hf_home"))
    monkeypatch.setenv("LMPROBE_CACHE", str(root / "lmprobe"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
