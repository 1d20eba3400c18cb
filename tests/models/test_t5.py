"""T5 family (v1.0; v1.1 / Flan-T5) against transformers' T5ForConditionalGeneration / T5EncoderModel."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import T5Config, T5EncoderModel, T5ForConditionalGeneration
from transformers.models.t5.modeling_t5 import T5Attention

from lmprobe.checkpoints import load
from lmprobe.engine import seq2seq
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.models import t5
from tests.models.parity import padded_batch, save_random

VOCAB = 101
TINY = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
            relative_attention_num_buckets=8, relative_attention_max_distance=20, decoder_start_token_id=0)
# v1.0: ReLU, tied head on scaled outputs. Flan (v1.1): gated-GELU and an untied lm_head, with the
# config.json that transformers 4 wrote (tie_word_embeddings false) or that transformers 5 writes.
VARIANTS = {"v1_0": ("relu", None), "flan_v4_config": ("gated-gelu", "v4"), "flan_v5_config": ("gated-gelu", "v5")}


def save_t5(path, variant, seed=0, **changes):
    """A random T5ForConditionalGeneration saved to ``path``, as transformers loads it back."""
    act, untied = VARIANTS[variant]
    save_random(T5ForConditionalGeneration, T5Config(**{**TINY, **changes}, feed_forward_proj=act), path, seed)
    if untied:
        file = f"{path}/model.safetensors"
        with safe_open(file, "pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        head = torch.randn(VOCAB, TINY["d_model"], generator=torch.Generator().manual_seed(seed))
        tensors["lm_head.weight"] = head / TINY["d_model"] ** 0.5
        save_file(tensors, file, metadata={"format": "pt"})
        config = json.load(open(f"{path}/config.json"))
        config.update(tie_word_embeddings=False, scale_decoder_outputs=False)
        if untied == "v4":
            del config["scale_decoder_outputs"]
        json.dump(config, open(f"{path}/config.json", "w"))
    return T5ForConditionalGeneration.from_pretrained(path).eval()


def _max_diff(ours, ref, real):
    return float(np.abs(np.asarray(ours) - ref.numpy())[real].max())


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (64, 256), (10, 7)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_buckets_match_transformers(num_buckets, max_distance, bidirectional):
    relative = np.arange(-600, 600)
    ref = T5Attention._relative_position_bucket(torch.tensor(relative), bidirectional=bidirectional,
                                                num_buckets=num_buckets, max_distance=max_distance)
    ours = t5.relative_buckets(jnp.asarray(relative), bidirectional=bidirectional, num_buckets=num_buckets,
                               max_distance=max_distance)
    np.testing.assert_array_equal(np.asarray(ours), ref.numpy())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_transformers(tmp_path, variant):
    hf = save_t5(tmp_path, variant)
    loaded = load(str(tmp_path), tokenizer=False)
    assert loaded.family.is_encoder_decoder and (loaded.model.lm_head is None) == (variant == "v1_0")
    model = loaded.model
    ids, mask = padded_batch(VOCAB, lengths=(9, 5, 1))
    labels, target_mask = padded_batch(VOCAB, lengths=(4, 7, 2), seed=1)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), labels=torch.tensor(labels),
                 decoder_attention_mask=torch.tensor(target_mask), output_hidden_states=True)
    enc = model.encode(ids, mask, output_hidden_states=True)
    real = mask.astype(bool)
    assert enc.hidden_states.shape[0] == len(ref.encoder_hidden_states)
    diffs = {"encoder_hidden": max(_max_diff(enc.hidden_states[i], h, real)
                                   for i, h in enumerate(ref.encoder_hidden_states))}
    shifted = seq2seq.shift_right(model, jnp.asarray(labels))
    dec = model.decode(shifted, enc.last_hidden_state, mask, target_mask, output_hidden_states=True)
    real = target_mask.astype(bool)
    diffs["decoder_hidden"] = max(_max_diff(dec.hidden_states[i], h, real)
                                  for i, h in enumerate(ref.decoder_hidden_states))
    diffs["logits"] = _max_diff(dec.logits, ref.logits, real)
    print(f"t5/{variant}: {diffs}")
    assert max(diffs.values()) <= 1e-4


def test_encoder_model_checkpoint_builds_the_encoder_only(tmp_path):
    config = T5Config(**TINY, feed_forward_proj="gated-gelu")
    hf = save_random(T5EncoderModel, config, tmp_path)
    model = load(str(tmp_path), tokenizer=False).model
    assert model.decoder is None
    ids, mask = padded_batch(VOCAB, lengths=(7, 3))
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    out = model(ids, mask, output_hidden_states=True)  # __call__: the encoder, where an encoder is expected
    real = mask.astype(bool)
    assert max(_max_diff(out.hidden_states[i], h, real) for i, h in enumerate(ref.hidden_states)) <= 1e-4
    with pytest.raises(LmprobeError, match="no decoder"):
        model.decode(ids, out.last_hidden_state, mask)


@pytest.fixture(scope="module")
def flan(tmp_path_factory):
    path = tmp_path_factory.mktemp("t5")
    hf = save_t5(path, "flan_v4_config", seed=3)
    return hf, load(str(path), tokenizer=False).model


def test_left_padded_source_matches_right_padded(flan):
    _, model = flan
    ids, mask = padded_batch(VOCAB, lengths=(9, 4))
    left_ids, left_mask = np.zeros_like(ids), np.zeros_like(mask)
    for row, n in enumerate(mask.sum(1)):
        left_ids[row, -n:], left_mask[row, -n:] = ids[row, :n], 1
    right, left = model.encode(ids, mask).last_hidden_state, model.encode(left_ids, left_mask).last_hidden_state
    targets = jnp.asarray(padded_batch(VOCAB, lengths=(5, 5), seed=2)[0])
    for row, n in enumerate(mask.sum(1)):
        np.testing.assert_allclose(np.asarray(left)[row, -n:], np.asarray(right)[row, :n], atol=1e-5)
    np.testing.assert_allclose(np.asarray(model.decode(targets, left, left_mask).logits),
                               np.asarray(model.decode(targets, right, mask).logits), atol=1e-4)


def test_kv_cache_decoding_matches_full_decoder_pass(flan):
    _, model = flan
    ids, mask = padded_batch(VOCAB, lengths=(9, 5))
    targets, _ = padded_batch(VOCAB, lengths=(8, 8), seed=4)
    encoded = model.encode(ids, mask).last_hidden_state
    full = np.asarray(model.decode(targets, encoded, mask).logits)
    step = nnx.jit(lambda m, x, c, i: m.decode(x, None, mask, cache=c, cache_index=i))
    cache = model.init_cache(encoded, targets.shape[1])
    out = step(model, targets[:, :3], cache, jnp.int32(0))  # a prefill of 3 tokens, then one at a time
    np.testing.assert_allclose(np.asarray(out.logits), full[:, :3], atol=1e-4)
    for index in range(3, targets.shape[1]):
        out = step(model, targets[:, index:index + 1], out.cache, jnp.int32(index))
        np.testing.assert_allclose(np.asarray(out.logits)[:, 0], full[:, index], atol=1e-4)


@pytest.mark.parametrize("variant", ["v1_0", "flan_v4_config"])
def test_greedy_generation_matches_transformers(tmp_path, variant):
    hf = save_t5(tmp_path, variant, seed=5, num_decoder_layers=2)  # transformers' generate: as many layers
    model = load(str(tmp_path), tokenizer=False).model
    ids, mask = padded_batch(VOCAB, lengths=(9, 6, 3), seed=6)
    with torch.no_grad():
        ref = hf.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False,
                          max_new_tokens=12, eos_token_id=1, pad_token_id=0).numpy()
    run = nnx.jit(lambda m, *a: seq2seq.generate(m, *a, max_new_tokens=12, top_k=0, greedy=True))
    ours = np.asarray(run(model, ids, mask, np.arange(3, dtype=np.int32), np.uint32(0), np.float32(1),
                          np.float32(1), np.int32(1)))
    for row in range(3):
        want = ref[row, 1:].tolist()  # transformers' rows start with decoder_start_token_id
        want = want[:want.index(1) + 1] if 1 in want else want
        assert ours[row, :len(want)].tolist() == want, (row, ours[row], want)


def test_config_errors_name_the_field():
    config = T5Config(**TINY).to_dict()
    with pytest.raises(CheckpointError, match="feed_forward_proj"):
        t5.T5Config.from_hf({**config, "feed_forward_proj": "fancy-gelu"})
    with pytest.raises(CheckpointError, match="relative_attention_max_distance"):
        t5.T5Config.from_hf({**config, "relative_attention_max_distance": 4})
