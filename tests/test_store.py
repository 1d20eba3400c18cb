"""Run-directory artifacts: local and epath paths, remote paths without a back end, one writer,
and the cache's branch that process 0 decides."""

import functools
import importlib.util
import json
import logging
import os

import numpy as np
import pytest
from etils import epath

from lmprobe import store
from lmprobe.engine import runtime
from lmprobe.errors import LmprobeError, NonFinite
from lmprobe.report import plots

VECTOR = store.Array((None,))  # any length, floating, finite
NO_GCSFS = importlib.util.find_spec("gcsfs") is None and importlib.util.find_spec("tensorflow") is None


def _files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_join_keeps_urls_and_local_paths():
    assert store.join("gs://bucket/run", "cache", "x.npy") == "gs://bucket/run/cache/x.npy"
    assert store.join("runs/byod", "results.json") == "runs/byod/results.json"
    assert store.join(epath.Path("/tmp/a"), "b") == "/tmp/a/b"
    assert store.is_remote("gs://b/x") and not store.is_remote("/tmp/x")
    assert not store.is_remote("file:///tmp/x")


def test_writes_through_epath_local_paths_atomically(tmp_path):
    run = epath.Path(tmp_path) / "run"  # an epath.Path works where a str does
    store.write_json(run / "results.json", {"score": np.float32(0.5), "curve": np.arange(3)})
    store.write_jsonl(store.join(str(run), "samples.jsonl"), [{"a": 1}, {"a": np.int64(2)}])
    store.write_bytes(run / "sub" / "blob.bin", b"\x00\x01")
    assert json.loads((run / "results.json").read_text()) == {"score": 0.5, "curve": [0, 1, 2]}
    assert (run / "samples.jsonl").read_text().splitlines() == ['{"a": 1}', '{"a": 2}']
    assert _files(tmp_path) == ["run/results.json", "run/samples.jsonl", "run/sub/blob.bin"]  # no .tmp- left
    assert oct(os.stat(run / "results.json").st_mode & 0o777) != oct(0o600)  # not mkstemp's private mode


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    with pytest.raises(TypeError):
        store.write_json(tmp_path / "r.json", {"x": object()})
    assert _files(tmp_path) == []


@pytest.mark.skipif(not NO_GCSFS, reason="a GCS back end is installed")
def test_gs_path_without_a_backend_is_one_clear_error_and_no_local_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LmprobeError, match=r"gs://bucket/run/results.json.*gcsfs"):
        store.write_json("gs://bucket/run/results.json", {"a": 1})
    with pytest.raises(LmprobeError, match=r"output directory gs://bucket/run.*pip install gcsfs"):
        store.check_writable("gs://bucket/run")
    with pytest.raises(LmprobeError, match="gcsfs"):
        store.cached("gs://bucket/run/cache/x.npy", lambda: np.zeros(2), expect=VECTOR)
    assert os.listdir(tmp_path) == []  # never a ./gs:/bucket/run directory


def test_a_url_mangled_by_os_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LmprobeError, match="lost a slash"):
        store.write_json(os.path.normpath("gs://bucket/run/results.json"), {})
    assert os.listdir(tmp_path) == []


def test_check_writable(tmp_path):
    store.check_writable(tmp_path / "new" / "run")  # created, probe removed
    assert _files(tmp_path) == [] and (tmp_path / "new" / "run").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(LmprobeError, match="is a file"):
        store.check_writable(tmp_path / "file")


