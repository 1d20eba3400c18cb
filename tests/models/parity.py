"""Parity harness: a tiny random Hugging Face model (torch) against lmprobe's Flax model.

The HF model is given random values for *every* parameter (norm scales and biases included), so
that a wrong or missing name mapping cannot hide behind default initialisation; it is saved as
safetensors and loaded back through lmprobe's real loader.
"""

from __future__ import annotations

import numpy as np
import torch

from lmprobe.checkpoints import load


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every parameter a random value of sensible scale."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[-1]))
    return model.eval()


def save_random(model_cls, config, path, seed: int = 0) -> torch.nn.Module:
    """Build ``model_cls(config)`` with random weights, save it to ``path`` as safetensors."""
    torch.manual_seed(seed)
    model = randomize(model_cls(config), seed)
    model.save_pretrained(path, safe_serialization=True)
    return model


def padded_batch(vocab_size: int, lengths=(9, 5, 1), seed: int = 0, left=False):
    """Random ids [B, T] and an attention mask for sequences of different lengths, padded."""
    rng = np.random.default_rng(seed)
    t = max(lengths)
    ids = rng.integers(3, vocab_size, size=(len(lengths), t))
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        if left:
            mask[row, t - n:] = 1
        else:
            mask[row, :n] = 1
    return ids, mask


def max_diffs(path, hf_model, ids, mask, **hf_kwargs) -> dict:
    """Max |difference| of logits (if any) and of every hidden state, over real tokens only."""
    loaded = load(str(path), tokenizer=False)
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                       output_hidden_states=True, **hf_kwargs)
    out = loaded.model(np.asarray(ids), np.asarray(mask), output_hidden_states=True)
    real = mask.astype(bool)
    diffs = {}
    if getattr(ref, "logits", None) is not None:
        diffs["logits"] = float(np.abs(np.asarray(out.logits) - ref.logits.numpy())[real].max())
    ours = np.asarray(out.hidden_states)
    assert ours.shape[0] == len(ref.hidden_states), (ours.shape, len(ref.hidden_states))
    diffs["hidden"] = max(float(np.abs(ours[i] - h.numpy())[real].max())
                          for i, h in enumerate(ref.hidden_states))
    diffs["last_hidden"] = float(np.abs(np.asarray(out.last_hidden_state) - ref.hidden_states[-1].numpy())[real].max())
    return diffs


def check_left_padding(model, ids, mask):
    """Outputs at real tokens of a left-padded batch equal those of each sequence alone."""
    padded = model(ids, mask, output_hidden_states=True)
    for row, n in enumerate(mask.sum(1)):
        alone = model(ids[row:row + 1, -n:], output_hidden_states=True)
        np.testing.assert_allclose(np.asarray(padded.hidden_states)[:, row, -n:],
                                   np.asarray(alone.hidden_states)[:, 0], atol=1e-5)
        if padded.logits is not None:
            np.testing.assert_allclose(np.asarray(padded.logits)[row, -n:],
                                       np.asarray(alone.logits)[0], atol=1e-5)


def check_kv_cache(model, vocab_size, prompt: int = 6):
    """Prefill left-padded prompts, then decode token by token under jit: logits equal the full pass's."""
    import jax.numpy as jnp
    from flax import nnx

    from lmprobe.models.base import empty_cache

    ids, mask = padded_batch(vocab_size, lengths=(10, 7), left=True)
    full = np.asarray(model(ids, mask).logits)
    cache = empty_cache(model.config, ids.shape[0], ids.shape[1], jnp.float32)
    step = nnx.jit(lambda m, x, c, i: m(x, mask, cache=c, cache_index=i))
    out = step(model, ids[:, :prompt], cache, jnp.int32(0))
    real = mask[:, :prompt].astype(bool)
    np.testing.assert_allclose(np.asarray(out.logits)[real], full[:, :prompt][real], atol=1e-4)
    for index in range(prompt, ids.shape[1]):
        out = step(model, ids[:, index:index + 1], out.cache, jnp.int32(index))
        np.testing.assert_allclose(np.asarray(out.logits)[:, 0], full[:, index], atol=1e-4)


def jitted_encoder(model):
    """An encoder's forward pass (all hidden states) under one jit: one compile per shape, shared by
    the checks below."""
    from flax import nnx

    forward = nnx.jit(lambda m, ids, mask, embeds: m(ids, mask, inputs_embeds=embeds, output_hidden_states=True))
    return lambda ids, mask=None, *, inputs_embeds=None, output_hidden_states=True: forward(
        model, ids, mask, inputs_embeds)


def check_right_padding(model, ids, mask):
    """Hidden states at real tokens of a right-padded batch equal those of each sequence alone."""
    padded = np.asarray(model(ids, mask).hidden_states)
    for row, n in enumerate(mask.sum(1)):
        alone = np.asarray(model(ids[row:row + 1, :n]).hidden_states)
        np.testing.assert_allclose(padded[:, row, :n], alone[:, 0], atol=1e-5)


def check_inputs_embeds(model, forward, ids, mask):
    """``forward`` of ``model.embed(ids)`` as inputs_embeds gives the hidden states of ``ids``."""
    from_ids = forward(ids, mask).hidden_states
    from_embeds = forward(None, mask, inputs_embeds=model.embed(ids)).hidden_states
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(from_embeds)[:, real], np.asarray(from_ids)[:, real], atol=1e-5)
