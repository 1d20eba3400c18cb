"""A real sweep over a training run whose steps are not all whole: lmprobe Orbax steps 10, 20, 30, 40
of the tiny Llama (orbax_io.save, the weights halved at each), of which 20 has its largest array file
cut short and 30 is half-written as orbax leaves a step on an object store or gcsfuse (its meta/ and
_CHECKPOINT_METADATA written, its arrays and orbax's commit_success.txt not yet).

The sweep scores 10 and 40 with the numbers of a sweep over intact copies, names 20 and 30 in one
line each and in results.json (rows marked ``failed`` with the reason), ends with one error line
(exit 2) and no traceback; a rerun tries 20 again and loads nothing else; a cached row ``{}`` is
named, discarded and rescored; with --watch, step 30 is scored once its writer completes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time

import jax
import pytest
from flax import nnx

from lmprobe.checkpoints import load
from lmprobe.checkpoints.orbax_io import COMMIT, save
from lmprobe.cli import common, sweep
from lmprobe.evaluate import sweep as sweep_lib
from tests.engine.conftest import tiny_llama_dir  # noqa: F401  (the fixture)

QUICK = ["--methods=byod", "--byod_examples=4", "--batch_size=8", "--verbosity=warning"]
STEPS = (10, 20, 30, 40)


@pytest.fixture(scope="module")
def intact(tiny_llama_dir, tmp_path_factory):  # noqa: F811
    """The training run, every step whole, and a held-out text (so that each step has its own number)."""
    config = json.load(open(os.path.join(tiny_llama_dir, "config.json")))
    src = load(str(tiny_llama_dir))
    root = tmp_path_factory.mktemp("train") / "ckpt"
    for step in STEPS:
        save(root, step, src.model, hf_config=config, tokenizer=src.tokenizer)
        nnx.update(src.model, jax.tree.map(lambda a: a * 0.5, nnx.state(src.model, nnx.Param)))
    heldout = root.parent / "heldout.txt"
    heldout.write_text("\n\n".join(" ".join(f"w{(7 * i + j) % 250 + 3}" for j in range(12)) for i in range(5)))
    return root, heldout


@pytest.fixture(scope="module")
def reference(intact, tmp_path_factory):
    """{step: numbers} of a sweep over intact copies of steps 10, 30 and 40."""
    root, heldout = intact
    good = tmp_path_factory.mktemp("good") / "ckpt"
    shutil.copytree(root, good, ignore=lambda d, names: ["20"] if d == str(root) else [])
    code, result, _ = run_sweep(good, good.parent / "out", f"--heldout={heldout}")
    assert code == 0 and [r["step"] for r in result["rows"]] == [10, 30, 40]
    return {r["step"]: r["numbers"] for r in result["rows"]}


def damaged(root, where):
    """A copy of the run with step 20 cut short and step 30 half-written; the path of 20's cut file."""
    shutil.copytree(root, where)
    files = [os.path.join(d, n) for d, _, names in os.walk(where / "20" / "params") for n in names]
    cut = max(files, key=os.path.getsize)
    os.truncate(cut, 1000)
    shutil.rmtree(where / "30" / "params")
    for marker in (where / "30" / COMMIT, where / "30" / "meta" / COMMIT):
        marker.unlink()
    return cut


def complete(root, where, step: int) -> None:
    """Finish ``where``'s half-written ``step`` as orbax does: its arrays, then the commit markers, the step's last."""
    shutil.copytree(root / str(step) / "params", where / str(step) / "params")
    for marker in (where / str(step) / "meta" / COMMIT, where / str(step) / COMMIT):
        shutil.copy(root / str(step) / marker.relative_to(where / str(step)), marker)


