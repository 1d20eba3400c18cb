"""Smoke test: the lm-eval benchmark runs both backends on a row, repeats it, and agrees with itself."""

from __future__ import annotations

import json

import pytest

from experiments.bench import lm_eval as bench


def test_benchmark_runs_both_backends_with_repeats(tmp_path, capfd, tiny_smollm2_dir):
    """On a tiny random SmolLM2 (its tokenizer; both backends read its folder): the benchmark's plumbing,
    not its figures; lmprobe's last warm run traced and summed up by kind of operation."""
    path = tmp_path / "bench.json"
    bench.main(["--rows=mc1", "--limit=2", "--repeats=2", f"--model={tiny_smollm2_dir}", f"--output={path}",
                f"--profile={tmp_path / 'trace'}"])
    (row,) = json.loads(path.read_text())["rows"]
    for side in ("lmprobe", "hf"):
        low, high = row[side]["range_s"]
        assert 0 < low <= row[side]["seconds"] <= high
        assert row[side]["requests"] == 8 and row[side]["tokens"] > 0 and row[side]["cpu_s"] > 0
    assert row["difference"] < 1e-4  # the same log-likelihoods from both backends
    out, err = capfd.readouterr()
    assert "fastest and slowest repeats" in out
    shares = [float(line.split("%")[0].split()[-1]) for line in err.splitlines() if "(in attention's tiles" in line]
    assert "mc1, the last warm run" in err and len(shares) == 4 and 99 < sum(shares) < 101


def test_benchmark_refuses_zero_repeats(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--rows=mc1", "--repeats=0"])
    assert "--repeats=0: at least one warm run" in capsys.readouterr().err
