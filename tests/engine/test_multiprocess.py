"""The front ends as one 2-process x 2-device jax.distributed job on localhost give the numbers of
one process with 4 devices, and only process 0 writes and prints.

Each job runs BYOD, SynTextBench and SynBench (small settings) in one Python process per job
process (the front ends' main(), as `python -m experiments.<name>` calls it), so that JAX and the
distributed runtime start once per process. An audit hook records every file a process opens for
writing, creates, renames or removes under the run directory.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.user_jobs import wait_while_progressing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = 1e-6
# what differs between two runs of the same computation: clocks, and where and how it ran
IGNORED_KEYS = {"timings_s", "seconds", "seconds_per_perturbed_sample", "wall_s", "device", "devices", "time",
                "run_info"}

DRIVER = textwrap.dedent("""
    import json, os, sys

    root = os.path.realpath(sys.argv[1])
    decoder, encoder = sys.argv[2:4]  # tiny random SmolLM2 and MiniLM (tests/tiny_models.py)
    writes = []

    def audit(event, args):
        if event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        elif event == "os.rename":  # os.replace too: the destination is what gets written
            writing, path = True, args[1]
        else:
            writing, path = event in ("os.mkdir", "os.remove", "os.rmdir"), args[0] if args else None
        if writing and isinstance(path, (str, bytes, os.PathLike)):
            full = os.path.realpath(os.fsdecode(path))
            if full.startswith(root):
                writes.append([event, os.path.relpath(full, root)])

    sys.addaudithook(audit)
    from lmprobe.cli import byod, synbench, syntextbench
    from lmprobe import store

    def step(name, main, argv):
        writes.clear()
        main(argv)
        print(f"WRITES {name} " + json.dumps(writes), flush=True)

    step("byod", byod.main, [f"--model={decoder}", "--corpus=fortunes", "--max_examples=4",
                             "--metrics=negation,word_order", "--benign=", "--batch_size=2",
                             f"--output_dir={root}/byod"])
    step("syntextbench", syntextbench.main, [f"--model={encoder}", "--lexicon=afinn", "--n=200", "--levels=0,0.5",
                                             "--no_baselines", "--icl_examples=0", "--batch_size=4",
                                             f"--output_dir={root}/syntextbench"])
    synbench_argv = [f"--model={encoder}", "--n=64", "--scales=1,3", "--eps=0,0.4", "--a_t=0.6,0.7", "--seq_len=8",
                     "--batch_size=4", f"--output_dir={root}/synbench"]
    step("synbench", synbench.main, synbench_argv)
    store._BROADCAST_CHUNK = 1 << 16  # the rerun loads its cache in several broadcasts
    step("synbench-rerun", synbench.main, synbench_argv)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int, **extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAX_", "XLA_", "TPU_", "SLURM_")) and k != "COORDINATOR_ADDRESS"
    }
    env.update(
        JAX_PLATFORMS="cpu",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
        **extra,
    )
    return env


def _start(out_dir, models, env, log_prefix):
    stdout, stderr = open(f"{log_prefix}.out", "w"), open(f"{log_prefix}.err", "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(out_dir), *models], cwd=REPO, env=env,
        stdout=stdout, stderr=stderr,
    )
    return proc, log_prefix


def _finish(jobs):
    """Wait for every process while they make progress (all killed once none wrote anything for a while:
    tests.user_jobs.wait_while_progressing); {log_prefix: (stdout, stderr)}."""
    outputs = [f"{prefix}.{end}" for _, prefix in jobs for end in ("out", "err")]
    wait_while_progressing([proc for proc, _ in jobs], outputs)
    logs = {}
    for proc, prefix in jobs:
        with open(f"{prefix}.out") as f, open(f"{prefix}.err") as g:
            logs[prefix] = (f.read(), g.read())
        assert proc.returncode == 0, (
            f"{prefix} exited {proc.returncode}:\n{logs[prefix][0][-3000:]}\n{logs[prefix][1][-5000:]}"
        )
    return logs


