"""The Scorer on an encoder-decoder (a tiny random T5) against transformers: target log-likelihoods,
embeddings, generation; the same numbers on 8 devices as on 1; refusals that name what to use."""

import jax
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement
from lmprobe.errors import LmprobeError
from tests.models.parity import save_random

VOCAB = 128
EOS = 1
RNG = np.random.default_rng(0)
SOURCES = [RNG.integers(3, VOCAB, size=n).tolist() for n in (5, 40, 12, 3, 30, 1, 17, 9)]
TARGETS = [RNG.integers(3, VOCAB, size=n).tolist() + [EOS] for n in (3, 1, 20, 7, 2, 11, 4, 9)]


def save_tiny_t5(path, seed: int = 0):
    """A random Flan-style T5 (gated-GELU, dims divisible by 4) with a word-level tokenizer whose
    words are 'w3' .. 'w127' and which appends </s>, as T5's does; returns the torch model."""
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=8, relative_attention_max_distance=20,
                      feed_forward_proj="gated-gelu", decoder_start_token_id=0)
    hf = save_random(T5ForConditionalGeneration, config, path, seed)
    vocab = {"<pad>": 0, "</s>": EOS, "<unk>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", EOS)])
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(path)
    return hf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine_t5")
    return path, save_tiny_t5(path)


def _scorer(path, mesh, **kwargs):
    loaded = load(str(path), place=placement(mesh))
    return Scorer(loaded.model, loaded.tokenizer, mesh=mesh, batch_size=2, **kwargs)


@pytest.fixture(scope="module")
def one(tiny):
    return _scorer(tiny[0], make_mesh(devices=jax.devices()[:1]))


def _reference(hf, source, target):
    """transformers' per-token ln p(target | source) and its mean loss, one pair unpadded."""
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([source]), labels=torch.tensor([target]))
    lp = torch.log_softmax(out.logits[0].double(), -1)[torch.arange(len(target)), torch.tensor(target)]
    return lp.numpy(), float(out.loss)


def test_score_targets_match_transformers(tiny, one):
    hf = tiny[1]
    scores = one.score_targets(SOURCES, TARGETS)
    worst = 0.0
    for source, target, lp, nll, n in zip(SOURCES, TARGETS, scores.token_logprobs, scores.nll, scores.num_predicted):
        ref, loss = _reference(hf, source, target)
        worst = max(worst, float(np.abs(lp - ref).max()))
        assert n == len(target) and nll / n == pytest.approx(loss, abs=1e-4)
    print(f"score_targets vs transformers: max |token log-prob diff| {worst:.2e}")
    assert worst <= 1e-4
    assert one.compilations["score_targets"] <= len({(len(s), len(t)) for s, t in zip(SOURCES, TARGETS)})


def test_texts_get_the_tokenizers_eos_and_score_uses_an_empty_source(tiny, one):
    texts = [" ".join(f"w{i}" for i in t[:-1]) for t in TARGETS[:4]]
    by_text = one.score_targets(["w5 w6"] * 4, texts)
    by_ids = one.score_targets([[5, 6, EOS]] * 4, TARGETS[:4])
    for a, b in zip(by_text.token_logprobs, by_ids.token_logprobs):
        np.testing.assert_allclose(a, b, atol=1e-6)
    scores, empty = one.score(TARGETS), one.score_targets([[EOS]] * len(TARGETS), TARGETS)
    np.testing.assert_allclose(scores.nll, empty.nll, atol=1e-5)
    assert scores.nll[0] == pytest.approx(len(TARGETS[0]) * _reference(tiny[1], [EOS], TARGETS[0])[1], abs=1e-4)
    a, b = one.score_pairs(TARGETS[:4], TARGETS[4:])
    np.testing.assert_allclose(np.concatenate([a.nll, b.nll]), empty.nll, atol=1e-5)


def test_embeddings_pool_the_encoder(tiny, one):
    hf = tiny[1]
    for seq in SOURCES[:3]:
        with torch.no_grad():
            hidden = hf.encoder(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
        np.testing.assert_allclose(one.embed([seq])[0], hidden[-1][0].mean(0).numpy(), atol=1e-5)
        np.testing.assert_allclose(one.embed([seq], pooling="cls", layer=1)[0], hidden[1][0, 0].numpy(), atol=1e-5)


def test_greedy_generation_matches_transformers(tiny, one):
    hf = tiny[1]
    ours = one.generate(SOURCES, max_new_tokens=10, decode=False)
    for source, got in zip(SOURCES, ours):
        with torch.no_grad():
            ref = hf.generate(input_ids=torch.tensor([source]), do_sample=False, max_new_tokens=10,
                              eos_token_id=EOS, pad_token_id=0)[0, 1:].tolist()
        assert got == ref[:ref.index(EOS) + 1] if EOS in ref else got == ref
    assert one.generate(["w5 w6 w7"], max_new_tokens=4)[0] == one.tokenizer.decode(
        one.generate([[5, 6, 7, EOS]], max_new_tokens=4, decode=False)[0])


def test_sampling_is_seeded_and_independent_of_batch_size(one):
    kwargs = dict(max_new_tokens=8, temperature=1.0, top_k=20, seed=7, decode=False)
    outputs = one.generate(SOURCES, **kwargs)
    assert Scorer(one.model, mesh=one.mesh, batch_size=8).generate(SOURCES, **kwargs) == outputs
    assert one.generate(SOURCES, **{**kwargs, "seed": 8}) != outputs


def test_the_same_numbers_on_8_devices(tiny, one):
    eight = _scorer(tiny[0], make_mesh(model_parallel=4))
    assert len(eight.mesh.devices.flat) == 8
    for got, want in zip(eight.score_targets(SOURCES, TARGETS).token_logprobs,
                         one.score_targets(SOURCES, TARGETS).token_logprobs):
        np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(eight.embed(SOURCES), one.embed(SOURCES), atol=1e-5)
    assert eight.generate(SOURCES, max_new_tokens=6, decode=False) == one.generate(SOURCES, max_new_tokens=6,
                                                                                   decode=False)


def test_decoder_only_entry_points_refuse_with_what_to_use(one, tiny_llama_dir):
    with pytest.raises(LmprobeError, match="encoder-decoder: score it with score_targets"):
        one.next_token_stats([[5, 6]], [[-1]], [[5, 7]], [[-1]])
    with pytest.raises(LmprobeError, match="as many sources"):
        one.score_targets([[5]], [])
    with pytest.raises(LmprobeError, match="target 1 is empty"):
        one.score_targets([[5], [6]], [[7], []])
    llama = Scorer(load(str(tiny_llama_dir), tokenizer=False).model)
    with pytest.raises(LmprobeError, match="needs an encoder-decoder"):
        llama.score_targets([[5]], [[6]])
