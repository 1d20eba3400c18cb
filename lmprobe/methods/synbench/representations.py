"""SynBench's representation networks f: inputs [B, *input_shape] -> [B, k]: from a JAX function, the
identity, a random projection, a known signal fraction, a language model fed Gaussian input embeddings
(through a Scorer), a ViT; and by name (``representation_kind``, ``load_representation``: models
loaded through the caller's loaders)."""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from lmprobe.data import gaussian
from lmprobe.engine.runner import run_here
from lmprobe.errors import LmprobeError
from lmprobe.methods import model_key
from lmprobe.methods.realtask import default_pooling
from lmprobe.methods.synbench.config import (
    DEFAULT_SEQ_LEN,
    EMBEDDING_SAMPLE,
    INPUTS,
    Config,
)


@dataclasses.dataclass
class Representation:
    """A representation network f: inputs [B, *input_shape] -> representations [B, k]."""

    name: str
    input_shape: tuple[int, ...]
    fn: Callable[[jax.Array], np.ndarray]
    channel_axis: int | None = None  # channels of the band covariance (C of CHW, D of T x D)
    offset: float = 0.0  # mu_bar (0.5 for pixel inputs, as the public code)
    normalize: Callable[[jax.Array], jax.Array] | None = None  # the model's input normalisation
    settings: dict = dataclasses.field(default_factory=dict)  # what else the cache key depends on
    identity: dict | None = None  # the model behind fn (checkpoint digest, dtype): part of the cache key
    # fn as a differentiable JAX function of normalised inputs, encoder(x) or encoder(encoder_params, x)
    # (None: not differentiable, e.g. a language model; the robust probe then attacks the representation)
    encoder: Callable | None = None
    encoder_params: object = None
    # a checkpoint loaded for this representation: its model_identity, location included (run_info; not in cache keys)
    checkpoint: dict | None = None
    # where the method's own programs run (the metric, baselines, robust probe): a language model's Scorer's
    # runner.program, so that a compile-only run compiles them beside the model's steps
    program: Callable = run_here
    # fn is a compile-only Scorer's (its answers are zeros): the checks that placeholders fail are skipped
    compile_only: bool = False

    def spec(self, config: Config) -> gaussian.GaussianSpec:
        return gaussian.GaussianSpec(tuple(self.input_shape), config.covariance, tuple(config.band),
                                     self.channel_axis, config.prior, self.offset)

    def input_encoder(self) -> tuple[Callable, object] | None:
        """(f, params): f(params, x) on raw inputs x (before the model's normalisation), or None."""
        if self.encoder is None:
            return None
        return _InputEncoder(self.encoder, self.normalize, self.encoder_params is not None), self.encoder_params


@dataclasses.dataclass(frozen=True)
class _InputEncoder:
    """encoder(params, normalize(x)), hashable (one compile per representation)."""

    encoder: Callable
    normalize: Callable | None
    with_params: bool

    def __call__(self, params, x):
        x = x if self.normalize is None else self.normalize(x)
        z = self.encoder(params, x) if self.with_params else self.encoder(x)
        return jnp.reshape(z, (x.shape[0], -1)).astype(jnp.float32)


def padded(fn: Callable, batch_size: int) -> Callable:
    """fn on batches padded to ``batch_size`` rows (one compiled shape), cut back afterwards."""

    def call(x):
        n = x.shape[0]
        if n < batch_size:
            x = jnp.concatenate([x, jnp.zeros((batch_size - n, *x.shape[1:]), x.dtype)])
        return np.asarray(fn(x))[:n]

    return call


def function_representation(name: str, fn: Callable, input_shape, *, batch_size: int = 64, **kwargs) -> Representation:
    """Any JAX function [B, *input_shape] -> [B, ...] (flattened to [B, k]), jitted; one whose output
    does not keep the batch axis first is refused (``check_batch_axis``, when it is traced)."""
    def flat(x):
        z = fn(x)
        check_batch_axis(name, fn, x, z)
        return jnp.reshape(z, (x.shape[0], -1)).astype(jnp.float32)

    return Representation(name, tuple(input_shape), padded(jax.jit(flat), batch_size), encoder=flat, **kwargs)


def check_batch_axis(name: str, fn: Callable, x, z) -> None:
    """Refuse ``fn`` unless its output's first axis is the batch's: ``z = fn(x)``, and its output's
    shape for one input more (traced, not run). A function that drops the batch axis (its output
    for one input, a reduction over the batch) can have as many leading entries as the batch has
    rows by chance: then flattening it to [B, k] would score a width of k = 1."""
    rows = x.shape[0]
    shape = tuple(getattr(z, "shape", ()))
    if shape[:1] == (rows,):
        try:
            one_more = jax.eval_shape(fn, jax.ShapeDtypeStruct((rows + 1, *x.shape[1:]), x.dtype))
        except Exception:  # noqa: BLE001 - a function of one batch size only: it is only given that many rows
            return
        rows, shape = rows + 1, tuple(getattr(one_more, "shape", ()))
    if shape[:1] != (rows,):
        raise LmprobeError(f"`model={name}` maps a batch of inputs of shape {(rows, *x.shape[1:])} to shape {shape}: "
                           "a representation function must keep the batch axis first ([B, ...] -> [B, ...], one "
                           "representation per input)")


