"""MaxText decoder checkpoints (Llama, Gemma 3; scanned and unscanned) against transformers' PyTorch
model holding the same weights.

The checkpoints are written as MaxText writes them, from the HF weights: the HF -> MaxText hooks of
src/maxtext/checkpoint_conversion/utils/param_mapping.py (AI-Hypercomputer/maxtext e591f30;
LLAMA31_MAXTEXT_TO_HF_PARAM_HOOK_FN, lines 2493-2569, saving_to_hf=False: kernels transposed and
reshaped, query scaled by head_dim**-0.5, q/k halves interleaved; GEMMA3_MAXTEXT_TO_HF_PARAM_HOOK_FN,
lines 174-329: norm scales +1, embedding times a bfloat16 sqrt(hidden_size)), the names of the
*_PARAM_MAPPING functions (lines 61-171, 2414-2490), layers stacked on param_scan_axis=1
(utils/utils.py lines 1375-1393; configs/base.yml param_scan_axis: 1), and the TrainState saved
as the CheckpointManager item 'items' with params={'params': weights} (utils/utils.py 1283-1302,
common/checkpointing.py item_names=('items',)).
"""

import json
import os

import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
import pytest
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

from lmprobe.checkpoints import identity, load
from lmprobe.checkpoints.model_config import hf_config
from lmprobe.checkpoints.resolve import resolve
from lmprobe.errors import CheckpointError
from tests.models.parity import max_diffs, padded_batch, randomize

