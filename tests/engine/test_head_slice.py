"""The LM head's slices of positions (steps.head_slice): bounded logits, the same log-probabilities."""

import jax
import numpy as np
import pytest

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement, steps
from tests.engine.conftest import tiny_llama_dir  # noqa: F401  (a fixture)


class Config:
    vocab_size = 49152


class Model:
    config = Config()


@pytest.mark.parametrize(("batch", "length", "want"), [(16, 96, 8), (16, 1, 1), (16, 12, 4), (1, 96, 32),
                                                       (1, 2048, 128), (256, 64, 1)])
def test_a_slice_is_a_power_of_two_dividing_the_length_within_the_logits_budget(batch, length, want):
    chunk = steps.head_slice(Model(), batch, length)
    assert chunk == want and length % chunk == 0
    assert chunk == 1 or 4 * batch * chunk * Config.vocab_size <= steps.LOGITS_BYTES


def test_small_slices_give_the_same_log_probabilities(tiny_llama_dir, monkeypatch):  # noqa: F811
    mesh = make_mesh(devices=jax.devices()[:1])
    loaded = load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False)
    texts = [list(range(3, 19)), list(range(30, 44))]  # one bucket, one program each way
    whole = Scorer(loaded.model, mesh=mesh, batch_size=2).score(texts).token_logprobs
    monkeypatch.setattr(steps, "LOGITS_BYTES", 1)  # one position per slice: another program, the same numbers
    for a, b in zip(Scorer(loaded.model, mesh=mesh, batch_size=2).score(texts).token_logprobs, whole, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_a_slice_is_sized_for_the_rows_a_device_holds():
    """Traced for 8 devices, 128 rows are 16 a device: the slice of 16 rows, not of 128."""
    from lmprobe.engine.mesh import tracing_on

    sixteen = steps.head_slice(Model(), 16, 96)
    with tracing_on(make_mesh(1)):  # data=8
        assert steps.batch_split() == 8
        assert steps.head_slice(Model(), 128, 96) == sixteen == 8
    assert steps.batch_split() == 1 and steps.head_slice(Model(), 128, 96) == 1


def test_traced_for_an_accelerator_a_slice_is_large_enough_not_to_wait_on_the_head():
    """On TPU or GPU a slice reads (under fsdp, gathers) the whole head: 16 rows of a 49k vocabulary get
    32 positions (512 tokens, HEAD_TOKENS), where CPU's memory budget gives 8."""
    from lmprobe.models import layers

    with layers.traced_for("tpu"):
        chunk = steps.head_slice(Model(), 16, 96)
    assert chunk == 32 and 4 * 16 * chunk * Config.vocab_size <= steps.ACCELERATOR_LOGITS_BYTES
    with layers.traced_for("cpu"):
        assert steps.head_slice(Model(), 16, 96) == 8
