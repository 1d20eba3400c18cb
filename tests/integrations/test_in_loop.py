"""ProxyCallback inside real optax training: docs/training.md's loop as written, a CallableLM beside the
module it wraps, bad input, and the JSONL log surviving a torn line."""

import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments.bench.in_loop import training
from lmprobe.checkpoints.resolve import resolve
from lmprobe.errors import LmprobeError
from lmprobe.integrations.in_loop import FILENAME, ProxyCallback, append_row, read_rows
from lmprobe.methods.realtask import cut, start_tokens
from lmprobe.models.callable_lm import CallableLM
from lmprobe.models.llama import Llama, LlamaConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_loop() -> str:
    """docs/training.md's in-loop example: the python block that builds a ProxyCallback."""
    with open(os.path.join(ROOT, "docs", "training.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    found = [b for b in blocks if "ProxyCallback(" in b]
    if not found:
        pytest.fail("docs/training.md has no python block with ProxyCallback ('Proxies inside a training loop')")
    return found[0]


@pytest.fixture(scope="module")
def tokenizer():
    return resolve("smollm2-135m").tokenizer()


def tiny(tokenizer, hidden=32):
    return Llama(LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                             tie_word_embeddings=True), rngs=nnx.Rngs(0))


def reference_heldout_loss(model, tokenizer, texts, max_chars) -> float:
    """Nats per held-out token from the model's own forward pass (no engine): the texts right-padded to one
    length in one batch, so one compiled forward; a causal model's logits at real positions ignore the padding."""
    start = start_tokens(tokenizer)
    seqs = [start + tokenizer(cut(text, max_chars), add_special_tokens=False)["input_ids"] for text in texts]
    ids = np.zeros((len(seqs), max(map(len, seqs))), np.int32)
    for row, seq in enumerate(seqs):
        ids[row, :len(seq)] = seq
    logp = jax.nn.log_softmax(model(ids, np.ones_like(ids)).logits[:, :-1], axis=-1)
    next_logp = np.asarray(jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0], np.float64)
    nll = tokens = 0.0
    for row, seq in enumerate(seqs):
        picked = next_logp[row, len(start) - 1:len(seq) - 1]
        nll, tokens = nll - picked.sum(), tokens + len(picked)
    return nll / tokens


def test_readme_training_loop(tmp_path, monkeypatch, capsys):
    """docs/training.md's loop runs as printed; each call sees the latest weights, and never recompiles."""
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(readme_loop(), "docs/training.md", "exec"), scope)
    probe, model, tokenizer = scope["probe"], scope["model"], scope["tokenizer"]
    rows = read_rows(str(tmp_path / "runs" / "in_loop" / FILENAME))
    assert [r["step"] for r in rows] == [0, 5, 10]
    assert rows[0]["traces"] > 0 and len({r["traces"] for r in rows}) == 1  # compiled once, on the first call
    assert sum(probe.compilations.values()) == rows[0]["traces"]
    losses = [r["heldout_loss"] for r in rows]
    assert losses[0] > losses[1] > losses[2]  # training lowers the held-out loss the callback sees
    for name in probe.methods:  # each proxy's numbers move with the weights
        keys = [k for k in scope["metrics"] if k.startswith(name) and not k.endswith("_stderr")]
        assert [rows[0][k] for k in keys] != [rows[-1][k] for k in keys], f"{name} did not move: {rows}"
    assert {k: rows[-1][k] for k in scope["metrics"]} == pytest.approx(scope["metrics"])
    ref = reference_heldout_loss(model, tokenizer, probe.heldout, probe.heldout_chars)
    assert rows[-1]["heldout_loss"] == pytest.approx(ref, rel=1e-4)
    assert capsys.readouterr().out.count("train loss") == 3


def test_callable_lm_matches_module(tokenizer, tmp_path):
    """A CallableLM of the same weights gives the module's numbers; later calls take its params."""
    model = tiny(tokenizer)
    graphdef, _ = nnx.split(model)

    def apply(params, ids, mask):
        out = nnx.merge(graphdef, params)(ids, mask)
        return out.logits, out.last_hidden_state

    settings = dict(methods=("heldout", "byod_word_order"), examples=8, heldout_texts=8, batch_size=8)
    by_module = ProxyCallback(tokenizer, tmp_path / "module", **settings)
    by_callable = ProxyCallback(tokenizer, tmp_path / "callable", **settings)
    train_step = training(model, 1e-2)
    batches = np.random.default_rng(0).integers(3, 5000, size=(4, 4, 32))
    seen, traces = [], []
    for step in range(3):
        params = nnx.to_pure_dict(nnx.state(model))
        wrapped = by_callable(step, CallableLM(apply, params, max_length=256) if step == 0 else params)
        traces.append(sum(by_callable.compilations.values()))
        assert wrapped == pytest.approx(by_module(step, model), rel=1e-4, abs=1e-5)
        seen.append(wrapped)
        for batch in batches[2 * step:2 * step + 2] if step < 2 else []:
            train_step(batch)
    assert traces[0] == traces[-1] > 0
    assert seen[0]["heldout_loss"] != seen[1]["heldout_loss"]
    assert len(read_rows(str(tmp_path / "callable" / FILENAME))) == 3


