"""A CallableLM wrapping an lmprobe Llama gives the module's results for every Scorer query, through
the engine's fallbacks (unpacked rows, generation by recomputation), each a notice once; a callable
whose outputs have the wrong shape or dtype is refused with one clear error."""

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lmprobe.checkpoints import load
from lmprobe.engine import HiddenMemo, Scorer, make_mesh, placement, steps
from lmprobe.errors import LmprobeError
from lmprobe.log import Notice
from lmprobe.models import CallableLM, family_of
from tests.engine.conftest import VOCAB

RNG = np.random.default_rng(1)
PREFIX = RNG.integers(3, VOCAB, size=8).tolist()
A = [PREFIX + RNG.integers(3, VOCAB, size=n).tolist() for n in (5, 6, 8, 7, 5, 6)]  # 13..16 tokens: one bucket
B = [a[:-2] + RNG.integers(3, VOCAB, size=2).tolist() for a in A]  # shares all but the last 2 tokens with A


def wrap(model, *, hidden=True, inputs_embeds=True, max_length=128):
    """``model`` as a CallableLM: apply(params, ids, mask) -> logits (and every layer's states)."""
    graphdef, params = nnx.split(model)

    def outputs(out):
        return (out.logits, out.hidden_states) if hidden else out.logits

    def apply(p, ids, mask):
        return outputs(nnx.merge(graphdef, p)(ids, mask, output_hidden_states=hidden))

    def embed_apply(p, x, mask):
        return outputs(nnx.merge(graphdef, p)(inputs_embeds=x, attention_mask=mask, output_hidden_states=True))

    return CallableLM(apply, params, max_length=max_length, embed_apply=embed_apply if inputs_embeds else None)


@pytest.fixture(scope="module")
def pair(tiny_llama_dir):
    """(the Llama's Scorer, its CallableLM's Scorer, log records of the latter's fallbacks), on 2 devices."""
    mesh = make_mesh(devices=jax.devices()[:2])
    model = load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False).model
    return Scorer(model, mesh=mesh, batch_size=4), Scorer(wrap(model), mesh=mesh, batch_size=4)


@contextlib.contextmanager
def logged():
    """The notices lmprobe gives inside the block (lmprobe.log.notice: warnings), every emission counted."""
    messages = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", Notice)
        try:
            yield messages
        finally:
            messages += [str(w.message) for w in caught if issubclass(w.category, Notice)]


def close(x, y, atol=2e-5):
    for a, b in zip(x, y, strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=atol)


def test_config_is_inferred_from_one_abstract_call(pair):
    ref, wrapped = pair
    config = wrapped.config
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (VOCAB, 64, 2)
    assert wrapped.max_length == 128 and wrapped.is_decoder and wrapped.identity["family"] == "CallableLM"
    family = family_of(wrapped.model)
    assert (family.packing, family.kv_cache, family.lm_head) == (False, False, False)


def test_scores_pairs_and_apply_match_the_module(pair):
    ref, wrapped = pair
    with logged() as messages:
        close(wrapped.score(A).token_logprobs, ref.score(A).token_logprobs)
        for mine, theirs in zip(wrapped.score_pairs(A, B), ref.score_pairs(A, B)):
            close(mine.token_logprobs, theirs.token_logprobs)
        wrapped.score_pairs(B, A)
        nll = lambda model, ids, mask: -(steps.token_logprobs(model, ids, mask) * jnp.roll(mask, -1, 1)).sum(1)  # noqa
        np.testing.assert_allclose(np.asarray(wrapped.apply("nll", nll, A)), np.asarray(ref.apply("nll", nll, A)),
                                   atol=2e-4)
    said = [m for m in messages if "no packed rows" in m]
    assert len(said) == 1 and "one sequence per row" in said[0]


def test_next_token_stats_with_token_set_top_k_and_memo(pair):
    ref, wrapped = pair
    a_pos, b_pos = [[-1, 2]] * len(A), [[-1, 3]] * len(B)
    expected = ref.next_token_stats(A, a_pos, B, b_pos, token_set=[3, 7, 11], top_k=3)
    memo = HiddenMemo()
    for _ in range(2):  # the second call reads every state from the memo
        got = wrapped.next_token_stats(A, a_pos, B, b_pos, token_set=[3, 7, 11], top_k=3, memo=memo)
        assert set(got) == set(expected)
        for key in expected:
            close(got[key], expected[key])
    assert memo.get(A[0], [len(A[0]) - 1]).shape == (1, VOCAB)  # a callable's memo holds its logits


