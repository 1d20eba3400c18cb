"""Runners of one model structure on one mesh share their jitted steps: a second Scorer of the same model
traces nothing and computes with its own weights; the steps kept hold at most SHARED_PROGRAMS programs."""

import jax
import numpy as np
from flax import nnx

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, steps
from lmprobe.engine import runner as runner_module
from lmprobe.engine.runner import Runner
from tests.engine.conftest import VOCAB

SEQS = [np.random.default_rng(0).integers(3, VOCAB, size=n).tolist() for n in (5, 40, 12, 3)]


def halved(path):
    """The tiny Llama with every parameter halved."""
    model = load(str(path), tokenizer=False).model
    nnx.update(model, jax.tree.map(lambda x: x / 2, nnx.state(model, nnx.Param)))
    return model


def test_a_second_scorer_of_the_structure_traces_nothing_and_uses_its_own_weights(tiny_llama_dir):
    one = make_mesh(devices=jax.devices()[:1])
    first = Scorer(load(str(tiny_llama_dir), tokenizer=False).model, mesh=one, batch_size=2)
    scores = first.score(SEQS)  # traced here, or by an earlier test of this model
    second = Scorer(halved(tiny_llama_dir), mesh=one, batch_size=2)
    theirs = second.score(SEQS)
    assert dict(second.compilations) == {}  # the first's programs
    other_mesh = Scorer(halved(tiny_llama_dir), mesh=make_mesh(devices=jax.devices()[:2]), batch_size=1)
    mine = other_mesh.score(SEQS)  # another mesh: programs of its own
    for a, b, c in zip(theirs.token_logprobs, mine.token_logprobs, scores.token_logprobs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
        assert not np.allclose(a, c, atol=1e-3)  # the halved weights', not the first's


def test_the_steps_used_last_are_kept_while_they_hold_at_most_shared_programs(tiny_llama_dir, monkeypatch):
    monkeypatch.setattr(runner_module, "SHARED_PROGRAMS", 2)
    mesh = make_mesh(devices=jax.devices()[:1])
    model = load(str(tiny_llama_dir), tokenizer=False).model
    ids = np.full((2, 8), 5, np.int32)

    def runner():
        return Runner(model, mesh, batch_size=2, max_tokens=None, max_length=128)

    first = runner()
    for name in ("a", "b", "c", "d"):  # steps of this test's own: a program each; making "d" drops "a"
        step = first.jit(name, steps.token_logprobs)
        step(*first.put(ids, np.ones_like(ids)))
    second = runner()
    for name in ("d", "c", "a"):  # kept, kept, gone
        second.jit(name, steps.token_logprobs)(*second.put(ids, np.ones_like(ids)))
    assert dict(second.compilations) == {"a": 1}