def test_cached_computes_once_then_loads(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return np.arange(6, dtype=np.float32).reshape(2, 3)

    path = store.join(str(tmp_path), "cache", "x.npy")
    first = store.cached(path, compute, expect=store.Array((2, 3), np.float32))
    again = store.cached(path, compute, expect=store.Array((2, 3), np.float32))
    assert len(calls) == 1 and again.dtype == np.float32
    np.testing.assert_array_equal(first, again)
    assert _files(tmp_path) == ["cache/x.npy"]

    rows = store.cached_json(store.join(str(tmp_path), "cache", "y.json"), lambda: (1, 2), expect=[int],
                             encode=list, decode=tuple)
    assert rows == (1, 2)
    assert store.cached_json(str(tmp_path / "cache" / "y.json"), lambda: pytest.fail("recomputed"), expect=[int],
                             encode=list, decode=tuple) == (1, 2)


def test_cache_branch_follows_process_0_not_the_local_view(tmp_path, monkeypatch):
    """Every process takes process 0's branch: computing runs collectives."""
    path = str(tmp_path / "x.npy")
    store.cached(path, lambda: np.ones(3), expect=VECTOR)
    before = os.stat(path).st_mtime_ns

    # another process: the file is on its disk, but it is not process 0, whose "missing" it follows
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    monkeypatch.setattr(store, "_share", lambda value: store._MISSING)
    out = store.cached(path, lambda: np.full(3, 7.0), expect=VECTOR)
    np.testing.assert_array_equal(out, np.full(3, 7.0))  # computed, as process 0 does
    assert os.stat(path).st_mtime_ns == before  # and written by process 0 only
    store.write_json(tmp_path / "r.json", {})
    plots.save_figure(plots.plt.figure(), str(tmp_path / "f.png"))
    assert _files(tmp_path) == ["x.npy"]

    # another process, process 0 has the cache: it loads process 0's bytes, never computes
    monkeypatch.setattr(store, "_share", lambda value: store._SAVED)
    monkeypatch.setattr(store, "_broadcast_bytes", lambda data: store._npy_bytes(np.full(3, 5.0)))
    np.testing.assert_array_equal(store.cached(str(tmp_path / "absent.npy"), lambda: pytest.fail("computed"),
                                               expect=VECTOR), np.full(3, 5.0))


def test_a_failed_cache_write_fails_every_process(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    with pytest.raises(LmprobeError, match="cannot write"):
        store.cached(str(tmp_path / "cache" / "x.npy"), lambda: np.ones(2), expect=VECTOR)
    # a process other than 0 raises too (process 0 shares its failure through agree)
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    monkeypatch.setattr(runtime, "agree", lambda flag: False)
    with pytest.raises(LmprobeError, match="process 0 could not write"):
        store.cached(str(tmp_path / "other.npy"), lambda: np.ones(2), expect=VECTOR)


def test_save_figure_writes_through_epath(tmp_path):
    fig, ax = plots.plt.subplots()
    ax.plot([0, 1], [1, 0])
    plots.save_figure(fig, epath.Path(tmp_path) / "figs" / "curve.png")
    data = (tmp_path / "figs" / "curve.png").read_bytes()
    assert data.startswith(b"\x89PNG") and _files(tmp_path) == ["figs/curve.png"]


def _results(started, score):
    return {"score": score, "run_info": {"started": started}}


def test_write_results_keeps_an_earlier_run_and_replaces_the_same_run(tmp_path):
    path = tmp_path / "results.json"
    first, second = "2024-05-01T12:00:00.500000+00:00", "2024-05-02T08:30:00.100000+00:00"
    store.write_results(path, _results(first, 1))
    store.write_results(path, _results(first, 2))  # the same run again (BYOD after every model)
    assert _files(tmp_path) == ["results.json"] and json.loads(path.read_text())["score"] == 2
    store.write_results(path, _results(second, 3))
    assert _files(tmp_path) == ["results-20240501T120000Z.json", "results.json"]
    assert json.loads((tmp_path / "results-20240501T120000Z.json").read_text())["score"] == 2
    assert json.loads(path.read_text())["score"] == 3


def test_write_results_never_overwrites_history_and_stamps_files_without_run_info(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"score": 0}')  # an old results.json without run_info: its mtime names it
    os.utime(path, (1714564800, 1714564800))  # 2024-05-01T12:00:00Z
    (tmp_path / "results-20240501T120000Z.json").write_text("{}")
    store.write_results(path, _results("2024-06-01T00:00:00+00:00", 1))
    assert json.loads((tmp_path / "results-20240501T120000Z-1.json").read_text()) == {"score": 0}
    assert (tmp_path / "results-20240501T120000Z.json").read_text() == "{}"
    path.write_text("not json")  # unreadable: kept too
    store.write_results(path, _results("2024-06-01T00:00:00+00:00", 2))
    assert len([f for f in _files(tmp_path) if f.startswith("results-")]) == 3


@pytest.mark.parametrize("fails_at", ["writing the new file", "keeping the old one", "renaming into place"])
def test_write_results_failing_at_any_step_leaves_the_old_results_in_place(tmp_path, monkeypatch, fails_at):
    """The new file is written beside results.json, then the old one is kept under its history
    name, then the new one replaces it: a full disk or a kill at any step leaves results.json."""
    path = tmp_path / "results.json"
    store.write_results(path, _results("2024-05-01T12:00:00+00:00", 1))
    old = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if fails_at == "writing the new file":
        monkeypatch.setattr(store.os, "fdopen", fail)
    elif fails_at == "keeping the old one":
        monkeypatch.setattr(store, "_keep_as_history", fail)
    else:  # after the old one was kept: the rerun finds it kept already
        replace = os.replace
        monkeypatch.setattr(store.os, "replace", lambda src, dst: fail() if dst == str(path) else replace(src, dst))
    with pytest.raises(LmprobeError, match="results.json.*No space left"):
        store.write_results(path, _results("2024-05-02T12:00:00+00:00", 2))
    assert path.read_bytes() == old and not [f for f in _files(tmp_path) if ".tmp-" in f]
    monkeypatch.undo()
    store.write_results(path, _results("2024-05-02T12:00:00+00:00", 2))  # the rerun: one history file, never two
    assert _files(tmp_path) == ["results-20240501T120000Z.json", "results.json"]
    assert (tmp_path / "results-20240501T120000Z.json").read_bytes() == old


def test_remove_leftovers_removes_only_temporary_files_of_killed_writes(tmp_path):
    (tmp_path / "cache" / store.temp_name("x.npy").split(os.sep)[-1]).parent.mkdir()
    leftovers = [tmp_path / os.path.basename(store.temp_name("results.json")),
                 tmp_path / "cache" / os.path.basename(store.temp_name("x.npy")),
                 tmp_path / "cache" / ".tmp-k3_a9zqxembed.npy"]  # an earlier lmprobe's (mkstemp's)
    for path in leftovers:
        path.write_bytes(b"half")
    folder = tmp_path / os.path.basename(store.temp_name("tokenizer"))  # a train run's tokenizer, half saved
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "tokenizer.json").write_text("{")
    kept = ["cache/x.npy", "notes/.tmp-mine", "results.json"]
    for name in kept:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("kept")
    assert store.remove_leftovers(tmp_path) == 4
    assert _files(tmp_path) == kept
    assert store.remove_leftovers(tmp_path / "absent") == 0 and store.remove_leftovers("gs://b/run") == 0


def test_write_results_writes_nothing_on_other_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    store.write_results(tmp_path / "results.json", _results("x", 1))
    assert _files(tmp_path) == []


@pytest.fixture
def records(caplog, monkeypatch):
    """caplog for lmprobe's records, whether or not a front end set up lmprobe's logging before."""
    logger = logging.getLogger("lmprobe")
    monkeypatch.setattr(logger, "propagate", False)
    logger.addHandler(caplog.handler)
    with caplog.at_level(logging.INFO, logger="lmprobe"):
        yield caplog
    logger.removeHandler(caplog.handler)


def _strict_loads(text: str):
    """json.loads that refuses NaN and infinities, as strict JSON readers do."""
    return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def _entry(value) -> bytes:
    """A well-formed entry of ``value`` (an array's .npy bytes with their checksum)."""
    return store._npy_bytes(value) if isinstance(value, np.ndarray) else json.dumps(value).encode()


DAMAGE = {  # entry name, what replaces its bytes, the warning's reason
    "npy truncated": ("x.npy", lambda data: data[:40], "has no checksum at its end"),
    "npy empty": ("x.npy", lambda data: b"", "has no checksum at its end"),
    "npy bytes flipped": ("x.npy", lambda data: _flip(data, 200), "does not match its checksum"),
    "npy of an older lmprobe": ("x.npy", lambda data: data[:-store._CHECKSUM_SIZE], "has no checksum at its end"),
    "npy wrong shape": ("x.npy", lambda data: _entry(np.arange(63.0)), "has shape (63,), expected (64,)"),
    "npy wrong dtype": ("x.npy", lambda data: _entry(np.arange(64)), "has dtype int64, expected floating"),
    "npy NaN": ("x.npy", lambda data: _entry(np.full(64, np.nan)), "has 64 non-finite values (NaN or infinite) of 64"),
    "json truncated": ("y.json", lambda data: data[:5], "is unreadable (JSONDecodeError: "),
    "json empty": ("y.json", lambda data: b"", "is unreadable (JSONDecodeError: "),
    "json {}": ("y.json", lambda data: b"{}", "lacks keys 'scores'"),
    "json null": ("y.json", lambda data: b"null", "is null, expected an object"),
    "json wrong type": ("y.json", lambda data: b'{"scores": [1, "2"]}', "has a string at scores[1], expected a number"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_or_wrong_cache_entry_is_named_discarded_and_recomputed(tmp_path, records, damage):
    name, damaged, why = DAMAGE[damage]
    path = tmp_path / "cache" / name
    if name.endswith(".npy"):
        fetch = functools.partial(store.cached, expect=store.Array((64,)))
        value = np.arange(64.0)
    else:
        fetch = functools.partial(store.cached_json, expect={"scores": [float]})
        value = {"scores": list(range(64))}
    fetch(str(path), lambda: value)
    path.write_bytes(damaged(path.read_bytes()))
    calls = []
    with store.cache_use() as use:
        again = fetch(str(path), lambda: calls.append(1) or value)
    assert calls == [1] and use.misses == 1 and use.hits == 0
    np.testing.assert_array_equal(again if name.endswith(".npy") else again["scores"],
                                  value if name.endswith(".npy") else value["scores"])
    (warning,) = [r.getMessage() for r in records.records if r.levelname == "WARNING"]
    assert warning.startswith(f"cache entry {path} {why}") and warning.endswith("discarded, recomputing")
    assert fetch(str(path), lambda: pytest.fail("the rewritten entry was not used")) is not None
    assert _files(tmp_path) == [f"cache/{name}"]


def test_an_array_entry_is_a_npy_file_numpy_reads(tmp_path):
    path = tmp_path / "x.npy"
    store.cached(str(path), lambda: np.arange(6.0).reshape(2, 3), expect=store.Array((2, 3)))
    np.testing.assert_array_equal(np.load(path), np.arange(6.0).reshape(2, 3))  # the checksum after it is ignored


@pytest.mark.parametrize("fetch, value, expect, why", [
    (store.cached, np.full(3, np.inf), VECTOR, "has 3 non-finite values"),
    (store.cached, np.zeros((3, 2)), VECTOR, r"has shape \(3, 2\), expected \(any,\)"),
    (store.cached_json, {"a": 1}, {"b": int}, "lacks keys 'b'; has unexpected keys 'a'"),
])
def test_a_computed_value_that_is_not_what_the_entry_holds_is_refused_and_never_written(tmp_path, fetch, value,
                                                                                          expect, why):
    path = tmp_path / "x"
    with pytest.raises(LmprobeError, match=f"the value computed for cache entry {path} {why}.*not cached"):
        fetch(str(path), lambda: value, expect=expect)
    assert _files(tmp_path) == []


def test_json_problem_names_where_and_what():
    schema = {"p": float, "esc": (int, None), "items": [{"text": str}], "skipped": {str: int}, "any": object}
    good = {"p": 1, "esc": None, "items": [{"text": "a"}], "skipped": {}, "any": [None]}
    assert store.json_problem(good, schema) is None
    assert store.json_problem({**good, "p": float("nan")}, schema) is None  # cache entries keep NaN
    assert store.json_problem({**good, "p": True}, schema) == "has a boolean at p, expected a number"
    assert store.json_problem({**good, "esc": 1.5}, schema) == "has a number at esc, expected an integer or null"
    assert store.json_problem({**good, "items": [{"text": 3}]}, schema) == \
        "has an integer at items[0].text, expected a string"
    assert store.json_problem({**good, "skipped": {"x": "y"}}, schema) == \
        "has a string at skipped.x, expected an integer"
    assert store.json_problem([], lambda v: None if v else "is empty") == "is empty"


def test_require_finite_names_the_model_the_stage_and_the_count():
    assert store.require_finite(np.ones(3), model="m", stage="embedding") is not None
    with pytest.raises(NonFinite, match=r"^m: embedding gave 2 non-finite values \(NaN or infinite\) of 6: "):
        store.require_finite(np.array([[1, np.nan, 2], [np.inf, 0, 1]]), model="m", stage="embedding")
    with pytest.raises(NonFinite, match="m: BYOD negation gave 1 non-finite values .* of 3"):
        store.require_finite([0.5, None, {"extra": [float("nan"), 1]}], model="m", stage="BYOD negation")


def test_a_corrupt_entry_on_process_0_makes_every_process_recompute(tmp_path, monkeypatch):
    path = tmp_path / "x.npy"
    path.write_bytes(b"")  # process 0 finds it unreadable and shares 'missing': the others compute too
    shared = []
    real_share = store._share
    monkeypatch.setattr(store, "_share", lambda value: shared.append(value) or real_share(value))
    np.testing.assert_array_equal(store.cached(str(path), lambda: np.ones(2), expect=VECTOR), np.ones(2))
    assert shared == [store._MISSING]


def test_cache_use_counts_hits_and_logs_them_and_stages_record_them(tmp_path, records):
    path = str(tmp_path / "a.npy")
    stages = store.StageTimes({"generation": 1.5})
    with stages("embedding", "m: embedding") as use:
        store.cached(path, lambda: np.ones(2), expect=VECTOR)
    assert use.to_json() == {"hits": 0, "entries": 1} and stages.cached == {}
    with stages("embedding", "m: embedding") as use:
        with store.cache_use() as inner:  # nested blocks count too
            store.cached(path, lambda: pytest.fail("recomputed"), expect=VECTOR)
        store.cached(str(tmp_path / "b.npy"), lambda: np.zeros(2), expect=VECTOR)
    assert inner.hits == 1 and use.to_json() == {"hits": 1, "entries": 2}
    assert stages.cached == {"embedding": {"hits": 1, "entries": 2}} and set(stages.seconds) == {"generation",
                                                                                                "embedding"}
    assert "m: embedding: 1 of 2 cache entries read from the cache" in records.messages


def test_json_files_are_strict_and_undefined_numbers_are_null(tmp_path):
    data = {"nan": float("nan"), "inf": float("-inf"), "np": np.float32("nan"), "array": np.array([1.0, np.inf]),
            "ok": np.int64(3), "nested": [{"x": (np.nan, 2.5)}], "std_error": None,
            "std_error_note": "undefined with one trial"}
    store.write_results(tmp_path / "results.json", {**data, "run_info": {"started": "x"}})
    store.write_json(tmp_path / "plain.json", data)
    store.write_jsonl(tmp_path / "samples.jsonl", [data, {"score": np.float64("nan")}])
    expected = {"nan": None, "inf": None, "np": None, "array": [1.0, None], "ok": 3, "nested": [{"x": [None, 2.5]}],
                "std_error": None, "std_error_note": "undefined with one trial"}
    assert _strict_loads((tmp_path / "results.json").read_text()) == {**expected, "run_info": {"started": "x"}}
    assert _strict_loads((tmp_path / "plain.json").read_text()) == expected
    rows = [_strict_loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert rows == [expected, {"score": None}]


def test_cache_entries_keep_nan_so_a_resumed_run_computes_what_the_first_did(tmp_path):
    path = str(tmp_path / "c.json")
    store.cached_json(path, lambda: {"gap": float("nan")}, expect={"gap": float})
    again = store.cached_json(path, lambda: pytest.fail("recomputed"), expect={"gap": float})
    assert np.isnan(again["gap"])
