"""Every model family runs sharded on the 8-device mesh and gives the one-device numbers."""

import jax
import numpy as np
import pytest
import transformers as tf
from flax import nnx

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement
from tests.models.parity import padded_batch, save_random

# Widths divisible by 4, so that heads, MLP and vocabulary really split over the 'model' axis.
FAMILIES = {
    "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=4,
                                                  num_key_value_heads=2)),
    "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "gpt_neo": (tf.GPTNeoForCausalLM, tf.GPTNeoConfig(vocab_size=128, hidden_size=32, num_layers=2, num_heads=4,
                                                      attention_types=[[["global", "local"], 1]], window_size=4,
                                                      max_position_embeddings=64)),
    "gpt_neox": (tf.GPTNeoXForCausalLM, tf.GPTNeoXConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                         num_hidden_layers=2, num_attention_heads=4)),
    "opt": (tf.OPTForCausalLM, tf.OPTConfig(vocab_size=128, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                            num_attention_heads=4, max_position_embeddings=64)),
    "bert": (tf.BertModel, tf.BertConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4)),
    "distilbert": (tf.DistilBertModel, tf.DistilBertConfig(vocab_size=128, dim=32, hidden_dim=64, n_layers=2,
                                                           n_heads=4)),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_sharded_forward_matches_one_device(tmp_path, family):
    cls, config = FAMILIES[family]
    save_random(cls, config, tmp_path)
    ids, mask = padded_batch(128, lengths=(9, 5, 1, 7))
    outputs = []
    for mesh in (make_mesh(devices=jax.devices()[:1]), make_mesh(model_parallel=4)):
        model = load(str(tmp_path), place=placement(mesh), tokenizer=False).model
        scorer = Scorer(model, mesh=mesh, batch_size=4)
        seqs = [row[m.astype(bool)].tolist() for row, m in zip(ids, mask)]
        outputs.append(scorer.embed(seqs, pooling="mean"))
        if scorer.is_decoder:
            outputs.append(np.concatenate(scorer.score(seqs).token_logprobs))
    half = len(outputs) // 2
    for one, eight in zip(outputs[:half], outputs[half:]):
        np.testing.assert_allclose(eight, one, atol=1e-5)
    layer_kernels = [v.get_value() for path, v in nnx.to_flat_state(nnx.state(model))
                     if path[-1] == "kernel" and v.get_value().ndim == 3]
    assert layer_kernels
    for kernel in layer_kernels:  # each of the 8 devices holds a slice, not a copy
        assert len(kernel.sharding.device_set) == 8
        assert all(s.data.size < kernel.size for s in kernel.addressable_shards)


def _pairs():
    rng = np.random.default_rng(1)
    x = [rng.integers(3, 128, size=n).tolist() for n in (12, 7, 9, 20)]
    a = [x[0], x[1], x[2], x[3][:5]]
    b = [x[0][:6] + x[3][:8],  # shared prefix of 6, then different suffixes
         x[1] + [5, 9, 11],  # a is a prefix of b (x and x + trigger)
         x[2],  # identical
         x[0][:3]]  # nothing shared
    return a, b


@pytest.mark.parametrize("family", sorted(f for f in FAMILIES if f not in ("bert", "distilbert")))
def test_packed_pairs_match_separate_sequences(tmp_path, family):
    """A shared prefix computed once (and sequences packed side by side) changes no number,
    with local attention windows (gpt_neo: 4 tokens) measured in positions, not slots."""
    cls, config = FAMILIES[family]
    save_random(cls, config, tmp_path)
    scorer = Scorer(load(str(tmp_path), tokenizer=False).model, batch_size=4)
    a, b = _pairs()
    packed_a, packed_b = scorer.score_pairs(a, b)
    separate = scorer.score(a + b)
    for got, want in zip(packed_a.token_logprobs + packed_b.token_logprobs, separate.token_logprobs):
        np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(np.concatenate([packed_a.nll, packed_b.nll]), separate.nll, atol=1e-4)
