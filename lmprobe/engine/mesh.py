"""The device mesh ('data', 'model') and the rules that place parameters and batches on it.

One code path from one CPU to a multi-host TPU pod: parameters carry logical axis names
(lmprobe.models.axes), a rules table maps them to mesh axes, and jit with NamedSharding does
the rest (no pmap). Tensor parallelism shards heads, MLP and vocabulary over 'model'; FSDP also
shards the embedding dimension over 'data', so that every device holds a slice of every matrix.
"""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from lmprobe.errors import LmprobeError
from lmprobe.models.axes import BATCH, EMBED, HEAD_DIM, HEADS, KV_HEADS, LAYERS, LENGTH, MLP, POSITIONS, VOCAB

DATA, MODEL = "data", "model"

# logical axis -> mesh axis (None: replicated); heads are sharded whole, never head_dim
TENSOR_PARALLEL = {VOCAB: MODEL, HEADS: MODEL, KV_HEADS: MODEL, MLP: MODEL,
                   EMBED: None, HEAD_DIM: None, LAYERS: None, POSITIONS: None}
FSDP = {**TENSOR_PARALLEL, EMBED: DATA}
RULES = {"tp": TENSOR_PARALLEL, "fsdp": FSDP}
# Activations between layers: batch over 'data', the rest whole (lmprobe.models.layers.constrain).
ACTIVATION_RULES = ((BATCH, DATA), (LENGTH, None), (EMBED, None))


@contextlib.contextmanager
def tracing_on(mesh: Mesh):
    """The context a model step is traced in: ``mesh`` and the activation rules, so that the
    models' activation constraints apply (outside it they are no-ops)."""
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nnx.logical_axis_rules(ACTIVATION_RULES):
        yield


def make_mesh(model_parallel: int = 1, devices=None) -> Mesh:
    """A (data, model) mesh over all devices; ``model_parallel`` devices share each model copy."""
    devices = list(jax.devices() if devices is None else devices)
    if model_parallel < 1 or len(devices) % model_parallel:
        raise LmprobeError(
            f"--model_parallel={model_parallel} does not divide the {len(devices)} devices: "
            f"choose one of {[d for d in range(1, len(devices) + 1) if len(devices) % d == 0]}")
    shape = (len(devices) // model_parallel, model_parallel)
    return Mesh(np.asarray(devices).reshape(shape), (DATA, MODEL), axis_types=(AxisType.Auto,) * 2)


def spec_for(shape: tuple, axes: tuple, mesh: Mesh, rules: dict) -> PartitionSpec:
    """PartitionSpec for an array whose dims are named ``axes``; dims that do not divide stay whole."""
    spec, used = [], set()
    for size, name in zip(shape, axes):
        mesh_axis = rules.get(name)
        if mesh_axis is None or mesh_axis in used or size % mesh.shape[mesh_axis]:
            spec.append(None)
        else:
            spec.append(mesh_axis)
            used.add(mesh_axis)
    return PartitionSpec(*spec)


class Placement:
    """Where a loader puts each parameter: ``place(array, axes)`` puts a host array straight onto
    its sharding, each device receiving only its slice (make_array_from_callback), so this works
    unchanged across the hosts of a pod, every host reading the same checkpoint. ``sharding(shape,
    axes)`` is that sharding, for readers that restore onto it themselves (Orbax)."""

    def __init__(self, mesh: Mesh, strategy: str = "fsdp"):
        if strategy not in RULES:
            raise LmprobeError(f"sharding strategy {strategy!r} is not one of {', '.join(RULES)}")
        self.mesh, self.strategy, self.rules = mesh, strategy, RULES[strategy]

    def sharding(self, shape: tuple, axes: tuple) -> NamedSharding:
        return NamedSharding(self.mesh, spec_for(tuple(shape), tuple(axes), self.mesh, self.rules))

    def __call__(self, array: np.ndarray, axes: tuple) -> jax.Array:
        return jax.make_array_from_callback(array.shape, self.sharding(array.shape, axes), lambda index: array[index])


def placement(mesh: Mesh, strategy: str = "fsdp") -> Placement:
    """The loader placement of ``strategy`` ('fsdp', 'tp') on ``mesh``."""
    return Placement(mesh, strategy)


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Leading (batch) axis over 'data', the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(DATA, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
