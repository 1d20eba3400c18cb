"""The device mesh ('data', 'model') and the rules that place parameters and batches on it.

One code path from one CPU to a multi-host TPU pod: parameters carry logical axis names
(lmprobe.models.axes), a rules table maps them to mesh axes, and jit with NamedSharding does
the rest (no pmap). Tensor parallelism shards heads, MLP and vocabulary over 'model'; FSDP also
shards the embedding dimension over 'data', so that every device holds a slice of every matrix.

A user's own mesh (a trainer's: ('data', 'fsdp', 'tensor'), ...) works too: ``data_axes`` names
the mesh axes the batch is split over (``batch_axes``), and the parameters stay where they are.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from lmprobe.errors import LmprobeError
from lmprobe.models import layers
from lmprobe.models.axes import BATCH, EMBED, HEAD_DIM, HEADS, KV_HEADS, LAYERS, LENGTH, MLP, POSITIONS, VOCAB

DATA, MODEL = "data", "model"

# logical axis -> mesh axis (None: replicated); heads are sharded whole, never head_dim
TENSOR_PARALLEL = {VOCAB: MODEL, HEADS: MODEL, KV_HEADS: MODEL, MLP: MODEL,
                   EMBED: None, HEAD_DIM: None, LAYERS: None, POSITIONS: None}
FSDP = {**TENSOR_PARALLEL, EMBED: DATA}
RULES = {"tp": TENSOR_PARALLEL, "fsdp": FSDP}
# Activations between layers: batch over 'data', the rest whole (lmprobe.models.layers.constrain); attention's
# heads over 'model' (its Pallas kernels' shard_map), where the mesh has that axis.
ACTIVATION_RULES = ((BATCH, DATA), (LENGTH, None), (EMBED, None), (HEADS, MODEL))


@contextlib.contextmanager
def tracing_on(mesh: Mesh, data_axes: tuple[str, ...] = (DATA,)):
    """The context a model step is traced in: ``mesh``, the activation rules (the batch over
    ``data_axes``), so that the models' activation constraints apply (outside it they are no-ops),
    and the platform of the mesh's devices (a TPU topology's too: its attention is Pallas')."""
    rules = ((BATCH, _axis(data_axes)), *ACTIVATION_RULES[1:])
    with (jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nnx.logical_axis_rules(rules),
          layers.traced_for(layers.platform_of(mesh.devices.flat[0]))):
        yield


def auto_axes(fn, mesh: Mesh, data_axes: tuple[str, ...] = (DATA,)):
    """``fn`` traced with the mesh's Explicit axes (jax.make_mesh's default) as Auto ones, as lmprobe's
    models expect (they place activations by constraints, not by sharding in types); its outputs'
    leading axis over ``data_axes``. ``fn`` itself on a mesh of Auto axes."""
    explicit = tuple(n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit)
    if not explicit:
        return fn
    return jax.sharding.auto_axes(fn, axes=explicit, out_sharding=PartitionSpec(_axis(data_axes)))


def batch_axes(mesh: Mesh, data_axes: Sequence[str] | str | None = None) -> tuple[str, ...]:
    """The mesh axes a batch is split over: ``data_axes`` checked against ``mesh``, or ('data',)
    when the mesh has that axis."""
    names = tuple(mesh.axis_names)
    if data_axes is None:
        if DATA not in names:
            raise LmprobeError(f"the mesh has axes {names} and none named {DATA!r}: say which the batch is split "
                               f"over, e.g. Scorer(..., data_axes={names[:1]})")
        return (DATA,)
    axes = (data_axes,) if isinstance(data_axes, str) else tuple(data_axes)
    unknown = [a for a in axes if a not in names]
    if unknown or len(set(axes)) != len(axes):
        raise LmprobeError(f"data_axes={axes}: each must be a distinct axis of the mesh, whose axes are {names}")
    return axes


def batch_devices(mesh: Mesh, data_axes: Sequence[str] = (DATA,)) -> int:
    """How many ways a batch is split: the product of the ``data_axes`` sizes."""
    return math.prod(mesh.shape[a] for a in data_axes)


_default_devices: list | None = None


def set_default_devices(devices: Sequence | None = None) -> None:
    """Say which devices a mesh spans when none are named: ``make_mesh()``, ``Scorer(model)`` without
    ``mesh=``, ``Scorer.load`` and the front ends. ``devices``: a sequence of jax devices, or None (the
    default): every device, ``jax.devices()``.

    E.g. ``set_default_devices(jax.devices()[:1])`` where jax made several CPU devices (a test session's
    ``jax_num_cpu_devices``) for work that runs faster unsharded; an explicit ``devices=`` or ``mesh=``
    still takes any of them."""
    global _default_devices
    if devices is not None and not list(devices):
        raise LmprobeError("set_default_devices: give at least one device, or None for every device")
    _default_devices = None if devices is None else list(devices)


def default_devices() -> list:
    """The devices a mesh spans when none are named (``set_default_devices``; every device by default)."""
    return list(jax.devices()) if _default_devices is None else list(_default_devices)


def make_mesh(model_parallel: int = 1, devices=None) -> Mesh:
    """A (data, model) mesh over ``devices`` (``default_devices()``: every device unless
    ``set_default_devices`` said otherwise); ``model_parallel`` devices share each model copy."""
    devices = list(default_devices() if devices is None else devices)
    if model_parallel < 1 or len(devices) % model_parallel:
        raise LmprobeError(
            f"`model_parallel={model_parallel}` does not divide the {len(devices)} devices: "
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


def batch_sharding(mesh: Mesh, ndim: int = 2, data_axes: tuple[str, ...] = (DATA,)) -> NamedSharding:
    """Leading (batch) axis over ``data_axes`` ('data'), the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(_axis(data_axes), *([None] * (ndim - 1))))


def _axis(data_axes: tuple[str, ...]):
    """One PartitionSpec entry for ``data_axes``: the name alone when there is one."""
    return data_axes[0] if len(data_axes) == 1 else tuple(data_axes)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
