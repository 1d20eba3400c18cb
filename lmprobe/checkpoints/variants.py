"""Model variants as nnx state transforms, named after a checkpoint: ``Scorer.load("NAME@int8")``.
They ask "does this design choice keep the invariances?" of one checkpoint (SCoPE, Rawal & Toneva, arXiv:2311.04166v1
Sec. 4 compares design choices).

    NAME@bf16          every floating parameter rounded to bfloat16 (compute dtype unchanged)
    NAME@int8          weight matrices fake-quantized to int8: symmetric, one scale per output
                       channel (per row of embedding tables), dequantized in place
    NAME@drop-layer=K  transformer block K (0-based) removed from the stacked layers
    NAME@noise=SIGMA   Gaussian noise on every parameter: w + SIGMA * rms(w) * N(0, 1), rms per
                       tensor (per layer of stacked layers), seeded by the tensor's path, so the
                       same name is the same model in every run (a ladder of known order)

Variants compose left to right: "smollm2-135m@int8@drop-layer=3". ``ladder_position`` places a name
on a ladder of known order (noise level, layers dropped).
"""

from __future__ import annotations

import dataclasses
import functools
import zlib

import jax
import jax.numpy as jnp
from flax import nnx

from lmprobe.errors import LmprobeError
from lmprobe.models.axes import HEAD_DIM, LAYERS

KINDS = ("bf16", "int8", "drop-layer=K", "noise=SIGMA")


def split_name(name: str) -> tuple[str, list[str]]:
    """'base@v1@v2' -> ('base', ['v1', 'v2']), variants checked."""
    base, *variants = name.split("@")
    for v in variants:
        if v.startswith("noise=") and _sigma(v) is None:
            raise LmprobeError(f"'@{v}' in '{name}': SIGMA is not a number >= 0; write NAME@noise=SIGMA, "
                               "e.g. smollm2-135m@noise=0.05")
        if v.startswith("drop-layer=") and not v[11:].lstrip("-").isdigit():
            raise LmprobeError(f"'@{v}' in '{name}': K is not an integer; write NAME@drop-layer=K, "
                               "e.g. smollm2-135m@drop-layer=15")
        if v not in ("bf16", "int8") and not v.startswith(("noise=", "drop-layer=")):
            raise LmprobeError(f"unknown model variant '@{v}' in '{name}': use one of "
                               f"{', '.join('@' + k for k in KINDS)}")
    return base, variants


def ladder_position(name: str) -> tuple[str, str, float] | None:
    """(the model the ladder starts from, ladder kind, level) of a variant whose quality is known to fall
    with the level, or None (a base model, or @bf16 / @int8 last): 'm@noise=0.1' -> ('m', 'noise', 0.1);
    'm@drop-layer=3@drop-layer=5' -> ('m', 'drop-layer', 2), the number of layers dropped."""
    base, names = split_name(name)
    if not names or names[-1] in ("bf16", "int8"):
        return None
    if names[-1].startswith("noise="):
        return "@".join([base, *names[:-1]]), "noise", _sigma(names[-1])
    kept = list(names)
    while kept and kept[-1].startswith("drop-layer="):
        kept.pop()
    return "@".join([base, *kept]), "drop-layer", float(len(names) - len(kept))


def _sigma(variant: str) -> float | None:
    try:
        sigma = float(variant.split("=", 1)[1])
    except ValueError:
        return None
    return sigma if sigma >= 0 else None


def add_noise(model: nnx.Module, sigma: float, seed: int = 0) -> None:
    """w += sigma * rms(w) * N(0, 1) for every floating parameter; rms over each tensor (each layer's
    slice of a stacked tensor), noise keyed by (seed, the parameter's path), drawn in place on the
    parameter's sharding."""
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value = var.get_value()
        if not jnp.issubdtype(value.dtype, jnp.floating):
            continue
        axes = tuple(var.get_metadata().get("axes") or ())
        stacked = axes[:1] == (LAYERS,) and value.ndim > 1
        key = jax.random.fold_in(jax.random.key(seed), zlib.crc32("/".join(map(str, path)).encode()))
        noisy = jax.jit(functools.partial(_noisy, stacked=stacked), out_shardings=getattr(value, "sharding", None))
        var.set_value(noisy(value, key, jnp.float32(sigma)))


def _noisy(value, key, sigma, *, stacked: bool):
    x = value.astype(jnp.float32)
    rms = jnp.sqrt(jnp.mean(jnp.square(x), axis=tuple(range(1, x.ndim)) if stacked else None, keepdims=True))
    return (x + sigma * rms * jax.random.normal(key, x.shape, jnp.float32)).astype(value.dtype)


def cast_bf16(model: nnx.Module) -> None:
    for _, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value = var.get_value()
        if jnp.issubdtype(value.dtype, jnp.floating):
            var.set_value(value.astype(jnp.bfloat16).astype(value.dtype))


def fake_quantize_int8(model: nnx.Module) -> None:
    """Kernels [.., in, out]: one scale per output column; embeddings [.., V, D]: one per row.

    Attention kernels keep heads apart: q/k/v [.., embed, heads, head_dim] scale per (head, dim),
    output projections [.., heads, head_dim, embed] reduce over both input dims."""
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value, leaf = var.get_value(), str(path[-1])
        if leaf not in ("kernel", "embedding") or value.ndim < 2:
            continue
        axes = tuple(var.get_metadata().get("axes") or ())
        if leaf == "embedding":
            axis = -1
        elif axes[-1:] == (HEAD_DIM,):
            axis = -3
        elif axes[-2:-1] == (HEAD_DIM,):
            axis = (-3, -2)
        else:
            axis = -2
        scale = jnp.maximum(jnp.abs(value).max(axis=axis, keepdims=True), 1e-12) / 127.0
        var.set_value((jnp.clip(jnp.round(value / scale), -127, 127) * scale).astype(value.dtype))


def drop_layer(model: nnx.Module, k: int) -> nnx.Module:
    """The model with stacked block k removed (its config's num_hidden_layers reduced)."""
    n = model.config.num_hidden_layers
    if not -n <= k < n or n < 2:
        raise LmprobeError(f"drop-layer={k}: the model has {n} layers; give 0..{n - 1} (and keep at least one)")
    k %= n
    stacks = {name for name in ("layers", "layer", "h", "blocks") if hasattr(model, name)}
    if not stacks:
        raise LmprobeError(f"{type(model).__name__} has no stacked layers to drop from")
    for name in stacks:
        for _, var in nnx.to_flat_state(nnx.state(getattr(model, name))):
            value = var.get_value()
            var.set_value(jnp.concatenate([value[:k], value[k + 1:]]))
    model.config = dataclasses.replace(model.config, num_hidden_layers=n - 1)
    return model


def apply_variants(model: nnx.Module, variants: list[str]) -> nnx.Module:
    """A transformed copy of the model (its own Variables; the input is left unchanged)."""
    model = nnx.clone(model)
    for v in variants:
        if v == "bf16":
            cast_bf16(model)
        elif v == "int8":
            fake_quantize_int8(model)
        elif v.startswith("noise="):
            add_noise(model, _sigma(v))
        else:
            model = drop_layer(model, int(v.split("=", 1)[1]))
    return model

