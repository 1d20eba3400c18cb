"""Compile before you rent, from a front end: ``--compile_only`` (``--target``) compiles every step the run
would execute at the run's batch geometry (lmprobe.planning.aot), and reports it in results.json. The CPU
tests compare it with a real run of the same command; the TPU tests compile a small model for v5e-8
with libtpu (the test extra). Small sets: a few seconds per compile."""

import collections
import importlib
import json
import re

import jax
import jax.numpy as jnp
import pytest

from lmprobe.cli import syntextbench
from lmprobe.engine.runner import Runner
from lmprobe.methods.byod import METRICS as BYOD_METRICS
from lmprobe.planning import targets

needs_libtpu = pytest.mark.skipif(not targets.libtpu_available(),
                                  reason="libtpu is not installed (the test extra installs it)")
SMALL = ["--lexicon=afinn", "--n=200", "--levels=0", "--no_baselines", "--batch_size=4"]


@pytest.fixture(autouse=True)
def tpu_precision():
    """Matmuls at the TPU's default precision, as a run has them (Pallas TPU kernels refuse 'highest')."""
    with jax.default_matmul_precision("default"):
        yield


def _shape(a) -> str:
    return f"{jnp.dtype(a.dtype).name}[{','.join(map(str, a.shape))}]"


def _real_run(monkeypatch, argv, main=syntextbench.main) -> collections.Counter:
    """(step, argument shapes) -> calls, of every step and program (Runner.program) a real run of ``argv``
    executed."""
    seen = collections.Counter()
    run, program = Runner.run, Runner.program

    def spy(self, step, calls, readback=None):
        calls = list(calls)
        name = next(k[0] for k, f in self._jitted.items() if f is step.jitted)
        for args in calls:
            seen[(name, tuple(_shape(a) for a in args if hasattr(a, "shape")))] += 1
        return run(self, step, calls, readback)

    def program_spy(self, name, fn, *args, **static):
        seen[(name, tuple(_shape(a) for a in jax.tree.leaves(args) if hasattr(a, "shape")))] += 1
        return program(self, name, fn, *args, **static)

    monkeypatch.setattr(Runner, "run", spy)
    monkeypatch.setattr(Runner, "program", program_spy)
    main(argv)
    monkeypatch.undo()
    return seen


def _labelled(tmp_path, rows: int = 20):
    """A small labelled CSV (text, label 0/1): a dataset that loads in no time."""
    data = tmp_path / "data.csv"
    data.write_text("text,label\n" + "\n".join(f"film {i} {('dull', 'fine')[i % 2]},{i % 2}"
                                                for i in range(rows)) + "\n")
    return f"--dataset={data}"


def _report(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "extra"), [("minilm-l6", []), ("tiny_smollm2_dir", ["--icl_examples=4"])])
def test_compile_only_compiles_every_step_the_run_runs(model, extra, tmp_path, monkeypatch, request):
    """The same command run for real and compiled only (this host's CPU): the same steps at the same
    shapes, called as often; the compile-only run writes its report and no embedding cache. (The decoder:
    a tiny random SmolLM2 with its tokenizer, so the run's batch geometry.)"""
    model_path = request.getfixturevalue(model) if model.startswith("tiny") else model
    argv = [f"--model={model_path}", *SMALL, *extra]
    ran = _real_run(monkeypatch, [*argv, f"--output_dir={tmp_path}/run"])
    syntextbench.main([*argv, "--compile_only", f"--output_dir={tmp_path}/aot"])
    report = _report(tmp_path / "aot" / "results.json")
    compiled = collections.Counter()
    for s in report["steps"]:
        compiled[(s["step"], tuple(s["shapes"]))] += s["calls"]
    assert compiled == ran
    kernels = {"accuracy_margin", "score"}  # SynTextBench's programs on the embeddings (one named as a step)
    assert {name for name, _ in ran} == ({"embed"} | kernels if model == "minilm-l6" else {"embed", "score"} | kernels)
    assert sum(not s["model_step"] for s in report["steps"]) == 2
    assert report["compile_only"] and report["fits"] is None  # CPU: no memory limit known
    assert all(s["peak_bytes"] > s["argument_bytes"] > 0 for s in report["steps"])
    assert not (tmp_path / "aot" / "cache").exists()


