"""Length-bucketed batching: few shapes, every input once, results back in input order."""

import numpy as np
import pytest

from lmprobe.engine.batching import (
    SPLIT_PADDING_TOKENS,
    batch_size_for,
    bucket_length,
    make_batches,
    piece_rows,
    restore,
)
from lmprobe.errors import LmprobeError


def test_bucket_length():
    assert [bucket_length(n) for n in (1, 9, 16, 17, 25, 100, 8192)] == [8, 12, 16, 24, 32, 128, 8192]
    assert bucket_length(70000) == 98304  # past the largest bucket: its next multiple


@pytest.mark.parametrize("left_pad", [False, True])
def test_batches_cover_inputs_and_restore_order(left_pad):
    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(1, 50, size=n)) for n in rng.integers(1, 300, size=101)]
    batches = make_batches(seqs, batch_size=4, left_pad=left_pad, data_parallel=2)  # 4 per device
    assert sorted(np.concatenate([b.indices for b in batches]).tolist()) == list(range(101))
    shapes = {b.shape for b in batches}
    assert {length for _, length in shapes} <= {8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384}
    assert {rows for rows, _ in shapes} <= {2, 4, 8}  # full batches (4 x 2), or a power of two per device
    for b in batches:
        for row, i in enumerate(b.indices):
            real = b.ids[row][b.mask[row].astype(bool)]
            assert real.tolist() == seqs[i]
            assert bool(b.mask[row, 0 if left_pad else -1]) == (len(seqs[i]) == b.shape[1])
    echoed = restore(batches, [[b.ids[r][b.mask[r].astype(bool)].tolist() for r in range(len(b.indices))]
                               for b in batches], len(seqs))
    assert echoed == [list(map(int, s)) for s in seqs]


def test_token_budget_shrinks_long_batches():
    seqs = [[1] * 1000] * 5 + [[1] * 10] * 5
    batches = make_batches(seqs, batch_size=8, max_tokens=2048)
    assert {b.shape for b in batches} == {(2, 1024), (1, 1024), (8, 12)}


def test_batch_size_and_token_budget_are_per_device():
    seqs = [[1] * 1000] * 9 + [[1] * 10] * 20
    batches = make_batches(seqs, batch_size=4, max_tokens=2048, data_parallel=4)
    # 1024-long: 2 per device (budget) x 4 = 8 rows, then 1 left: 1 per device x 4; 12-long: 4 x 4 = 16, then 4
    assert [b.shape for b in batches] == [(8, 1024), (4, 1024), (16, 12), (4, 12)]
    assert [len(b.indices) for b in batches] == [8, 1, 16, 4]
    assert batch_size_for(10, 4, None, data_parallel=4) == 16
    assert batch_size_for(5000, 4, 2048, data_parallel=4) == 4  # never below one row per device


def test_long_partial_batch_is_cut_into_powers_of_two():
    seqs = [[1] * 2000] * 5 + [[1] * 1500] * 3 + [[1] * 10] * 5
    batches = make_batches(seqs, batch_size=16)
    # 5 rows of 2,048 would pad 3 more (6,144 tokens): 4 + 1; 3 of 1,536 pad 1,536 tokens, 5 of 12 pad 36: one batch
    assert [b.shape for b in batches] == [(4, 2048), (1, 2048), (4, 1536), (8, 12)]
    assert sorted(np.concatenate([b.indices for b in batches]).tolist()) == list(range(13))
    assert [b.shape for b in make_batches(seqs[:5], batch_size=16, split=False)] == [(8, 2048)]


def test_fill_pads_each_partial_batch_to_a_full_one():
    seqs = [[1] * 20] * 21 + [[1] * 10] * 3
    assert [b.shape for b in make_batches(seqs, batch_size=16)] == [(16, 24), (8, 24), (4, 12)]
    batches = make_batches(seqs, batch_size=16, fill=True, max_tokens=256)  # 10 rows of 24 tokens, 16 of 12
    assert [b.shape for b in batches] == [(10, 24), (10, 24), (10, 24), (16, 12)]
    assert [len(b.indices) for b in batches] == [10, 10, 1, 3] and not batches[2].mask[1:].any()


def test_piece_rows_per_shard():
    assert piece_rows(5, 16, 2048) == [4, 1]
    assert piece_rows(5, 16, 2048, data_parallel=2) == [4, 2]  # 3 rows a shard: 2 + 1, each on both shards
    assert piece_rows(7, 16, 2048, data_parallel=2) == [8]  # 4 a shard: one padding row, nothing to cut
    assert piece_rows(16, 16, 2048) == [16]  # a full batch
    assert piece_rows(3, 16, SPLIT_PADDING_TOKENS - 1) == [4]  # one padding row below the threshold


def test_empty_sequence_is_named():
    with pytest.raises(LmprobeError, match="input 1 is empty"):
        make_batches([[1, 2], []], batch_size=4)
