"""A tiny random Llama (dimensions divisible by 4 so it shards over the 'model' axis), with a
word-level tokenizer so that text entry points work too."""

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from tests.models.parity import save_random

VOCAB = 256


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine_llama")
    save_random(LlamaForCausalLM, LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128), path)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(path)
    return path
