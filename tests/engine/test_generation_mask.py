"""Constrained generation: ``Scorer.generate(allowed=...)`` emits only allowed ids (and EOS)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement
from lmprobe.engine.generation import restrict
from lmprobe.errors import LmprobeError
from tests.engine.conftest import VOCAB

RNG = np.random.default_rng(1)
PROMPTS = [RNG.integers(3, VOCAB, size=n).tolist() for n in (5, 40, 12, 3, 17, 9)]
SAMPLED = dict(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=3, decode=False)


@pytest.fixture(scope="module")
def one(tiny_llama_dir):
    model = load(str(tiny_llama_dir), place=placement(make_mesh(devices=jax.devices()[:1])), tokenizer=False).model
    return Scorer(model, mesh=make_mesh(devices=jax.devices()[:1]), batch_size=4)


def _mask(ids):
    mask = np.zeros(VOCAB, bool)
    mask[list(ids)] = True
    return mask


def _logits(scorer, seq):
    return np.asarray(scorer.model(jnp.asarray([seq])).logits[0], np.float64)


@pytest.mark.parametrize("kwargs", [dict(max_new_tokens=12, decode=False), SAMPLED])
def test_every_generated_id_is_allowed_per_row(one, kwargs):
    sets = [set(range(10, 30)), set(range(100, 140, 3))]
    masks = [_mask(sets[i % 2]) for i in range(len(PROMPTS))]
    out = one.generate(PROMPTS, allowed=masks, **kwargs)  # no tokenizer, no eos_id: rows run to the end
    assert all(len(o) == 12 for o in out)
    for i, o in enumerate(out):
        assert set(o) <= sets[i % 2], (i, o)
    ended = one.generate(PROMPTS, allowed=masks, eos_id=2, **kwargs)  # EOS 2 lies outside both sets
    for i, o in enumerate(ended):
        assert set(o) <= sets[i % 2] | {2} and (2 not in o or o[-1] == 2), (i, o)


def test_greedy_with_a_mask_is_the_best_allowed_id(one):
    allowed = _mask(range(50, 90))
    prompt = PROMPTS[1]
    ids = list(prompt)
    for _ in range(4):
        logits = _logits(one, ids)[-1]
        ids.append(int(np.argmax(np.where(allowed, logits, -np.inf))))
    assert one.generate([prompt], max_new_tokens=4, allowed=allowed, decode=False) == [ids[len(prompt):]]


@pytest.mark.parametrize("kwargs", [dict(max_new_tokens=12, decode=False), SAMPLED])
def test_a_mask_of_all_ids_changes_nothing(one, kwargs):
    full = np.ones(VOCAB, bool)
    assert one.generate(PROMPTS, allowed=full, **kwargs) == one.generate(PROMPTS, **kwargs)


def test_masked_sampling_is_seeded_and_independent_of_batch_size(one):
    masks = [_mask(range(3, 60)) if i % 2 else _mask(range(60, 200)) for i in range(len(PROMPTS))]
    out = one.generate(PROMPTS, allowed=masks, **SAMPLED)
    single = Scorer(one.model, mesh=one.mesh, batch_size=1)
    assert single.generate(PROMPTS, allowed=masks, **SAMPLED) == out
    assert one.generate(PROMPTS, allowed=masks, **SAMPLED) == out
    assert one.generate(PROMPTS, allowed=masks, **{**SAMPLED, "seed": 4}) != out


def test_new_masks_reuse_the_compiled_program(one):
    kwargs = dict(max_new_tokens=6, temperature=1.0, seed=0, decode=False)
    one.generate(PROMPTS[:4], allowed=_mask(range(3, 40)), **kwargs)
    before = one.compilations["generate"]
    out = one.generate(PROMPTS[:4], allowed=_mask(range(200, 256)), **kwargs)
    assert one.compilations["generate"] == before
    assert all(200 <= t < 256 for o in out for t in o)


def test_eos_stays_allowed_and_ends_rows():
    logits = jnp.asarray([[0.0, 5.0, 1.0, 2.0]])
    kept = np.asarray(restrict(logits, jnp.asarray([[False, False, False, True]]), 1))
    np.testing.assert_array_equal(kept, [[-np.inf, 5.0, -np.inf, 2.0]])
    assert restrict(logits, None, 1) is logits


def test_eos_outside_the_mask_still_ends_a_row(one):
    prompt = PROMPTS[0]
    first = one.generate([prompt], max_new_tokens=1, decode=False)[0][0]
    out = one.generate([prompt], max_new_tokens=5, allowed=_mask([7]), eos_id=first, decode=False)
    assert out == [[first]]  # the unconstrained argmax is the EOS: allowed, emitted, the row stops


def test_bad_masks(one):
    with pytest.raises(LmprobeError, match="has shape"):
        one.generate(PROMPTS[:1], allowed=np.ones(VOCAB + 1, bool))
    with pytest.raises(LmprobeError, match="2 masks for 1 prompts"):
        one.generate(PROMPTS[:1], allowed=[np.ones(VOCAB, bool)] * 2)
    with pytest.raises(LmprobeError, match="allows no token"):
        one.generate(PROMPTS[:1], allowed=np.zeros(VOCAB, bool))
