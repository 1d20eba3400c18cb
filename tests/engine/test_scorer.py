"""The Scorer's entry points: against direct computation, and the same on 8 devices as on 1."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy.spatial.distance import jensenshannon
from scipy.special import log_softmax
from scipy.stats import entropy

from lmprobe.checkpoints import load
from lmprobe.engine import HiddenMemo, Scorer, make_mesh, placement
from lmprobe.engine import scorer as scorer_module
from lmprobe.engine.batching import LENGTH_BUCKETS
from lmprobe.engine.generation import sample
from lmprobe.errors import LmprobeError
from tests.engine.conftest import VOCAB

RNG = np.random.default_rng(0)
SEQS = [RNG.integers(3, VOCAB, size=n).tolist() for n in (5, 40, 12, 3, 70, 33, 17, 9, 100, 2, 64)]


def _scorer(path, mesh, **kwargs):
    model = load(str(path), place=placement(mesh), tokenizer=False).model
    return Scorer(model, mesh=mesh, batch_size=4, **kwargs)


@pytest.fixture(scope="module")
def one(tiny_llama_dir):
    return _scorer(tiny_llama_dir, make_mesh(devices=jax.devices()[:1]))


@pytest.fixture(scope="module")
def eight(tiny_llama_dir):
    return _scorer(tiny_llama_dir, make_mesh(model_parallel=4))


def _logits(scorer, seq):
    return np.asarray(scorer.model(jnp.asarray([seq])).logits[0], np.float64)


def test_token_logprobs_match_direct_log_softmax(one):
    scores = one.score(SEQS)
    for seq, lp, nll in zip(SEQS, scores.token_logprobs, scores.nll):
        ref = log_softmax(_logits(one, seq), axis=-1)[np.arange(len(seq) - 1), seq[1:]]
        np.testing.assert_allclose(lp, ref, atol=2e-5)
        assert nll == pytest.approx(-ref.sum(), abs=1e-3)
    np.testing.assert_allclose(scores.mean_nll, scores.nll / (np.array([len(s) for s in SEQS]) - 1))


def test_next_token_stats_match_scipy(one):
    a, b = SEQS[:4], SEQS[4:8]
    a_pos, b_pos = [[-1, 0]] * 4, [[-1, 1]] * 4
    token_set = [3, 7, 11]
    stats = one.next_token_stats(a, a_pos, b, b_pos, token_set=token_set, top_k=3)
    for i in range(4):
        for j in range(2):
            la = _logits(one, a[i])[a_pos[i][j]]
            lb = _logits(one, b[i])[b_pos[i][j]]
            p, q = np.exp(log_softmax(la)), np.exp(log_softmax(lb))
            assert stats["jsd"][i][j] == pytest.approx(jensenshannon(p, q) ** 2, abs=1e-5)
            assert stats["kl_ab"][i][j] == pytest.approx(entropy(p, q), abs=1e-5)
            assert stats["entropy_b"][i][j] == pytest.approx(entropy(q), abs=1e-5)
            assert stats["mass_a"][i][j] == pytest.approx(p[token_set].sum(), rel=1e-4)
            assert stats["topk_b"][i][j].tolist() == np.argsort(-q)[:3].tolist()


def test_embeddings_match_direct_pooling(one):
    seq = SEQS[2]
    out = one.model(jnp.asarray([seq]), output_hidden_states=True, compute_logits=False)
    hs = np.asarray(out.hidden_states[:, 0])
    np.testing.assert_allclose(one.embed([seq], pooling="mean")[0], hs[-1].mean(0), atol=1e-5)
    np.testing.assert_allclose(one.embed([seq], pooling="last")[0], hs[-1][-1], atol=1e-5)
    np.testing.assert_allclose(one.embed([seq], pooling="cls", layer=1)[0], hs[1][0], atol=1e-5)
    np.testing.assert_allclose(one.embed([seq], pooling="first_last_avg")[0],
                               (0.5 * (hs[1] + hs[-1])).mean(0), atol=1e-5)
    embeds = np.asarray(one.model.embed(jnp.asarray([seq])))
    np.testing.assert_allclose(one.embed_inputs(embeds)[0], hs[-1].mean(0), atol=1e-5)


def test_every_api_gives_the_same_numbers_on_8_devices(one, eight):
    assert len(eight.mesh.devices.flat) == 8
    for got, want in zip(eight.score(SEQS).token_logprobs, one.score(SEQS).token_logprobs):
        np.testing.assert_allclose(got, want, atol=1e-5)
    args = (SEQS[:5], [[-1]] * 5, SEQS[5:10], [[-2]] * 5)
    for key, values in one.next_token_stats(*args, token_set=[4, 5]).items():
        np.testing.assert_allclose(np.stack(eight.next_token_stats(*args, token_set=[4, 5])[key]),
                                   np.stack(values), atol=1e-5, err_msg=key)
    for pooling in ("mean", "last", "first_last_avg"):
        np.testing.assert_allclose(eight.embed(SEQS, pooling=pooling), one.embed(SEQS, pooling=pooling), atol=1e-5)
    x = np.random.default_rng(1).normal(size=(6, 8, 64)).astype(np.float32)
    np.testing.assert_allclose(eight.embed_inputs(x), one.embed_inputs(x), atol=1e-5)
    kwargs = dict(max_new_tokens=6, decode=False)
    assert eight.generate(SEQS, **kwargs) == one.generate(SEQS, **kwargs)
    kwargs.update(temperature=0.9, top_p=0.9, seed=3)
    assert eight.generate(SEQS, **kwargs) == one.generate(SEQS, **kwargs)


def test_mixed_lengths_compile_once_per_bucket(tiny_llama_dir):
    scorer = _scorer(tiny_llama_dir, make_mesh(devices=jax.devices()[:1]))
    seqs = [RNG.integers(3, VOCAB, size=n).tolist() for n in RNG.integers(2, 128, size=40)]
    scorer.score(seqs)
    buckets = {b.shape for b in scorer.runner.batches(scorer.encode(seqs))}
    lengths = {length for _, length in buckets}
    assert lengths <= set(LENGTH_BUCKETS) and len(lengths) >= 6
    assert scorer.compilations["score"] == len(buckets) <= 2 * len(lengths)  # a full and a partial batch per bucket
    scorer.score(seqs[::-1])
    assert scorer.compilations["score"] == len(buckets)


def test_greedy_generation_is_argmax_and_stops_at_eos(one):
    prompt = SEQS[1]
    ids = list(prompt)
    for _ in range(5):
        ids.append(int(np.argmax(_logits(one, ids)[-1])))
    assert one.generate([prompt], max_new_tokens=5, decode=False) == [ids[len(prompt):]]
    eos = ids[len(prompt) + 1]
    assert one.generate([prompt], max_new_tokens=5, eos_id=eos, decode=False) == [ids[len(prompt):len(prompt) + 2]]
    top1 = one.generate([prompt], max_new_tokens=5, temperature=1.0, top_k=1, decode=False)
    assert top1 == [ids[len(prompt):]]


def test_sampling_is_seeded_and_independent_of_batch_size(one):
    kwargs = dict(max_new_tokens=8, temperature=1.0, seed=7, decode=False)
    single = Scorer(one.model, mesh=one.mesh, batch_size=1)
    outputs = one.generate(SEQS, **kwargs)
    assert single.generate(SEQS, **kwargs) == outputs
    assert one.generate(SEQS, **{**kwargs, "seed": 8}) != outputs
    assert len({tuple(o) for o in outputs}) > 1


@pytest.mark.parametrize("top_k, top_p, expected", [
    (0, 1.0, [0.5, 0.3, 0.1, 0.06, 0.04]),
    (3, 1.0, [5 / 9, 3 / 9, 1 / 9, 0, 0]),  # top-k, renormalised
    (3, 0.7, [5 / 8, 3 / 8, 0, 0, 0]),  # then the nucleus of the top-k distribution (HF's order)
    (0, 0.85, [5 / 9, 3 / 9, 1 / 9, 0, 0]),
])
def test_sampling_draws_from_the_filtered_distribution(top_k, top_p, expected):
    logits = jnp.log(jnp.asarray([0.5, 0.3, 0.1, 0.06, 0.04])) * 2.0  # temperature 2 undoes the x2
    keys = jax.random.split(jax.random.key(0), 40_000)
    draws = jax.vmap(lambda k: sample(k, logits, 2.0, top_k, top_p))(keys)
    np.testing.assert_allclose(np.bincount(np.asarray(draws), minlength=5) / len(keys), expected, atol=0.01)


def test_bad_input(one):
    assert one.score([]).token_logprobs == [] and one.generate([]) == []
    assert one.embed([]).shape == (0, 64) and one.next_token_stats([], [], [], []) == {}
    with pytest.raises(LmprobeError, match=f"input 1 has token id {VOCAB}.*outside the vocabulary"):
        one.score([[1, 2], [3, VOCAB]])
    long = [list(range(3, 200))]
    truncating = Scorer(one.model, mesh=one.mesh)
    assert len(truncating.score(long).token_logprobs[0]) == 127 and truncating.truncated == 1
    strict = Scorer(one.model, mesh=one.mesh, truncate=False)
    with pytest.raises(LmprobeError, match="input 0 has 197 tokens, more than the 128 that fit the model's context"):
        strict.score(long)


def test_texts_go_through_the_tokenizer(tiny_llama_dir):
    scorer = Scorer.load(str(tiny_llama_dir), batch_size=2)
    texts = ["w3 w4 w5 w6", "w10 w11"]
    np.testing.assert_allclose(scorer.score(texts).nll, scorer.score([[3, 4, 5, 6], [10, 11]]).nll, atol=1e-5)
    (text,) = scorer.generate(["w3 w4"], max_new_tokens=3, eos_id=-1)
    assert len(text.split()) == 3 and all(w.startswith("w") or w in ("<pad>", "<s>", "</s>") for w in text.split())


def test_generation_fills_a_learned_position_table_to_the_end(tmp_path):
    """A prompt whose bucket (64) plus new tokens would pass GPT-2's 64 positions still generates."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from tests.models.parity import save_random

    save_random(GPT2LMHeadModel, GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64), tmp_path)
    scorer = Scorer(load(str(tmp_path), tokenizer=False).model, mesh=make_mesh(devices=jax.devices()[:1]))
    prompt = list(range(3, 43))  # 40 tokens: bucket 64, but 40 + 10 slots fit in 64 positions
    (out,) = scorer.generate([prompt], max_new_tokens=10, decode=False, eos_id=-1)
    assert len(out) == 10 and scorer.truncated == 0


