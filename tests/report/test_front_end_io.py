"""The front ends' shared plumbing: dtype defaults, one printer, output directories checked
before any model work."""

import importlib.util

import jax.numpy as jnp
import pytest

from experiments import cli
from experiments import synbench as synbench_front_end
from lmprobe.engine import runtime

NO_GCSFS = importlib.util.find_spec("gcsfs") is None and importlib.util.find_spec("tensorflow") is None


def test_dtype_defaults_to_auto_resolved_for_the_hardware():
    p = cli.parser("x")
    args = p.parse_args([])
    assert args.dtype == "auto" and cli.dtype(args) == jnp.float32  # CPU
    assert cli.dtype(p.parse_args(["--dtype=bfloat16"])) == jnp.bfloat16
    with pytest.raises(SystemExit):
        p.parse_args(["--dtype=int8"])
    assert "per device" in p.format_help() and "data-parallel devices" in p.format_help()


def test_only_process_0_prints_and_shows_progress(monkeypatch, capsys):
    cli.say("from process 0")
    assert list(cli.progress(range(3), desc="bar")) == [0, 1, 2]
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    cli.say("from process 1")
    bar = cli.progress(range(3), desc="quiet")
    assert list(bar) == [0, 1, 2] and bar.disable
    out, err = capsys.readouterr()
    assert "from process 0" in out and "from process 1" not in out and "quiet" not in err


@pytest.mark.skipif(not NO_GCSFS, reason="a GCS back end is installed")
def test_a_gs_output_dir_without_a_backend_fails_before_any_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(synbench_front_end, "representation_for",
                        lambda args: pytest.fail("the model loaded before the output directory was checked"))
    with pytest.raises(SystemExit) as stop:
        synbench_front_end.main(["--output_dir=gs://bucket/run", "--n=16"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "gs://bucket/run" in err and "gcsfs" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no ./gs:/bucket/run