def test_syntextbench_compiles_the_generators_generation(tmp_path, tiny_minilm_dir, tiny_smollm2_dir):
    """--generator (A.2): the generator's report (generator/results.json) holds its constrained generation, one
    batch of 16 starting tokens per 16 sentences of each split (180 + 20 at n = 200, one level); the model's
    steps follow on the LM-free sentences, said in its notes."""
    syntextbench.main([f"--model={tiny_minilm_dir}", f"--generator={tiny_smollm2_dir}", "--lexicon=afinn", "--n=200",
                       "--levels=0", "--no_baselines", "--batch_size=16", "--generator_max_tokens=4", "--compile_only",
                       f"--output_dir={tmp_path}"])
    generator = _report(tmp_path / "generator" / "results.json")
    calls = {tuple(s["shapes"][:2]): s["calls"] for s in generator["steps"] if s["step"] == "generate"}
    assert sum(calls.values()) == 12 + 2 and generator["model"] == tiny_smollm2_dir, calls  # ceil(180/16), ceil(20/16)
    model = _report(tmp_path / "results.json")
    assert model["model"] == tiny_minilm_dir and any("LM-free sentences" in n for n in model["notes"])


@pytest.mark.slow
def test_byod_compile_only_compiles_every_step_the_run_runs(tmp_path, monkeypatch):
    """BYOD's scoring of pairs, hidden states at positions and pair statistics: the same (step, shapes)
    and calls as a real run of the same command."""
    from lmprobe.cli import byod

    argv = ["--model=smollm2-135m", "--corpus=fortunes", "--max_examples=4", "--metrics=negation,word_order,entropy",
            "--benign=", "--batch_size=2"]
    ran = _real_run(monkeypatch, [*argv, f"--output_dir={tmp_path}/run"], main=byod.main)
    byod.main([*argv, "--compile_only", f"--output_dir={tmp_path}/aot"])
    report = _report(tmp_path / "aot" / "results.json")
    compiled = collections.Counter()
    for s in report["steps"]:  # one entry per (step, statics, shapes): statics apart, as the run's traces are
        compiled[(s["step"], tuple(s["shapes"]))] += s["calls"]
    assert compiled == ran and len({name for name, _ in ran}) >= 3


def test_a_geometry_that_does_not_fit_is_reported_and_named(tmp_path, capsys):
    """--hbm below one batch's peak: results.json says which steps do not fit, and the run ends with
    one line naming the flags that fix it (status 2)."""
    with pytest.raises(SystemExit) as e:
        syntextbench.main(["--model=minilm-l6", *SMALL, "--compile_only", "--hbm=16MiB", f"--output_dir={tmp_path}"])
    report = _report(tmp_path / "results.json")
    assert e.value.code == 2 and report["fits"] is False and report["hbm_bytes"] == 16 * 2**20
    steps = [s for s in report["steps"] if s["model_step"]]  # the kernels on 200 embeddings fit
    assert steps and all(s["fits"] is False for s in steps)  # fp32 parameters alone exceed 16 MiB a device
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]  # after the log lines
    assert len(err) == 1 and re.search(r"does not fit .* --batch_size, .*--target or --num_slices", err[0])


