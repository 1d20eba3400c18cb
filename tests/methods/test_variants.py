"""@noise=SIGMA: seeded, sized by each tensor's rms, composable with the other variants."""

import jax
import numpy as np
import pytest
from flax import nnx
from transformers import LlamaConfig, LlamaForCausalLM

from lmprobe.checkpoints import load, variants
from lmprobe.engine import Scorer
from lmprobe.engine.mesh import make_mesh
from lmprobe.errors import LmprobeError
from tests.models.parity import save_random


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    path = tmp_path_factory.mktemp("variants_llama")
    save_random(LlamaForCausalLM, LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128,
                                              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2), path)
    return Scorer(load(str(path), tokenizer=False).model, None, mesh=make_mesh(devices=jax.devices()[:1]), batch_size=4)


def _params(model) -> dict:
    return {"/".join(map(str, p)): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def test_noise_is_seeded_and_relative_to_each_tensor(scorer):
    base = _params(scorer.model)
    a = _params(variants.apply_variants(scorer.model, ["noise=0.1"]))
    b = _params(variants.apply_variants(scorer.model, ["noise=0.1"]))
    zero = _params(variants.apply_variants(scorer.model, ["noise=0"]))
    assert _params(scorer.model).keys() == base.keys()  # the input model is untouched
    for name, w in base.items():
        np.testing.assert_array_equal(a[name], b[name])  # same name, same model
        np.testing.assert_array_equal(zero[name], w)
        delta = (a[name] - w).astype(np.float64)
        if w.size < 1000:
            continue
        axis = tuple(range(1, w.ndim)) if "layers" in name else None  # stacked: one rms per layer
        rms = np.sqrt(np.mean(np.square(w.astype(np.float64)), axis=axis))
        ratio = np.sqrt(np.mean(np.square(delta), axis=axis)) / rms
        np.testing.assert_allclose(ratio, 0.1, rtol=0.1, err_msg=name)  # noise std = 0.1 rms, per layer slice
    names = [n for n in base if base[n].size >= 1000]
    first, second = (a[n] - base[n] for n in names[:2])
    assert not np.allclose(first.ravel()[:100], second.ravel()[:100])  # each tensor draws its own noise


def test_noise_changes_outputs_monotonically(scorer):
    texts = [[1, 5, 9, 17, 33, 2], [1, 60, 12, 7]]
    clean = scorer.score(texts).token_logprobs
    drift = []
    for sigma in (0.02, 0.2):
        model = variants.apply_variants(scorer.model, [f"noise={sigma}"])
        other = Scorer(model, None, mesh=scorer.mesh, batch_size=scorer.batch_size)
        got = other.score(texts).token_logprobs
        drift.append(np.mean([np.abs(g - c).mean() for g, c in zip(got, clean)]))
    assert 0 < drift[0] < drift[1]


@pytest.mark.parametrize("name", ["m@noise=-1", "m@noise=x", "m@noise="])
def test_bad_noise_names(name):
    with pytest.raises(LmprobeError, match=r"SIGMA is not a number >= 0; write NAME@noise=SIGMA, e\.g\."):
        variants.split_name(name)


def test_noise_parses_and_composes():
    assert variants.split_name("m@noise=0.05@int8") == ("m", ["noise=0.05", "int8"])
