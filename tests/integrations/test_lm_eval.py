"""lmprobe as an lm-eval backend, against lm-eval's own HF backend (``hf``) on the same weights: a tiny random
Llama for every request type (shared contexts, left truncation, rolling windows, generation rounds and stop
sequences), and SmolLM2-135M on the local sentiment tasks in fixtures/ (a labelled CSV)."""

import copy
import functools
import importlib
import json
import pathlib
import sys

import jax
import lm_eval
import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement
from lmprobe.errors import LmprobeError
from lmprobe.integrations.lm_eval import LmprobeLM, main
from lmprobe.planning import targets
from tests.engine.conftest import tiny_llama_dir  # noqa: F401  (a fixture)

FIXTURES = pathlib.Path(__file__).with_name("fixtures")


def words(*ids) -> str:
    return " ".join(f"w{i}" for i in ids)


def requests(kind, *args):
    return [Instance(kind, {}, a if isinstance(a, tuple) else (a,), i) for i, a in enumerate(args)]


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):  # noqa: F811
    loaded = load(str(tiny_llama_dir))
    ours = LmprobeLM(scorer=Scorer(loaded.model, loaded.tokenizer, batch_size=2))
    return ours, HFLM(pretrained=str(tiny_llama_dir), device="cpu", dtype="float32", batch_size=4)


def test_loglikelihood_matches_hf_backend(tiny):
    ours, hf = tiny
    context = words(5, 6, 7)
    with torch.no_grad():
        greedy = int(hf.model(torch.tensor([[5, 6, 7]])).logits[0, -1].argmax())
    long_context = words(*range(3, 153))  # 150 tokens: cut on the left to the context of 128
    shared = words(*range(20, 45))  # long enough to pack its answers of several tokens in one row
    reqs = requests("loglikelihood", (context, " w8"), (context, " w9 w10"), (context, f" w{greedy}"),
                    (context + " ", "w8"), ("", words(3, 4)), (long_context, " w12 w13"), (context, " w8"),
                    (long_context, " w14 w15 w16"), (shared, " w8 w9"), (shared, " w10 w11 w12"), (shared, " w13"))
    got, ref = ours.loglikelihood(reqs), hf.loglikelihood(reqs)
    np.testing.assert_allclose([g[0] for g in got], [r[0] for r in ref], atol=1e-4)
    assert [g[1] for g in got] == [r[1] for r in ref]
    assert got[2][1] and got[0] == got[3] == got[6]
    assert ours.scorer.runner.compilations["continuations_packed"]  # short sequences share rows: all of these
    alone = requests("loglikelihood", (long_context, " w12 w13"))  # one sequence: a plain causal row
    np.testing.assert_allclose(ours.loglikelihood(alone)[0][0], ref[5][0], atol=1e-4)
    assert ours.scorer.runner.compilations["continuations"]


def test_bad_requests_raise_one_clear_error_before_running(tiny):
    ours, _ = tiny
    compiled = dict(ours.scorer.runner.compilations)
    with pytest.raises(LmprobeError, match="request 1 has an empty continuation"):
        ours._loglikelihood_tokens([(None, [5, 6], [7]), (None, [5, 6], [])])
    vocab = ours.scorer.vocab_size
    with pytest.raises(LmprobeError, match=f"request 1 has token id {vocab + 3}, outside.*vocabulary of {vocab}"):
        ours._loglikelihood_tokens([(None, [5, 6], [7]), (None, [vocab + 3, 6], [7, 8])])  # another model's prefix
    with pytest.raises(LmprobeError, match="prefix_token_id=.*outside the model's vocabulary"):
        LmprobeLM(scorer=ours.scorer, prefix_token_id=vocab)
    assert dict(ours.scorer.runner.compilations) == compiled  # nothing reached a jitted step


def test_loglikelihood_rolling_matches_hf_backend(tiny):
    """A document longer than the context (the largest bucket) is scored in lm-eval's disjoint windows of
    max_length tokens, each a plain causal row."""
    ours, hf = tiny
    reqs = requests("loglikelihood_rolling", words(3, 4, 5), words(*range(3, 131)), words(*(list(range(3, 250)) * 2)))
    np.testing.assert_allclose(ours.loglikelihood_rolling(reqs), hf.loglikelihood_rolling(reqs), rtol=1e-6, atol=1e-4)


