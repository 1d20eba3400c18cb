"""lmprobe's own safetensors reader against the safetensors library, and its validation."""

from __future__ import annotations

import json
import os
import re
import struct

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file
from safetensors.torch import save_file as save_torch

from lmprobe.checkpoints.safetensors_io import SafetensorsFile, open_file, open_index
from lmprobe.errors import CheckpointError


def _raw_file(path, header: dict, data: bytes = b"") -> str:
    blob = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + data)
    return str(path)


def test_numpy_dtypes_bit_for_bit(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((7,)).astype(np.float16),
        "f64": rng.standard_normal((2, 2, 2)),
        "i64": rng.integers(-5, 5, (4,)),
        "u8": rng.integers(0, 255, (6,), dtype=np.uint8),
        "bool": rng.random(5) > 0.5,
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
    }
    path = str(tmp_path / "m.safetensors")
    save_file(tensors, path, metadata={"format": "np"})
    expected = load_file(path)
    source = open_file(path)
    assert sorted(source.names()) == sorted(tensors)
    for name, want in expected.items():
        got = source.read(name)
        assert got.dtype == want.dtype and got.shape == want.shape == source.shape(name)
        assert got.tobytes() == want.tobytes(), name


def test_bfloat16_and_float8_match_torch(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "bf16": torch.randn(4, 6, generator=g).to(torch.bfloat16),
        "f8": torch.randn(8, generator=g).to(torch.float8_e4m3fn),
    }
    path = str(tmp_path / "bf16.safetensors")
    save_torch(tensors, path)
    source = open_file(path)
    bf16 = source.read("bf16")
    assert bf16.dtype == ml_dtypes.bfloat16 and bf16.shape == (4, 6)
    assert np.array_equal(bf16.view(np.int16), tensors["bf16"].view(torch.int16).numpy())
    np.testing.assert_array_equal(bf16.astype(np.float32), tensors["bf16"].float().numpy())
    f8 = source.read("f8")
    assert f8.dtype == ml_dtypes.float8_e4m3fn
    assert np.array_equal(f8.view(np.uint8), tensors["f8"].view(torch.uint8).numpy())


def test_reads_are_lazy_read_only_views(tmp_path):
    path = str(tmp_path / "m.safetensors")
    save_file({"a": np.arange(12, dtype=np.float32).reshape(3, 4)}, path)
    file = SafetensorsFile(path)
    assert file._mmap is None  # header only until a tensor is read
    arr = open_file(path).read("a")
    assert not arr.flags.writeable and not arr.flags.owndata
    np.testing.assert_array_equal(arr, np.arange(12).reshape(3, 4))


@settings(max_examples=25, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(0, 4), max_size=3), min_size=1, max_size=4),
    dtype=st.sampled_from([np.float32, np.float16, np.int32, np.int8]),
)
def test_roundtrip_property(tmp_path_factory, shapes, dtype):
    rng = np.random.default_rng(len(shapes))
    tensors = {f"t{i}": np.asarray(rng.standard_normal(s) * 10).astype(dtype) for i, s in enumerate(shapes)}
    path = str(tmp_path_factory.mktemp("prop") / "p.safetensors")
    save_file(tensors, path)
    source = open_file(path)
    for name, want in tensors.items():
        assert source.read(name).tobytes() == want.tobytes()
        assert source.shape(name) == want.shape


def _sharded(tmp_path, weight_map_extra=None):
    rng = np.random.default_rng(2)
    a = {"a.weight": rng.standard_normal((2, 3)).astype(np.float32)}
    b = {"b.weight": rng.standard_normal((5,)).astype(np.float32), "b.bias": np.ones(2, np.float32)}
    save_file(a, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file(b, str(tmp_path / "model-00002-of-00002.safetensors"))
    weight_map = {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.weight": "model-00002-of-00002.safetensors",
        "b.bias": "model-00002-of-00002.safetensors",
        **(weight_map_extra or {}),
    }
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return str(index), {**a, **b}


def test_sharded_index(tmp_path):
    index, tensors = _sharded(tmp_path)
    source = open_index(index)
    assert sorted(source.names()) == sorted(tensors)
    for name, want in tensors.items():
        np.testing.assert_array_equal(source.read(name), want)


def test_missing_shard_is_named(tmp_path):
    index, _ = _sharded(tmp_path, {"c.weight": "model-00003-of-00003.safetensors"})
    with pytest.raises(CheckpointError, match=r"shard 'model-00003-of-00003.safetensors'.*missing"):
        open_index(index)


def test_index_placing_tensor_in_wrong_shard(tmp_path):
    index, _ = _sharded(tmp_path, {"c.weight": "model-00001-of-00002.safetensors"})
    with pytest.raises(CheckpointError, match=r"tensor 'c.weight'"):
        open_index(index)


def test_index_without_weight_map(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(CheckpointError, match="weight_map"):
        open_index(str(index))


def test_truncated_file_says_expected_and_found(tmp_path):
    path = str(tmp_path / "t.safetensors")
    save_file({"w": np.zeros((64, 64), np.float32)}, path)
    full = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(full - 100)
    with pytest.raises(CheckpointError) as err:
        open_file(path)
    msg = str(err.value)
    assert path in msg and "re-download" in msg
    assert f"truncated or corrupt (expected {full} bytes, found {full - 100})" in msg


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"\x01\x02", "expected at least 8 bytes, found 2"),
        (struct.pack("<Q", 1 << 40) + b"{}", "header length"),
        (struct.pack("<Q", 50) + b"{}", "expected 58 bytes, found 10"),
        (struct.pack("<Q", 9) + b"{not json", "not valid JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    ],
)
def test_corrupt_headers(tmp_path, content, fragment):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=re.escape(fragment)) as err:
        open_file(str(path))
    assert "truncated or corrupt" in str(err.value) and str(path) in str(err.value)


def test_offsets_inconsistent_with_shape(tmp_path):
    path = _raw_file(
        tmp_path / "o.safetensors",
        {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}},
        b"\0" * 16,
    )
    with pytest.raises(CheckpointError, match=r"'w' spans 12 bytes but shape \[2, 2\] of F32 needs 16"):
        open_file(path)


def test_offsets_past_end_of_file(tmp_path):
    path = _raw_file(
        tmp_path / "e.safetensors",
        {"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}},
        b"\0" * 16,
    )
    with pytest.raises(CheckpointError, match=r"truncated or corrupt \(expected \d+ bytes"):
        open_file(path)


def test_unknown_dtype_is_named(tmp_path):
    path = _raw_file(
        tmp_path / "d.safetensors", {"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, b"\0"
    )
    with pytest.raises(CheckpointError, match=r"tensor 'w'.*dtype 'F4'"):
        open_file(path)


def test_missing_tensor_names_tensor_and_checkpoint(tmp_path):
    path = str(tmp_path / "m.safetensors")
    save_file({"a": np.zeros(2, np.float32)}, path)
    source = open_file(path)
    for call in (source.read, source.shape):
        with pytest.raises(CheckpointError, match=rf"tensor 'lm_head.weight' is not in checkpoint '{re.escape(path)}'"):
            call("lm_head.weight")