def test_embeddings_for_each_pooling_and_layer(pair):
    ref, wrapped = pair
    for pooling in ("mean", "cls", "last", "first_last_avg"):
        close(wrapped.embed(A, pooling=pooling), ref.embed(A, pooling=pooling))
    close(wrapped.embed(A, layer=1), ref.embed(A, layer=1))
    x = RNG.normal(size=(3, 8, 64)).astype(np.float32)
    close(wrapped.embed_inputs(x, pooling="last"), ref.embed_inputs(x, pooling="last"))


def test_generation_by_recomputation_gives_the_kv_cached_tokens(pair):
    ref, wrapped = pair
    allowed = np.zeros(VOCAB, bool)
    allowed[[5, 9, 40, 41, 200]] = True
    cases = [dict(), dict(temperature=1.0, top_k=8, seed=3), dict(temperature=0.7, top_p=0.9, allowed=allowed)]
    with logged() as messages:
        for kwargs in cases:
            got = wrapped.generate(A, max_new_tokens=5, decode=False, eos_id=2, **kwargs)
            assert got == ref.generate(A, max_new_tokens=5, decode=False, eos_id=2, **kwargs)
        if "allowed" in cases[-1]:
            assert {t for row in got for t in row} <= {5, 9, 40, 41, 200, 2}
        mine, theirs = HiddenMemo(), HiddenMemo()
        assert wrapped.generate(A[:2], max_new_tokens=3, memo=mine) == ref.generate(A[:2], max_new_tokens=3,
                                                                                     memo=theirs)
    said = [m for m in messages if "no KV cache" in m]
    assert len(said) == 1 and "recomputes" in said[0]
    # the memo holds the states the head reads: the logits of each prompt position
    positions = range(len(A[1]))
    logits = ref.model.logits(jnp.asarray(theirs.get(A[1], positions)))
    np.testing.assert_allclose(mine.get(A[1], positions), np.asarray(logits), atol=2e-5)


def test_a_logits_only_callable_scores_but_refuses_embeddings(tiny_llama_dir, pair):
    ref, _ = pair
    model = load(str(tiny_llama_dir), tokenizer=False).model
    scorer = Scorer(wrap(model, hidden=False, inputs_embeds=False), mesh=ref.mesh, batch_size=4)
    assert scorer.config.hidden_size is None
    close(scorer.score(A[:2]).token_logprobs, ref.score(A[:2]).token_logprobs)
    with pytest.raises(LmprobeError, match=r"embeddings need hidden states.*return \(logits, hidden"):
        scorer.embed(A)
    with pytest.raises(LmprobeError, match="embeddings need hidden states"):
        scorer.embed_inputs(np.zeros((1, 4, 64)))


def test_last_layer_only_refuses_other_layers_and_embed_inputs_without_embed_apply(tiny_llama_dir, pair):
    ref, _ = pair
    graphdef, params = nnx.split(load(str(tiny_llama_dir), tokenizer=False).model)

    def apply(p, ids, mask):
        out = nnx.merge(graphdef, p)(ids, mask)
        return out.logits, out.last_hidden_state

    scorer = Scorer(CallableLM(apply, params, max_length=64), mesh=ref.mesh, batch_size=4)
    assert scorer.config.num_hidden_layers is None and scorer.max_length == 64
    close(scorer.embed(A[:2], pooling="last"), ref.embed(A[:2], pooling="last"))
    with pytest.raises(LmprobeError, match="needs every layer's hidden states"):
        scorer.embed(A[:2], pooling="first_last_avg")
    with pytest.raises(LmprobeError, match="needs embed_apply="):
        scorer.embed_inputs(np.zeros((1, 4, 64)))


@pytest.mark.parametrize("apply, expected", [
    (lambda p, ids, mask: p["w"][ids].sum(-1), r"returned float32\[2, 8\]; expected logits \[2, 8, V\]"),
    (lambda p, ids, mask: p["w"][ids].astype(jnp.int32), r"returned int32\[2, 8, 16\]"),
    (lambda p, ids, mask: (p["w"][ids], p["w"][ids][:, :4]),
     r"returned \(float32\[2, 8, 16\], float32\[2, 4, 16\]\).*hidden \[2, 8, D\]"),
    (lambda p, ids, mask: (p["w"][ids], p["w"][ids], p["w"]), r"returned \(float32\[2, 8, 16\], .*; expected"),
    (lambda p, ids, mask: p["missing"][ids], r"apply\(params, int32\[2, 8\], int32\[2, 8\]\) fails: KeyError"),
])
def test_bad_callables_get_one_clear_error(apply, expected):
    with pytest.raises(LmprobeError, match=expected):
        CallableLM(apply, {"w": jnp.ones((VOCAB, 16))}, max_length=32)


