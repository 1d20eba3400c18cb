"""Run-directory artifacts: local and epath paths, remote paths without a back end, one writer,
and the cache's branch that process 0 decides."""

import importlib.util
import json
import os

import numpy as np
import pytest
from etils import epath

from lmprobe.engine import runtime
from lmprobe.errors import LmprobeError
from lmprobe.report import artifacts, plots

NO_GCSFS = importlib.util.find_spec("gcsfs") is None and importlib.util.find_spec("tensorflow") is None


def _files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_join_keeps_urls_and_local_paths():
    assert artifacts.join("gs://bucket/run", "cache", "x.npy") == "gs://bucket/run/cache/x.npy"
    assert artifacts.join("runs/byod", "results.json") == "runs/byod/results.json"
    assert artifacts.join(epath.Path("/tmp/a"), "b") == "/tmp/a/b"
    assert artifacts.is_remote("gs://b/x") and not artifacts.is_remote("/tmp/x")
    assert not artifacts.is_remote("file:///tmp/x")


def test_writes_through_epath_local_paths_atomically(tmp_path):
    run = epath.Path(tmp_path) / "run"  # an epath.Path works where a str does
    artifacts.write_json(run / "results.json", {"score": np.float32(0.5), "curve": np.arange(3)})
    artifacts.write_jsonl(artifacts.join(str(run), "samples.jsonl"), [{"a": 1}, {"a": np.int64(2)}])
    artifacts.write_bytes(run / "sub" / "blob.bin", b"\x00\x01")
    assert json.loads((run / "results.json").read_text()) == {"score": 0.5, "curve": [0, 1, 2]}
    assert (run / "samples.jsonl").read_text().splitlines() == ['{"a": 1}', '{"a": 2}']
    assert _files(tmp_path) == ["run/results.json", "run/samples.jsonl", "run/sub/blob.bin"]  # no .tmp- left
    assert oct(os.stat(run / "results.json").st_mode & 0o777) != oct(0o600)  # not mkstemp's private mode


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    with pytest.raises(TypeError):
        artifacts.write_json(tmp_path / "r.json", {"x": object()})
    assert _files(tmp_path) == []


@pytest.mark.skipif(not NO_GCSFS, reason="a GCS back end is installed")
def test_gs_path_without_a_backend_is_one_clear_error_and_no_local_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LmprobeError, match=r"gs://bucket/run/results.json.*gcsfs"):
        artifacts.write_json("gs://bucket/run/results.json", {"a": 1})
    with pytest.raises(LmprobeError, match=r"output directory gs://bucket/run.*pip install gcsfs"):
        artifacts.check_writable("gs://bucket/run")
    with pytest.raises(LmprobeError, match="gcsfs"):
        artifacts.cached("gs://bucket/run/cache/x.npy", lambda: np.zeros(2))
    assert os.listdir(tmp_path) == []  # never a ./gs:/bucket/run directory


def test_a_url_mangled_by_os_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LmprobeError, match="lost a slash"):
        artifacts.write_json(os.path.normpath("gs://bucket/run/results.json"), {})
    assert os.listdir(tmp_path) == []


def test_check_writable(tmp_path):
    artifacts.check_writable(tmp_path / "new" / "run")  # created, probe removed
    assert _files(tmp_path) == [] and (tmp_path / "new" / "run").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(LmprobeError, match="is a file"):
        artifacts.check_writable(tmp_path / "file")


