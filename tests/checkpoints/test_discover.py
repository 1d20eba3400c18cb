"""Checkpoint discovery for sweeps: every kind with its step, steps their writer has not finished named,
clear errors."""

import json
import os

import pytest
from safetensors.numpy import save_file

from lmprobe.checkpoints.discover import GGUF, HF, LEVANTER, MAXTEXT, ORBAX, discover
from lmprobe.errors import CheckpointError
from tests.checkpoints.conftest import TINY_CONFIG, tiny_tensors


def _hf(path, seed=0):
    os.makedirs(path)
    json.dump(TINY_CONFIG, open(os.path.join(path, "config.json"), "w"))
    save_file(tiny_tensors(seed), os.path.join(path, "model.safetensors"))
    return str(path)


def _orbax_step(root, name):
    for part in ("meta", "params"):
        os.makedirs(os.path.join(root, name, part))


def test_hf_directories_by_step_name_in_step_order_not_name_order(tmp_path):
    paths = [_hf(tmp_path / n) for n in ("checkpoint-1000", "checkpoint-200", "checkpoint-30")]
    os.makedirs(tmp_path / "tmp-checkpoint-5000")  # the HF Trainer's half-written save
    (tmp_path / "trainer_state.json").write_text("{}")
    found = discover(tmp_path)
    assert [(f.step, f.path, f.format) for f in found] == [(30, paths[2], HF), (200, paths[1], HF),
                                                          (1000, paths[0], HF)]
    assert [f.step for f in discover(str(tmp_path / "checkpoint-*0"))] == [30, 200, 1000]  # a glob


def test_names_without_steps_are_numbered_in_natural_order(tmp_path):
    for n in ("b-run2", "b-run10", "a-run"):
        _hf(tmp_path / n)
    assert [(f.step, os.path.basename(f.path)) for f in discover(tmp_path)] == [
        (0, "a-run"), (1, "b-run2"), (2, "b-run10")]


def test_orbax_steps_skip_half_written_ones_and_gguf_files(tmp_path):
    root = tmp_path / "ckpt"
    for name in ("100", "20", "300.orbax-checkpoint-tmp-1712345"):
        _orbax_step(root, name)
    os.makedirs(root / "400")  # no meta/: not finished
    os.makedirs(root / "tokenizer")
    found = discover(root)
    assert [(f.step, f.format) for f in found] == [(20, ORBAX), (100, ORBAX)]
    assert found[0].path == str(root / "20")
    # a step directory's fingerprint is its params/ files: it changes when they do
    before = found[0].fingerprint()
    (root / "20" / "params" / "shard").write_bytes(b"x")
    assert discover(root)[0].fingerprint() != before

    for n in ("run-step-5.gguf", "run-step-12.gguf"):
        (tmp_path / n).write_bytes(b"GGUF")
    assert [(f.step, f.format) for f in discover(str(tmp_path / "*.gguf"))] == [(5, GGUF), (12, GGUF)]


def test_an_hf_directory_by_itself_and_fingerprints_follow_the_weights(tmp_path):
    path = _hf(tmp_path / "step_7")
    (found,) = discover(path)
    assert (found.step, found.path) == (7, path)
    before = found.fingerprint()
    save_file(tiny_tensors(1), os.path.join(path, "model.safetensors"))
    assert discover(path)[0].fingerprint() != before


def test_nothing_recognisable_is_one_line_naming_what_was_looked_for_and_what_is_there(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    os.makedirs(tmp_path / "logs")
    with pytest.raises(CheckpointError, match=r"holds no checkpoint .*notes\.txt.*Orbax.*config\.json.*\.gguf"):
        discover(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        discover(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="no path matches"):
        discover(str(tmp_path / "ckpt-*"))


def test_two_checkpoints_with_one_step_are_refused(tmp_path):
    _hf(tmp_path / "a" / "step_5")
    _hf(tmp_path / "b" / "step_5")
    with pytest.raises(CheckpointError, match="two checkpoints have step 5"):
        discover(str(tmp_path / "*" / "step_*"))


def test_maxtext_steps(tmp_path):
    run = tmp_path / "run"
    for step in (1000, 500):
        os.makedirs(run / "checkpoints" / str(step) / "items")
        (run / "checkpoints" / str(step) / "items" / "_METADATA").write_text("{}")
    os.makedirs(run / "checkpoints" / "1500" / "items")  # no _METADATA yet: still being written
    found = discover(run / "checkpoints")
    assert [(f.step, f.format) for f in found] == [(500, MAXTEXT), (1000, MAXTEXT)]
    assert found[1].path == str(run / "checkpoints" / "1000")
    assert [f.step for f in discover(str(run / "checkpoints" / "*"))] == [500, 1000]


def test_a_step_is_finished_when_its_writer_says_so(tmp_path):
    """orbax (commit_success.txt where the writer puts one in its steps), MaxText (the same) and Levanter
    (metadata.json, written after every array): an unfinished step is found with why, and never read."""
    root = tmp_path / "orbax"
    for name in ("10", "20", "30"):
        _orbax_step(root, name)
    assert [f.unfinished for f in discover(root)] == ["", "", ""]  # no step has the file: orbax renames
    for name in ("10", "20"):
        (root / name / "commit_success.txt").write_text("done")
    found = discover(root)
    assert [f.step for f in found] == [10, 20, 30] and [bool(f.unfinished) for f in found] == [False, False, True]
    assert "no commit_success.txt" in found[2].unfinished
    assert [bool(f.unfinished) for f in discover(root / "30")] == [True]  # a step given by itself too

    run = tmp_path / "maxtext"
    for step in (500, 1000, 1500):
        os.makedirs(run / str(step) / "items")
        (run / str(step) / "items" / "_METADATA").write_text("{}")
        if step != 1500:
            (run / str(step) / "commit_success.txt").write_text("done")
    assert [(f.step, f.format, bool(f.unfinished)) for f in discover(run)] == [
        (500, MAXTEXT, False), (1000, MAXTEXT, False), (1500, MAXTEXT, True)]

    levanter = tmp_path / "levanter"
    for step in (100, 200):
        os.makedirs(levanter / f"step-{step}" / "model")
    (levanter / "step-100" / "metadata.json").write_text('{"step": 100}')
    found = discover(levanter)
    assert [(f.step, f.format) for f in found] == [(100, LEVANTER), (200, LEVANTER)]
    assert found[0].unfinished == "" and "no metadata.json" in found[1].unfinished
