"""A tiny random Llama (dimensions divisible by 4 so it shards over the 'model' axis)."""

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from tests.models.parity import save_random

VOCAB = 256


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine_llama")
    save_random(LlamaForCausalLM, LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128), path)
    return path
