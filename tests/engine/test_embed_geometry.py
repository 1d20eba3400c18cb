"""The embedding geometry of encoders on CPU: a token budget by the model's MLP width and finer length
buckets, the same embeddings as the runner's plain geometry to float rounding; nothing changes for
decoders or where the user set a token budget."""

import jax
import numpy as np
import pytest
from transformers import BertConfig, BertModel

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement
from lmprobe.engine.batching import (
    CPU_ACTIVATION_BYTES,
    FINE_LENGTH_BUCKETS,
    LENGTH_BUCKETS,
    MIN_CPU_TOKENS,
    bucket_length,
    cpu_token_budget,
)
from tests.models.parity import save_random

RNG = np.random.default_rng(0)
VOCAB = 131
SEQS = [RNG.integers(3, VOCAB, size=n).tolist() for n in RNG.integers(2, 300, size=60)]


def test_token_budget_keeps_the_widest_activation_in_cache():
    assert cpu_token_budget(1536) == 512  # all-MiniLM-L6-v2's MLP
    assert cpu_token_budget(3072) == cpu_token_budget(4096) == 256  # BERT-base, BERT-large
    assert cpu_token_budget(1 << 20) == MIN_CPU_TOKENS
    for width in (64, 384, 1536, 3072, 4096, 11008):
        budget = cpu_token_budget(width)
        assert budget & (budget - 1) == 0
        assert budget == MIN_CPU_TOKENS or budget * width * 4 <= CPU_ACTIVATION_BYTES < 2 * budget * width * 4


def test_fine_buckets_hold_the_plain_ones_and_pad_at_most_a_fifth():
    assert set(LENGTH_BUCKETS) <= set(FINE_LENGTH_BUCKETS)
    assert all(b % 4 == 0 for b in FINE_LENGTH_BUCKETS)
    assert max(bucket_length(n, FINE_LENGTH_BUCKETS) / n for n in range(13, 4000)) <= 1.25  # from 13 tokens on


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("wide_bert")
    save_random(BertModel, BertConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=4096, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=320), path)
    model = load(str(path), place=placement(make_mesh(devices=jax.devices()[:1])), tokenizer=False).model
    return Scorer(model, mesh=make_mesh(devices=jax.devices()[:1]), batch_size=16)


def test_an_encoder_on_cpu_embeds_within_its_budget_on_fine_buckets(encoder):
    assert encoder.embed_geometry() == {"max_tokens": 256, "buckets": FINE_LENGTH_BUCKETS, "fill": True}
    batches = encoder.runner.batches(SEQS, **encoder.embed_geometry())
    assert all(b.shape[0] * b.shape[1] <= 256 or b.shape[0] == 1 for b in batches)
    assert all(b.shape[0] <= encoder.batch_size for b in batches)
    assert {b.shape[1] for b in batches} <= set(FINE_LENGTH_BUCKETS)
    assert len({b.shape for b in batches}) == len({b.shape[1] for b in batches})  # one shape per bucket
    encoder.max_tokens = 1024  # the user's budget wins, on the plain buckets
    try:
        assert encoder.embed_geometry() == {}
    finally:
        encoder.max_tokens = None


def test_the_new_geometry_moves_embeddings_by_float_rounding_only(encoder):
    new = encoder.embed(SEQS, pooling="first_last_avg")
    encoder.embed_batching = "runner"
    try:
        old = encoder.embed(SEQS, pooling="first_last_avg")
    finally:
        encoder.embed_batching = "auto"
    np.testing.assert_allclose(new, old, rtol=1e-5, atol=1e-5)


def test_decoders_keep_the_runner_geometry(tiny_llama_dir):
    mesh = make_mesh(devices=jax.devices()[:1])
    model = load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False).model
    assert Scorer(model, mesh=mesh, batch_size=4).embed_geometry() == {}
