"""What a run reads back is checked, on real runs of the front ends (issue 61: items 1, 3, 4):
damaged or wrong cache entries are named once, discarded and recomputed to the same score; a
model that gives NaN is one named error with nothing cached; results.json is never lost; one
writer per output directory.

One SynTextBench run (a tiny random MiniLM, loss-data baselines on) is the reference; each test
damages a copy of its directory and runs again."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lmprobe import store
from lmprobe.cli import byod as byod_front_end
from lmprobe.cli import lock
from lmprobe.cli import synbench as synbench_front_end
from lmprobe.cli import syntextbench as front_end
from lmprobe.training.tokenizer import tokenizer_for

ARGS = ["--n=200", "--levels=0.2", "--a_t=0.6", "--baseline_steps=10", "--icl_examples=0", "--batch_size=8"]
SAME = ("score", "scores_by_a_t", "levels", "baselines")  # what a recovered run must give exactly as the first


def _run(model: str, out, capsys) -> tuple[dict | None, list[str]]:
    """(results.json or None, stderr lines) of SynTextBench on ``model`` into ``out``; exit 2 allowed."""
    try:
        front_end.main([f"--model={model}", *ARGS, f"--output_dir={out}"])
    except SystemExit as e:
        assert e.code == 2
    err = capsys.readouterr().err.splitlines()
    path = os.path.join(out, "results.json")
    return (json.load(open(path)) if os.path.exists(path) else None), err


@pytest.fixture(scope="module")
def first(tiny_minilm_dir, tmp_path_factory):
    """(the reference run's directory, its results.json)."""
    out = tmp_path_factory.mktemp("first")
    front_end.main([f"--model={tiny_minilm_dir}", *ARGS, f"--output_dir={out}"])
    lock.release_all()
    with open(out / "results.json") as f:
        return out, json.load(f)


def _copy(first, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(first[0], out)
    return out


def _entries(out, suffix: str) -> list:
    return sorted((out / "cache").glob(f"*{suffix}"))


def _warnings(err: list[str]) -> list[str]:
    return [line for line in err if "cache entry" in line]


def _flip_data(data: bytes) -> bytes:
    """Random bytes over the middle of an entry's array data (its header and checksum left alone)."""
    middle = len(data) // 2
    noise = np.random.default_rng(0).integers(0, 256, 64, dtype=np.uint8).tobytes()
    return data[:middle] + noise + data[middle + 64:]


def _wrong_shape(data: bytes) -> bytes:
    """A valid entry (checksum and all) of the same array less its first row."""
    return store._npy_bytes(np.load(store.io.BytesIO(data))[1:])


def _narrower(data: bytes) -> bytes:
    """A valid entry (checksum and all) of the same array less its last column."""
    return store._npy_bytes(np.load(store.io.BytesIO(data))[:, :-1])


@pytest.mark.parametrize("damage, why", [(_flip_data, "does not match its checksum (its bytes changed on disk)"),
                                         (_wrong_shape, "has shape (179, 64), expected (180, 64)"),
                                         (_narrower, "has shape (180, 63), expected (180, 64)")])
def test_a_damaged_embedding_is_named_once_and_recomputed_to_the_same_score(first, tmp_path, capsys,
                                                                            tiny_minilm_dir, damage, why):
    out = _copy(first, tmp_path)
    (train,) = [p for p in _entries(out, ".npy") if p.name.endswith("-train.npy")]
    train.write_bytes(damage(train.read_bytes()))
    result, err = _run(tiny_minilm_dir, out, capsys)
    assert _warnings(err) == [f"warning: cache entry {train} {why}: discarded, recomputing"]
    assert {k: result[k] for k in SAME} == {k: first[1][k] for k in SAME}
    assert store.cached(str(train), lambda: pytest.fail("recomputed again"), expect=store.Array((180, None))).shape \
        == (180, 64)


@pytest.mark.parametrize("entry, why", [(b"{}", "lacks keys 'p', 'val_loss', 'mdl', 'sdl', 'sdl_is_lower_bound', "
                                                "'esc', 'esc_text', 'eps', 'max_n', 'units'"),
                                        (b"null", "is null, expected an object")])
def test_a_baselines_entry_that_parses_but_is_wrong_is_named_and_recomputed(first, tmp_path, capsys,
                                                                            tiny_minilm_dir, entry, why):
    out = _copy(first, tmp_path)
    (baselines,) = _entries(out, ".json")
    baselines.write_bytes(entry)
    result, err = _run(tiny_minilm_dir, out, capsys)
    assert _warnings(err) == [f"warning: cache entry {baselines} {why}: discarded, recomputing"]
    assert {k: result[k] for k in SAME} == {k: first[1][k] for k in SAME}
    assert result["baselines"]["p"] == 0.2 and "baselines: off" not in capsys.readouterr().out


def _nan_copy(model_dir, to) -> str:
    """``model_dir`` with every floating weight NaN."""
    shutil.copytree(model_dir, to)
    path = os.path.join(to, "model.safetensors")
    weights = load_file(path)
    save_file({k: np.full_like(v, np.nan) if v.dtype.kind == "f" else v for k, v in weights.items()}, path,
              metadata={"format": "pt"})
    return str(to)


def test_nan_weights_are_one_named_error_and_nothing_is_cached(tiny_minilm_dir, tmp_path, capsys):
    model = _nan_copy(tiny_minilm_dir, tmp_path / "nan-minilm")
    result, err = _run(model, tmp_path / "run", capsys)
    assert result is None
    assert err[-1] == (f"error: {model}: embedding gave 11520 non-finite values (NaN or infinite) of 11520: its "
                       "weights or its function give NaN or overflow (a damaged or wrongly converted checkpoint, "
                       "or a dtype too narrow for it); nothing of it was cached")
    assert not (tmp_path / "run" / "cache").exists() or not list((tmp_path / "run" / "cache").iterdir())


def test_byod_on_nan_logits_is_one_named_error_not_n_a(tiny_smollm2_dir, tmp_path, capsys):
    model = _nan_copy(tiny_smollm2_dir, tmp_path / "nan-smollm2")
    with pytest.raises(SystemExit) as exit:
        byod_front_end.main([f"--model={model}", "--corpus=fortunes", "--metrics=negation,word_order",
                             "--max_examples=4", "--benign=", "--batch_size=4", f"--output_dir={tmp_path / 'run'}"])
    assert exit.value.code == 2
    err = capsys.readouterr().err.splitlines()
    # NaN: 4 pairs' log-perplexities and their difference, the mean and its stderr; the share of drops is 0
    assert err[-1].startswith(f"error: {model}: BYOD negation gave 14 non-finite values (NaN or infinite) of 15: ")
    assert not [f for f in (tmp_path / "run").rglob("*.json")]  # no metric cached, no results.json


def first_input(x):
    """A representation that drops the batch axis: the first input's 64 values (the batch is 64 rows)."""
    return x[0]


def test_a_synbench_function_that_drops_the_batch_axis_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        synbench_front_end.main([f"--model={__name__}:first_input", "--n=64", "--scales=1", "--eps=0", "--a_t=0.7",
                                 f"--output_dir={tmp_path}"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --model={__name__}:first_input maps a batch of inputs of shape (65, 64) to shape (64,): a "
        "representation function must keep the batch axis first ([B, ...] -> [B, ...], one representation per "
        "input)")


HOLD = """
import sys, time
from lmprobe.cli import lock
lock.take(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_writer_gets_one_line_naming_the_first_and_a_stale_lock_is_taken_over(first, tmp_path, capsys,
                                                                                        tiny_minilm_dir):
    out = _copy(first, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = (out / "results.json").read_bytes()
        result, err = _run(tiny_minilm_dir, out, capsys)
        assert err[-1].startswith(f"error: output directory {out} is in use by process {holder.pid} on "
                                  f"{socket.gethostname()}, running since ")
        assert err[-1].endswith("wait for it to end, or pass another --output_dir") and len(_warnings(err)) == 0
        assert (out / "results.json").read_bytes() == before  # nothing written
    finally:
        holder.kill()  # kill -9: its lock file stays behind, naming a process that is gone
        holder.wait()
    assert json.loads((out / lock.NAME).read_text())["pid"] == holder.pid
    result, err = _run(tiny_minilm_dir, out, capsys)  # taken over
    assert {k: result[k] for k in SAME} == {k: first[1][k] for k in SAME} and not (out / lock.NAME).exists()


def test_results_json_survives_a_failure_between_the_steps_and_killed_writes_are_cleaned(first, tmp_path, capsys,
                                                                                        tiny_minilm_dir, monkeypatch):
    out = _copy(first, tmp_path)
    before = (out / "results.json").read_bytes()
    replace = os.replace  # the new results.json is written and the old one kept: then the rename fails

    def full_disk(src, dst):
        if dst == str(out / "results.json"):
            raise OSError(28, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(store.os, "replace", full_disk)
    result, err = _run(tiny_minilm_dir, out, capsys)
    assert err[-1].startswith(f"error: cannot write {out / 'results.json'}: OSError: [Errno 28] No space left")
    assert (out / "results.json").read_bytes() == before
    (kept,) = [p for p in out.glob("results-*.json")]
    assert kept.read_bytes() == before
    monkeypatch.undo()

    killed = [out / os.path.basename(store.temp_name("results.json")),
              out / "cache" / os.path.basename(store.temp_name("x-train.npy"))]  # what a kill -9 mid-write leaves
    for path in killed:
        path.write_bytes(b"half written")
    result, err = _run(tiny_minilm_dir, out, capsys)
    assert not any(path.exists() for path in killed) and not list(out.rglob(".tmp-*"))
    assert f"{out}: removed 2 temporary files of writes an earlier run did not finish" in err
    assert {k: result[k] for k in SAME} == {k: first[1][k] for k in SAME}
    assert sorted(p.name for p in out.glob("results-*.json")) == [kept.name]  # kept once, not twice


def test_two_tokenizer_writers_never_share_a_folder(tmp_path):
    """Two `train` runs saving the same tokenizer at once: each its own folder, one of them renamed into place."""
    texts = [f"document {i} about the weather and the sea" for i in range(200)]
    directory, errors, vocabularies = str(tmp_path / "tokenizer"), [], []

    def write():
        try:
            vocabularies.append(tokenizer_for("bpe", texts, 300, directory).get_vocab())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and vocabularies[0] == vocabularies[1]
    assert sorted(os.listdir(tmp_path)) == ["tokenizer"]  # no staging folder left