def identity_representation(input_shape, **kwargs) -> Representation:
    """z = x: the sanity baseline, whose SynBench-Score is about 1."""
    return function_representation("identity", lambda x: x, input_shape, **kwargs)


def random_projection_representation(input_shape, dim: int, *, seed: int = 0, **kwargs) -> Representation:
    """z = R^T x with a fixed Gaussian R [d, dim]: keeps about dim / d of the signal."""
    d = math.prod(input_shape)
    matrix = jax.random.normal(jax.random.PRNGKey(seed), (d, dim), jnp.float32) / math.sqrt(d)
    rep = function_representation("random_projection", lambda x: x.reshape(x.shape[0], -1) @ matrix,
                                  input_shape, **kwargs)
    rep.settings.update(dim=dim, projection_seed=seed)
    return rep


def signal_fraction_representation(width: int, fraction: float, *, extra: int = 16, seed: int = 0,
                                   **kwargs) -> Representation:
    """z = Q^T x for inputs of size width + ``extra``, Q orthonormal [d, width] keeping ``fraction``
    of the class signal: ||Q^T u||^2 = fraction for u = 1_d / sqrt(d), noise still N(0, I_width).
    Its class-mean Mahalanobis half-distance is sqrt(fraction) s at scale s, so its true score is
    ``population_scores(sqrt(fraction) * scales, config)``: a known answer for the finite-sample bias."""
    if not 0 < fraction <= 1 or width < 1 or extra < 1:
        raise LmprobeError(f"signal_fraction_representation: fraction={fraction} must be in (0, 1], width={width} "
                           f"and extra={extra} >= 1")
    d = width + extra
    rng = np.random.default_rng(seed)
    u = np.ones(d) / math.sqrt(d)
    basis = np.linalg.qr(np.column_stack([u, rng.normal(size=(d, width))]))[0]  # u, then width directions _|_ u
    q = basis[:, 1:].copy()
    q[:, 0] = math.sqrt(fraction) * u + math.sqrt(1.0 - fraction) * basis[:, 1]
    matrix = jnp.asarray(q, jnp.float32)
    rep = function_representation("signal_fraction", lambda x: x.reshape(x.shape[0], -1) @ matrix, (d,), **kwargs)
    rep.settings.update(width=width, fraction=fraction, projection_seed=seed)
    return rep


