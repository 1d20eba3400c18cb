"""Attention kernels keep heads as their own dimension: fused HF q/k/v tensors are split on load,
and 'model' sharding splits heads, never head_dim."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from safetensors.numpy import load_file
from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

from lmprobe.checkpoints import load
from lmprobe.engine.mesh import TENSOR_PARALLEL, make_mesh, placement, spec_for
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, LAYERS
from tests.models.parity import save_random

pytestmark = pytest.mark.multi_device  # meshes over several of the 8 CPU devices

D, H = 32, 4


def test_gpt2_c_attn_is_split_into_heads(tmp_path):
    save_random(GPT2LMHeadModel, GPT2Config(vocab_size=64, n_embd=D, n_layer=2, n_head=H, n_positions=32), tmp_path)
    attn = load(str(tmp_path), tokenizer=False).model.h.attn
    w, b = (load_file(tmp_path / "model.safetensors")[f"transformer.h.1.attn.c_attn.{p}"] for p in ("weight", "bias"))
    for i, proj in enumerate((attn.q_proj, attn.k_proj, attn.v_proj)):  # Conv1D [in, q | k | v]
        assert proj.kernel[...].shape == (2, D, H, D // H)
        np.testing.assert_array_equal(proj.kernel[...][1], w[:, i * D:(i + 1) * D].reshape(D, H, D // H))
        np.testing.assert_array_equal(proj.bias[...][1], b[i * D:(i + 1) * D].reshape(H, D // H))
    assert attn.c_proj.kernel[...].shape == (2, H, D // H, D)


def test_gpt_neox_query_key_value_is_split_per_head(tmp_path):
    save_random(GPTNeoXForCausalLM, GPTNeoXConfig(vocab_size=64, hidden_size=D, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=H), tmp_path)
    attn = load(str(tmp_path), tokenizer=False).model.layers.attention
    tensors = load_file(tmp_path / "model.safetensors")
    w = tensors["gpt_neox.layers.0.attention.query_key_value.weight"].reshape(H, 3, D // H, D)  # torch [out, in]
    b = tensors["gpt_neox.layers.0.attention.query_key_value.bias"].reshape(H, 3, D // H)
    for i, proj in enumerate((attn.q_proj, attn.k_proj, attn.v_proj)):
        np.testing.assert_array_equal(proj.kernel[...][0], w[:, i].transpose(2, 0, 1))
        np.testing.assert_array_equal(proj.bias[...][0], b[:, i])


def test_model_parallel_shards_heads_not_head_dim(tmp_path):
    mesh = make_mesh(model_parallel=4)
    assert spec_for((2, D, 2, 16), (LAYERS, EMBED, HEADS, HEAD_DIM), mesh, TENSOR_PARALLEL) == P(None, None, None, None)
    save_random(LlamaForCausalLM, LlamaConfig(vocab_size=64, hidden_size=D, intermediate_size=64, num_hidden_layers=2,
                                              num_attention_heads=H, num_key_value_heads=2), tmp_path)
    attn = load(str(tmp_path), place=placement(mesh), tokenizer=False).model.layers.self_attn
    assert attn.q_proj.kernel.get_metadata()["axes"] == (LAYERS, EMBED, HEADS, HEAD_DIM)
    assert attn.q_proj.kernel[...].shape == (2, D, H, D // H)
    assert attn.q_proj.kernel[...].sharding.spec == P(None, "data", "model", None)  # fsdp: embed over 'data'
    assert attn.o_proj.kernel[...].sharding.spec == P(None, "model", None, "data")
    assert attn.k_proj.kernel[...].sharding.spec == P(None, "data", None, None)  # 2 kv heads: not split in 4
    assert len(jax.devices()) == 8
