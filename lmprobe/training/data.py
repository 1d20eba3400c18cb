"""Token blocks: documents joined with the tokenizer's end-of-text id and cut into fixed-length
training sequences, the batch of each step (a seeded permutation per epoch, so any step's batch is
known without replaying the run), and the held-out documents as padded, truncated rows.
"""

from __future__ import annotations

import numpy as np

from lmprobe.errors import LmprobeError


def pack(tokenizer, texts, seq_len: int, eos: int) -> np.ndarray:
    """[N, seq_len] int32: the texts' ids, each followed by ``eos``, concatenated and cut (the tail dropped)."""
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    stream = np.fromiter((t for row in ids for t in (*row, eos)), np.int32)
    n = len(stream) // seq_len
    if n < 1:
        raise LmprobeError(f"the training text has {len(stream)} tokens, fewer than one sequence of "
                           f"`seq_len={seq_len}`: give more text or a shorter `seq_len`")
    return stream[: n * seq_len].reshape(n, seq_len)


def batch_indices(num_blocks: int, batch: int, step: int, seed: int) -> np.ndarray:
    """The blocks of ``step``'s batch: epoch e = step // (num_blocks // batch) visits the blocks in the
    order of a permutation seeded by (seed, e)."""
    per_epoch = num_blocks // batch
    if per_epoch < 1:
        raise LmprobeError(f"{num_blocks} training sequences are fewer than one batch of `train_batch_size={batch}`: "
                           "give more text or a smaller batch")
    epoch, i = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(num_blocks)
    return order[i * batch:(i + 1) * batch]


def heldout_rows(tokenizer, texts, seq_len: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) [M, seq_len], M a multiple of ``batch``: each held-out text's ids as the Scorer reads
    them (the tokenizer's own special tokens, the first ``seq_len`` kept), right-padded; empty rows pad M."""
    ids = [row[:seq_len] for row in tokenizer(list(texts))["input_ids"]]
    rows = -(-len(ids) // batch) * batch
    out, mask = np.zeros((rows, seq_len), np.int32), np.zeros((rows, seq_len), np.int32)
    for r, row in enumerate(ids):
        out[r, :len(row)], mask[r, :len(row)] = row, 1
    return out, mask
