"""Run-directory artifacts: local and epath paths, remote paths without a back end, one writer,
and the cache's branch that process 0 decides."""

import importlib.util
import json
import logging
import os

import numpy as np
import pytest
from etils import epath

from lmprobe import store
from lmprobe.engine import runtime
from lmprobe.errors import LmprobeError
from lmprobe.report import plots

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
        store.cached("gs://bucket/run/cache/x.npy", lambda: np.zeros(2))
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
    first = store.cached(path, compute)
    again = store.cached(path, compute)
    assert len(calls) == 1 and again.dtype == np.float32
    np.testing.assert_array_equal(first, again)
    assert _files(tmp_path) == ["cache/x.npy"]

    rows = store.cached_json(store.join(str(tmp_path), "cache", "y.json"), lambda: (1, 2),
                                 encode=list, decode=tuple)
    assert rows == (1, 2)
    assert store.cached_json(str(tmp_path / "cache" / "y.json"), lambda: pytest.fail("recomputed"),
                                 encode=list, decode=tuple) == (1, 2)


def test_cache_branch_follows_process_0_not_the_local_view(tmp_path, monkeypatch):
    """Every process takes process 0's branch: computing runs collectives."""
    path = str(tmp_path / "x.npy")
    store.cached(path, lambda: np.ones(3))
    before = os.stat(path).st_mtime_ns

    # another process: the file is on its disk, but it is not process 0, whose "missing" it follows
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    monkeypatch.setattr(store, "_share", lambda value: store._MISSING)
    out = store.cached(path, lambda: np.full(3, 7.0))
    np.testing.assert_array_equal(out, np.full(3, 7.0))  # computed, as process 0 does
    assert os.stat(path).st_mtime_ns == before  # and written by process 0 only
    store.write_json(tmp_path / "r.json", {})
    plots.save_figure(plots.plt.figure(), str(tmp_path / "f.png"))
    assert _files(tmp_path) == ["x.npy"]

    # another process, process 0 has the cache: it loads process 0's bytes, never computes
    monkeypatch.setattr(store, "_share", lambda value: store._SAVED)
    monkeypatch.setattr(store, "_broadcast_bytes", lambda data: store._npy_bytes(np.full(3, 5.0)))
    np.testing.assert_array_equal(store.cached(str(tmp_path / "absent.npy"), lambda: pytest.fail("computed")),
                                  np.full(3, 5.0))


def test_a_failed_cache_write_fails_every_process(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    with pytest.raises(LmprobeError, match="cannot write"):
        store.cached(str(tmp_path / "cache" / "x.npy"), lambda: np.ones(2))
    # a process other than 0 raises too (process 0 shares its failure through agree)
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    monkeypatch.setattr(runtime, "agree", lambda flag: False)
    with pytest.raises(LmprobeError, match="process 0 could not write"):
        store.cached(str(tmp_path / "other.npy"), lambda: np.ones(2))


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


@pytest.mark.parametrize("name, truncate", [("x.npy", 40), ("x.npy", 0), ("y.json", 5), ("y.json", 0)])
def test_a_truncated_or_empty_cache_entry_is_discarded_and_recomputed(tmp_path, records, name, truncate):
    path = tmp_path / "cache" / name
    fetch = store.cached if name.endswith(".npy") else store.cached_json
    value = np.arange(64.0) if name.endswith(".npy") else {"scores": list(range(64))}
    fetch(str(path), lambda: value)
    path.write_bytes(path.read_bytes()[:truncate])
    calls = []
    with store.cache_use() as use:
        again = fetch(str(path), lambda: calls.append(1) or value)
    assert calls == [1] and use.misses == 1 and use.hits == 0
    np.testing.assert_array_equal(again if name.endswith(".npy") else again["scores"],
                                  value if name.endswith(".npy") else value["scores"])
    (warning,) = [r.getMessage() for r in records.records if r.levelname == "WARNING"]
    assert warning.startswith(f"cache entry {path} is unreadable (") and warning.endswith("discarded, recomputing")
    assert fetch(str(path), lambda: pytest.fail("the rewritten entry was not used")) is not None
    assert _files(tmp_path) == [f"cache/{name}"]


def test_a_corrupt_entry_on_process_0_makes_every_process_recompute(tmp_path, monkeypatch):
    path = tmp_path / "x.npy"
    path.write_bytes(b"")  # process 0 finds it unreadable and shares 'missing': the others compute too
    shared = []
    real_share = store._share
    monkeypatch.setattr(store, "_share", lambda value: shared.append(value) or real_share(value))
    np.testing.assert_array_equal(store.cached(str(path), lambda: np.ones(2)), np.ones(2))
    assert shared == [store._MISSING]


def test_cache_use_counts_hits_and_logs_them_and_stages_record_them(tmp_path, records):
    path = str(tmp_path / "a.npy")
    stages = store.Stages({"generation": 1.5})
    with stages("embedding", "m: embedding") as use:
        store.cached(path, lambda: np.ones(2))
    assert use.to_json() == {"hits": 0, "entries": 1} and stages.cached == {}
    with stages("embedding", "m: embedding") as use:
        with store.cache_use() as inner:  # nested blocks count too
            store.cached(path, lambda: pytest.fail("recomputed"))
        store.cached(str(tmp_path / "b.npy"), lambda: np.zeros(2))
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
    store.cached_json(path, lambda: {"gap": float("nan")})
    again = store.cached_json(path, lambda: pytest.fail("recomputed"))
    assert np.isnan(again["gap"])
