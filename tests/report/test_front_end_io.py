"""The front ends' shared plumbing: dtype defaults, one printer, output directories checked
before any model work."""

import gc
import importlib.util
import os
import signal
import subprocess
import sys
import weakref

import jax.numpy as jnp
import pytest

from lmprobe.cli import common
from lmprobe.cli import synbench as synbench_front_end
from lmprobe.engine import runtime

NO_GCSFS = importlib.util.find_spec("gcsfs") is None and importlib.util.find_spec("tensorflow") is None


def test_dtype_defaults_to_auto_resolved_for_the_hardware():
    p = common.parser("x")
    args = p.parse_args([])
    assert args.dtype == "auto" and common.dtype(args) == jnp.float32  # CPU
    assert common.dtype(p.parse_args(["--dtype=bfloat16"])) == jnp.bfloat16
    with pytest.raises(SystemExit):
        p.parse_args(["--dtype=int8"])
    assert "per device" in p.format_help() and "data-parallel devices" in p.format_help()


class _Weights:
    """An object in a reference cycle, as a loaded model's weights are."""

    def __init__(self):
        self.cycle = self


def test_one_model_at_a_time_collects_what_the_loop_made_and_unfreezes_the_rest():
    older = _Weights()
    older_ref = weakref.ref(older)
    with pytest.raises(RuntimeError), common.one_model_at_a_time():
        assert gc.get_freeze_count() > 0
        del older  # made before the loop: frozen, so not collected inside it
        weights = _Weights()
        ref = weakref.ref(weights)
        del weights
        gc.collect()
        assert ref() is None and older_ref() is not None
        raise RuntimeError("a step fails")
    assert gc.get_freeze_count() == 0  # unfrozen, on an error too
    gc.collect()
    assert older_ref() is None
    gc.freeze()  # a caller's own freeze (a server's, before it forks) stays as it was
    try:
        with common.one_model_at_a_time():
            pass
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_only_process_0_prints_and_shows_progress(monkeypatch, capsys):
    common.say("from process 0")
    assert list(common.progress(range(3), desc="bar")) == [0, 1, 2]
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    common.say("from process 1")
    numbers = range(3)
    assert common.progress(numbers, desc="quiet") is numbers  # the bare iteration
    out, err = capsys.readouterr()
    assert "from process 0" in out and "from process 1" not in out and "quiet" not in err


@pytest.mark.skipif(not NO_GCSFS, reason="a GCS back end is installed")
def test_a_gs_output_dir_without_a_backend_fails_before_any_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(synbench_front_end, "load_representation",
                        lambda *a, **k: pytest.fail("the model loaded before the output directory was checked"))
    with pytest.raises(SystemExit) as stop:
        synbench_front_end.main(["--output_dir=gs://bucket/run", "--n=16"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "gs://bucket/run" in err and "gcsfs" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no ./gs:/bucket/run


def test_ctrl_c_ends_with_one_line_naming_the_saved_run_and_status_130(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(common, "_saved_in", [])

    @common.main_guard
    def main(out):
        if out:
            common.output_dir(out)
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stop:
        main(None)
    assert stop.value.code == 130 and capsys.readouterr().err == "interrupted: nothing was saved yet\n"
    with pytest.raises(SystemExit) as stop:
        main(str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert stop.value.code == 130 and len(err.splitlines()) == 1
    assert str(tmp_path / "run") in err and "the same command resumes" in err


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_in_a_front_end_process_prints_no_traceback(tmp_path, sig):
    """Ctrl-C, and SIGTERM (a pod's preemption), end with the one line and status 128 + signal."""
    # the child handles SIGINT as on a terminal: launched in the background (no job control), it inherits it ignored
    script = ("import os, signal, time\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from lmprobe.cli import common\n"
              "@common.main_guard\n"
              "def main():\n"
              f"    common.output_dir({str(tmp_path)!r})\n"
              f"    os.kill(os.getpid(), signal.{sig})\n"
              "    time.sleep(60)\n"
              "main()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 128 + getattr(signal, sig) and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and str(tmp_path) in done.stderr