LLAMA = LlamaConfig(vocab_size=151, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                    num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)
GEMMA3 = Gemma3TextConfig(
    vocab_size=151, hidden_size=48, intermediate_size=80, num_hidden_layers=7, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, max_position_embeddings=64, sliding_window=4,
    layer_types=["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                     "full_attention": {"rope_type": "default", "rope_theta": 10000.0}})
LLAMA_LAYER = {"self_attn.q_proj": "self_attention/query", "self_attn.k_proj": "self_attention/key",
               "self_attn.v_proj": "self_attention/value", "self_attn.o_proj": "self_attention/out",
               "mlp.gate_proj": "mlp/wi_0", "mlp.up_proj": "mlp/wi_1", "mlp.down_proj": "mlp/wo",
               "input_layernorm": "pre_self_attention_layer_norm",
               "post_attention_layernorm": "post_self_attention_layer_norm"}
GEMMA3_LAYER = {**{k: v for k, v in LLAMA_LAYER.items() if k.endswith("proj")},
                "input_layernorm": "pre_self_attention_norm", "post_attention_layernorm": "post_self_attention_norm",
                "self_attn.q_norm": "self_attention/query_norm", "self_attn.k_norm": "self_attention/key_norm",
                "pre_feedforward_layernorm": "pre_ffw_norm", "post_feedforward_layernorm": "post_ffw_norm"}


def to_maxtext(name: str, x: np.ndarray, config, gemma: bool) -> np.ndarray:
    """One HF tensor in MaxText's layout (param_mapping.py's hooks, saving_to_hf=False)."""
    heads, kv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    if name.endswith("norm.weight"):
        return x + 1.0 if gemma else x
    if name == "model.embed_tokens.weight":
        return (x * np.float32(ml_dtypes.bfloat16(config.hidden_size ** 0.5))).astype(x.dtype) if gemma else x
    target = {"q_proj": (-1, heads, d), "k_proj": (-1, kv, d), "v_proj": (-1, kv, d), "o_proj": (heads, d, -1)}
    kind = name.split(".")[-2]
    x = x.T.reshape(target.get(kind, x.T.shape))  # reshape_kernel
    if not gemma and kind in ("q_proj", "k_proj"):  # adjust_rope: halves -> interleaved pairs
        x = np.stack([x[..., : d // 2], x[..., d // 2:]], axis=-1).reshape(x.shape)
    if not gemma and kind == "q_proj":  # scale_query_layer
        x = (x.astype(np.float32) * np.float32(1 / np.sqrt(d))).astype(x.dtype)
    return x


def maxtext_tree(hf, config, *, gemma: bool, scanned: bool) -> dict:
    state = {k: v.numpy() for k, v in hf.state_dict().items()}
    n, layer_map = config.num_hidden_layers, GEMMA3_LAYER if gemma else LLAMA_LAYER
    tree = {"token_embedder": {"embedding": to_maxtext("model.embed_tokens.weight", state["model.embed_tokens.weight"],
                                                       config, gemma)},
            "decoder": {"decoder_norm": {"scale": to_maxtext("model.norm.weight", state["model.norm.weight"],
                                                             config, gemma)}}}
    if not config.tie_word_embeddings:
        tree["decoder"]["logits_dense"] = {"kernel": state["lm_head.weight"].T}

    def layer(i):
        out = {}
        for hf_mod, mt in layer_map.items():
            name = f"model.layers.{i}.{hf_mod}.weight"
            node = out
            for part in mt.split("/"):
                node = node.setdefault(part, {})
            node["kernel" if hf_mod.endswith("proj") else "scale"] = to_maxtext(name, state[name], config, gemma)
        return out

    def stack(layers):  # on param_scan_axis = 1
        return _map(lambda *xs: np.stack(xs, axis=1), *layers)

    if not scanned:
        tree["decoder"].update({f"layers_{i}": layer(i) for i in range(n)})
    elif not gemma:
        tree["decoder"]["layers"] = stack([layer(i) for i in range(n)])
    else:  # blocks of 6 (layers b, b+6, ...), the remainder unscanned
        full = n - n % 6
        tree["decoder"]["layers"] = {f"layers_{b}": stack([layer(i) for i in range(b, full, 6)]) for b in range(6)}
        tree["decoder"]["layers_remainder"] = {f"layers_{r}": layer(full + r) for r in range(n % 6)}
    return tree


def _map(fn, *trees):
    if isinstance(trees[0], dict):
        return {k: _map(fn, *(t[k] for t in trees)) for k in trees[0]}
    return fn(*trees)


def write_run(run, hf, config, **layout) -> str:
    """A MaxText run directory: RUN/config.json and RUN/checkpoints/0/items; returns the step's path."""
    os.makedirs(run, exist_ok=True)
    state = {"step": 0, "params": {"params": maxtext_tree(hf, config, **layout)}, "opt_state": {}}
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    with ocp.CheckpointManager(os.path.join(run, "checkpoints"), options=options, item_names=("items",)) as m:
        m.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(state)))
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump(config.to_dict(), f)
    return os.path.join(run, "checkpoints", "0")


@pytest.mark.parametrize("scanned", [True, False], ids=["scanned", "unscanned"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_logits_match_transformers(tmp_path, arch, scanned):
    cls, config = (LlamaForCausalLM, LLAMA) if arch == "llama" else (Gemma3ForCausalLM, GEMMA3)
    hf = randomize(cls(config))
    step = write_run(tmp_path / "run", hf, config, gemma=arch == "gemma3", scanned=scanned)
    ids, mask = padded_batch(config.vocab_size)
    diffs = max_diffs(step, hf, ids, mask)
    print(f"maxtext {arch} {'scanned' if scanned else 'unscanned'}: max |logit diff| {diffs['logits']:.2e}")
    assert diffs["logits"] <= 1e-4 and diffs["hidden"] <= 1e-4
    root = str(tmp_path / "run" / "checkpoints")  # the run's checkpoints: its latest step
    assert resolve(root).location == resolve(step).location == os.path.join(step, "items")
    assert hf_config(root)[0]["model_type"] == hf_config(step)[0]["model_type"] == config.model_type
    info = identity(load(step, tokenizer=False).checkpoint)
    assert info["format"] == "maxtext-orbax" and info["step"] == 0 and info["weights_sha256"]


def test_errors_name_the_leaf_and_the_config(tmp_path):
    hf = randomize(LlamaForCausalLM(LLAMA))
    step = write_run(tmp_path / "run", hf, LLAMA, gemma=False, scanned=True)
    more_layers = {**LLAMA.to_dict(), "num_hidden_layers": 4}
    with open(tmp_path / "run" / "config.json", "w") as f:
        json.dump(more_layers, f)
    with pytest.raises(CheckpointError, match=r"'params/params/decoder/layers/.*' .* shape .* layer 3 on axis 1"):
        load(step, tokenizer=False)
    with open(tmp_path / "run" / "config.json", "w") as f:
        json.dump({**LLAMA.to_dict(), "intermediate_size": 96}, f)
    leaf = r"down_proj.weight' \(MaxText leaf 'params/params/decoder/layers/mlp/wo/kernel', layer 0 on axis 1, "
    with pytest.raises(CheckpointError, match=leaf + r"shape \(80, 3, 48\)\).* \(48, 80\).*implies \(48, 96\)"):
        load(step, tokenizer=False)
    os.remove(tmp_path / "run" / "config.json")
    with pytest.raises(CheckpointError, match="MaxText checkpoint.*no Hugging Face config"):
        load(step, tokenizer=False)


def test_unfinished_and_damaged_steps_are_one_error_naming_them(tmp_path):
    """A step orbax has not finished (no commit_success.txt where the run's other steps have one) is
    not read, the run's latest finished step is; an array cut short is one error naming the step."""
    import shutil

    hf = randomize(LlamaForCausalLM(LLAMA))
    step = write_run(tmp_path / "run", hf, LLAMA, gemma=False, scanned=True)
    later = os.path.join(os.path.dirname(step), "1")
    shutil.copytree(step, later)
    os.remove(os.path.join(later, "commit_success.txt"))
    with pytest.raises(CheckpointError, match=r"MaxText step '.*/checkpoints/1' is not finished \(it has no "
                                              r"commit_success.txt"):
        load(later, tokenizer=False)
    assert resolve(os.path.dirname(step)).location == os.path.join(step, "items")  # the latest finished step
    items = os.path.join(step, "items")
    data = max((os.path.join(d, n) for d, _, names in os.walk(items) for n in names), key=os.path.getsize)
    os.truncate(data, 100)
    with pytest.raises(CheckpointError, match=r"MaxText checkpoint '.*/checkpoints/0/items' cannot be read \("
                                              r".*: it is incomplete or damaged"):
        load(step, tokenizer=False)