def run_sweep(ckpt, out, *extra):
    """(exit code, results.json, stderr lines) of ``lmprobe sweep`` in this process."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            sweep.main([f"--checkpoints={ckpt}", f"--output_dir={out}", *QUICK, *extra])
            code = 0
        except SystemExit as e:
            code = e.code
    path = os.path.join(out, "results.json")
    result = json.load(open(path)) if os.path.exists(path) else None
    return code, result, err.getvalue().splitlines()


@pytest.fixture
def loads(monkeypatch):
    """The steps common.load_scorer loads, in order."""
    seen, real = [], common.load_scorer

    def counting(args, name=None, **kwargs):
        seen.append(int(os.path.basename(name)))
        return real(args, name, **kwargs)

    monkeypatch.setattr(common, "load_scorer", counting)
    return seen


def by_step(result) -> dict:
    return {r["step"]: r for r in result["rows"]}


def named(err: list[str], step: int) -> list[str]:
    return [line for line in err if line.startswith(f"step {step}:")]


def test_the_good_steps_are_scored_the_bad_ones_named_and_a_rerun_retries_them(intact, reference, tmp_path, loads):
    root, heldout = intact
    run = tmp_path / "ckpt"
    cut = damaged(root, run)
    out, extra = tmp_path / "out", [f"--heldout={heldout}"]
    code, result, err = run_sweep(run, out, *extra)
    rows = by_step(result)
    assert code == 2 and sorted(rows) == list(STEPS) and loads == [10, 20, 40]  # 30 is never read
    assert rows[10]["numbers"] == reference[10] and rows[40]["numbers"] == reference[40]
    assert "numbers" not in rows[20] and "numbers" not in rows[30]
    assert rows[20]["failed"].startswith(f"Orbax checkpoint '{run / '20' / 'params'}' cannot be read (")
    assert "OUT_OF_RANGE" in rows[20]["failed"] and f"not valid for value of size {os.path.getsize(cut)}" in rows[20][
        "failed"]  # the bytes orbax wanted from the file cut short
    assert rows[30]["failed"] == "not finished: it has no commit_success.txt, which orbax writes last (the other " \
                                 "steps have theirs)"
    assert len(named(err, 20)) == 1 and rows[20]["failed"] in named(err, 20)[0]
    assert named(err, 30) == [f"step 30: {rows[30]['failed']}; a rerun scores it once it is finished"]
    assert err[-1].startswith("error: 2 steps of ") and "not scored (20, 30: " in err[-1]
    assert not [line for line in err if "Traceback" in line or re.match(r"\w+(Error|Exception): ", line)], err

    # a rerun: 10 and 40 from their cache, 20 tried again, 30 still not read; the same outcome
    loads.clear()
    code, again, err = run_sweep(run, out, *extra)
    again = by_step(again)
    assert code == 2 and loads == [20] and len(named(err, 20)) == 1
    assert {s: again[s] for s in (10, 30, 40)} == {s: rows[s] for s in (10, 30, 40)}  # 10, 40 cached, 30 as it was
    assert again[20]["failed"].startswith(f"Orbax checkpoint '{run / '20' / 'params'}' cannot be read (")

    # a cached row that is not a sweep row ({}: the KeyError of every rerun before) is named and rescored,
    # and so is a results.json whose rows are not a sweep's
    (cached,) = [p for p in (out / "steps").iterdir() if p.name.startswith("step-10-")]
    cached.write_text("{}")
    (out / "results.json").write_text(json.dumps({"rows": [{}]}))
    loads.clear()
    code, again, err = run_sweep(run, out, *extra)
    assert code == 2 and loads == [10, 20] and by_step(again)[10]["numbers"] == reference[10]
    assert [line for line in err if str(cached) in line] == [
        f"warning: cache entry {cached} lacks keys 'step', 'checkpoint', 'format', 'numbers', 'seconds': "
        "discarded, recomputing"]

    # both steps whole again: every step scored, the two new ones alone loaded
    shutil.rmtree(run / "20")
    shutil.copytree(root / "20", run / "20")
    complete(root, run, 30)
    loads.clear()
    code, whole, err = run_sweep(run, out, *extra)
    assert code == 0 and loads == [20, 30] and not named(err, 20) and not named(err, 30)
    assert all("failed" not in r for r in whole["rows"]) and by_step(whole)[30]["numbers"] == reference[30]


def test_watch_scores_the_half_written_step_once_its_writer_completes_it(intact, reference, tmp_path, loads):
    root, heldout = intact
    run, out = tmp_path / "ckpt", tmp_path / "out"
    damaged(root, run)
    seen = threading.Event()

    def writer():  # completes step 30 once the sweep has written it down as not finished
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not seen.is_set():
            try:
                rows = json.loads((out / "results.json").read_text())["rows"]
            except (OSError, ValueError, KeyError):
                rows = []
            if any(r["step"] == 30 and r.get("failed", "").startswith("not finished") for r in rows):
                complete(root, run, 30)
                seen.set()
            time.sleep(0.05)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    started = time.monotonic()
    code, result, err = run_sweep(run, out, f"--heldout={heldout}", "--watch", "--poll_s=0.2", "--until_step=40",
                                  "--watch_s=600")
    thread.join(10)
    rows = by_step(result)
    assert seen.is_set() and time.monotonic() - started < 600  # it ended by itself, not at --watch_s
    assert code == 2 and sorted(rows) == list(STEPS) and "failed" in rows[20]
    assert {s: rows[s]["numbers"] for s in (10, 30, 40)} == {s: reference[s] for s in (10, 30, 40)}
    assert loads.count(20) == sweep_lib.TRIES and loads.count(30) == 1  # 20 tried at 3 polls; 30 read once, whole
    assert len(named(err, 20)) == 1 and named(err, 20)[0].endswith("; tried again at the next poll")
    assert named(err, 30) == ["step 30: not finished: it has no commit_success.txt, which orbax writes last (the "
                              "other steps have theirs); scored once it is finished"]
    assert err[-1].startswith("error: 1 step of ") and "not scored (20: " in err[-1]
    assert not [line for line in err if "Traceback" in line], err