def test_generate_until_matches_hf_backend_greedy(tiny, monkeypatch):
    ours, hf = tiny
    prompts = [words(5, 6, 7), words(*range(3, 203)), words(9)]  # the long one is cut to 128 - 40 tokens
    free = hf.generate_until(requests("generate_until", *[(p, {"until": [], "max_gen_toks": 40}) for p in prompts]))
    assert ours.generate_until(requests("generate_until", *[(p, {"until": [], "max_gen_toks": 40})
                                                             for p in prompts])) == free  # rounds of 32, then 8
    stop = free[0].split()[35]  # a stop sequence met in the second round
    rounds, generate = [], ours.scorer.generate  # what the engine returns: a row ends at its stop id
    monkeypatch.setattr(ours.scorer, "generate", lambda *a, **kw: rounds.append((kw, generate(*a, **kw))) or
                        rounds[-1][1])
    reqs = requests("generate_until", (prompts[0], {"until": [stop], "max_gen_toks": 40}),
                    (prompts[2], {"until": ["w"], "max_gen_toks": 3, "do_sample": False}))
    got = ours.generate_until(reqs)
    assert got == hf.generate_until(reqs)
    assert len(got[0].split()) < 36 and got[1] == ""
    # the tokens whose text holds the stop string end the decode loop ("w12" -> w12, w120 .. w129)
    assert ours.stop_ids([stop]) == tuple(i for i in range(3, 256) if stop in f"w{i}")
    first = next(k for k, word in enumerate(free[0].split()) if stop in word)
    (ids_0, (row_0,)), (ids_1, (row_1,)), (ids_w, (row_w,)) = [(kw["stop_ids"], out) for kw, out in rounds]
    eos = (ours.eot_token_id,)  # always among the stop ids: with or without stop strings, one program
    assert ids_0 == ids_1 == ours.stop_ids([stop]) + eos and len(ids_w) == 253 + 1  # every word holds "w"
    assert (len(row_0), len(row_1), len(row_w)) == (32, first - 31, 1)  # each round ends at its stop id
    assert stop in ours.tok_decode(row_1[-1:])
    sampled = requests("generate_until", *[(p, {"until": [], "max_gen_toks": 5, "do_sample": True, "temperature": 0.8})
                                            for p in prompts])
    assert ours.generate_until(sampled) == ours.generate_until(sampled)  # seeded


def test_registered_model_args_and_errors(tiny, monkeypatch):
    ours, _ = tiny
    assert lm_eval.api.registry.get_model("lmprobe") is LmprobeLM
    assert lm_eval.api.registry.get_model("hf") is HFLM  # lm-eval's own backends still load
    with pytest.raises(LmprobeError, match="unknown batchsize.*known: pretrained"):
        LmprobeLM.create_from_arg_string("pretrained=smollm2-135m,batchsize=4")
    with pytest.raises(LmprobeError, match="target=v5e-8 compiles for a TPU slice .* add compile_only=True"):
        LmprobeLM.create_from_arg_string("pretrained=smollm2-135m,target=v5e-8")
    # lm-eval always passes --batch_size and --device; model_args win, device is JAX's business
    LmprobeLM.create_from_arg_obj({"scorer": ours.scorer, "batch_size": 4}, {"batch_size": 1, "device": "cuda"})
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    monkeypatch.delitem(sys.modules, "lmprobe.integrations.lm_eval")
    with pytest.raises(ImportError, match=r'pip install -e "\.\[lm_eval\]"'):
        importlib.import_module("lmprobe.integrations.lm_eval")


