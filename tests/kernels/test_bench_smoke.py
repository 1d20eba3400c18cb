"""Smoke test: the kernel benchmark's --quick mode runs end to end and writes its figures."""

from __future__ import annotations

import json
import math

from experiments.bench import kernels as bench_kernels


def test_quick_benchmark_runs_and_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    bench_kernels.main(["--quick", "--repeats=1", f"--json={path}"])
    printed = capsys.readouterr().out
    payload = json.loads(path.read_text())
    assert payload["mode"] == "quick"
    kernels = {row["kernel"] for row in payload["rows"]}
    assert {"js_divergence (unchunked)", "class whitening (fit + apply)", "robust_direction (l2)"} <= kernels
    assert all(row["jax_ms"] > 0 and math.isfinite(row["speedup"]) for row in payload["rows"])
    memory = payload["jsd_memory"]
    chunked = next(v for k, v in memory.items() if k.startswith("jax_chunked"))
    assert chunked < memory["jax_unchunked_temp_mb"]
    assert "speedup" in printed and "Peak memory" in printed
