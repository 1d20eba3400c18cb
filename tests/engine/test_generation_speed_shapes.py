"""Generation batches across length buckets (one decode pass for prompts of mixed lengths) and stop ids."""

import types

import jax
import numpy as np
import pytest

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement
from lmprobe.engine.generation import prompt_batches, until_eos
from lmprobe.errors import LmprobeError
from tests.engine.conftest import VOCAB

RNG = np.random.default_rng(2)
PROMPTS = [RNG.integers(3, VOCAB, size=n).tolist() for n in (5, 40, 12, 3, 17, 9, 30)]  # buckets 8 .. 48
GREEDY = dict(max_new_tokens=4, decode=False, eos_id=-1)


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(devices=jax.devices()[:1])


@pytest.fixture(scope="module")
def model(tiny_llama_dir, mesh):
    return load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False).model


@pytest.fixture(scope="module")
def scorer(model, mesh):
    return Scorer(model, mesh=mesh, batch_size=8)


@pytest.fixture(scope="module")
def greedy(scorer):
    return scorer.generate(PROMPTS, **GREEDY)


def test_prompt_batches_fill_across_buckets_longest_first():
    runner = types.SimpleNamespace(batch_size=4, max_tokens=None, data_parallel=1,
                                   bucket_lengths=lambda limit: [b for b in (8, 12, 16, 24, 32, 48) if b <= limit])
    batches = prompt_batches(runner, PROMPTS, 48)
    assert [b.shape for b in batches] == [(4, 48), (4, 12)]  # 40, 30, 17, 12 | 9, 5, 3 (+1 padding row)
    assert sorted(i for b in batches for i in b.indices) == list(range(len(PROMPTS)))
    for b in batches:
        for row, i in enumerate(b.indices):
            n = len(PROMPTS[i])
            assert b.ids[row, -n:].tolist() == PROMPTS[i] and b.mask[row].sum() == n == b.lengths[row]
            assert not b.mask[row, :-n].any()  # left padding
    with pytest.raises(LmprobeError, match="input 1 is empty"):
        prompt_batches(runner, [[3], [], [4]], 48)


def test_mixed_lengths_decode_in_one_batch_with_unchanged_tokens(scorer, greedy):
    assert scorer.compilations["generate"] == 1  # five buckets, one program, one decode loop
    shortest = PROMPTS.index(min(PROMPTS, key=len))  # padded to bucket 48 with the others, to 8 alone
    assert scorer.generate([PROMPTS[shortest]], **GREEDY) == [greedy[shortest]]


def test_stop_ids_end_rows_like_eos(scorer, greedy):
    stop = {greedy[0][2], greedy[1][0], greedy[3][3]}
    cut = scorer.generate(PROMPTS, **GREEDY, stop_ids=sorted(stop))
    assert cut == [until_eos(row, -1, stop) for row in greedy]
    assert len(cut[1]) == 1 and len(cut[0]) <= 3
    with pytest.raises(LmprobeError, match="stop_ids"):
        scorer.generate(PROMPTS, **GREEDY, stop_ids=[VOCAB])
