"""lmprobe.evaluate.sweep without a model or flags: the stages faked (their own tests cover them), checkpoints
as directories: rows with intervals and the in-loop callback's flat names, resumption from the cached rows,
failures and unfinished steps as rows, and when watching stops. tests/cli/test_sweep.py runs it end to end."""

from __future__ import annotations

import json

import pytest

from lmprobe.checkpoints.discover import Found
from lmprobe.errors import LmprobeError
from lmprobe.evaluate import sweep as sweep_lib
from lmprobe.methods import stages as stages_lib
from lmprobe.methods.result import Number


@pytest.fixture
def fake_stages(monkeypatch):
    """stages_lib.run faked: each model's numbers from its scale; the models it scored, in order."""
    scored = []

    def run(stages, scorer, settings, inputs, *, name, run_dir, progress):
        scored.append(scorer)
        return {"heldout_loss": Number(scorer, 0.1), "syntextbench": Number(2 * scorer)}, {"heldout": 0.5}

    monkeypatch.setattr(stages_lib, "run", run)
    monkeypatch.setattr(sweep_lib.gc, "collect", lambda: 0)  # no weights to free; a full collection takes 0.5 s
    return scored


def checkpoints(root, steps, unfinished=()) -> list[Found]:
    found = []
    for step in steps:
        (root / f"step_{step}").mkdir(parents=True, exist_ok=True)
        (root / f"step_{step}" / "weights.bin").write_text(str(step))
        found.append(Found(step, str(root / f"step_{step}"), "hf", "no commit yet" if step in unfinished else ""))
    return found


def job(tmp_path, load, told, **kwargs) -> sweep_lib.Sweep:
    written, settings = kwargs.pop("written", []), kwargs.pop("settings", stages_lib.Settings())
    return sweep_lib.Sweep(str(tmp_path / "ckpt"), ("heldout", "syntextbench"), settings,
                           stages_lib.Inputs(heldout=["a held-out text"]), str(tmp_path / "out"), load,
                           write=lambda path, result: written.append((path, json.loads(json.dumps(result)))),
                           tell=told.append, **kwargs)


def test_rows_hold_intervals_and_flat_metrics_and_a_rerun_scores_nothing(tmp_path, fake_stages):
    found, told, written = checkpoints(tmp_path / "ckpt", (10, 20)), [], []
    steps = sweep_lib.run(job(tmp_path, lambda f: f.step / 10, told, written=written), found)
    rows = steps.scored_rows()
    assert [r["step"] for r in rows] == [10, 20] and fake_stages == [1.0, 2.0] and told == []
    loss = rows[0]["numbers"]["heldout_loss"]
    assert loss["value"] == 1.0 and loss["stderr"] == 0.1 and loss["low"] < 1.0 < loss["high"]
    assert rows[0]["numbers"]["syntextbench"] == {"value": 2.0, "stderr": None, "low": None, "high": None}
    assert rows[0]["metrics"] == {"heldout_loss": 1.0, "heldout_loss_stderr": 0.1, "syntextbench": 2.0}
    assert set(rows[0]["seconds"]) == {"load", "heldout", "total"}
    assert [path for path, _ in written] == [str(tmp_path / "out" / "results.json")] * 2  # after every step
    result = written[-1][1]
    assert result["method"] == "sweep" and result["checkpoints"] == str(tmp_path / "ckpt")
    assert [r["step"] for r in result["rows"]] == [10, 20] and result["skipped_steps"] == []
    assert sweep_lib.run(job(tmp_path, lambda f: pytest.fail("loaded again"), told), found).scored_rows() == rows
    other = job(tmp_path, lambda f: f.step / 100, told, settings=stages_lib.Settings(seed=1))
    assert [r["numbers"]["syntextbench"]["value"] for r in sweep_lib.run(other, found).scored_rows()] == [0.2, 0.4]