def test_apply_returns_rows_in_input_order(tiny_llama_dir):
    scorer = _scorer(tiny_llama_dir, make_mesh(devices=jax.devices()[:2]))
    seqs = [RNG.integers(3, VOCAB, size=n).tolist() for n in (5, 40, 3, 17, 9)]
    masked_sums = scorer.apply("masked_sum", lambda model, ids, mask: (ids * mask).sum(1), seqs)
    np.testing.assert_array_equal(np.asarray(masked_sums), [sum(s) for s in seqs])
    with pytest.raises(LmprobeError, match="no inputs"):
        scorer.apply("masked_sum", lambda model, ids, mask: ids, [])


def test_pairs_with_shared_prefixes_match_direct_logits(one):
    x = SEQS[4]
    a = [x[:30], x[:20], x[:10], SEQS[1]]
    b = [x[:12] + SEQS[2], x[:20] + [5, 6], x[:10], SEQS[2]]  # shared prefix, x + trigger, same, none
    a_pos, b_pos = [[-1, 11, 5]] * 4, [[-1, 11, 5]] * 4
    a_pos[2] = b_pos[2] = [-1, 9, 5]
    a_pos[3] = b_pos[3] = [-1, 0, 5]
    stats = one.next_token_stats(a, a_pos, b, b_pos)
    for i in range(4):
        for j in range(3):
            p = np.exp(log_softmax(_logits(one, a[i])[a_pos[i][j]]))
            q = np.exp(log_softmax(_logits(one, b[i])[b_pos[i][j]]))
            assert stats["jsd"][i][j] == pytest.approx(jensenshannon(p, q) ** 2, abs=1e-5)
            assert stats["entropy_a"][i][j] == pytest.approx(entropy(p), abs=1e-5)
            assert stats["entropy_b"][i][j] == pytest.approx(entropy(q), abs=1e-5)
    assert stats["jsd"][2].max() < 1e-6  # identical inputs