def compare(a, b, path="", tolerance=TOLERANCE) -> float:
    """Largest absolute difference between two JSON trees' numbers (structure and every other
    value equal, IGNORED_KEYS skipped); an AssertionError names the first place they differ."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) - IGNORED_KEYS == set(b) - IGNORED_KEYS, f"{path}: keys differ"
        return max([compare(a[k], b[k], f"{path}.{k}", tolerance) for k in a if k not in IGNORED_KEYS] or [0.0])
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths differ"
        return max([compare(x, y, f"{path}[{i}]", tolerance) for i, (x, y) in enumerate(zip(a, b))] or [0.0])
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        assert isinstance(b, (int, float)) and not isinstance(b, bool), f"{path}: {a!r} vs {b!r}"
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), f"{path}: {a} vs {b}"
            return 0.0
        diff = abs(a - b)
        assert diff <= tolerance, f"{path}: {a} vs {b} (difference {diff:.3g} > {tolerance})"
        return diff
    assert a == b, f"{path}: {a!r} vs {b!r}"
    return 0.0


def test_compare_ignores_timings_and_finds_differences():
    a = {"x": [1.0, {"y": 2}], "timings_s": {"a": 1.0}, "name": "m"}
    assert compare(a, {"x": [1.0 + 5e-7, {"y": 2}], "timings_s": {"a": 9.0}, "name": "m"}) == pytest.approx(5e-7)
    with pytest.raises(AssertionError, match=r"\.x\[1\]\.y"):
        compare(a, {"x": [1.0, {"y": 3}], "timings_s": {}, "name": "m"})
    with pytest.raises(AssertionError, match="name"):
        compare(a, {"x": [1.0, {"y": 2}], "name": "n"})


METHODS = ("byod", "syntextbench", "synbench")
SUMMARIES = ("== BYOD", "SynTextBench score", "SynBench-Score", "results in")


class Jobs:
    """The one-process job and the two-process job (three processes), started together beside the suite, at its
    priority (a busy machine cannot starve them)."""

    def __init__(self, folder, models, cache: str):
        port = _free_port()
        self.folder = folder
        pair = [_env(2, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i),
                     LMPROBE_COMPILATION_CACHE=cache) for i in range(2)]
        self.started = [_start(folder / "one", models, _env(4, LMPROBE_COMPILATION_CACHE=cache), str(folder / "one"))]
        self.started += [_start(folder / "two", models, env, str(folder / f"two-p{i}")) for i, env in enumerate(pair)]

    def finish(self) -> dict:
        return _finish(self.started)

    def stop(self) -> None:
        for proc, _ in self.started:
            if proc.poll() is None:
                proc.kill()


def start_jobs(request, folder) -> Jobs:
    """The session starts the jobs with its first test (a ``starts_early`` marker): they run beside the suite,
    with a compilation cache of their own (jax writes an entry in place: the suite must not read one half written)."""
    from tests.conftest import EARLY_CACHE

    models = (request.getfixturevalue("tiny_smollm2_dir"), request.getfixturevalue("tiny_minilm_dir"))
    return Jobs(folder, models, EARLY_CACHE)


@pytest.mark.slow
@pytest.mark.starts_early("tests.engine.test_multiprocess:start_jobs")
def test_two_processes_match_one_process_and_only_process_0_writes(started_early):
    jobs = started_early("tests.engine.test_multiprocess:start_jobs")
    tmp_path = jobs.folder
    logs = jobs.finish()
    (out0, err0), (out1, err1) = logs[str(tmp_path / "two-p0")], logs[str(tmp_path / "two-p1")]

    differences = {}
    for method in METHODS:
        one = json.loads((tmp_path / "one" / method / "results.json").read_text())
        two = json.loads((tmp_path / "two" / method / "results.json").read_text())  # synbench: the rerun's
        differences[method] = compare(one, two)
    print("max |2-process - 1-process| per method:", differences)

    # one writer: process 1 wrote, created, renamed nothing under the run directory ...
    writes = {
        p: {
            line.split(" ", 2)[1]: json.loads(line.split(" ", 2)[2])
            for line in out.splitlines()
            if line.startswith("WRITES ")
        }
        for p, out in (("p0", out0), ("p1", out1))
    }
    assert set(writes["p0"]) == set(writes["p1"]) == {*METHODS, "synbench-rerun"}
    assert all(w == [] for w in writes["p1"].values()), writes["p1"]
    for method in METHODS:  # (the hook sees process 0's writes)
        assert any(path == f"{method}/results.json" for _, path in writes["p0"][method])
    # the rerun took the cache branch on both processes (process 0 read, broadcast): nothing computed
    # again, so no cache file written, and the same numbers
    assert writes["p0"]["synbench-rerun"] and not [p for _, p in writes["p0"]["synbench-rerun"] if "/cache/" in p]
    # ... and left no temporary or probe file; every method's outputs are there once
    files = sorted(
        os.path.relpath(os.path.join(d, f), tmp_path / "two")
        for d, _, names in os.walk(tmp_path / "two")
        for f in names
    )
    assert not [f for f in files if os.path.basename(f).startswith((".tmp-", ".lmprobe-write-test"))], files
    for method in METHODS:
        assert f"{method}/results.json" in files
    assert "byod/samples.jsonl" in files and "byod/radar.png" in files and "synbench/bound_threshold.png" in files
    assert any(f.startswith("syntextbench/cache/") for f in files)

    # one printer: process 0 printed the summaries (stdout) and log lines (stderr), process 1 none of
    # them; progress bars are off when stderr is not a terminal, and on process 1 always
    for text in SUMMARIES:
        assert text in out0 and text not in out1, text
    assert "batch: " in err0 and "batch: " not in err1 and "%|" not in err1
