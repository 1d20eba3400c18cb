"""Levanter checkpoints (Llama, Gemma 3, GPT-2; scanned and unscanned layers) against transformers'
PyTorch model holding the same weights.

The checkpoints are written as Levanter writes them (stanford-crfm/levanter 9263f81): each array leaf
of the trainer state a TensorStore zarr array at its equinox field path, by
jax.experimental.array_serialization's GlobalAsyncCheckpointManager.serialize_with_paths
(levanter/tensorstore_serialization.py, tree_serialize_leaves_tensorstore), then metadata.json
(checkpoint.py, _save_metadata), in RUN/step-<n> (checkpoint.py: destination f"step-{step}"). The
arrays are HF's reshaped into Levanter's axes (models/llama.py, gemma.py, gpt2.py, layers/attention.py;
haliax.nn.Linear: [Out..., In...] with out_first, GPT-2's [In..., Out...]); scanned layers are
haliax Stacked (field ``stacked``, the layer on axis 0), unscanned ones BlockSeq (``blocks/<i>``).
"""

import datetime
import json
import os

import jax
import numpy as np
import pytest
from jax.experimental.array_serialization.serialization import GlobalAsyncCheckpointManager
from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM

from lmprobe.checkpoints import load
from lmprobe.checkpoints.model_config import hf_config
from lmprobe.checkpoints.resolve import resolve
from lmprobe.errors import CheckpointError
from tests.checkpoints.test_maxtext import GEMMA3, LLAMA
from tests.models.parity import max_diffs, padded_batch, randomize

GPT2 = GPT2Config(vocab_size=151, n_embd=48, n_layer=3, n_head=4, n_positions=64)