def test_pairs_too_long_for_one_row_get_a_row_each(tiny_llama_dir):
    scorer = _scorer(tiny_llama_dir, make_mesh(devices=jax.devices()[:1]), max_length=40)
    a, b = [SEQS[1][:30], SEQS[1][:5]], [SEQS[1][:10] + SEQS[5][:25], SEQS[1][:5] + [7]]  # 30 + 25 > 40
    packed = scorer.score_pairs(a, b)
    separate = scorer.score(a + b)
    for got, want in zip(packed[0].token_logprobs + packed[1].token_logprobs, separate.token_logprobs):
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_memo_runs_each_input_once(one):
    memo, last = HiddenMemo(), [[-1]] * 3
    a, b, c = SEQS[:3], SEQS[3:6], SEQS[6:9]
    one.next_token_stats(a, last, b, last, memo=memo)
    ran = []
    batches = one.runner.batches
    one.runner.batches = lambda seqs, **kwargs: ran.append([tuple(s) for s in seqs]) or batches(seqs, **kwargs)
    try:
        second = one.next_token_stats(a, last, c, last, memo=memo)
    finally:
        del one.runner.batches
    assert sorted(ran[0]) == sorted(tuple(s) for s in c)  # the a's came from the memo
    fresh = one.next_token_stats(a, last, c, last)
    for key in ("jsd", "entropy_a", "entropy_b"):
        np.testing.assert_allclose(np.concatenate(second[key]), np.concatenate(fresh[key]), atol=1e-5)