def test_cached_computes_once_then_loads(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return np.arange(6, dtype=np.float32).reshape(2, 3)

    path = artifacts.join(str(tmp_path), "cache", "x.npy")
    first = artifacts.cached(path, compute)
    again = artifacts.cached(path, compute)
    assert len(calls) == 1 and again.dtype == np.float32
    np.testing.assert_array_equal(first, again)
    assert _files(tmp_path) == ["cache/x.npy"]

    rows = artifacts.cached_json(artifacts.join(str(tmp_path), "cache", "y.json"), lambda: (1, 2),
                                 encode=list, decode=tuple)
    assert rows == (1, 2)
    assert artifacts.cached_json(str(tmp_path / "cache" / "y.json"), lambda: pytest.fail("recomputed"),
                                 encode=list, decode=tuple) == (1, 2)


def test_cache_branch_follows_process_0_not_the_local_view(tmp_path, monkeypatch):
    """Every process takes process 0's branch: computing runs collectives."""
    path = str(tmp_path / "x.npy")
    artifacts.cached(path, lambda: np.ones(3))
    before = os.stat(path).st_mtime_ns

    # another process: the file is on its disk, but it is not process 0, whose "missing" it follows
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    monkeypatch.setattr(artifacts, "_share", lambda value: artifacts._MISSING)
    out = artifacts.cached(path, lambda: np.full(3, 7.0))
    np.testing.assert_array_equal(out, np.full(3, 7.0))  # computed, as process 0 does
    assert os.stat(path).st_mtime_ns == before  # and written by process 0 only
    artifacts.write_json(tmp_path / "r.json", {})
    plots.save_figure(plots.plt.figure(), str(tmp_path / "f.png"))
    assert _files(tmp_path) == ["x.npy"]

    # another process, process 0 has the cache: it loads process 0's bytes, never computes
    monkeypatch.setattr(artifacts, "_share", lambda value: artifacts._SAVED)
    monkeypatch.setattr(artifacts, "_broadcast_bytes", lambda data: artifacts._npy_bytes(np.full(3, 5.0)))
    np.testing.assert_array_equal(artifacts.cached(str(tmp_path / "absent.npy"), lambda: pytest.fail("computed")),
                                  np.full(3, 5.0))


def test_a_failed_cache_write_fails_every_process(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    with pytest.raises(LmprobeError, match="cannot write"):
        artifacts.cached(str(tmp_path / "cache" / "x.npy"), lambda: np.ones(2))
    # a process other than 0 raises too (process 0 shares its failure through agree)
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    monkeypatch.setattr(runtime, "agree", lambda flag: False)
    with pytest.raises(LmprobeError, match="process 0 could not write"):
        artifacts.cached(str(tmp_path / "other.npy"), lambda: np.ones(2))


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
    artifacts.write_results(path, _results(first, 1))
    artifacts.write_results(path, _results(first, 2))  # the same run again (BYOD after every model)
    assert _files(tmp_path) == ["results.json"] and json.loads(path.read_text())["score"] == 2
    artifacts.write_results(path, _results(second, 3))
    assert _files(tmp_path) == ["results-20240501T120000Z.json", "results.json"]
    assert json.loads((tmp_path / "results-20240501T120000Z.json").read_text())["score"] == 2
    assert json.loads(path.read_text())["score"] == 3


def test_write_results_never_overwrites_history_and_stamps_files_without_run_info(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"score": 0}')  # an old results.json without run_info: its mtime names it
    os.utime(path, (1714564800, 1714564800))  # 2024-05-01T12:00:00Z
    (tmp_path / "results-20240501T120000Z.json").write_text("{}")
    artifacts.write_results(path, _results("2024-06-01T00:00:00+00:00", 1))
    assert json.loads((tmp_path / "results-20240501T120000Z-1.json").read_text()) == {"score": 0}
    assert (tmp_path / "results-20240501T120000Z.json").read_text() == "{}"
    path.write_text("not json")  # unreadable: kept too
    artifacts.write_results(path, _results("2024-06-01T00:00:00+00:00", 2))
    assert len([f for f in _files(tmp_path) if f.startswith("results-")]) == 3


def test_write_results_writes_nothing_on_other_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "is_main", lambda: False)
    artifacts.write_results(tmp_path / "results.json", _results("x", 1))
    assert _files(tmp_path) == []