def levanter_model(hf: dict, config, arch: str) -> tuple[dict, dict]:
    """(global leaves, per-layer leaves: a list of dicts) of the model, in Levanter's names and axes."""
    if arch == "gpt2":
        h, d = config.n_head, config.n_embd
        top = {"embeddings/token_embeddings/weight": hf["transformer.wte.weight"],
               "embeddings/position_embeddings/weight": hf["transformer.wpe.weight"],
               "transformer/ln_f/weight": hf["transformer.ln_f.weight"],
               "transformer/ln_f/bias": hf["transformer.ln_f.bias"]}
        layers = []
        for i in range(config.n_layer):
            p = {k[len(f"transformer.h.{i}."):]: v for k, v in hf.items() if k.startswith(f"transformer.h.{i}.")}
            layers.append({**{f"{n}/{w}": p[f"{n}.{w}"] for n in ("ln_1", "ln_2") for w in ("weight", "bias")},
                           "attn/c_attn/weight": p["attn.c_attn.weight"].reshape(d, 3, h, d // h),
                           "attn/c_attn/bias": p["attn.c_attn.bias"].reshape(3, h, d // h),
                           "attn/c_proj/weight": p["attn.c_proj.weight"].reshape(h, d // h, d),
                           "attn/c_proj/bias": p["attn.c_proj.bias"],
                           **{f"mlp/{m}/{w}": p[f"mlp.{m}.{w}"] for m in ("c_fc", "c_proj")
                              for w in ("weight", "bias")}})
        return top, layers
    heads, kv, d = config.num_attention_heads, config.num_key_value_heads, config.hidden_size
    dh = getattr(config, "head_dim", None) or d // heads
    top = {"embeddings/token_embeddings/weight": hf["model.embed_tokens.weight"],
           "transformer/norm/weight": hf["model.norm.weight"]}
    if "lm_head.weight" in hf and not config.tie_word_embeddings:
        top["lm_head/weight"] = hf["lm_head.weight"]
    layers = []
    for i in range(config.num_hidden_layers):
        p = {k[len(f"model.layers.{i}."):]: v for k, v in hf.items() if k.startswith(f"model.layers.{i}.")}
        layer = {"self_attn/q_proj/weight": p["self_attn.q_proj.weight"].reshape(kv, heads // kv, dh, d),
                 "self_attn/k_proj/weight": p["self_attn.k_proj.weight"].reshape(kv, dh, d),
                 "self_attn/v_proj/weight": p["self_attn.v_proj.weight"].reshape(kv, dh, d),
                 "self_attn/o_proj/weight": p["self_attn.o_proj.weight"].reshape(d, heads, dh)}
        for name, value in p.items():
            if not name.startswith(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")):
                layer[name[:-len(".weight")].replace(".", "/") + "/weight"] = value
        layers.append(layer)
    return top, layers


def write_run(run, hf_model, config, arch: str, *, scanned: bool, step: int = 100) -> str:
    """RUN/config.json and RUN/step-<step>/ as Levanter's trainer writes them; returns the step's path."""
    hf = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
    top, layers = levanter_model(hf, config, arch)
    module = "transformer/blocks" if arch == "gpt2" else "transformer/layers"
    leaves = {f"model/{k}": v for k, v in top.items()}
    for name in layers[0]:
        if scanned:
            leaves[f"model/{module}/stacked/{name}"] = np.stack([layer[name] for layer in layers])
        else:
            leaves.update({f"model/{module}/blocks/{i}/{name}": layer[name] for i, layer in enumerate(layers)})
    leaves["opt_state/1/0/mu/model/transformer/norm/weight"] = np.zeros(3, np.float32)  # the rest of the state
    leaves["step"] = np.asarray(step, np.int32)
    path = os.path.join(run, f"step-{step}")
    manager = GlobalAsyncCheckpointManager()
    manager.serialize_with_paths([jax.numpy.asarray(v) for v in leaves.values()],
                                 [os.path.join(path, *k.split("/")) for k in leaves])
    manager.wait_until_finished()
    with open(os.path.join(path, "metadata.json"), "w") as f:
        json.dump({"step": step, "timestamp": datetime.datetime.now().isoformat(), "is_temporary": False}, f)
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump(config.to_dict(), f)
    return path


@pytest.mark.parametrize("scanned", [True, False], ids=["scanned", "unscanned"])
@pytest.mark.parametrize("arch", ["llama", "gemma3", "gpt2"])
def test_logits_match_transformers(tmp_path, arch, scanned):
    from transformers import Gemma3ForCausalLM

    cls, config = {"llama": (LlamaForCausalLM, LLAMA), "gemma3": (Gemma3ForCausalLM, GEMMA3),
                   "gpt2": (GPT2LMHeadModel, GPT2)}[arch]
    hf = randomize(cls(config))
    step = write_run(tmp_path / "run", hf, config, arch, scanned=scanned)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(step, hf, ids, mask)
    print(f"levanter {arch} {'scanned' if scanned else 'unscanned'}: max |logit diff| {diffs['logits']:.2e}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4
    assert resolve(str(tmp_path / "run")).location == resolve(step).location == step  # the run: its latest step
    assert hf_config(str(tmp_path / "run"))[0]["model_type"] == config.model_type  # the memory plan reads it


def test_errors_name_the_leaf_and_the_config(tmp_path):
    hf = randomize(LlamaForCausalLM(LLAMA))
    step = write_run(tmp_path / "run", hf, LLAMA, "llama", scanned=True)
    os.rename(os.path.join(step, "model", "transformer", "norm"), os.path.join(step, "norm-moved"))
    with pytest.raises(CheckpointError, match=r"leaf 'model/transformer/norm/weight' is missing from Levanter"):
        load(step, tokenizer=False)
    os.remove(tmp_path / "run" / "config.json")
    with pytest.raises(CheckpointError, match="is a Levanter checkpoint .* no Hugging Face config"):
        load(step, tokenizer=False)
    bigger = {**LLAMA.to_dict(), "num_hidden_layers": 4}
    (tmp_path / "run" / "config.json").write_text(json.dumps(bigger))
    os.rename(os.path.join(step, "norm-moved"), os.path.join(step, "model", "transformer", "norm"))
    with pytest.raises(CheckpointError, match=r"layer 3 on axis 0; the config.json beside it has more layers"):
        load(step, tokenizer=False)


def test_a_run_is_discovered_step_by_step_with_its_identity(tmp_path):
    from lmprobe.checkpoints import identity
    from lmprobe.checkpoints.discover import discover

    hf = randomize(LlamaForCausalLM(LLAMA))
    first = write_run(tmp_path / "run", hf, LLAMA, "llama", scanned=True, step=100)
    second = write_run(tmp_path / "run", hf, LLAMA, "llama", scanned=True, step=200)
    found = discover(str(tmp_path / "run"))
    assert [(f.step, f.path, f.format) for f in found] == [(100, first, "levanter"), (200, second, "levanter")]
    info = identity(load(second, tokenizer=False).checkpoint)
    assert info["format"] == "levanter-tensorstore" and info["step"] == 200 and info["weights_sha256"]


def test_a_step_without_metadata_json_is_unfinished_and_a_cut_array_is_one_error(tmp_path):
    """Levanter writes metadata.json after every array: a step without it is found unfinished (and the
    run's latest step is the finished one); an array chunk cut short is one error naming the array."""
    import shutil

    from lmprobe.checkpoints.discover import discover

    hf = randomize(LlamaForCausalLM(LLAMA))
    first = write_run(tmp_path / "run", hf, LLAMA, "llama", scanned=True, step=100)
    shutil.copytree(first, tmp_path / "run" / "step-200")
    os.remove(tmp_path / "run" / "step-200" / "metadata.json")
    found = discover(str(tmp_path / "run"))
    assert [(f.step, bool(f.unfinished)) for f in found] == [(100, False), (200, True)]
    assert "no metadata.json" in found[1].unfinished
    assert resolve(str(tmp_path / "run")).location == first
    chunks = [os.path.join(d, n) for d, _, names in os.walk(os.path.join(first, "model")) for n in names
              if not n.startswith(".")]
    os.truncate(max(chunks, key=os.path.getsize), 10)
    with pytest.raises(CheckpointError, match=r"Levanter array '.*/step-100/model/.*' cannot be read \(.*: it is "
                                              r"incomplete or damaged"):
        load(first, tokenizer=False)