def test_bad_input(tokenizer, tmp_path):
    """A first call without a model, a model of another shape later, a bad step or method: one clear error."""
    with pytest.raises(LmprobeError, match="unknown method.*heldout"):
        ProxyCallback(tokenizer, methods=("perplexity",))
    probe = ProxyCallback(tokenizer, tmp_path, methods=("heldout",), heldout_texts=4)
    model = tiny(tokenizer)
    with pytest.raises(LmprobeError, match="first call needs the model itself"):
        probe(0, nnx.state(model))
    probe(0, model)
    with pytest.raises(LmprobeError, match="update: .*(graph|leaf)"):
        probe(1, tiny(tokenizer, hidden=48))
    with pytest.raises(LmprobeError, match="not an integer"):
        probe("last", model)
    assert [r["step"] for r in read_rows(str(tmp_path / FILENAME))] == [0]


def test_torn_line_keeps_earlier_rows(tmp_path):
    """A crash mid-write leaves a partial last line: earlier rows stay whole and the next row starts afresh."""
    path = str(tmp_path / FILENAME)
    append_row(path, {"step": 0, "loss": 1.5})
    with open(path, "ab") as f:
        f.write(b'{"step": 1, "lo')  # the crash
    append_row(path, {"step": 2, "loss": float("nan")})
    assert read_rows(path) == [{"step": 0, "loss": 1.5}, {"step": 2, "loss": None}]


def test_methods_the_model_cannot_run_are_refused_before_any_work(tokenizer, tmp_path):
    """A logits-only callable with the default methods: one line naming the methods at the first call, at once."""
    model = tiny(tokenizer)
    graphdef, params = nnx.split(model)
    logits_only = CallableLM(lambda p, ids, mask: nnx.merge(graphdef, p)(ids, mask).logits, params, max_length=256)
    probe = ProxyCallback(tokenizer, tmp_path, heldout_texts=4, examples=8)
    start = time.perf_counter()
    with pytest.raises(LmprobeError, match=r"ProxyCallback: syntextbench needs hidden states .*: drop it \(methods="
                                           r"\('heldout', 'byod_negation', 'byod_word_order', 'byod_long_range'"):
        probe(0, logits_only)
    assert time.perf_counter() - start < 5 and probe.scorer is None and not (tmp_path / FILENAME).exists()
    with_hidden = CallableLM(lambda p, ids, mask: (lambda o: (o.logits, o.last_hidden_state))(
        nnx.merge(graphdef, p)(ids, mask)), params, max_length=256)
    with pytest.raises(LmprobeError, match="synbench needs the model's token embeddings"):
        ProxyCallback(tokenizer, methods=("synbench", "heldout"), heldout_texts=4)(0, with_hidden)


class OwnDecoder(nnx.Module):
    """A decoder of the user's own (no lmprobe family): embeddings, a causal running mean, a tied head."""

    def __init__(self, vocab, rngs):
        self.embed = nnx.Embed(vocab, 16, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        h = self.embed(input_ids)
        h = jnp.cumsum(h * attention_mask[..., None], axis=1) / jnp.arange(1, h.shape[1] + 1)[:, None]
        return self.embed.attend(h), h


def test_a_foreign_nnx_module_is_probed_as_it_trains(tokenizer, tmp_path):
    """The module itself on every call (the trainer's nnx.Optimizer updates it in place): new numbers,
    no new compilation, and the held-out loss of the module's own forward pass."""
    module = OwnDecoder(len(tokenizer), nnx.Rngs(0))
    probe = ProxyCallback(tokenizer, tmp_path, methods=("heldout", "byod_word_order"), heldout_texts=4,
                          examples=8, max_length=64)
    first = probe(0, module)
    traces = sum(probe.compilations.values())
    module.embed.embedding[...] = module.embed.embedding[...] * 1.5  # a training step, in place
    second = probe(1, module)
    assert sum(probe.compilations.values()) == traces and first["heldout_loss"] != second["heldout_loss"]
    graphdef, state = nnx.split(module)

    class Out:  # the module's outputs as reference_heldout_loss reads them
        def __init__(self, logits):
            self.logits = logits

    reference = reference_heldout_loss(lambda ids, mask: Out(nnx.merge(graphdef, state)(ids, mask)[0]), tokenizer,
                                       probe.heldout, probe.heldout_chars)
    assert second["heldout_loss"] == pytest.approx(reference, rel=1e-4)
