"""Tiny random stand-ins of the embedded models: SmolLM2's and MiniLM's architecture and tokenizer, two
layers of width 64, random weights (seeded).

For tests whose subject is what a front end or the engine does with a model (steps and shapes compiled,
files written, processes agreeing), not what the model knows: they load and run in a fraction of the real
models' time, and tokenize text exactly as the real ones do, so batch geometry stays realistic. Tests of
what a model knows, and the user jobs, keep the real models.
"""

from __future__ import annotations

import os
import shutil

from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

from lmprobe.checkpoints.model_config import hf_config
from lmprobe.checkpoints.resolve import resolve
from lmprobe.checkpoints.tokenizer import gguf_tokenizer
from tests.models.parity import save_random

SIZE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}


def tiny_smollm2(path: str) -> str:
    """A 2-layer Llama with SmolLM2-135M's vocabulary, tied embedding and tokenizer (chat template included)."""
    config = {k: v for k, v in hf_config("smollm2-135m")[0].items() if k in LlamaConfig().to_dict()}
    save_random(LlamaForCausalLM, LlamaConfig(**{**config, **SIZE, "num_key_value_heads": 2, "head_dim": 16}),
                path)
    gguf_tokenizer(resolve("smollm2-135m").location).save_pretrained(path)
    return str(path)


MINILM_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "modules.json",
                "sentence_bert_config.json", "1_Pooling")


def tiny_minilm(path: str) -> str:
    """A 2-layer BERT with all-MiniLM-L6-v2's vocabulary, tokenizer and sentence-transformers pooling."""
    source = resolve("minilm-l6").location
    config = {k: v for k, v in hf_config("minilm-l6")[0].items() if k in BertConfig().to_dict()}
    # MiniLM's MLP width kept: the CPU batch geometry of encoders is sized by it (engine.batching.cpu_token_budget)
    save_random(BertModel, BertConfig(**{**config, **SIZE, "intermediate_size": config["intermediate_size"]}), path)
    for name in MINILM_FILES:
        copy = shutil.copytree if os.path.isdir(os.path.join(source, name)) else shutil.copy
        copy(os.path.join(source, name), os.path.join(path, name))
    return str(path)
