"""``lmprobe sweep --model_fn``: a plain-JAX model's checkpoints, written with orbax's standard API
(CheckpointManager steps of a Flax TrainState, one StandardCheckpointer checkpoint), swept with the
held-out loss of an independent forward pass; each bad input is one line on stderr, exit 2, and no
results written."""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax.training import train_state
from jax.sharding import PartitionSpec

from lmprobe.cli import sweep
from lmprobe.integrations.own_model import OwnModel
from lmprobe.methods.realtask import start_tokens
from tests.engine.conftest import VOCAB

QUICK = ["--methods=byod", "--byod_examples=4", "--batch_size=8", "--verbosity=warning"]
MODEL = '''
import jax, jax.numpy as jnp
from lmprobe.models.callable_lm import CallableLM

def apply(p, ids, mask):
    h = jnp.tanh(p["wte"][ids] + p["pos"][:ids.shape[1]])
    h = h + jnp.cumsum(h * mask[..., None], axis=1) / jnp.arange(1, ids.shape[1] + 1)[:, None]
    return h @ p["wte"].T, h

def build(params):
    return CallableLM(apply, params, max_length=32)

def closure(params):  # a new function object at every step
    return CallableLM(lambda p, ids, mask: apply(p, ids, mask), params, max_length=32)

def half_vocab(params):
    return CallableLM(lambda p, ids, mask: apply(p, ids, mask)[0][..., :128], params, max_length=32)

def broken(params):
    raise ValueError("no such layer: blocks")

def wrong(params):
    return params
'''
TEXTS = [" ".join(f"w{(7 * i + j) % 250 + 3}" for j in range(12)) for i in range(5)]


def params(seed: int, width: int = 16, pos: bool = True) -> dict:
    k1, k2 = jax.random.split(jax.random.key(seed))
    out = {"wte": 0.5 * jax.random.normal(k1, (VOCAB, width)), "pos": 0.1 * jax.random.normal(k2, (32, width))}
    return out if pos else {"wte": out["wte"]}


@pytest.fixture
def user(tmp_path, monkeypatch):
    """tmp_path as the working directory, holding tinygpt.py and heldout.jsonl."""
    (tmp_path / "tinygpt.py").write_text(MODEL)
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "tinygpt", raising=False)
    return tmp_path


def manager_steps(root, trees: dict) -> None:
    """``trees`` ({step: params}) saved as Flax TrainStates by a CheckpointManager, as a trainer does."""
    with ocp.CheckpointManager(os.path.abspath(root)) as manager:
        for step, p in trees.items():
            manager.save(step, args=ocp.args.StandardSave(train_state.TrainState.create(
                apply_fn=None, params=p, tx=optax.adam(1e-3))))


def reference_loss(p, tokenizer) -> float:
    """Nats per held-out token from the model's own forward pass, text by text (no engine)."""
    sys.path.insert(0, os.getcwd())
    import tinygpt

    start = start_tokens(tokenizer)  # the held-out loss's convention: predicted after the start tokens
    nll = tokens = 0.0
    for text in TEXTS:
        ids = np.asarray(start + tokenizer(text, add_special_tokens=False)["input_ids"])
        logits = tinygpt.apply(p, ids[None], np.ones((1, len(ids)), np.int32))[0][0]
        logp = np.asarray(jax.nn.log_softmax(logits[:-1].astype(jnp.float32)), np.float64)
        picked = logp[np.arange(len(ids) - 1), ids[1:]][len(start) - 1:]
        nll, tokens = nll - picked.sum(), tokens + len(picked)
    return nll / tokens


def run(ckpt, out, *extra, fn: str = "build") -> dict:
    sweep.main([f"--checkpoints={ckpt}", f"--output_dir={out}", f"--model_fn=tinygpt:{fn}", *QUICK, *extra])
    return json.loads((out / "results.json").read_text())


def test_manager_steps_and_a_single_checkpoint_are_swept(user, tiny_llama_dir):
    trees = {10: params(0), 20: params(1)}
    manager_steps(user / "ckpt", trees)
    extra = [f"--tokenizer={tiny_llama_dir}", "--heldout=heldout.jsonl"]
    rows = run(user / "ckpt", user / "out", *extra, fn="closure")["rows"]
    assert [(r["step"], r["format"]) for r in rows] == [(10, "orbax-standard"), (20, "orbax-standard")]
    own = OwnModel("tinygpt:build", str(tiny_llama_dir))
    for row, p in zip(rows, trees.values()):
        assert row["metrics"]["heldout_loss"] == pytest.approx(reference_loss(p, own.tokenizer), rel=1e-5)
        assert {"byod_negation", "byod_word_order", "heldout_bits_per_byte"} <= set(row["metrics"])  # in-loop names
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(os.path.abspath(user / "single"), {"model": trees[20]})
    single = run(user / "single", user / "out2", *extra, "--params_key=model")["rows"]
    assert [r["step"] for r in single] == [0] and single[0]["metrics"] == pytest.approx(rows[1]["metrics"])


