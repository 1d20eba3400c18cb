"""Turn a resolved checkpoint into a Flax model: one tensor at a time, checked, placed.

The model is first built abstractly (no memory); each parameter is then read from the
checkpoint under the HF name its family's table gives, checked against the expected shape,
transposed, split out of a fused q/k/v tensor, reshaped (HF's heads*head_dim is our
[heads, head_dim]), cast, and placed (by default on the default device; the engine passes a
placement that puts each parameter straight onto its sharding). An lmprobe Orbax checkpoint is
restored whole instead, each array straight onto its sharding (``restore``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.errors import CheckpointError
from lmprobe.models import HF, Family, family_for
from lmprobe.models.axes import HEAD_DIM, HEADS, KV_HEADS

Placement = Callable[[np.ndarray, tuple], jax.Array]


class Loaded(NamedTuple):
    model: nnx.Module
    tokenizer: object  # None when loaded with tokenizer=False
    family: Family
    config: object  # the family's config dataclass
    checkpoint: object  # lmprobe.checkpoints.resolve.Checkpoint


def load(name: str, *, dtype=jnp.float32, param_dtype=None, place: Placement | None = None,
         offline: bool | None = None, allow_pickle: bool = False, tokenizer: bool = True,
         revision: str | None = None, progress: Callable = lambda it, **_: it) -> Loaded:
    """Resolve ``name`` (path, hub id, alias, GGUF, embedded default; ``revision`` for hub models);
    build its model and tokenizer, the parameters read through ``progress`` (tqdm-like)."""
    from lmprobe.checkpoints.resolve import resolve

    ckpt = resolve(name, offline=offline, allow_pickle=allow_pickle, revision=revision)
    family = family_for(ckpt.config, where=ckpt.location)
    if tokenizer and not getattr(family.model, "takes_text", True):
        raise CheckpointError(
            f"model '{name}' ({ckpt.location}) is a {family.name} model, which takes no text and has no "
            "tokenizer: load it with tokenizer=False")
    if ckpt.orbax is not None:
        model, cfg = restore(family, ckpt, dtype=dtype, param_dtype=param_dtype, place=place)
    else:
        model, cfg = build(family, ckpt.config, ckpt.tensors, dtype=dtype, param_dtype=param_dtype,
                           place=place, where=ckpt.location, progress=progress, desc=f"{name}: loading weights")
    return Loaded(model, ckpt.tokenizer() if tokenizer else None, family, cfg, ckpt)


def build(family: Family, hf_config: dict, tensors, *, dtype=jnp.float32, param_dtype=None,
          place: Placement | None = None, where: str = "checkpoint", progress: Callable = lambda it, **_: it,
          desc: str = "loading weights"):
    """Build ``family``'s model from HF config and tensors, one parameter (stacked over layers) at
    a time through ``progress`` (tqdm-like); returns (model, family config)."""
    param_dtype = param_dtype or dtype
    cfg = family.config_from_hf(hf_config)
    available = set(tensors.names())
    fit_config = getattr(family.model, "fit_config", None)  # optional modules (a ViT's pooler)
    if fit_config is not None:
        cfg = fit_config(cfg, lambda name: _find(name, family.base_prefix, available) is not None)
    abstract = nnx.eval_shape(lambda: family.model(cfg, dtype=dtype, param_dtype=param_dtype,
                                                   rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    place = place or (lambda array, axes: jnp.asarray(array))
    flat = list(nnx.to_flat_state(state))
    for path, var in progress(flat, desc=desc, total=len(flat)):
        key = ".".join(map(str, path))
        want, axes = tuple(var.get_value().shape), tuple(var.get_metadata()["axes"])
        array = _read(family, family.hf_names(key), tensors, available, want, axes, where, param_dtype)
        var.set_value(place(array, axes))
    return nnx.merge(graphdef, state), cfg


def restore(family: Family, ckpt, *, dtype=jnp.float32, param_dtype=None, place=None):
    """Build ``family``'s model from an lmprobe Orbax checkpoint (``ckpt.orbax``), every parameter read
    by orbax straight onto ``place.sharding(shape, axes)`` (an lmprobe.engine.mesh.Placement; None: the
    default device) in ``param_dtype``; returns (model, family config)."""
    from lmprobe.checkpoints import orbax_io

    step = ckpt.orbax
    if jax.process_index() == 0:
        print(f"{ckpt.name}: Orbax checkpoint step {step.step} ({step.path})", file=sys.stderr)
    param_dtype = param_dtype or dtype
    cfg = family.config_from_hf(ckpt.config)
    abstract = nnx.eval_shape(lambda: family.model(cfg, dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0)))
    graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
    if len(nnx.to_flat_state(rest)):
        raise CheckpointError(f"{family.name} models hold state besides parameters, which lmprobe's Orbax "
                              f"checkpoints do not save: load '{ckpt.name}' from a Hugging Face export instead")
    sharding = getattr(place, "sharding", None)
    if place is not None and sharding is None:
        raise CheckpointError("an Orbax checkpoint restores onto shardings: pass place=lmprobe.engine.mesh."
                              "placement(mesh, strategy) (an object with .sharding(shape, axes)), or no place")
    return nnx.merge(graphdef, orbax_io.restore(step, params, place)), cfg


def _read(family: Family, rule: HF, tensors, available: set[str], want: tuple, axes: tuple,
          where: str, dtype) -> np.ndarray:
    """The tensor for one parameter in ``dtype`` (stacked over layers when its name has ``{i}``),
    checked. Layers are written into one preallocated array: no second copy of a stacked weight."""
    if "{i}" not in rule.name:
        return _read_one(family, rule, tensors, available, want, axes, where).astype(dtype, copy=False)
    out = np.empty(want, dtype)
    for i in range(want[0]):
        out[i] = _read_one(family, rule._replace(name=rule.name.format(i=i)), tensors, available, want[1:],
                           axes[1:], where)
    return out


def _read_one(family, rule: HF, tensors, available, want, axes, where) -> np.ndarray:
    found = _find(rule.name, family.base_prefix, available)
    if found is None:
        raise CheckpointError(
            f"tensor {rule.name!r} is missing from {where} ({family.name} checkpoint with "
            f"{len(available)} tensors): the checkpoint is incomplete or does not match its "
            "config.json; re-download or re-export it")
    shape = tuple(tensors.shape(found))
    hf_shape = _hf_shape(want, axes, fused=rule.qkv is not None)
    expected = tuple(reversed(hf_shape)) if rule.transpose else hf_shape
    if shape != expected:
        describe = getattr(tensors, "describe", repr)  # a reader's own name for it (a MaxText leaf)
        raise CheckpointError(
            f"tensor {describe(found)} in {where} has shape {shape}, but the config.json implies {expected}: "
            "the weights and config.json belong to different models; use the config saved with them")
    array = np.asarray(tensors.read(found))
    array = array.T if rule.transpose else array
    if rule.qkv is not None:  # the last axis holds q, k and v
        heads = want[axes.index(HEADS if HEADS in axes else KV_HEADS)]
        split = (heads, 3, -1) if rule.per_head else (3, -1)
        array = np.take(array.reshape(*array.shape[:-1], *split), rule.qkv, axis=-2)
    return array.reshape(want)


def _hf_shape(want: tuple, axes: tuple, fused: bool) -> tuple:
    """The shape HF stores a parameter in (before any transpose): [heads, head_dim] as one
    dimension, and that three times over for a fused q/k/v tensor."""
    shape = []
    for size, axis in zip(want, axes):
        if axis == HEAD_DIM and shape:
            shape[-1] *= size
        else:
            shape.append(size)
    if fused:
        shape[-1] *= 3
    return tuple(shape)


_LEGACY_NORM_NAMES = {"LayerNorm.weight": "LayerNorm.gamma", "LayerNorm.bias": "LayerNorm.beta"}


def _find(name: str, prefix: str, available: set[str]) -> str | None:
    """``name`` as stored: as is, without the base-model prefix, or with it; for TF-era BERT
    checkpoints also with LayerNorm.gamma / .beta (which transformers renames on load)."""
    candidates = [name]
    if prefix and name.startswith(prefix):
        candidates.append(name[len(prefix):])
    elif prefix:
        candidates.append(prefix + name)
    for new, old in _LEGACY_NORM_NAMES.items():
        if name.endswith(new):
            candidates += [c[: -len(new)] + old for c in candidates]
    return next((c for c in candidates if c in available), None)