def test_bad_embed_apply_and_context_are_refused():
    params = {"w": jnp.ones((VOCAB, 16))}
    with pytest.raises(LmprobeError, match=r"embed_apply\(params, float32\[2, 8, 16\].*with V = 256"):
        CallableLM(lambda p, ids, m: (jax.nn.one_hot(ids, VOCAB), p["w"][ids]), params, max_length=32,
                   embed_apply=lambda p, x, m: (x, x))
    with pytest.raises(LmprobeError, match="context length"):
        CallableLM(lambda p, ids, m: p["w"][ids], params, max_length=0)


def positional(params, ids, mask):
    """A model with a learned position table of 32 rows (logits, final states)."""
    h = params["w"][ids] + params["pos"][:ids.shape[1]]
    return h @ params["w"].T, h


def test_a_context_longer_than_the_model_takes_is_refused_at_construction():
    params = {"w": jnp.ones((VOCAB, 16)), "pos": jnp.zeros((32, 16))}
    assert CallableLM(positional, params, max_length=32).config.max_position_embeddings == 32
    with pytest.raises(LmprobeError, match=r"max_length=48\): apply fails on 48 tokens .*the longest it takes is "
                                           r"32 tokens: pass max_length=32"):
        CallableLM(positional, params, max_length=48)


class Foreign(nnx.Module):
    """A user's own NNX decoder (no lmprobe family): embeddings, a norm, an LM head."""

    def __init__(self, rngs, outputs="both"):
        self.embed = nnx.Embed(VOCAB, 16, rngs=rngs)
        self.pos = nnx.Param(0.1 * jax.random.normal(rngs.params(), (32, 16)))
        self.norm = nnx.RMSNorm(16, rngs=rngs)
        self.head = nnx.Linear(16, VOCAB, rngs=rngs)
        self.outputs = outputs

    def __call__(self, input_ids, attention_mask):
        h = self.norm(self.embed(input_ids) + self.pos[:input_ids.shape[1]])
        logits = self.head(h)
        return {"both": (logits, h), "logits": logits, "ids": input_ids}[self.outputs]


def test_a_foreign_nnx_module_runs_as_a_callable_lm(pair):
    ref, _ = pair
    module = Foreign(nnx.Rngs(0))
    scorer = Scorer(module, mesh=ref.mesh, batch_size=4, max_length=32)
    assert scorer.is_decoder and scorer.config.hidden_size == 16 and scorer.identity["family"] == "CallableLM"
    ids = np.asarray(A[0])
    logp = jax.nn.log_softmax(module(ids[None], np.ones((1, len(ids)), np.int32))[0][0], -1)
    close(scorer.score(A[:1]).token_logprobs, [np.asarray(logp)[np.arange(len(ids) - 1), ids[1:]]], atol=1e-5)
    traced = dict(scorer.compilations)
    module.head.bias[...] = module.head.bias[...] + jnp.arange(VOCAB) / VOCAB  # a trainer's step, in place
    scorer.update(module, step=1)  # the module itself, as a ProxyCallback passes it
    logp = jax.nn.log_softmax(module(ids[None], np.ones((1, len(ids)), np.int32))[0][0], -1)
    close(scorer.score(A[:1]).token_logprobs, [np.asarray(logp)[np.arange(len(ids) - 1), ids[1:]]], atol=1e-5)
    assert dict(scorer.compilations) == traced
    assert scorer.embed(A[:2]).shape == (2, 16)


def test_a_foreign_module_gets_one_line_saying_what_to_return(pair):
    ref, _ = pair
    with pytest.raises(LmprobeError, match=r"Scorer\(Foreign\(...\)\): .*no max_length .*pass max_length="):
        Scorer(Foreign(nnx.Rngs(0)))
    with pytest.raises(LmprobeError, match=r"Foreign.__call__\(int32\[2, 8\], int32\[2, 8\]\) returned int32.*needs "
                                           r"__call__\(input_ids, attention_mask\) returning logits"):
        Scorer(Foreign(nnx.Rngs(0), outputs="ids"), max_length=32)
    with pytest.raises(LmprobeError, match="the longest it takes is 32 tokens"):
        Scorer(Foreign(nnx.Rngs(0)), max_length=64)
    with pytest.raises(LmprobeError, match="graph differs"):
        Scorer(Foreign(nnx.Rngs(0)), mesh=ref.mesh, max_length=32).update(Foreign(nnx.Rngs(0), outputs="logits"))
