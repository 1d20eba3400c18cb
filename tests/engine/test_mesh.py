"""The (data, model) mesh and parameter placement on 8 CPU devices."""

import jax
import numpy as np
import pytest

from lmprobe.checkpoints import load
from lmprobe.engine import default_devices, make_mesh, placement, set_default_devices
from lmprobe.engine.mesh import TENSOR_PARALLEL, spec_for
from lmprobe.errors import LmprobeError


def test_mesh_covers_all_devices():
    assert len(jax.devices()) == 8
    mesh = make_mesh(model_parallel=4)
    assert dict(mesh.shape) == {"data": 2, "model": 4}
    with pytest.raises(LmprobeError, match="`model_parallel=3` does not divide the 8 devices"):
        make_mesh(model_parallel=3)


def test_default_devices_are_those_a_mesh_spans_when_none_are_named():
    try:
        set_default_devices(jax.devices()[2:4])
        assert default_devices() == jax.devices()[2:4]
        assert list(make_mesh().devices.flat) == jax.devices()[2:4]
        assert dict(make_mesh(model_parallel=2).shape) == {"data": 1, "model": 2}
        assert make_mesh(devices=jax.devices()).size == 8  # named devices: any of them
        with pytest.raises(LmprobeError, match="`model_parallel=4` does not divide the 2 devices"):
            make_mesh(model_parallel=4)
        with pytest.raises(LmprobeError, match="at least one device"):
            set_default_devices([])
    finally:
        set_default_devices(None)
    assert default_devices() == jax.devices() and make_mesh().size == 8


def test_dims_that_do_not_divide_stay_whole():
    mesh = make_mesh(model_parallel=4)
    assert spec_for((64, 30), ("embed", "heads"), mesh, TENSOR_PARALLEL) == jax.sharding.PartitionSpec(None, None)
    assert spec_for((64, 32), ("embed", "heads"), mesh, TENSOR_PARALLEL) == jax.sharding.PartitionSpec(None, "model")


@pytest.mark.parametrize("strategy, per_device", [("fsdp", 1 / 8), ("tp", 1 / 4)])
def test_parameters_are_distributed(tiny_llama_dir, strategy, per_device):
    mesh = make_mesh(model_parallel=4)
    model = load(str(tiny_llama_dir), place=placement(mesh, strategy), tokenizer=False).model
    kernel = model.layers.mlp.up_proj.kernel[...]  # [layers, embed, mlp]
    shards = kernel.addressable_shards
    assert len({s.device for s in shards}) == 8
    for shard in shards:
        assert shard.data.size == kernel.size * per_device
    # gathered back, the sharded weight is the checkpoint's weight
    reference = load(str(tiny_llama_dir), tokenizer=False).model.layers.mlp.up_proj.kernel[...]
    np.testing.assert_array_equal(np.asarray(kernel), np.asarray(reference))
