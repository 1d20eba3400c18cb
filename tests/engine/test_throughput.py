"""The throughput benchmark runs end to end (figures are not asserted: timings are no tests)."""

import json

import pytest

from lmprobe.cli import throughput


def test_throughput_writes_every_figure(tiny_llama_dir, tmp_path, capsys):
    throughput.main([f"--model={tiny_llama_dir}", "--forward=2x16", "--generation=2x4x4",
                     "--repeats=1", f"--output_dir={tmp_path}"])
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["peak_gflops"] > 0 and results["peak_source"] == "measured matmul peak (CPU)"
    for section in ("forward", "generation"):
        (row,) = results[section]
        assert row["batch"] == 2 * results["data_parallel"]  # --forward and --generation batches are per device
        assert row["tokens_per_s"] > 0 and row["gflops"] > 0 and row["torch_tokens_per_s"] > 0
    assert "MFU" in capsys.readouterr().out


@pytest.mark.parametrize("kind, tflops", [
    ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 NVL", 835),
    ("NVIDIA H200", 989), ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA A100 80GB PCIe", 312),
    ("NVIDIA A100-PCIE-40GB", 312), ("NVIDIA L4", 121), ("TPU v4", 275), ("TPU v5 lite", 197),
    ("TPU v5e", 197), ("TPU v5", 459), ("TPU v5p", 459), ("TPU v6 lite", 918), ("TPU v6e", 918),
    ("NVIDIA L40S", None), ("TPU v4 lite", None), ("TPU7x", None), ("cpu", None),
])
def test_advertised_peaks_by_device_kind(kind, tflops):
    assert throughput.bf16_peak_tflops(kind) == tflops


def test_an_unknown_accelerator_falls_back_to_a_measured_peak(monkeypatch):
    class Device:
        device_kind = "Imaginary X1"

    monkeypatch.setattr(throughput.jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(throughput.jax, "devices", lambda: [Device()])
    monkeypatch.setattr(throughput.jax, "device_count", lambda: 2)
    monkeypatch.setattr(throughput, "matmul_peak", lambda dtype, repeats: 100.0)
    assert throughput.peak_gflops(None, 1) == (
        200.0, "measured matmul peak x 2 devices ('Imaginary X1' is not in the table of advertised peaks)")
    Device.device_kind = "NVIDIA H100 80GB HBM3"
    assert throughput.peak_gflops(None, 1) == (2 * 989e3, "advertised bf16 peak 989 TFLOP/s x 2 devices")


def test_flops_per_token_counts_matmuls_and_attention(tiny_llama_dir):
    from lmprobe.engine import Scorer

    scorer = Scorer.load(str(tiny_llama_dir))
    # 2 layers x (q 64x64 + k, v 64x32 + o 64x64 + 3 MLP 64x128) + LM head 64x256, attention 4*2*T*64
    matmul = 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128) + 64 * 256
    assert throughput.flops_per_token(scorer, 16) == 2 * matmul + 4 * 2 * 16 * 64
