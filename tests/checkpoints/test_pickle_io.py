"""Pickled weights: refused by default, read with allow_pickle=True."""

from __future__ import annotations

import json
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

from lmprobe.checkpoints.resolve import resolve
from lmprobe.errors import CheckpointError

from .conftest import TINY_CONFIG


def torch_tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "w.f32": torch.randn(3, 4, generator=g),
        "w.bf16": torch.randn(5, generator=g).to(torch.bfloat16),
        "w.f16": torch.randn(2, 2, generator=g).to(torch.float16),
    }


def pickle_dir(tmp_path, filename="pytorch_model.bin"):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    tensors = torch_tensors()
    torch.save(tensors, tmp_path / filename)
    return str(tmp_path), tensors


@pytest.mark.parametrize("filename", ["pytorch_model.bin", "weights.pt"])
def test_refused_without_flag(tmp_path, filename):
    directory, _ = pickle_dir(tmp_path, filename)
    with pytest.raises(CheckpointError) as err:
        resolve(directory)
    msg = str(err.value)
    assert filename in msg and "allow_pickle=True" in msg and "safetensors" in msg


def test_read_with_flag(tmp_path):
    directory, tensors = pickle_dir(tmp_path)
    source = resolve(directory, allow_pickle=True).tensors
    assert sorted(source.names()) == sorted(tensors)
    assert source.shape("w.f32") == (3, 4)
    np.testing.assert_array_equal(source.read("w.f32"), tensors["w.f32"].numpy())
    bf16 = source.read("w.bf16")
    assert bf16.dtype == ml_dtypes.bfloat16
    assert np.array_equal(bf16.view(np.int16), tensors["w.bf16"].view(torch.int16).numpy())
    assert source.read("w.f16").dtype == np.float16


def test_sharded_bin_index(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    tensors = torch_tensors()
    torch.save({"w.f32": tensors["w.f32"]}, tmp_path / "pytorch_model-00001-of-00002.bin")
    torch.save({"w.f16": tensors["w.f16"]}, tmp_path / "pytorch_model-00002-of-00002.bin")
    weight_map = {"w.f32": "pytorch_model-00001-of-00002.bin", "w.f16": "pytorch_model-00002-of-00002.bin"}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CheckpointError, match="pytorch_model.bin.index.json"):
        resolve(str(tmp_path))
    source = resolve(str(tmp_path), allow_pickle=True).tensors
    assert sorted(source.names()) == ["w.f16", "w.f32"]
    np.testing.assert_array_equal(source.read("w.f16"), tensors["w.f16"].numpy())


def test_non_tensor_pickle_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    torch.save({"step": 3, "w": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="flat state dict of tensors"):
        resolve(str(tmp_path), allow_pickle=True)


def test_torch_missing(tmp_path, monkeypatch):
    directory, _ = pickle_dir(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(CheckpointError, match=r"needs PyTorch, which is not installed"):
        resolve(directory, allow_pickle=True)