@pytest.mark.multi_device  # its parameters are restored onto a sharding over several devices
def test_each_array_is_restored_onto_its_sharding(user, tiny_llama_dir):
    manager_steps(user / "ckpt", {1: params(0)})
    own = OwnModel("tinygpt:build", str(tiny_llama_dir))  # 8 CPU devices: 'data' has 8
    found = own.discover(user / "ckpt")
    got = own.params(found[0])
    assert got["wte"].sharding.spec == PartitionSpec("data", None) and got["pos"].sharding.spec == PartitionSpec(
        "data", None)
    np.testing.assert_array_equal(np.asarray(got["wte"]), np.asarray(params(0)["wte"]))
    scorer = own.scorer(found[0])
    assert scorer.score(TEXTS[:1]).nll[0] > 0 and own.scorer(found[0]) is scorer


@pytest.mark.parametrize("case, expected", [
    ("no_module", r"--model_fn=nosuch:build: module 'nosuch' cannot be imported \(ModuleNotFoundError"),
    ("raises", r"--model_fn=tinygpt:broken raised ValueError: no such layer: blocks \(on the parameters of step 1"),
    ("returns", r"--model_fn=tinygpt:wrong returned a dict: return lmprobe.models.CallableLM"),
    ("missing", r"holds two different models: leaf 'pos' is missing in step 2 and float32\[32, 16\] in step 1"),
    ("shape", r"holds two different models: leaf 'pos' is float32\[32, 8\] in step 2 and float32\[32, 16\] in step 1"),
    ("vocab", r"the tokenizer has 256 ids but the logits of --model_fn=tinygpt:half_vocab have 128"),
    ("no_tokenizer", r"--model_fn=tinygpt:build needs --tokenizer=NAME\|DIR"),
    ("synbench", r"--methods: synbench needs the model's token embeddings.*use --methods=byod"),
])
def test_bad_inputs_are_one_line_exit_2_and_write_nothing(user, tiny_llama_dir, capsys, case, expected):
    second = {"missing": params(1, pos=False), "shape": params(1, width=8)}
    if case == "shape":
        second["shape"] = {"wte": params(1)["wte"], "pos": params(1, width=8)["pos"]}
    manager_steps(user / "ckpt", {1: params(0), 2: second.get(case, params(1))})
    fn = {"no_module": "nosuch:build", "raises": "tinygpt:broken", "returns": "tinygpt:wrong",
          "vocab": "tinygpt:half_vocab"}.get(case, "tinygpt:build")
    argv = [f"--checkpoints={user / 'ckpt'}", f"--output_dir={user / 'out'}", f"--model_fn={fn}", *QUICK]
    tokenizer = user / "tokenizer"  # a tokenizer saved alone (save_pretrained), no model beside it
    OwnModel("tinygpt:build", str(tiny_llama_dir)).tokenizer.save_pretrained(tokenizer)
    argv += [] if case == "no_tokenizer" else [f"--tokenizer={tokenizer}"]
    argv += ["--methods=byod,synbench"] if case == "synbench" else []
    with pytest.raises(SystemExit) as stop:
        sweep.main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert __import__("re").search(expected, err[0]), err[0]
    assert not (user / "out" / "results.json").exists() and not (user / "out" / "steps").exists()


def test_an_unfinished_step_and_a_damaged_one_are_named_and_the_others_swept(user, tiny_llama_dir, capsys):
    """orbax's standard API: step 2 without the commit_success.txt its other steps have (not finished: never
    read), step 3 with its arrays cut short (one line, a failed row); steps 1 and 4 are scored."""
    manager_steps(user / "ckpt", {s: params(s) for s in (1, 2, 3, 4)})
    (user / "ckpt" / "2" / "commit_success.txt").unlink()
    files = [os.path.join(d, n) for d, _, names in os.walk(user / "ckpt" / "3") for n in names if "ocdbt" in d]
    os.truncate(max(files, key=os.path.getsize), 100)
    with pytest.raises(SystemExit) as stop:
        run(user / "ckpt", user / "out", f"--tokenizer={tiny_llama_dir}", "--heldout=heldout.jsonl")
    rows = {r["step"]: r for r in json.loads((user / "out" / "results.json").read_text())["rows"]}
    assert stop.value.code == 2 and sorted(rows) == [1, 2, 3, 4]
    assert "heldout_loss" in rows[1]["metrics"] and "heldout_loss" in rows[4]["metrics"]
    assert rows[2]["failed"].startswith("not finished: it has no commit_success.txt")
    assert "cannot be read" in rows[3]["failed"] and str(user / "ckpt" / "3") in rows[3]["failed"]
    err = capsys.readouterr().err
    assert err.count("step 2: ") == 1 and err.count("step 3: ") == 1 and "Traceback" not in err