def test_generation_prefill_fills_the_memo(one):
    """Prompt states from the generation prefill serve later queries, the prompts' own prefixes too."""
    memo = HiddenMemo()
    prompts = SEQS[1:4]
    one.generate(prompts, max_new_tokens=3, memo=memo)
    a = [p[: len(p) // 2 + 1] for p in prompts]  # prefixes of the prompts, asked at their last token
    ran = []
    batches = one.runner.batches
    one.runner.batches = lambda seqs, **kwargs: ran.append(seqs) or batches(seqs, **kwargs)
    try:
        cached = one.next_token_stats(a, [[-1, 0]] * 3, prompts, [[-1, 1]] * 3, memo=memo)
    finally:
        del one.runner.batches
    assert ran == []
    fresh = one.next_token_stats(a, [[-1, 0]] * 3, prompts, [[-1, 1]] * 3)
    for key in ("jsd", "entropy_a", "entropy_b"):
        np.testing.assert_allclose(np.concatenate(cached[key]), np.concatenate(fresh[key]), atol=1e-5)


def _logged(scorer, events, specs=None):
    """Record each batch placed on the mesh ('put') and each readback ('fetch', batches), on ``scorer``."""
    put, fetch = scorer.runner.put, scorer.runner.fetch

    def logged_put(*arrays):
        events.append("put")
        return put(*arrays)

    def logged_fetch(outputs):
        events.append(("fetch", len(outputs)))
        if specs is not None:
            specs.extend(leaf.sharding.spec for leaf in jax.tree.leaves(outputs))
        return fetch(outputs)

    scorer.runner.put, scorer.runner.fetch = logged_put, logged_fetch


def _every_entry_point(scorer):
    seqs = SEQS * 2
    x = np.random.default_rng(1).normal(size=(10, 8, 64)).astype(np.float32)
    return {
        "score": lambda: scorer.score(seqs).token_logprobs,
        "score_pairs": lambda: [s.token_logprobs for s in scorer.score_pairs(seqs[:11], seqs[11:])],
        "next_token_stats": lambda: scorer.next_token_stats(
            seqs[:11], [[-1, 0]] * 11, seqs[11:], [[-1, 1]] * 11, token_set=[4], top_k=2
        ),
        "embed": lambda: scorer.embed(seqs),
        "embed_inputs": lambda: scorer.embed_inputs(x),
        "generate": lambda: scorer.generate(seqs, max_new_tokens=3, temperature=0.7, decode=False, memo=HiddenMemo()),
    }


def _assert_same(got, want):
    """Equal to the last bit, through lists, tuples and dicts."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _assert_same(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    else:
        np.testing.assert_array_equal(got, want)


def test_batches_are_dispatched_before_any_is_read_back_and_read_back_once(tiny_llama_dir):
    """Batch k+1 goes to the device before batch k comes back: one readback per call (two for
    next_token_stats: hidden states, then statistics), after every batch of it was placed."""
    scorer = _scorer(tiny_llama_dir, make_mesh(devices=jax.devices()[:1]))
    scorer.batch_size = 2
    events = []
    _logged(scorer, events)
    for name, call in _every_entry_point(scorer).items():
        events.clear()
        call()
        fetches = [i for i, e in enumerate(events) if e != "put"]
        stages = 2 if name == "next_token_stats" else 1
        assert len(fetches) == stages and fetches[-1] == len(events) - 1, (name, events)
        first = fetches[0]
        assert first >= 2 and events[first] == ("fetch", first), (name, events)  # several batches, all in flight


def test_reading_back_early_keeps_a_bounded_lag_and_the_same_numbers(tiny_llama_dir):
    """With no room for results on device, batch k is read back only after batch k + lookahead
    was dispatched; reading every batch back at once (lookahead 0) is the batch-by-batch
    reference: every entry point gives the same bits either way."""
    scorer = _scorer(tiny_llama_dir, make_mesh(devices=jax.devices()[:1]))
    scorer.batch_size = 2
    pipelined = {name: call() for name, call in _every_entry_point(scorer).items()}
    scorer.readback_bytes, scorer.lookahead = 0, 2
    events = []
    _logged(scorer, events)
    scorer.score(SEQS * 2)
    dispatched = read = 0
    for e in events:
        if e == "put":
            dispatched += 1
        else:
            read += e[1]
            assert dispatched >= min(read + scorer.lookahead, len([x for x in events if x == "put"])), events
    assert read == dispatched and sum(e != "put" for e in events) > 2
    scorer.lookahead = 0  # batch by batch: dispatch, read back, dispatch the next
    events.clear()
    scorer.score(SEQS * 2)
    assert events == ["put", ("fetch", 1)] * (len(events) // 2)
    for name, call in _every_entry_point(scorer).items():
        _assert_same(call(), pipelined[name])


def test_step_outputs_stay_sharded_over_data_until_the_readback(tiny_llama_dir):
    scorer = _scorer(tiny_llama_dir, make_mesh(model_parallel=2))  # 4 data x 2 model
    events, specs = [], []
    _logged(scorer, events, specs)
    for call in _every_entry_point(scorer).values():
        call()
    assert specs and all(spec == jax.sharding.PartitionSpec("data") for spec in specs), set(specs)
    out = scorer.apply("masked_sum", lambda model, ids, mask: (ids * mask).sum(1), SEQS)
    assert out.sharding.is_fully_replicated  # left on device, readable by every process


def test_batch_size_is_per_data_parallel_device(tiny_llama_dir, monkeypatch):
    said = []
    monkeypatch.setattr(scorer_module, "main_print", lambda *args, **_: said.append(" ".join(map(str, args))))
    monkeypatch.setattr(scorer_module, "BATCH_LINES", set())
    scorer = Scorer.load(str(tiny_llama_dir), model_parallel=2, batch_size=3, dtype="auto")  # 4 data x 2 model
    assert "batch: 3 per device x 4 data-parallel devices = 12 sequences per batch" in said
    Scorer.load(str(tiny_llama_dir), model_parallel=2, batch_size=3, dtype="auto")  # a second model: said once
    assert len([line for line in said if line.startswith("batch: ")]) == 1
    assert scorer.mesh.shape["data"] == 4
    seqs = [s[:10] for s in SEQS if len(s) >= 10] * 3  # 21 sequences of 10 tokens: one bucket
    assert [b.shape[0] for b in scorer.runner.batches(seqs)] == [12, 12]  # 12 rows, then 9 padded to 3 per device
    assert scorer.runner.rows(scorer.batch_size) == 12
    scorer.max_tokens = 24  # per device: 2 rows of 12 tokens (bucket 12)
    assert [b.shape[0] for b in scorer.runner.batches(seqs)] == [8, 8, 8]
    assert {v.dtype for v in jax.tree.leaves(nnx.state(scorer.model, nnx.Param))} == {jnp.dtype("float32")}
    bf16 = Scorer.load(str(tiny_llama_dir), dtype="bfloat16")
    assert {v.dtype for v in jax.tree.leaves(nnx.state(bf16.model, nnx.Param))} == {jnp.dtype("bfloat16")}


def test_identity_strategy_and_revision(tiny_llama_dir, one):
    f32 = Scorer.load(str(tiny_llama_dir), dtype="float32", strategy="tp", model_parallel=2)
    bf16 = Scorer.load(str(tiny_llama_dir), dtype="bfloat16")
    assert f32.strategy == "tp" and bf16.strategy == "fsdp" and one.strategy is None
    about = f32.identity
    assert about["name"] == str(tiny_llama_dir) and about["family"] == "Llama" and about["model_type"] == "llama"
    assert about["dtype"] == about["param_dtype"] == "float32" and about["variants"] == []
    assert about["checkpoint"]["weights_sha256"] == bf16.identity["checkpoint"]["weights_sha256"]
    assert bf16.identity["dtype"] == "bfloat16" and bf16.identity != about
    assert one.identity["checkpoint"] is None and one.identity["param_dtype"] == "float32"  # built directly
    with pytest.raises(LmprobeError, match="revision 'v1' was given for the local model"):
        Scorer.load(str(tiny_llama_dir), revision="v1")  # passed on to checkpoint resolution
