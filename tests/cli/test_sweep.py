"""experiments.sweep on a tiny random Llama's "training run": three HF step directories (and three
lmprobe Orbax steps) with different weights; one row per step, cached steps are not loaded again,
--watch picks up a step written after it started, vanished steps are skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from safetensors.numpy import load_file, save_file

from lmprobe.cli import common, sweep
from lmprobe.evaluate import sweep as sweep_lib
from lmprobe.methods import byod as byod_method
from lmprobe.store import read_json

SMALL = ["--syntextbench_n=200", "--syntextbench_levels=0,0.9", "--synbench_n=80", "--synbench_scales=0.5,2",
         "--byod_examples=4", "--batch_size=32", "--verbosity=warning"]
QUICK = ["--methods=byod", "--byod_examples=4", "--batch_size=8", "--verbosity=warning"]


def _step(tiny_llama_dir, target, scale: float) -> str:
    """The tiny Llama with its weights x ``scale`` at ``target``, written whole under a temporary
    name and renamed (as a trainer does)."""
    tmp = f"{target}.partial"
    shutil.copytree(tiny_llama_dir, tmp)
    tensors = load_file(os.path.join(tmp, "model.safetensors"))
    save_file({k: (v * scale).astype(v.dtype) for k, v in tensors.items()}, os.path.join(tmp, "model.safetensors"),
              metadata={"format": "pt"})
    os.rename(tmp, target)
    return str(target)


@pytest.fixture
def run_dir(tiny_llama_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for step, scale in ((100, 1.0), (200, 0.5), (300, 0.25)):
        _step(tiny_llama_dir, ckpt / f"step_{step}", scale)
    return ckpt


@pytest.fixture
def loads(monkeypatch):
    """The paths common.load_scorer loads, in order."""
    seen, real = [], common.load_scorer

    def counting(args, name=None, **kwargs):
        seen.append(os.path.basename(name))
        return real(args, name, **kwargs)

    monkeypatch.setattr(common, "load_scorer", counting)
    return seen


def _heldout(tmp_path):
    path = tmp_path / "heldout.txt"
    path.write_text("\n\n".join(" ".join(f"w{(7 * i + j) % 250 + 3}" for j in range(12)) for i in range(5)))
    return path


def _sweep(ckpt, out, *extra):
    sweep.main([f"--checkpoints={ckpt}", f"--output_dir={out}", *extra])
    return read_json(os.path.join(out, "results.json"))


def test_one_row_per_step_with_intervals_and_heldout_loss_and_a_rerun_loads_nothing(run_dir, tiny_llama_dir, tmp_path,
                                                                                    loads, capsys):
    heldout = _heldout(tmp_path)
    out = tmp_path / "out"
    result = _sweep(run_dir, out, *SMALL, f"--heldout={heldout}")
    rows = result["rows"]
    assert [(r["step"], os.path.basename(r["checkpoint"]), r["format"]) for r in rows] == [
        (100, "step_100", "hf"), (200, "step_200", "hf"), (300, "step_300", "hf")]
    readings = [n for metric in byod_method.READINGS.values() for n in metric.values()]
    assert set(rows[0]["numbers"]) == {"syntextbench", "syntextbench_accuracy", "synbench", "synbench_corrected",
                                       "synbench_ceiling", "synbench_eps0.2", *readings, *sweep.stages_lib.BYOD,
                                       "heldout_loss", "heldout_bits_per_byte"}
    negation = rows[0]["numbers"]["byod_negation"]
    assert negation["low"] < negation["value"] < negation["high"]
    assert rows[0]["numbers"]["syntextbench"]["low"] is None  # no interval from SynTextBench
    assert rows[0]["metrics"]["byod_negation_stderr"] == negation["stderr"]  # the in-loop rows' flat names
    losses = [r["numbers"]["heldout_loss"]["value"] for r in rows]
    assert len(set(losses)) == 3 and all(v > 0 for v in losses)  # different weights, different numbers
    assert all(r["seconds"]["total"] > 0 for r in rows)
    assert (out / "step-heldout_loss.png").stat().st_size > 0 and (out / "step-byod_negation.png").exists()
    assert "step_" not in capsys.readouterr().err
    assert loads == ["step_100", "step_200", "step_300"]

    # the same files: nothing loaded, the same rows, no plot redrawn (a new step alone is loaded: the --watch test)
    def plots():
        return {p.name: p.stat().st_mtime_ns for p in out.glob("step-*.png")}

    drawn = plots()
    assert _sweep(run_dir, out, *SMALL, f"--heldout={heldout}")["rows"] == rows and len(loads) == 3
    assert plots() == drawn and len(drawn) == len(rows[0]["numbers"])


def test_watch_scores_a_step_written_after_it_started_and_stops_at_until_step(run_dir, tiny_llama_dir, tmp_path,
                                                                                loads):
    shutil.rmtree(run_dir / "step_300")
    out = tmp_path / "out"
    first = _sweep(run_dir, out, *QUICK)["rows"]
    assert loads == ["step_100", "step_200"]
    started = threading.Event()
    real_listing = sweep_lib.listing

    def listing(*args, **kwargs):
        started.set()
        return real_listing(*args, **kwargs)

    def trainer():  # writes step 300 once the sweep has started
        started.wait(120)
        time.sleep(0.3)
        _step(tiny_llama_dir, run_dir / "step_300", 0.25)
        _step(tiny_llama_dir, run_dir / "step_400", 0.1)  # past --until_step: never scored

    writer = threading.Thread(target=trainer, daemon=True)
    writer.start()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_lib, "listing", listing)
        result = _sweep(run_dir, out, *QUICK, "--watch", "--poll_s=0.1", "--until_step=300")
    writer.join(10)
    assert [r["step"] for r in result["rows"]] == [100, 200, 300] and result["rows"][:2] == first
    assert loads == ["step_100", "step_200", "step_300"]  # the cached steps are not loaded again


def test_a_step_deleted_while_read_is_skipped_and_ctrl_c_keeps_the_steps_done(run_dir, tmp_path, monkeypatch,
                                                                            capsys):
    real = common.load_scorer

    def rotating(args, name=None, **kwargs):
        if name.endswith("step_200"):
            shutil.rmtree(name)  # the trainer's rotation deletes it mid-read
        if name.endswith("step_300"):
            raise KeyboardInterrupt
        return real(args, name, **kwargs)

    monkeypatch.setattr(common, "load_scorer", rotating)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        _sweep(run_dir, out, *QUICK)
    assert stop.value.code == 130
    err = capsys.readouterr().err
    assert f"step 200: checkpoint '{run_dir / 'step_200'}' was deleted while it was read" in err
    assert "interrupted" in err
    result = json.loads((out / "results.json").read_text())
    assert [r["step"] for r in result["rows"]] == [100] and result["skipped_steps"] == [200]
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_orbax_steps_are_swept(tiny_llama_dir, tmp_path):
    import jax
    from flax import nnx

    from lmprobe.checkpoints import load
    from lmprobe.checkpoints.orbax_io import save

    config = json.load(open(os.path.join(tiny_llama_dir, "config.json")))
    src = load(str(tiny_llama_dir))
    root = tmp_path / "orbax"
    for step in (10, 20, 30):
        save(root, step, src.model, hf_config=config, tokenizer=src.tokenizer)
        nnx.update(src.model, jax.tree.map(lambda a: a * 0.5, nnx.state(src.model, nnx.Param)))
    rows = _sweep(root, tmp_path / "out", *QUICK, f"--heldout={_heldout(tmp_path)}")["rows"]
    assert [(r["step"], r["format"]) for r in rows] == [(10, "orbax"), (20, "orbax"), (30, "orbax")]
    assert len({r["numbers"]["heldout_loss"]["value"] for r in rows}) == 3 and rows[0]["checkpoint"] == str(root / "10")


def test_an_empty_directory_is_one_clear_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        sweep.main([f"--checkpoints={tmp_path / 'empty'}", f"--output_dir={tmp_path / 'out'}", *QUICK])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no checkpoint" in err[0] and "Orbax" in err[0]


def test_bad_methods_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sweep.main([f"--checkpoints={tmp_path}", "--methods=byod,nope", f"--output_dir={tmp_path / 'out'}"])
    assert "--methods=byod,nope: choose from syntextbench, synbench, byod" in capsys.readouterr().err


@pytest.mark.slow
def test_two_processes_score_every_step_and_only_process_0_writes(run_dir, tmp_path):
    from tests.engine.test_multiprocess import REPO, _env, _free_port

    shutil.rmtree(run_dir / "step_300")
    port, out = _free_port(), tmp_path / "out"
    code = "import sys; from lmprobe.cli import sweep; sweep.main(sys.argv[1:])"
    argv = [f"--checkpoints={run_dir}", f"--output_dir={out}", *QUICK]
    procs = [subprocess.Popen([sys.executable, "-c", code, *argv], cwd=REPO, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=_env(1, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                                                               JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i)))
             for i in range(2)]
    logs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    assert "results in" in logs[0][0] and "results in" not in logs[1][0]  # the summary from process 0 only
    rows = read_json(os.path.join(out, "results.json"))["rows"]
    assert [r["step"] for r in rows] == [100, 200] and len(os.listdir(out / "steps")) == 2


def test_a_truncated_step_is_named_in_one_line_and_a_failed_row_and_the_others_are_scored(run_dir, tmp_path, loads,
                                                                                        capsys):
    weights = run_dir / "step_200" / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        _sweep(run_dir, out, *QUICK)
    err = capsys.readouterr().err.strip().splitlines()
    rows = {r["step"]: r for r in read_json(os.path.join(out, "results.json"))["rows"]}
    assert stop.value.code == 2 and sorted(rows) == [100, 200, 300] and loads == ["step_100", "step_200", "step_300"]
    assert "numbers" in rows[100] and "numbers" in rows[300] and "numbers" not in rows[200]
    assert str(weights) in rows[200]["failed"]
    (line,) = [e for e in err if e.startswith("step 200:")]
    assert line == f"step 200: not scored: {rows[200]['failed']}; a rerun tries it again"
    assert err[-1].startswith("error: 1 step of ") and "(200: " in err[-1] and "Traceback" not in "\n".join(err)


def test_watch_s_goes_with_watch(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sweep.main([f"--checkpoints={tmp_path}", "--watch_s=5", f"--output_dir={tmp_path / 'out'}", *QUICK])
    assert "--watch_s goes with --watch" in capsys.readouterr().err