def test_an_unreadable_step_and_an_unfinished_one_are_failed_rows_and_the_others_are_scored(tmp_path, fake_stages,
                                                                                           monkeypatch):
    found, told = checkpoints(tmp_path / "ckpt", (10, 20, 30), unfinished=(30,)), []
    monkeypatch.setattr(sweep_lib.time, "sleep", lambda s: None)  # the wait for a deletion under way

    def load(f):
        if f.step == 20:
            raise LmprobeError("`step_20` holds a truncated array")
        return 1.0

    steps = sweep_lib.run(job(tmp_path, load, told), found)
    assert sorted(steps.rows) == [10] and sorted(steps.failed) == [20, 30]
    why = f"checkpoint '{found[1].path}' cannot be read (LmprobeError: `step_20` holds a truncated array)"
    assert [r["failed"] for r in steps.failed_rows()] == [
        f"{why}: it is incomplete or damaged; re-save it", "not finished: no commit yet"]
    assert steps.failed[20].files == found[1].fingerprint() and steps.failed[20].tries == 1
    assert told == [f"step 20: not scored: {why}: it is incomplete or damaged; re-save it; a rerun tries it again",
                    "step 30: not finished: no commit yet; a rerun scores it once it is finished"]
    results = steps.results("ckpt", 0.0)
    assert [r["step"] for r in results["rows"]] == [10, 20, 30] and "failed" in results["rows"][1]


def test_watching_stops_at_until_step_once_nothing_before_it_waits(tmp_path, fake_stages, monkeypatch):
    root, told, listings = tmp_path / "ckpt", [], []
    first = checkpoints(root, (10, 20), unfinished=(20,))

    def find(spec):  # the trainer finishes step 20 and writes 30 and 40 before the first poll
        listings.append(spec)
        return checkpoints(root, (10, 20, 30, 40))

    monkeypatch.setattr(sweep_lib.time, "sleep", lambda s: None)
    steps = sweep_lib.run(job(tmp_path, lambda f: 1.0, told, find=find), first, watch=True, until_step=30, poll_s=5)
    assert sorted(steps.rows) == [10, 20, 30] and not steps.failed and listings == [str(root)]  # 40: past it
    assert told == ["step 20: not finished: no commit yet; scored once it is finished"]


def test_watching_stops_after_watch_s_and_a_step_gone_from_the_listing_counts_as_vanished(tmp_path, fake_stages,
                                                                                           monkeypatch):
    root, told, polls = tmp_path / "ckpt", [], []
    first = checkpoints(root, (10, 20), unfinished=(20,))
    monkeypatch.setattr(sweep_lib.time, "sleep", polls.append)
    steps = sweep_lib.run(job(tmp_path, lambda f: 1.0, told, find=lambda spec: first[:1]), first, watch=True,
                          poll_s=1.0, watch_s=0.0)
    assert polls == [] and sorted(steps.rows) == [10] and sorted(steps.failed) == [20]  # stopped before any poll
    steps.listed(first[:1])  # step 20 rotated away before it was finished
    assert steps.skipped == {20} and not steps.failed and steps.settled(20)


def test_a_cached_row_of_another_step_is_refused():
    assert sweep_lib.same_step({"step": 3}, 3) == {"step": 3}
    with pytest.raises(ValueError, match="not a sweep row of step 4"):
        sweep_lib.same_step({"step": 3}, 4)


def test_earlier_rows_are_the_scored_rows_of_a_sweeps_results(tmp_path):
    path = tmp_path / "results.json"
    assert sweep_lib.earlier_rows(str(path)) is None
    path.write_text(json.dumps({"rows": [{"step": 1, "numbers": {}}, {"step": 2, "failed": "why"}]}))
    assert sweep_lib.earlier_rows(str(path)) == [{"step": 1, "numbers": {}}]
    path.write_text(json.dumps({"method": "validate"}))
    assert sweep_lib.earlier_rows(str(path)) is None


def test_heldout_texts_are_the_first_non_blank_documents(tmp_path):
    path = tmp_path / "heldout.txt"
    path.write_text("one\n\n   \n\ntwo\n\nthree")
    assert sweep_lib.load_heldout(str(path), 2) == ["one", "two"] and sweep_lib.load_heldout(None, 2) is None
