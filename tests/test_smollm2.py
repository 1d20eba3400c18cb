"""The embedded SmolLM2-135M GGUF: lmprobe's Flax Llama against transformers' own GGUF loading."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from lmprobe.checkpoints import load

pytestmark = pytest.mark.slow

SENTENCES = ["The capital of France is", "Label-free evaluation scores a model without a test set.", "Hi"]


@pytest.fixture(scope="module")
def ours():
    return load("smollm2-135m")


@pytest.fixture(scope="module")
def reference(smollm2_reference):
    return smollm2_reference


def test_config_and_tokenizer_match_transformers(ours, reference):
    model, tok = reference
    cfg = ours.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.vocab_size, cfg.tie_word_embeddings) == (30, 576, 9, 3, 49152, True)
    for text in SENTENCES:
        assert ours.tokenizer(text)["input_ids"] == tok(text)["input_ids"]


def test_logits_match_transformers_on_padded_batch(ours, reference):
    model, tok = reference
    tok.pad_token = tok.eos_token
    batch = tok(SENTENCES, padding=True, return_tensors="np")
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(batch["input_ids"]),
                    attention_mask=torch.tensor(batch["attention_mask"]), output_hidden_states=True)
    out = ours.model(batch["input_ids"], batch["attention_mask"], output_hidden_states=True)
    real = batch["attention_mask"].astype(bool)
    logit_diff = np.abs(np.asarray(out.logits) - ref.logits.numpy())[real].max()
    # Hidden states reach |h| ~ 1e3 (massive activations): compare relative to each layer's scale.
    hidden_diff = max(np.abs(np.asarray(out.hidden_states[i]) - h.numpy())[real].max()
                      / np.abs(h.numpy()[real]).max() for i, h in enumerate(ref.hidden_states))
    print(f"smollm2-135m: max |logit diff| {logit_diff:.2e}, "
          f"max |hidden diff| / max |hidden| {hidden_diff:.2e}")
    assert logit_diff <= 1e-3
    assert hidden_diff <= 1e-5


def greedy(loaded, prompt: str, new_tokens: int, length: int = 16) -> str:
    """Greedy continuation by full forward passes at one padded length (one compilation)."""
    ids = loaded.tokenizer(prompt)["input_ids"]
    graphdef, state = nnx.split(loaded.model)
    step = jax.jit(lambda s, x, m, n: jnp.argmax(nnx.merge(graphdef, s)(x, m).logits[0, n - 1]))
    for _ in range(new_tokens):
        n = len(ids)
        x = np.zeros((1, length), np.int32)
        x[0, :n] = ids
        ids.append(int(step(state, x, (np.arange(length) < n)[None], n)))
    return loaded.tokenizer.decode(ids)


def test_greedy_continuation_names_paris(ours):
    text = greedy(ours, "The capital of France is", 3)
    assert "Paris" in text, text
