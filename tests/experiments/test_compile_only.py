"""Compile before you rent, from a front end: ``--compile_only`` (``--target``) compiles every step the run
would execute at the run's batch geometry (lmprobe.engine.aot), and reports it in results.json. The CPU
tests compare it with a real run of the same command; the TPU tests compile a small model for v5e-8
with libtpu (the test extra). Small sets: a few seconds per compile."""

import collections
import json
import re

import jax
import jax.numpy as jnp
import pytest

from experiments import syntextbench
from lmprobe.engine import targets
from lmprobe.engine.runner import Runner

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
    """(step, argument shapes) -> calls, of every step a real run of ``argv`` executed."""
    seen = collections.Counter()
    run = Runner.run

    def spy(self, step, calls, readback=None):
        calls = list(calls)
        name = next(k[0] for k, f in self._jitted.items() if f is step.func)
        for args in calls:
            seen[(name, tuple(_shape(a) for a in args if hasattr(a, "shape")))] += 1
        return run(self, step, calls, readback)

    monkeypatch.setattr(Runner, "run", spy)
    main(argv)
    monkeypatch.undo()
    return seen


def _report(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "extra"), [("minilm-l6", []), ("smollm2-135m", ["--icl_examples=4"])])
def test_compile_only_compiles_every_step_the_run_runs(model, extra, tmp_path, monkeypatch):
    """The same command run for real and compiled only (this host's CPU): the same steps at the same
    shapes, called as often; the compile-only run writes its report and no embedding cache."""
    argv = [f"--model={model}", *SMALL, *extra]
    ran = _real_run(monkeypatch, [*argv, f"--output_dir={tmp_path}/run"])
    syntextbench.main([*argv, "--compile_only", f"--output_dir={tmp_path}/aot"])
    report = _report(tmp_path / "aot" / "results.json")
    compiled = collections.Counter({(s["step"], tuple(s["shapes"])): s["calls"] for s in report["steps"]})
    assert compiled == ran
    assert {name for name, _ in ran} == ({"embed"} if model == "minilm-l6" else {"embed", "score"})
    assert report["compile_only"] and report["fits"] is None  # CPU: no memory limit known
    assert all(s["peak_bytes"] > s["argument_bytes"] > 0 for s in report["steps"])
    assert not (tmp_path / "aot" / "cache").exists()


@pytest.mark.slow
def test_byod_compile_only_compiles_every_step_the_run_runs(tmp_path, monkeypatch):
    """BYOD's scoring of pairs, hidden states at positions and pair statistics: the same (step, shapes)
    and calls as a real run of the same command."""
    from experiments import byod

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
    assert all(s["fits"] is False for s in report["steps"])  # fp32 parameters alone exceed 16 MiB a device
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]  # after the log lines
    assert len(err) == 1 and re.search(r"does not fit .* --batch_size, .*--target or --num_slices", err[0])


@needs_libtpu
def test_syntextbench_compiles_for_v5e_8(tmp_path, capsys):
    """minilm-l6 for a v5e-8 from this host: the TPU compiler's memory and cost per step, bf16, 8 rows
    per batch on 8 data shards; the table labels its times as estimates."""
    syntextbench.main(["--model=minilm-l6", "--lexicon=afinn", "--n=200", "--levels=0", "--no_baselines",
                       "--batch_size=1", "--target=v5e-8", "--compile_only", f"--output_dir={tmp_path}"])
    report = _report(tmp_path / "results.json")
    assert (report["target"], report["platform"], report["devices"], report["dtype"]) == ("v5e-8", "tpu", 8,
                                                                                         "bfloat16")
    assert report["fits"] is True and report["hbm_bytes"] == targets.target("v5e-8").chip.hbm_bytes
    steps = report["steps"]
    assert steps and all(s["step"] == "embed" and s["global_rows"] == 8 and s["rows_per_device"] == 1 for s in steps)
    assert all(s["cost"]["useful_flops"] > 0 and s["compile_seconds"] > 0 for s in steps)
    assert report["estimated_seconds"] > 0
    assert "ESTIMATE (TPU cost model, not measured)" in capsys.readouterr().out


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
    assert report["steps"] and all(s["exhausted"] and s["fits"] is False for s in report["steps"])
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
    from experiments import train

    with pytest.raises(SystemExit) as e:
        train.main(["--target=v5e-8"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert re.search(r"^error: --target compiles a model's steps .* has no such flag: .*lmprobe syntextbench", err)