def scorer_representation(scorer, name: str, *, seq_len: int = DEFAULT_SEQ_LEN, pooling: str | None = None,
                          layer: int = -1, inputs: str = "embedding", input_scale: float | None = None,
                          identity: dict | None = None, moments: tuple | None = None) -> Representation:
    """A language model fed Gaussian input embeddings [T, hidden] (Scorer.embed_inputs); its
    identity is the scorer's unless ``identity`` is given.

    * Pooling and layer: the real-task probes' (``realtask.default_pooling``: the last token of a
    decoder, the first-last layer average of an encoder; ``layer`` -1, the last), so SynBench
    scores the features the probes are scored on.
    * SynBench's sample x (N(y s u, I) in [T, hidden], u = 1 / sqrt(T hidden)) first has each
    token's hidden coordinates multiplied by fixed balanced signs (``balanced_signs``): the class
    mean y s u is constant across coordinates, and a LayerNorm over the hidden axis (BERT's
    embedding LayerNorm) would subtract exactly that constant. The signs keep both covariances
    (identity, and band: per channel along the tokens).
    * ``inputs="embedding"`` (default): each token is then mu + c (x_t R), mu and R R^T = C the mean
    and covariance of the model's token embeddings (``embedding_moments``; R the symmetric square
    root, which does not depend on the order of the hidden coordinates), c = ``input_scale``
    (default 1): at c = 1 the inputs have the token embeddings' first two moments, and the class
    shift lies in the whitened coordinates x. ``inputs="rms"``: x times c, by default the RMS of
    the token embeddings (``token_embedding_rms``; CACHE_VERSION 4's inputs). Either map is an
    invertible affine function of x, so the raw reference is unchanged. ``moments``: (mu, R) of
    ``embedding_moments`` computed once (``input_scale_sweep``).
    * A compile-only Scorer (``scorer.compile_only``) has no weights to take moments of: its inputs are
    x as drawn (their values choose no step; their shapes are the run's).
    """
    if inputs not in INPUTS:
        raise LmprobeError(f"inputs={inputs!r} for {name}: choose from {', '.join(INPUTS)}")
    if input_scale is not None and not input_scale > 0:
        raise LmprobeError(f"input_scale={input_scale} for {name}: the factor on the Gaussian inputs must be > 0")
    pooling = pooling or default_pooling(scorer)
    hidden = int(scorer.config.hidden_size)
    signs = balanced_signs(hidden)
    settings = {"pooling": pooling, "layer": layer, "seq_len": seq_len, "inputs": inputs, "input_signs": "balanced"}
    compile_only = getattr(scorer, "compile_only", None) is not None  # a Scorer's; a stand-in with embed_inputs: no
    runner = getattr(scorer, "runner", None)
    if compile_only:
        scale = 1.0 if input_scale is None else float(input_scale)
        transform = np.asarray
    elif inputs == "rms":
        scale = float(token_embedding_rms(scorer) if input_scale is None else input_scale)
        factor = signs * np.float32(scale)
        transform = lambda x: np.asarray(x) * factor
    else:
        scale = 1.0 if input_scale is None else float(input_scale)
        mean, root = moments if moments is not None else embedding_moments(scorer, name=name)
        signed_root = jnp.asarray(signs[:, None] * root * scale, jnp.float32)  # diag(signs) R c
        mean = jnp.asarray(mean, jnp.float32)
        transform = lambda x: mean + jnp.asarray(x) @ signed_root  # eager: no compile per representation
    settings["input_scale"] = round(scale, 6)
    return Representation(name, (seq_len, hidden),
                          lambda x: scorer.embed_inputs(np.asarray(transform(x)), pooling=pooling, layer=layer),
                          channel_axis=-1, settings=settings,
                          identity=identity if identity is not None else model_key(scorer),
                          program=run_here if runner is None else runner.program, compile_only=compile_only)


def embedding_moments(scorer, sample: int = EMBEDDING_SAMPLE, *, name: str = "the model") -> tuple[np.ndarray, ...]:
    """(mean [D], symmetric square root R [D, D] of the covariance), float64, of the model's input
    embeddings (``model.embed``, Gemma's sqrt(d) factor included) over ``sample`` evenly spaced
    token ids. * Every id weighs the same (no corpus frequencies). A singular covariance (fewer
    ids than dimensions, tied embeddings) is an error: R would drop part of the class signal."""
    vocab, hidden = int(scorer.config.vocab_size), int(scorer.config.hidden_size)
    ids = jnp.asarray(np.unique(np.linspace(0, vocab - 1, min(sample, vocab)).round().astype(np.int32)))
    e = np.asarray(multihost_utils.process_allgather(scorer.model.embed(ids).astype(jnp.float32), tiled=True))
    mean = e.mean(axis=0)
    centred = e - mean
    cov = (centred.T @ centred).astype(np.float64) / max(len(ids) - 1, 1)
    vals, vecs = np.linalg.eigh(cov)
    if not vals[0] > hidden * np.finfo(np.float32).eps * vals[-1]:
        rank = int(np.sum(vals > hidden * np.finfo(np.float32).eps * vals[-1]))
        raise LmprobeError(f"{name}'s token embeddings have a singular covariance (rank {rank} of {hidden} over "
                           f"{len(ids)} token ids): Gaussian inputs drawn with it would lose part of the class "
                           "signal; use `inputs=rms`")
    return np.asarray(mean, np.float64), (vecs * np.sqrt(vals)) @ vecs.T


def token_embedding_rms(scorer, sample: int = 4096) -> float:
    """RMS of the model's input embeddings (``model.embed``: Gemma's sqrt(d) factor included) over
    ``sample`` evenly spaced token ids of its vocabulary."""
    vocab = int(scorer.config.vocab_size)
    ids = jnp.asarray(np.linspace(0, vocab - 1, min(sample, vocab)).round().astype(np.int32))
    return float(jnp.sqrt(jnp.mean(jnp.square(scorer.model.embed(ids).astype(jnp.float32)))))


