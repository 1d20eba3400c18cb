"""The throughput benchmark runs end to end (figures are not asserted: timings are no tests)."""

import json

from experiments import throughput


def test_throughput_writes_every_figure(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "throughput.json"
    throughput.main([f"--model={tiny_llama_dir}", "--forward=2x16", "--generation=2x4x4",
                     "--repeats=1", f"--json={out}"])
    results = json.loads(out.read_text())
    assert results["matmul_peak_gflops"] > 0
    for section in ("forward", "generation"):
        (row,) = results[section]
        assert row["tokens_per_s"] > 0 and row["gflops"] > 0 and row["torch_tokens_per_s"] > 0
    assert "MFU" in capsys.readouterr().out


def test_flops_per_token_counts_matmuls_and_attention(tiny_llama_dir):
    from lmprobe.engine import Scorer

    scorer = Scorer.load(str(tiny_llama_dir))
    # 2 layers x (q 64x64 + k, v 64x32 + o 64x64 + 3 MLP 64x128) + LM head 64x256, attention 4*2*T*64
    matmul = 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128) + 64 * 256
    assert throughput.flops_per_token(scorer, 16) == 2 * matmul + 4 * 2 * 16 * 64
