"""SynBench's representation networks by name: what a model name is (``representation_kind``) and
its Representation built from it (``load_representation``), models loaded through the caller's
loaders (a front end's: its shared flags decide dtype, mesh and hub access).

Names: ``identity`` (the sanity baseline, score about 1), ``random_projection``, a JAX function
``package.module:function`` mapping inputs [B, *input_shape] to [B, ...], a ViT checkpoint (model
type "vit": [CLS] of pixel inputs), or any other checkpoint, a language model (Gaussian input
embeddings through Scorer.embed_inputs; variants NAME@noise=... allowed).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from lmprobe.errors import LmprobeError
from lmprobe.methods import synbench

IDENTITY, RANDOM_PROJECTION, FUNCTION, VIT, LANGUAGE_MODEL = (
    "identity", "random_projection", "function", "vit", "language_model")
KINDS = (IDENTITY, RANDOM_PROJECTION, FUNCTION, VIT, LANGUAGE_MODEL)
FUNCTION_INPUT_SHAPE = (64,)  # d for identity / random_projection / functions by default (n >> d: score ~ 1)
PROJECTION_DIM = 32  # output width of random_projection by default


def representation_kind(name: str, *, offline: bool | None = None, revision: str | None = None,
                        allow_pickle: bool = False) -> str:
    """One of KINDS for ``name``: IDENTITY and RANDOM_PROJECTION by name, FUNCTION for
    ``package.module:function`` (not an existing path), else a checkpoint, resolved (no weights
    read): VIT when its family is vit, LANGUAGE_MODEL otherwise. A ViT with variants is an error."""
    if name in (IDENTITY, RANDOM_PROJECTION):
        return name
    if ":" in name and not os.path.exists(name):
        return FUNCTION
    from lmprobe.checkpoints import variants
    from lmprobe.checkpoints.resolve import resolve
    from lmprobe.models import family_for

    base, applied = variants.split_name(name)
    ckpt = resolve(base, offline=offline, allow_pickle=allow_pickle, revision=revision)
    if family_for(ckpt.config, where=ckpt.location).name != "vit":
        return LANGUAGE_MODEL
    if applied:
        raise LmprobeError(f"--model={name}: variants ({', '.join(applied)}) apply to language models; "
                           f"give the ViT checkpoint as {base}")
    return VIT


def import_function(name: str) -> Callable:
    """The function ``package.module:function`` names; one clear error when it cannot be imported."""
    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise LmprobeError(f"--model={name}: cannot import function {attr!r} from module {module!r} "
                           f"({e})") from None


def load_representation(name: str, *, load_scorer: Callable, load_checkpoint: Callable, dtype=None, seed: int = 0,
                        batch_size: int = 64, input_shape: tuple[int, ...] | None = None,
                        channel_axis: int | None = None, projection_dim: int = PROJECTION_DIM,
                        seq_len: int = synbench.DEFAULT_SEQ_LEN, pooling: str | None = None, layer: int = -1,
                        inputs: str = "embedding", input_scale: float | None = None, offline: bool | None = None,
                        revision: str | None = None, allow_pickle: bool = False) -> synbench.Representation:
    """The representation network ``name`` describes (``representation_kind``), its model loaded last.

    ``load_scorer(name)``: a language model's Scorer (variants applied); ``load_checkpoint(name)``:
    a ViT's ``lmprobe.checkpoints.load`` result, in ``dtype`` (its identity's compute dtype; the
    Representation's ``checkpoint``). ``batch_size``: inputs per call of a function or ViT (one
    compiled shape); ``input_shape`` / ``channel_axis`` / ``projection_dim``: the inputs of
    identity, random_projection and functions (default FUNCTION_INPUT_SHAPE); ``seq_len`` /
    ``pooling`` / ``layer`` / ``inputs`` / ``input_scale``: a language model's (synbench.scorer_representation).
    ``offline`` / ``revision`` / ``allow_pickle``: how a checkpoint name resolves."""
    kind = representation_kind(name, offline=offline, revision=revision, allow_pickle=allow_pickle)
    shape = input_shape or FUNCTION_INPUT_SHAPE
    common = {"batch_size": batch_size, "channel_axis": channel_axis}
    if kind == IDENTITY:
        return synbench.identity_representation(shape, **common)
    if kind == RANDOM_PROJECTION:
        return synbench.random_projection_representation(shape, projection_dim, seed=seed, **common)
    if kind == FUNCTION:
        return synbench.function_representation(name, import_function(name), shape, **common)
    if kind == VIT:
        return vit_checkpoint_representation(load_checkpoint(name), name, dtype=dtype, batch_size=batch_size)
    return synbench.scorer_representation(load_scorer(name), name, seq_len=seq_len, pooling=pooling, layer=layer,
                                          inputs=inputs, input_scale=input_scale)


def vit_checkpoint_representation(loaded, name: str, *, dtype=None, batch_size: int = 64) -> synbench.Representation:
    """synbench.vit_representation of a loaded ViT checkpoint (``lmprobe.checkpoints.load``'s result),
    with the checkpoint's image normalisation and its identity (compute ``dtype``) in the cache key."""
    from lmprobe.checkpoints import identity, image_processor
    from lmprobe.engine import model_identity

    about = model_identity(loaded.model, name=name, checkpoint=identity(loaded.checkpoint), dtype=dtype)
    cfg = loaded.config
    mean, std = image_processor.image_normalization(loaded.checkpoint.location, cfg.num_channels)
    rep = synbench.vit_representation(loaded.model, name, mean=mean, std=std, image_size=cfg.image_size,
                                      channels=cfg.num_channels, batch_size=batch_size, identity=about)
    rep.checkpoint = about
    return rep