def test_a_program_that_does_not_fit_names_the_sample_size(tmp_path, capsys, tiny_minilm_dir):
    """The loss-data probes (50 jobs' Adam state, about 0.5 GiB) above --hbm while the tiny model's steps fit:
    the one line names the program and what changes it (samples, levels, the baselines), not the batch or the
    mesh, which do not."""
    with pytest.raises(SystemExit) as e:
        syntextbench.main([f"--model={tiny_minilm_dir}", "--lexicon=afinn", "--n=200", "--levels=0",
                           "--baseline_level=0", "--baseline_steps=100", "--compile_only", "--hbm=128MiB",
                           f"--output_dir={tmp_path}"])
    report = _report(tmp_path / "results.json")
    assert e.value.code == 2 and report["fits"] is False
    assert all(s["fits"] for s in report["steps"] if s["model_step"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(err) == 1 and re.search(r"its probe_\w+ program \(on one device.* fewer samples \(--n\) or levels, "
                                       r"or leave out its loss-data baselines \(--no_baselines\)", err[0])


@needs_libtpu
def test_a_batch_the_tpu_compiler_refuses_does_not_fit(tmp_path, capsys):
    """A config whose one-layer MLP is 2**27 wide (16 GiB a matrix, gathered whole under fsdp): the TPU
    compiler runs out of memory (RESOURCE_EXHAUSTED), reported as not fitting, never a traceback. No
    tokenizer: token counts estimated from words, said in the report."""
    config = tmp_path / "wide.json"
    config.write_text(json.dumps(dict(model_type="gpt2", n_layer=1, n_embd=64, n_head=4, vocab_size=256,
                                      n_positions=128, n_inner=2**27)))
    with pytest.raises(SystemExit) as e:
        syntextbench.main([f"--model={config}", "--lexicon=afinn", "--n=200", "--levels=0", "--no_baselines",
                           "--icl_examples=0", "--batch_size=4", "--target=v5e-8", "--compile_only",
                           f"--output_dir={tmp_path}/out"])
    report = _report(tmp_path / "out" / "results.json")
    assert e.value.code == 2 and report["fits"] is False
    steps = [s for s in report["steps"] if s["model_step"]]
    assert steps and all(s["exhausted"] and s["fits"] is False for s in steps)
    assert any("tokenizer is not on this host" in n for n in report["notes"])


@pytest.mark.parametrize(("argv", "says"), [
    (["--target=v9-8", "--compile_only"], r"^error: --target=v9-8 is not a TPU slice lmprobe knows: use one of v4-8"),
    (["--target=v5e-8"], r"^error: --target=v5e-8 compiles for a TPU slice this run is not on: add --compile_only"),
])
def test_bad_targets_are_one_line(argv, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        syntextbench.main(["--model=minilm-l6", *argv, f"--output_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and re.search(says, err)


def test_a_front_end_without_target_names_those_with_it(capsys):
    from lmprobe.cli import train

    with pytest.raises(SystemExit) as e:
        train.main(["--target=v5e-8"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert re.search(r"^error: --target compiles a model's steps .* has no such flag: .*lmprobe syntextbench", err)


def test_synbench_compiles_embed_inputs_for_every_batch(tmp_path, tiny_minilm_dir):
    """SynBench's language model: Scorer.embed_inputs of every Gaussian batch of every scale, split and
    --input_scales factor (2 x 2 x 2 x 3 batches of 16, the last one cut short and padded), at
    [batch_size, seq_len, hidden]; no embedding moments computed, no representation cached."""
    from lmprobe.cli import synbench

    synbench.main([f"--model={tiny_minilm_dir}", "--n=40", "--scales=1,5", "--eps=0", "--a_t=0.7", "--batch_size=16",
                   "--seq_len=4", "--input_scales=1,2", "--compile_only", f"--output_dir={tmp_path}"])
    report = _report(tmp_path / "results.json")
    (step,) = [s for s in report["steps"] if s["model_step"]]
    assert (step["step"], step["shapes"], step["calls"]) == ("embed_inputs", ["float32[16,4,64]", "int32[16,4]"], 24)
    assert step["static"]["pooling"] == "first_last_avg" and step["static"]["continuous"] is True
    # the metric's programs per --input_scales factor: width 64 > n = 40, so in the within-class support first
    programs = {s["step"]: (s["shapes"], s["calls"]) for s in report["steps"] if not s["model_step"]}
    assert programs == {"support_basis": (["float32[2,40,64]", "int32[2,40]"], 2),
                        "to_support": (["float32[2,40,64]", "float32[2,64,40]"], 4),  # train and test
                        "accuracy_bound": (["float32[40,40]", "int32[40]", "float32[40,40]", "int32[40]",
                                            "float32[1]"], 4)}  # per scale
    assert report["compile_only"] and any("not compiled: the embedding moments" in n for n in report["notes"])
    assert not (tmp_path / "cache").exists()


def test_synbench_compiles_l1_classifiers_and_the_robust_probe(tmp_path, tiny_minilm_dir):
    """An l1 budget's classifiers (one program over the scales) and the robust probe on the representation
    (Table 6: a standard and a robust probe share one training program; each evaluated in one batch): with the
    embedding of the probe's own 40 + 40 inputs, (5 + 5) + (3 + 3) batches of 16."""
    from lmprobe.cli import synbench

    synbench.main([f"--model={tiny_minilm_dir}", "--n=80", "--scales=1", "--eps=0,0.5", "--a_t=0.7", "--norm=1",
                   "--robust_probe", "--probe_attack=representation", "--probe_n=40", "--probe_steps=5",
                   "--no_baselines", "--batch_size=16", "--seq_len=4", "--compile_only", f"--output_dir={tmp_path}"])
    steps = {s["step"]: s for s in _report(tmp_path / "results.json")["steps"]}
    assert set(steps) == {"embed_inputs", "lp_accuracy_bound", "robust_probe_fit", "robust_probe_correct"}
    assert steps["embed_inputs"]["calls"] == 16
    assert (steps["lp_accuracy_bound"]["shapes"], steps["lp_accuracy_bound"]["calls"]) == (
        ["float32[1,80,64]", "int32[1,80]", "float32[1,80,64]", "int32[1,80]", "float32[2]"], 1)
    for name in ("robust_probe_fit", "robust_probe_correct"):
        assert steps[name]["calls"] == 2 and "float32[40,64]" in steps[name]["shapes"], steps[name]
    assert steps["robust_probe_fit"]["static"]["pgd_steps"] == 10


def test_synbench_without_a_language_model_is_refused_in_one_line(tmp_path, capsys):
    from lmprobe.cli import synbench

    with pytest.raises(SystemExit) as e:
        synbench.main(["--model=identity", "--compile_only", f"--output_dir={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1
    assert re.search(r"^error: --compile_only compiles a language model's .* --model=identity .* no engine model",
                     err[0])


@pytest.mark.slow
def test_mstemp_compiles_each_models_generation_and_scoring(tmp_path):
    """MSTemp: one report per model of the run (target and evaluator smollm2-135m, one Scorer as the run
    loads it; the filter minilm-l6): the evaluator's generation (prefill and decode loop) at
    --max_new_tokens for every prompt (4 seeds x 2 candidates), the target's zero-shot scoring, the filter's
    embedding (on the seeds: zeros give no candidate)."""
    from lmprobe.cli import mstemp

    mstemp.main(["--model=smollm2-135m", "--evaluator=smollm2-135m", _labelled(tmp_path), "--max_examples=4",
                 "--n_templates=2", "--m_samples=1", "--max_new_tokens=8", "--batch_size=4",
                 "--label_names=negative,positive", "--compile_only", f"--output_dir={tmp_path}"])
    report = _report(tmp_path / "results.json")
    assert report["compile_only"] and list(report["models"]) == ["smollm2-135m", "minilm-l6"]
    steps = report["models"]["smollm2-135m"]["steps"]
    generate = [s for s in steps if s["step"] == "generate"]
    assert generate and all(s["static"]["max_new_tokens"] == 8 for s in generate)
    rows = sum(s["calls"] * int(re.match(r"int32\[(\d+),", s["shapes"][0]).group(1)) for s in generate)
    assert 8 <= rows < 8 + 4 * len(generate)  # every prompt, in batches of at most 4 rows
    assert {"generate", "score"} <= {s["step"] for s in steps}
    assert any("no sample is generated" in n for n in report["models"]["minilm-l6"]["notes"])
    (embed,) = report["models"]["minilm-l6"]["steps"]
    assert embed["step"] == "embed" and embed["calls"] == 1 and embed["shapes"][0].startswith("int32[4,")


def test_scope_compiles_the_reference_and_each_model(tmp_path, tiny_smollm2_dir):
    """SCoPE: the reference's and each model's (--model) zero-shot steps (label words '0' and '1': next-token
    or answer scoring) over the base texts and the search's perturbations, a report each in one results.json."""
    from lmprobe.cli import scope

    scope.main([f"--reference={tiny_smollm2_dir}", f"--model={tiny_smollm2_dir}@bf16", _labelled(tmp_path),
                "--max_examples=2", "--batch_size=2", "--trials=1", "--capability=typo", "--bootstrap=0",
                "--compile_only", f"--output_dir={tmp_path}"])
    report = _report(tmp_path / "results.json")
    assert list(report["models"]) == [tiny_smollm2_dir, f"{tiny_smollm2_dir}@bf16"] and report["fits"] is None
    for name, model in report["models"].items():
        assert model["steps"] and {s["step"] for s in model["steps"]} <= {"scope_next_token", "score"}, name
    reference, target = (sum(s["calls"] for s in m["steps"]) for m in report["models"].values())
    assert reference > target >= 2  # the search's calls are the reference's; a model scores texts and pairs


@pytest.mark.parametrize(("argv", "says"), [
    (["--target=smollm2-135m@bf16"], r"^error: --target=smollm2-135m@bf16 is not a TPU slice: the models it named "
                                     r"are now --model=smollm2-135m@bf16"),
    (["--reference=minilm-l6", "--model=minilm-l6@int8", "--head=checkpoint", "--compile_only"],
     r"^error: --compile_only reads no weights, and minilm-l6's head is read from its checkpoint"),
])
def test_scope_old_target_flag_and_checkpoint_heads_are_one_line(argv, says, tmp_path, capsys):
    """SCoPE's models moved from --target to --model: an old --target=MODEL says so; --compile_only refuses a
    head read from a checkpoint (it reads no weights)."""
    from lmprobe.cli import scope

    with pytest.raises(SystemExit) as e:
        scope.main([*argv, _labelled(tmp_path), "--max_examples=4", f"--output_dir={tmp_path}"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert e.value.code == 2 and len(err) == 1 and re.search(says, err[0])


def _syntextbench_v5e_8(report, out):
    """(Tiny) MiniLM: the TPU compiler's memory and cost per step, bf16, 8 rows per batch on 8 data shards; the
    table labels its times as estimates."""
    assert (report["platform"], report["dtype"]) == ("tpu", "bfloat16")
    assert report["hbm_bytes"] == targets.target("v5e-8").chip.hbm_bytes
    steps = [s for s in report["steps"] if s["model_step"]]
    assert steps and all(s["step"] == "embed" and s["global_rows"] == 8 and s["rows_per_device"] == 1 for s in steps)
    assert all(s["cost"]["useful_flops"] > 0 and s["compile_seconds"] > 0 for s in steps)
    assert report["estimated_seconds"] > 0
    # the scoring kernels on one chip, without an estimate (the probes are compiled on CPU by
    # test_a_program_that_does_not_fit_names_the_sample_size)
    programs = {s["step"]: s for s in report["steps"] if not s["model_step"]}
    assert set(programs) == {"accuracy_margin", "score"}
    assert all(s["fits"] and s["peak_bytes"] > 0 and s["cost"]["overhead"] is None and "estimated_seconds" in s
               and s["estimated_seconds"] is None for s in programs.values())
    assert programs["accuracy_margin"]["shapes"][0] == "float32[1,180,64]"  # 1 level, 90% of 200, width 64
    assert "ESTIMATE (TPU cost model, not measured)" in out and "without an estimate" not in out


def _synbench_v5e_8(report, out):
    """(Tiny) MiniLM's embed_inputs: 8 rows on 8 data shards, bf16, the TPU compiler's verdict and cost; the
    robust probe on the representation (the largest budget: a standard and a robust probe) on one chip."""
    assert report["dtype"] == "bfloat16"
    (step,) = [s for s in report["steps"] if s["model_step"]]
    assert (step["step"], step["global_rows"], step["calls"]) == ("embed_inputs", 8, 2 * 2 + 2 * 2)  # 16 a split
    assert step["cost"]["useful_flops"] > 0
    assert {s["step"]: s["calls"] for s in report["steps"]}["robust_probe_fit"] == 2


def _scope_v5e_8(report, out):
    """SCoPE with fine-tuned heads (encoders): Adam's initial state, each training step (5 epochs of one batch)
    on the model's fsdp shards, the trained head's scoring (a black box of it samples those scores). Adam's
    moments are sharded as the parameters: a step's arguments are about 3x the parameters per device (8x
    more, were they replicated)."""
    (model,) = report["models"].values()
    steps = {s["step"]: s for s in model["steps"]}
    assert set(steps) == {"finetune_init", "finetune_step", "scope_classify"}
    assert steps["finetune_init"]["calls"] == 1 and steps["finetune_step"]["calls"] == 5
    assert steps["finetune_step"]["shapes"][:2] == ["int32[16,8]", "int32[16,8]"]  # the batch, over 8 shards
    params = model["param_bytes_per_device"]
    assert 3 * params <= steps["finetune_step"]["argument_bytes"] <= 4 * params, (params, steps["finetune_step"])
    assert not steps["finetune_step"]["model_step"] and steps["scope_classify"]["model_step"]


def _byod_v5e_8(report, out):
    """Every metric at once: each of them compiled, none refused."""
    (compiled,) = [n for n in report["notes"] if n.startswith("metrics compiled: ")]
    assert compiled.removeprefix("metrics compiled: ").split(", ") == list(BYOD_METRICS)
    assert not [n for n in report["notes"] if "not compiled, it could not run" in n], report["notes"]
    assert {"score_packed", "hidden_at", "pair_stats", "generate"} <= {s["step"] for s in report["steps"]}


def _mstemp_v5e_8(report, out):
    """The evaluator's generation and the target's scoring (one Scorer: the same model), the filter's embedding."""
    decoder, encoder = report["models"].values()
    assert {"generate", "score"} <= {s["step"] for s in decoder["steps"]}
    assert {s["step"] for s in encoder["steps"]} == {"embed"}


def _v5e_8_case(method: str, tmp_path, decoder: str, encoder: str) -> tuple[list[str], object]:
    """Tiny settings of each front end (a tiny SmolLM2 and MiniLM; a few shapes each), and what its report holds."""
    return {
        "syntextbench": ([f"--model={encoder}", "--lexicon=afinn", "--n=200", "--levels=0", "--no_baselines",
                          "--batch_size=1"], _syntextbench_v5e_8),
        "synbench": ([f"--model={encoder}", "--n=16", "--scales=1", "--eps=0,0.5", "--a_t=0.7", "--batch_size=1",
                      "--seq_len=4", "--robust_probe", "--probe_attack=representation", "--probe_steps=2"],
                     _synbench_v5e_8),
        "byod": ([f"--model={decoder}", "--corpus=fortunes", "--max_documents=40", "--max_examples=2",
                  f"--metrics={','.join(BYOD_METRICS)}", "--batch_size=1"], _byod_v5e_8),
        "scope": ([f"--reference={encoder}", f"--model=blackbox:{encoder}", _labelled(tmp_path), "--max_examples=2",
                   "--batch_size=2", "--trials=1", "--capability=typo", "--bootstrap=0"], _scope_v5e_8),
        "mstemp": ([f"--model={decoder}", f"--evaluator={decoder}", f"--filter={encoder}", _labelled(tmp_path),
                    "--max_examples=2", "--n_templates=1", "--m_samples=1", "--max_new_tokens=4", "--batch_size=1",
                    "--label_names=negative,positive"], _mstemp_v5e_8),
    }[method]


@needs_libtpu
@pytest.mark.parametrize("method", ["syntextbench", "synbench", "byod", "scope", "mstemp"])
def test_every_front_end_compiles_its_method_for_v5e_8(method, tmp_path, capsys, tiny_smollm2_dir, tiny_minilm_dir):
    """Each method's own run on compile-only Scorers for a v5e-8 from this host (libtpu's compile-only client:
    nothing may be placed on its devices), to its report: results.json (per model), the table on stdout."""
    argv, check = _v5e_8_case(method, tmp_path, tiny_smollm2_dir, tiny_minilm_dir)
    importlib.import_module(f"lmprobe.cli.{method}").main([*argv, "--target=v5e-8", "--compile_only",
                                                           f"--output_dir={tmp_path}/out"])
    report = _report(tmp_path / "out" / "results.json")
    models = list(report["models"].values()) if "models" in report else [report]
    assert report["compile_only"] and report["fits"] is True and models
    for model in models:
        assert (model["target"], model["devices"]) == ("v5e-8", 8) and model["steps"], model["model"]
    out = capsys.readouterr().out
    assert out.count("compiled, not run: ") == len(models) and "report in " in out
    check(report, out)