def test_the_command_without_lm_eval_is_one_line(monkeypatch, capsys):
    from lmprobe.integrations import lm_eval_main

    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as in an install without the lm_eval extra
    assert lm_eval_main(["--help"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and 'pip install -e ".[lm_eval]"' in err


def test_command_line_runs_a_local_task(tiny_llama_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(sys, "argv", sys.argv[:1])
    # lm-eval's own task index takes seconds to build: only the fixtures' tasks here
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", functools.partial(TaskManager, include_defaults=False))
    main(["--model", "lmprobe", "--model_args", f"pretrained={tiny_llama_dir},batch_size=2", "--tasks",
          "lmprobe_sentiment", "--include_path", str(FIXTURES), "--limit", "2", "--output_path", str(tmp_path)])
    assert list(tmp_path.rglob("results_*.json"))


@pytest.mark.skipif(not targets.libtpu_available(), reason="libtpu is not installed (pip install -e '.[tpu]')")
def test_command_line_compiles_a_local_task_for_v5e_8(tiny_llama_dir, tmp_path, monkeypatch, capsys):  # noqa: F811
    """compile_only=True with target=v5e-8: every request type's steps compiled for the slice (scoring at each
    length bucket, generation's rounds), the report written after each batch of requests and printed last."""
    monkeypatch.setattr(sys, "argv", sys.argv[:1])
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", functools.partial(TaskManager, include_defaults=False))
    report = tmp_path / "report.json"
    main(["--model", "lmprobe", "--model_args", f"pretrained={tiny_llama_dir},batch_size=2,compile_only=True,"
          f"target=v5e-8,report={report}", "--tasks", "lmprobe_sentiment,lmprobe_sentiment_gen", "--include_path",
          str(FIXTURES), "--limit", "2"])
    out = json.loads(report.read_text())
    assert (out["target"], out["devices"], out["fits"]) == ("v5e-8", 8, True)
    assert {s["step"] for s in out["steps"]} == {"continuations_packed", "generate"}
    assert all(s["calls"] >= 1 and s["shapes"][0].startswith("int32[8,") for s in out["steps"])  # 1 row x 8
    printed = capsys.readouterr().out
    assert "compiled, not run" in printed and "metrics above come from zeros" in printed


def transformers_smollm2():
    """transformers' PyTorch Llama holding the embedded GGUF's float32 weights. The weights are read by
    lmprobe's GGUF reader (transformers' own GGUF loading takes 20 s here; tests/test_smollm2.py checks
    the two against each other) and the tokenizer is a copy of lmprobe's, itself transformers' conversion
    of the GGUF's vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmprobe.checkpoints.embedded import embedded_path
    from lmprobe.checkpoints.gguf_io import open_gguf

    config, tensors = open_gguf(embedded_path("smollm2-135m"))
    weights = {name: torch.tensor(tensors.read(name)) for name in tensors.names()}
    return LlamaForCausalLM.from_pretrained(None, config=LlamaConfig(**config), state_dict=weights).eval()


@pytest.mark.slow
def test_smollm2_tasks_match_hf_backend():
    """Per-request log-likelihoods within 1e-4 with the same greedy flags and accuracy; the same generations;
    the rolling log-likelihoods (sums over 10-20 tokens, each token within ~2e-5) within 1e-5 relative."""
    mesh = make_mesh(devices=jax.devices()[:1])  # one device: 8 virtual ones on 2 cores only add time
    loaded = load("smollm2-135m", place=placement(mesh))
    ours = LmprobeLM(scorer=Scorer(loaded.model, loaded.tokenizer, mesh=mesh, batch_size=16))
    hf = HFLM(pretrained=transformers_smollm2(), tokenizer=copy.deepcopy(loaded.tokenizer), device="cpu",
              batch_size=16)
    manager = TaskManager(include_path=str(FIXTURES), include_defaults=False)
    for task, limit in {"lmprobe_sentiment": 16, "lmprobe_sentiment_ppl": 4, "lmprobe_sentiment_gen": 4}.items():
        runs = [lm_eval.simple_evaluate(model=m, tasks=[task], task_manager=manager, limit=limit, log_samples=True,
                                        verbosity="ERROR") for m in (ours, hf)]
        (got, ref), (got_samples, ref_samples) = [[r[key][task] for r in runs] for key in ("results", "samples")]
        for a, b in zip(got_samples, ref_samples, strict=True):
            if task == "lmprobe_sentiment_gen":
                assert a["resps"] == b["resps"]
                continue
            (ll_a, greedy_a), (ll_b, greedy_b) = [
                zip(*[r[0] if isinstance(r[0], tuple) else (r[0], None) for r in s["resps"]]) for s in (a, b)]
            tolerance = {"atol": 1e-4} if task == "lmprobe_sentiment" else {"rtol": 1e-5}
            np.testing.assert_allclose(ll_a, ll_b, **tolerance)
            assert greedy_a == greedy_b
        assert {k: v for k, v in got.items() if "perplexity" not in k and "bits" not in k} == \
               {k: v for k, v in ref.items() if "perplexity" not in k and "bits" not in k}