def balanced_signs(d: int, seed: int = 0) -> np.ndarray:
    """[d] float32 of +1 and -1 in equal numbers (one more +1 for odd d), in a seeded order: the
    constant vector becomes one with (near) zero mean and the same norm."""
    signs = np.where(np.arange(d) < (d + 1) // 2, 1.0, -1.0).astype(np.float32)
    return signs[np.random.default_rng(seed).permutation(d)]


def vit_representation(model, name: str, *, mean, std, image_size, channels: int = 3,
                       batch_size: int = 64, identity: dict | None = None) -> Representation:
    """A vision transformer's [CLS] token of the final normed output (timm's pre-logits, the
    paper's features): pixels [B, C, H, W] around 0.5, normalised (x - mean) / std per channel.
    ``identity``: what the model is, for the cache key (``lmprobe.engine.model_identity``
    with the checkpoint's ``lmprobe.checkpoints.identity``); by default its family and dtype only."""
    from flax import nnx

    from lmprobe.engine import model_identity

    graphdef, state = nnx.split(model)
    encoder = lambda state, px: nnx.merge(graphdef, state)(px).last_hidden_state[:, 0].astype(jnp.float32)
    cls = jax.jit(encoder)
    mean = jnp.asarray(mean, jnp.float32).reshape(-1, 1, 1)
    std = jnp.asarray(std, jnp.float32).reshape(-1, 1, 1)
    height, width = image_size
    return Representation(name, (channels, height, width), padded(lambda px: cls(state, px), batch_size),
                          channel_axis=0, offset=0.5, normalize=lambda x: (x - mean) / std,
                          settings={"pooling": "cls", "mean": np.asarray(mean).ravel().tolist(),
                                    "std": np.asarray(std).ravel().tolist()},
                          identity=model_key(identity if identity is not None else model_identity(model)),
                          encoder=encoder, encoder_params=state)


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
        raise LmprobeError(f"`model={name}`: variants ({', '.join(applied)}) apply to language models; "
                           f"give the ViT checkpoint as {base}")
    return VIT


def import_function(name: str) -> Callable:
    """The function ``package.module:function`` names; one clear error when it cannot be imported."""
    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise LmprobeError(f"`model={name}`: cannot import function {attr!r} from module {module!r} "
                           f"({e})") from None


def load_representation(name: str, *, load_scorer: Callable, load_checkpoint: Callable, dtype=None, seed: int = 0,
                        batch_size: int = 64, input_shape: tuple[int, ...] | None = None,
                        channel_axis: int | None = None, projection_dim: int = PROJECTION_DIM,
                        seq_len: int = DEFAULT_SEQ_LEN, pooling: str | None = None, layer: int = -1,
                        inputs: str = "embedding", input_scale: float | None = None, offline: bool | None = None,
                        revision: str | None = None, allow_pickle: bool = False) -> Representation:
    """The representation network ``name`` describes (``representation_kind``), its model loaded last.

    ``load_scorer(name)``: a language model's Scorer (variants applied); ``load_checkpoint(name)``:
    a ViT's ``lmprobe.checkpoints.load`` result, in ``dtype`` (its identity's compute dtype; the
    Representation's ``checkpoint``). ``batch_size``: inputs per call of a function or ViT (one
    compiled shape); ``input_shape`` / ``channel_axis`` / ``projection_dim``: the inputs of
    identity, random_projection and functions (default FUNCTION_INPUT_SHAPE); ``seq_len`` /
    ``pooling`` / ``layer`` / ``inputs`` / ``input_scale``: a language model's (scorer_representation).
    ``offline`` / ``revision`` / ``allow_pickle``: how a checkpoint name resolves."""
    kind = representation_kind(name, offline=offline, revision=revision, allow_pickle=allow_pickle)
    shape = input_shape or FUNCTION_INPUT_SHAPE
    common = {"batch_size": batch_size, "channel_axis": channel_axis}
    if kind == IDENTITY:
        return identity_representation(shape, **common)
    if kind == RANDOM_PROJECTION:
        return random_projection_representation(shape, projection_dim, seed=seed, **common)
    if kind == FUNCTION:
        return function_representation(name, import_function(name), shape, **common)
    if kind == VIT:
        return vit_checkpoint_representation(load_checkpoint(name), name, dtype=dtype, batch_size=batch_size)
    return scorer_representation(load_scorer(name), name, seq_len=seq_len, pooling=pooling, layer=layer,
                                          inputs=inputs, input_scale=input_scale)


def vit_checkpoint_representation(loaded, name: str, *, dtype=None, batch_size: int = 64) -> Representation:
    """vit_representation of a loaded ViT checkpoint (``lmprobe.checkpoints.load``'s result),
    with the checkpoint's image normalisation and its identity (compute ``dtype``) in the cache key."""
    from lmprobe.checkpoints import identity, image_processor
    from lmprobe.engine import model_identity

    about = model_identity(loaded.model, name=name, checkpoint=identity(loaded.checkpoint), dtype=dtype)
    cfg = loaded.config
    mean, std = image_processor.image_normalization(loaded.checkpoint.location, cfg.num_channels)
    rep = vit_representation(loaded.model, name, mean=mean, std=std, image_size=cfg.image_size,
                                      channels=cfg.num_channels, batch_size=batch_size, identity=about)
    rep.checkpoint = about
    return rep
