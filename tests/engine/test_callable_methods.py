"""The methods run on a CallableLM and give the results of the lmprobe module it wraps: BYOD (every
metric: packed pairs, memo, sampled generation), SynTextBench, SynBench's continuous inputs, and
lm-eval's packed continuation scoring."""

import jax
import numpy as np
import pytest

from lmprobe.checkpoints import load
from lmprobe.data.corpus import Corpus
from lmprobe.engine import Scorer, make_mesh, placement
from lmprobe.methods import byod, syntextbench
from tests.engine.test_callable import wrap
from tests.methods.test_byod import PARAGRAPHS, PROFANITY
from tests.methods.test_byod import _tokenizer as byod_tokenizer


@pytest.fixture(scope="module")
def scorers(tiny_llama_dir):
    mesh = make_mesh(devices=jax.devices()[:2])
    model = load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False).model
    tokenizer = byod_tokenizer(bos=True)
    few = dict(mesh=mesh, batch_size=4, buckets=(32, 128))  # few shapes: few compilations
    return Scorer(model, tokenizer, **few), Scorer(wrap(model), tokenizer, **few)


def test_byod_every_metric(scorers):
    config = byod.Config(max_examples=3, max_new_tokens=4)
    module, wrapped = (byod.run(s, Corpus("tiny", PARAGRAPHS), config, model_name="tiny", profanity=PROFANITY)
                       for s in scorers)
    expected, got = module.to_dict(), wrapped.to_dict()
    assert set(got) == set(expected)
    scored = [m for m in byod.METRICS if isinstance(expected[m].get("score"), float)]
    assert len(scored) >= 5, expected
    for metric in scored:
        assert got[metric]["n"] == expected[metric]["n"]
        assert got[metric]["score"] == pytest.approx(expected[metric]["score"], rel=1e-4, abs=1e-6), metric


def test_syntextbench(scorers):
    config = syntextbench.Config(n=syntextbench.MIN_N, levels=(0.5,), baselines=False, icl_examples=0)
    tasks = syntextbench.build_tasks(config)
    module, wrapped = (syntextbench.run(s, config, model_name="tiny", tasks=[tasks]) for s in scorers)
    assert wrapped.score.value == pytest.approx(module.score.value, abs=1e-6)
    for mine, theirs in zip(wrapped.levels, module.levels):
        assert mine["accuracy"] == theirs["accuracy"]
        assert mine["margin"] == pytest.approx(theirs["margin"], rel=1e-4)


def test_synbench_inputs_embeds(scorers):
    x = np.random.default_rng(0).normal(size=(4, 8, 64)).astype(np.float32)
    module, wrapped = (s.embed_inputs(x, pooling="mean") for s in scorers)
    np.testing.assert_allclose(wrapped, module, atol=2e-5)


def test_lm_eval_continuations_unpacked(scorers):
    context = list(range(10, 22))
    pairs = [(context, [30, 31]), (context, [40]), (context, [50, 51, 52]), (context[:5], [7])]
    module, wrapped = (s.score_continuations(pairs, limit=64) for s in scorers)
    np.testing.assert_allclose([lp for lp, _ in wrapped], [lp for lp, _ in module], atol=2e-5)
    assert [g for _, g in wrapped] == [g for _, g in module]
