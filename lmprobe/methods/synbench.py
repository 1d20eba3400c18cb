"""SynBench (../seeds/003): robustness-accuracy of representations on synthetic Gaussian data.

    class-conditional Gaussians, one task per scale s (lmprobe.data.gaussian; Sec. 3.1, 3.3)
    -> raw-data reference: accuracy a(s, eps) and expected scaled bound of the eps-robust Bayes
       classifier in closed form (Thm 1 (iii)-(iv), Thm 2 for l_p, Thm 3 for tau != 1/2)
    -> representations z = f(x) of train and test samples, cached per (scale, split)
    -> class means and pooled covariance of the train split, eps-robust Bayes classifier for
       every eps, accuracy and mean scaled bound over correctly classified test samples
       (Thm 1 (ii), Sec. 3.2.2; kernels.bayes.synbench_accuracy_bound)
    -> E(a_t) = (1/n) sum_i bound_i 1[a_i > a_t] and SynBench-Score = int_{a_t}^1 E_rep /
       int_{a_t}^1 E_raw, integrated exactly (Eq. 2-3; kernels.integrals.synbench_score)

Conventions (* marks a choice the paper leaves open):
* eps is relative by default, a radius eps * ||mu||_p in each space (the public code); with
  ``relative_epsilon=False`` it is the radius itself (the paper's text). Relative eps must be
  < 1 (at 1 the budget swallows the class-mean half-distance and no classifier is left).
* Raw reference of the band covariance: w = (Sigma + kappa I)^{-1} mu from banded solves of
  one channel block (every block is the same and mu is constant), never a d x d matrix.
* Imbalanced classes (App. D): the classifier is sign(w^T (x - c) - q/2), q = ln((1-tau)/tau),
  w = Sigma^{-1}(mu - z_Sigma); the expected bound is E[. | f(x) = y] (kernels.theory).
  A general Sigma enters Thm 3 only through mu^T w and ||w||_Sigma, which the identity-
  covariance formulas reproduce with ||mu|| -> mu^T w / ||w||_Sigma, ||w|| -> ||w||_Sigma.
* Eigenvalues of the pooled covariance are kept above a relative cut (numpy.matrix_rank's
  d * eps_f32 * lambda_max), not the public code's absolute 1e-6, so units do not matter.
* Finite samples: the representations' classifier is fitted on n samples (the raw reference is
  exact), so the plug-in score is biased against wide representations: with n <= width it is 0
  for any model, and the identity, 1 in the limit, falls with width / n. Beside it, at eps = 0,
  ``score_corrected`` (``corrected_summary``): the same integration with the accuracy and
  expected bound of the Bayes classifier at the unbiased squared Mahalanobis distance, defined
  while n1 + n2 - k - 3 > 0 (``n_for_width`` gives n for a ratio n / width), with its standard
  error ``score_corrected_stderr`` (``corrected_stderr``: parametric resamples of each scale's
  distance from its noncentral F law). The eps > 0 scores have no correction: they carry the
  plug-in's bias against wide representations (measured for the identity:
  ``python -m experiments.bench.synbench --finite_sample --epsilons=0,0.2``).
* Representations wider than the training split (e.g. the identity on image inputs) are
  first projected onto the span of the within-class-centred training rows, the support of the
  pooled covariance (App. C Remark): the same classifier, without a d x d array.

Optional, after scoring (Config.robust_probe, Sec. 4 "Robust linear probing", Tables 6 / 9):
eps = argmax_eps SynBench-Score at ``probe_a_t``, then a standard and an eps-robust linear probe
(lmprobe.methods.robust_probe: 10-step PGD-l2 adversarial training on the INPUT through the
frozen f, as the paper; ``probe_attack="representation"`` attacks f(x)), both reported clean
and under attack. eps keeps the score's convention: relative (eps * ||mu|| of the attacked
space) unless --no_relative_epsilon. * Downstream task: the paper probes CIFAR10; offline, a
labelled class-conditional Gaussian task at ``probe_scale`` drawn from a held-out seed
(seed + DOWNSTREAM_SEED_OFFSET: none of the scored samples), ``probe_n`` train + test samples.
For the identity on isotropic data the answers are closed forms: accuracy Phi(s), robust
accuracy Phi(s (1 - eps)) (relative) or Phi(s - eps) (absolute).

Optional (Config.baselines, App. G, Tables 14 / 15): the loss-data baselines of Whitney et al.
(Val loss, MDL, SDL_1, eSC_1; lmprobe.methods.loss_data, in nats) on the cached train-split
representations of one scale, ``baseline_scale``. * The paper does not say which scale; its
"n = length of the synthetic data set" is one task's n samples (eSC > floor(0.9 n) in Table 14).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from scipy import stats
from scipy.linalg import solveh_banded
from scipy.optimize import brentq

import kernels
from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError
from lmprobe.methods import Ticker, loss_data, model_key, no_progress, robust_probe
from lmprobe.methods.realtask import default_pooling
from lmprobe.report.artifacts import Stages, cache_key, cached, cached_json, join

PAPER_EPSILONS = (0.0, 0.2, 0.4, 0.6, 0.8)
PAPER_THRESHOLDS = (0.6, 0.7, 0.75, 0.8, 0.85, 0.9)  # Tables 3, 5, 7, 8
NORMS = (1.0, 2.0, math.inf)
DEFAULT_SEQ_LEN = 8  # tokens per Gaussian "sentence" fed to a language model (* not in the paper)
INPUTS = ("embedding", "rms")  # a language model's Gaussian inputs (scorer_representation)
EMBEDDING_SAMPLE = 32768  # token ids whose embeddings give the inputs' mean and covariance
DEFAULT_INPUT_SCALES = (0.25, 0.5, 1.0, 2.0)  # input_scale_sweep: factors on the inputs' deviation from the mean
DEFAULT_N_RATIO = 20  # n_for_width: samples per split per representation dimension
CEILING_BATCH = 1024  # ceiling: Gaussian samples per batch of the identity (no model memory to mind)
CURVE_GRID = tuple(float(a) for a in np.linspace(0.5, 1.0, 201))
CACHE_VERSION = 5  # 2: keys hold the model's identity (checkpoint digest, dtype); 3: language models' input signs;
# 4: their inputs at the token-embedding scale; 5: their inputs drawn with the token embeddings' mean and covariance
DOWNSTREAM_SEED_OFFSET = 10_000  # the robust probe's downstream task: seed + this, never a scored sample
STDERR_DRAWS = 400  # corrected_stderr: parametric resamples of the plug-in distances (sd known to ~4%)


@dataclasses.dataclass(frozen=True)
class Config:
    epsilons: tuple[float, ...] = PAPER_EPSILONS  # robust budgets (fractions of ||mu|| unless --no_relative_epsilon)
    a_t: tuple[float, ...] = PAPER_THRESHOLDS  # threshold accuracies, each in (0.5, 1)
    # class-mean scales: paper (0.1, ..., 5.0), reference (0.1, ..., 4.9) or numbers (default: paper)
    scales: tuple[float, ...] = gaussian.PAPER_SCALES
    n: int = 2048  # samples per scale in each of the train and test splits
    covariance: str = "identity"  # covariance of the Gaussians
    band: tuple[float, ...] = gaussian.DEFAULT_BAND  # band covariance: autocovariance c0,c1,c2 per channel
    prior: float = 0.5  # class prior tau = P(y = +1)
    norm: float = 2.0  # p of the l_p budget: 1, 2 or inf
    relative_epsilon: bool = True  # eps is a fraction of ||mu|| (--no_relative_epsilon or --absolute_eps: the radius)
    seed: int = 0
    batch_size: int = 64  # Gaussian samples per generated batch, each fed to the representation at once
    robust_probe: bool = False  # after scoring: standard and eps-robust linear probes at eps = argmax score (Table 6)
    probe_a_t: float = 0.7  # the robust probe's eps is argmax_eps SynBench-Score at this a_t (one of a_t)
    probe_attack: str = "input"  # robust probe's PGD-l2 attacks the input through f (the paper) or the representation
    probe_scale: float = 1.0  # robust probe's downstream task: a held-out labelled Gaussian task at this scale
    probe_n: int | None = None  # robust probe's train and test samples each (none: n)
    probe_steps: int = 1000  # Adam steps of each linear probe (batch 256, lr 1e-2, 10 PGD steps each)
    baselines: bool = False  # App. G: loss-data baselines Val loss / MDL / SDL / eSC on the cached representations
    baseline_scale: float = 1.0  # the scale (one of scales) whose train-split representations the baselines see
    baseline_steps: int = 4000  # training steps of the loss-data baselines' probes

    def check(self) -> None:
        """Bad settings fail here, before any model is loaded."""
        if not self.a_t or any(not 0.5 < a < 1 for a in self.a_t):
            raise LmprobeError(f"a_t={list(self.a_t)}: every threshold accuracy must lie in (0.5, 1) "
                               "(accuracies of a binary task start at 0.5)")
        if not self.epsilons or any(not e >= 0 for e in self.epsilons):
            raise LmprobeError(f"epsilons {list(self.epsilons)} must be non-empty and >= 0")
        if not self.scales or any(not s > 0 for s in self.scales):
            raise LmprobeError(f"scales {list(self.scales)} must be non-empty and > 0")
        if self.relative_epsilon and max(self.epsilons) >= 1:
            raise LmprobeError(f"eps={max(self.epsilons)} is a relative budget eps * ||mu||: it must be < 1, "
                               "else it covers the whole class-mean half-distance and leaves no classifier")
        if not self.relative_epsilon and max(self.epsilons) >= max(self.scales):
            raise LmprobeError(f"eps={max(self.epsilons)} is not below the class-mean half-distance of any "
                               f"scale (largest {max(self.scales)}): use eps < {max(self.scales)}")
        if self.norm not in NORMS:
            raise LmprobeError(f"norm={self.norm}: l_p budgets are supported for p in 1, 2, inf")
        if self.covariance == "band" and self.norm != 2:
            raise LmprobeError("the band-covariance raw reference is implemented for l2 budgets only: "
                               "use --norm=2 or --covariance=identity")
        if self.n < 8:
            raise LmprobeError(f"n={self.n} samples per split is too few to estimate class means: use >= 8")
        if self.batch_size < 1:
            raise LmprobeError(f"batch_size={self.batch_size} must be >= 1")
        gaussian.GaussianSpec((1,), self.covariance, self.band, None, self.prior).check()
        if self.robust_probe:
            if not any(math.isclose(self.probe_a_t, a) for a in self.a_t):
                raise LmprobeError(f"probe_a_t={self.probe_a_t} is not one of a_t {list(self.a_t)}: the robust "
                                   "probe's eps is the argmax of the score at that threshold")
            if not self.probe_scale > 0:
                raise LmprobeError(f"probe_scale={self.probe_scale} must be > 0")
            if self.probe_n is not None and self.probe_n < 8:
                raise LmprobeError(f"probe_n={self.probe_n} is too few samples for a probe: use >= 8")
            robust_probe.ProbeConfig(epsilon=max(self.epsilons), relative_epsilon=self.relative_epsilon,
                                     attack=self.probe_attack, steps=self.probe_steps).check()
        if self.baselines:
            if not any(math.isclose(self.baseline_scale, s) for s in self.scales):
                raise LmprobeError(f"baseline_scale={self.baseline_scale} is not one of the scales: the baselines "
                                   "run on that scale's cached representations")
            if self.n < loss_data.MIN_SAMPLES or self.baseline_steps < 1:
                raise LmprobeError(f"the loss-data baselines need n >= {loss_data.MIN_SAMPLES} and baseline_steps "
                                   f">= 1; got n={self.n}, baseline_steps={self.baseline_steps}")


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
    """Any JAX function [B, *input_shape] -> [B, ...] (flattened to [B, k]), jitted."""
    flat = lambda x: jnp.reshape(fn(x), (x.shape[0], -1)).astype(jnp.float32)
    return Representation(name, tuple(input_shape), padded(jax.jit(flat), batch_size), encoder=flat, **kwargs)


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
    """
    if inputs not in INPUTS:
        raise LmprobeError(f"inputs={inputs!r} for {name}: choose from {', '.join(INPUTS)}")
    if input_scale is not None and not input_scale > 0:
        raise LmprobeError(f"input_scale={input_scale} for {name}: the factor on the Gaussian inputs must be > 0")
    pooling = pooling or default_pooling(scorer)
    hidden = int(scorer.config.hidden_size)
    signs = balanced_signs(hidden)
    settings = {"pooling": pooling, "layer": layer, "seq_len": seq_len, "inputs": inputs, "input_signs": "balanced"}
    if inputs == "rms":
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
                          identity=identity if identity is not None else model_key(scorer))


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
                           "signal; use inputs='rms' (--inputs=rms)")
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


# --------------------------------------------------------------------------------------
# Raw-data reference (Thm 1-3)
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Reference:
    accuracy: np.ndarray  # [S, E]
    bound: np.ndarray  # [S, E] expected scaled bound of correctly classified samples


def _band_statistics(band, length: int, rho: float) -> tuple[float, float]:
    """(u^T w, ||w||_Sigma) for unit-scale u = 1_L / sqrt(L), w = (T + kappa I)^{-1} u with
    kappa chosen so that ||kappa w|| = rho ||u|| (T: one Toeplitz band block of length L)."""
    c = np.asarray(band, np.float64)
    m = len(c) - 1
    ab = np.zeros((m + 1, length))
    for k in range(m + 1):  # upper banded storage of solveh_banded
        ab[m - k, k:] = c[k]
    ones = np.ones(length) / math.sqrt(length)

    def solve(kappa):
        shifted = ab.copy()
        shifted[m] += kappa
        return solveh_banded(shifted, ones, overwrite_ab=True, check_finite=False)

    # ||kappa w(kappa)|| grows from 0 to ||u|| = 1: Brent's root find on ln kappa
    gap = lambda t: math.exp(t) * np.linalg.norm(solve(math.exp(t))) - rho
    kappa = math.exp(brentq(gap, -40.0, 40.0, xtol=1e-10)) if rho > 0 else 0.0
    w = solve(kappa)
    tw = c[0] * w
    for k in range(1, m + 1):
        tw[k:] += c[k] * w[:-k]
        tw[:-k] += c[k] * w[k:]
    return float(ones @ w), float(math.sqrt(max(w @ tw, 0.0)))


def raw_reference(config: Config, spec: gaussian.GaussianSpec) -> Reference:
    """Accuracy and expected scaled bound of the eps-robust Bayes classifier on the raw data.

    Identity covariance, l_p budget: z_Sigma is the projection of the constant vector mu onto
    the l_p ball, again constant, so w = mu (1 - e/s) with e = eps * s (relative) or
    min(s, eps d^{1/2 - 1/p}) (absolute): Thm 1 / Thm 3 with ||w|| = s - e. Band covariance:
    banded solves (see _band_statistics). Balanced classes give Thm 1 (iii)-(iv) exactly.
    """
    s = np.asarray(config.scales, np.float64)[:, None]
    eps = np.asarray(config.epsilons, np.float64)[None, :]
    if config.covariance == "identity":
        e = eps * s if config.relative_epsilon else eps * spec.dim ** (0.5 - 1.0 / config.norm) + 0.0 * s
        noise = np.maximum(s - e, 0.0)
        signal = s * noise
    else:
        length = spec.dim // spec.channels
        signal, noise = np.zeros((len(s), eps.shape[1])), np.zeros((len(s), eps.shape[1]))
        memo = {}
        for i, scale in enumerate(s[:, 0]):
            for j, budget in enumerate(eps[0]):
                rho = budget if config.relative_epsilon else budget / scale
                if rho >= 1:
                    continue  # degenerate: w = 0
                key = round(rho, 12)
                if key not in memo:
                    memo[key] = _band_statistics(config.band, length, rho)
                uw, unorm = memo[key]
                signal[i, j], noise[i, j] = scale * scale * uw, scale * unorm
    degenerate = noise <= 0
    safe = np.where(degenerate, 1.0, noise)
    norm_equiv = np.where(degenerate, 0.0, signal / safe)  # Thm 3 with ||mu|| -> mu^T w / ||w||_Sigma
    eps_equiv = np.where(degenerate, 1.0, norm_equiv - noise)
    accuracy = kernels.imbalanced_accuracy(norm_equiv, eps_equiv, config.prior)
    bound = kernels.imbalanced_expected_scaled_bound(norm_equiv, eps_equiv, config.prior)
    return Reference(np.asarray(accuracy, np.float64), np.asarray(bound, np.float64))


# --------------------------------------------------------------------------------------
# Representation side (Sec. 3.2.2)
# --------------------------------------------------------------------------------------


@jax.jit
def _within_class_basis(z, labels):
    """Orthonormal basis [k, n] of the span of the within-class-centred rows (zero columns
    where the span has fewer dimensions), from the n x n Gram matrix."""
    means = kernels.class_means(z, labels)
    centred = z - jnp.where((labels > 0)[:, None], means[0], means[1]) * (labels != 0)[:, None]
    vals, vecs = jnp.linalg.eigh(centred @ centred.T)
    keep = vals > vals[-1] * z.shape[0] * float(jnp.finfo(jnp.float32).eps)
    return jnp.where(keep, (centred.T @ vecs) / jnp.sqrt(jnp.where(keep, vals, 1.0)), 0.0)


def check_representations(name: str, z: np.ndarray, scale: float) -> None:
    """NaN / infinite / constant representations are errors, never a silent score of 0."""
    if not np.all(np.isfinite(z)):
        raise LmprobeError(f"representation of {name} at scale s={scale} has NaN or infinite entries "
                           f"({int(np.sum(~np.isfinite(z)))} of {z.size}): check the model's dtype "
                           "(try --dtype=float32) and its input normalisation")
    if float(np.max(np.ptp(z, axis=0))) == 0.0:
        raise LmprobeError(f"representation of {name} at scale s={scale} has zero variance (every sample "
                           "maps to the same vector): the model ignores its input, so SynBench is undefined")


def representation_summary(z_train, y_train, z_test, y_test, config: Config) -> kernels.MarginSummary:
    """Accuracy and mean scaled bound [S, E] of the eps-robust Bayes classifiers of the
    representations z_* [S, n, k] (one task per scale), labels [S, n] in {+1, -1}."""
    z_train, z_test = jnp.asarray(z_train, jnp.float32), jnp.asarray(z_test, jnp.float32)
    y_train, y_test = jnp.asarray(y_train, jnp.int32), jnp.asarray(y_test, jnp.int32)
    eps = jnp.asarray(config.epsilons, jnp.float32)
    if config.norm == 2:
        if z_train.shape[-1] > z_train.shape[-2]:  # wider than the sample: work in the support
            basis = jax.vmap(_within_class_basis)(z_train, y_train)
            z_train, z_test = z_train @ basis, z_test @ basis
        out = [kernels.synbench_accuracy_bound(z_train[i], y_train[i], z_test[i], y_test[i], eps,
                                               tau=config.prior, relative_epsilon=config.relative_epsilon,
                                               eig_atol=0.0)
               for i in range(z_train.shape[0])]  # per scale: keeps [E, n, k] off the memory peak
        return kernels.MarginSummary(*(jnp.stack(parts) for parts in zip(*out)))
    if z_train.shape[-1] > z_train.shape[-2]:
        raise LmprobeError(f"l_p budgets with p={config.norm} act in the representation's own coordinates "
                           f"and need n >= representation size: n={z_train.shape[-2]}, size "
                           f"{z_train.shape[-1]}; raise --n or use --norm=2")
    return _lp_summary(z_train, y_train, z_test, y_test, eps, config)


def _lp_summary(z_train, y_train, z_test, y_test, eps, config: Config) -> kernels.MarginSummary:
    """Thm 2: l_p-robust directions by FISTA on the pooled precision (pseudo-inverse)."""
    moments = kernels.class_moments(z_train, y_train)
    vals, vecs = kernels.descending_eigh(kernels.pooled_covariance(moments))
    support = kernels.numerical_support(vals, None, 0.0)
    precision = jnp.einsum("sij,sj,skj->sik", vecs, jnp.where(support, 1.0 / jnp.where(support, vals, 1.0), 0.0), vecs)
    mean_diff = 0.5 * (moments.means[:, 0] - moments.means[:, 1])
    midpoint = 0.5 * (moments.means[:, 0] + moments.means[:, 1])
    out = []
    for e in eps:
        robust = kernels.robust_direction_lp(mean_diff, precision, e, p=config.norm,
                                             relative_epsilon=config.relative_epsilon)
        margins = kernels.linear_margins(z_test, y_test, midpoint, robust.weight, mean_diff, tau=config.prior,
                                         norm_ord=kernels.dual_exponent(config.norm))
        out.append(kernels.summarize_margins(margins, y_test))
    return kernels.MarginSummary(*(jnp.stack(parts, axis=-1) for parts in zip(*out)))


def mean_difference_norms(z_train, y_train, norm: float) -> np.ndarray:
    """||mu||_p per scale, mu = half the class-mean difference of the representations."""
    means = kernels.class_means(jnp.asarray(z_train, jnp.float32), jnp.asarray(y_train, jnp.int32))
    return np.asarray(jnp.linalg.norm(0.5 * (means[..., 0, :] - means[..., 1, :]), ord=norm, axis=-1))


# --------------------------------------------------------------------------------------
# Scores (Eq. 2-3)
# --------------------------------------------------------------------------------------


def synbench_scores(rep_acc, rep_bound, raw: Reference, config: Config) -> np.ndarray:
    """SynBench-Score [A, E] for every threshold a_t and epsilon, exact areas."""
    t = jnp.asarray(config.a_t, jnp.float32)[:, None]
    score = kernels.synbench_score(jnp.asarray(rep_acc).T, jnp.asarray(rep_bound).T,
                                   jnp.asarray(raw.accuracy).T, jnp.asarray(raw.bound).T, t)
    return np.asarray(score, np.float64)


# --------------------------------------------------------------------------------------
# Bias-corrected score at eps = 0
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class CorrectedSummary:
    """The eps = 0 Bayes classifier of every scale at the unbiased Mahalanobis distance."""

    accuracy: np.ndarray  # [S] Phi(D_u / 2) (Thm 3(iii) at the prior; NaN where undefined)
    bound: np.ndarray  # [S] expected scaled bound of correct samples at the same distance (Thm 1(iv) / 3(iv))
    samples: int  # n = n1 + n2 per scale (both splits)
    k: int  # dimension of the pooled covariance's support (the width, unless rank-deficient)
    reason: str | None  # why the corrected score is undefined; None when it is defined
    distances: tuple[np.ndarray, ...] | None = None  # (D^2, n1, n2, k) [S] behind it (``squared_distances``)


def unbiased_squared_distance(d2, n1, n2, k) -> np.ndarray:
    """D_u^2 = (n - k - 3) / (n - 2) D^2 - k (1/n1 + 1/n2), clipped at 0; NaN where n - k - 3 <= 0.

    D^2 = (m_1 - m_2)^T S^{-1} (m_1 - m_2) is the plug-in squared Mahalanobis distance of class
    means m_y over n_y samples with the pooled covariance S (divisor n - 2, n = n1 + n2) in k
    dimensions. For Gaussian classes, (n - 2) S ~ Wishart_k(n - 2, Sigma) independent of
    m_1 - m_2 ~ N(delta, (1/n1 + 1/n2) Sigma), so E[S^{-1}] = (n - 2) / (n - k - 3) Sigma^{-1} and
    E[D^2] = (n - 2) / (n - k - 3) (Delta^2 + k (1/n1 + 1/n2)) (McLachlan, Discriminant Analysis
    and Statistical Pattern Recognition, Sec. 10.4; Lachenbruch & Mickey): D_u^2 is unbiased for
    Delta^2 before the clip. Arguments broadcast.
    """
    d2, n1, n2, k = (np.asarray(v, np.float64) for v in (d2, n1, n2, k))
    n = n1 + n2
    defined = (n - k - 3 > 0) & (n1 > 0) & (n2 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (n - k - 3) / (n - 2) * d2 - k * (1.0 / n1 + 1.0 / n2)
    return np.where(defined, np.maximum(value, 0.0), np.nan)


def bayes_accuracy_bound(distance2, prior: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """(accuracy, expected scaled bound of correct samples) of the eps = 0 Bayes classifier of
    two Gaussian classes at squared Mahalanobis distance ``distance2`` between their means: the
    raw reference's formulas (Thm 3 (iii)-(iv); Phi(Delta / 2) and Thm 1(iv) at prior 1/2) with
    ||mu||_Sigma = Delta / 2. NaN stays NaN."""
    half = 0.5 * jnp.sqrt(jnp.asarray(distance2, jnp.float32))
    return (np.asarray(kernels.imbalanced_accuracy(half, 0.0, prior), np.float64),
            np.asarray(kernels.imbalanced_expected_scaled_bound(half, 0.0, prior), np.float64))


def squared_distances(z, labels) -> tuple[np.ndarray, ...]:
    """(D^2, n1, n2, k) [S] of representations z [S, n, k] with labels [S, n] in {+1, -1, 0 (padding)}:
    the plug-in squared Mahalanobis distance between the class means (pooled covariance, divisor
    n - 2, inverted on its numerical support of dimension k: kernels.numerical_support's cut),
    class sizes and k. numpy, float64 eigenvalues: nothing to compile per shape."""
    out = []
    for zi, yi in zip(np.asarray(z, np.float32), np.asarray(labels)):  # one k x k covariance at a time
        pos, neg = zi[yi > 0], zi[yi < 0]
        if min(len(pos), len(neg)) < 2:
            out.append((np.nan, len(pos), len(neg), zi.shape[1]))
            continue
        m1, m2 = pos.mean(0, dtype=np.float64), neg.mean(0, dtype=np.float64)
        centred = np.concatenate([pos - m1.astype(np.float32), neg - m2.astype(np.float32)])
        vals, vecs = np.linalg.eigh((centred.T @ centred).astype(np.float64) / (len(centred) - 2))
        support = vals > zi.shape[1] * np.finfo(np.float32).eps * vals[-1]
        diff = (m1 - m2) @ vecs[:, support]
        out.append((float(np.sum(diff * diff / vals[support])), len(pos), len(neg), int(support.sum())))
    return tuple(np.asarray(v, np.float64) for v in zip(*out))


def corrected_summary(z_train, y_train, z_test, y_test, config: Config) -> CorrectedSummary:
    """The bias-corrected eps = 0 side of representations z_* [S, n, k] (labels [S, n]).

    The plug-in score scores a classifier fitted on n samples: its test accuracy falls below the
    Bayes accuracy as k / n grows (the fitted direction overfits), and its scaled bound divides
    by the in-sample class-centre distance mu^T w, inflated like D^2. Here neither enters: both
    splits (no held-out data is needed) give D^2, ``unbiased_squared_distance`` corrects it, and
    accuracy and expected bound are the Bayes classifier's at that distance (``bayes_accuracy_bound``),
    i.e. the paper's Gaussian model of the representations (Sec. 3.2.2) evaluated at an unbiased
    distance instead of on one fitted classifier. Undefined (NaN, with the reason) while
    n1 + n2 - k - 3 <= 0; never builds a k x k matrix for k >= n.
    """
    z = np.concatenate([np.asarray(z_train), np.asarray(z_test)], axis=1)
    y = np.concatenate([np.asarray(y_train), np.asarray(y_test)], axis=1)
    samples, width = int(np.max(np.sum(y != 0, axis=1))), int(z.shape[2])  # label 0: padding
    nan = np.full(len(z), np.nan)
    if samples - width - 3 <= 0:
        return CorrectedSummary(nan, nan, samples, width, _too_few(samples, width))
    d2, n1, n2, k = squared_distances(z, y)
    distance2 = unbiased_squared_distance(d2, n1, n2, k)
    accuracy, bound = bayes_accuracy_bound(distance2, config.prior)
    reason = None if np.all(np.isfinite(distance2)) else _too_few(samples, int(k.max()))
    return CorrectedSummary(accuracy, bound, samples, int(k.max()), reason, (d2, n1, n2, k))


def corrected_stderr(summary: CorrectedSummary, raw: Reference, config: Config, *, draws: int = STDERR_DRAWS,
                     seed: int = 0) -> np.ndarray:
    """Standard error [A] of the bias-corrected eps = 0 score (NaN where it is undefined): the
    standard deviation of the score over ``draws`` parametric resamples of every scale's plug-in
    distance. Under the corrected score's own Gaussian model of the representations, Hotelling's
    T^2 = c D^2 (c = n1 n2 / n) has (m / (k (n - 2))) T^2 ~ F'(k, m, c Delta^2), m = n - k - 1
    (Anderson 2003, Sec. 5.2; the scales are independent samples): each resample draws D^2 from
    that noncentral F at Delta^2 = the scale's unbiased estimate, corrects it, and integrates.
    Seeded; the score's sampling error for one model, what resolves two models' scores."""
    if summary.reason is not None or summary.distances is None:
        return np.full(len(config.a_t), np.nan)
    d2, n1, n2, k = summary.distances
    n, c = n1 + n2, n1 * n2 / (n1 + n2)
    m = n - k - 1
    centre = unbiased_squared_distance(d2, n1, n2, k)
    f = stats.ncf.rvs(k, m, c * centre, size=(draws, len(d2)), random_state=np.random.default_rng(seed))
    resampled = unbiased_squared_distance(k * (n - 2) / (m * c) * f, n1, n2, k)  # [draws, S]
    accuracy, bound = bayes_accuracy_bound(resampled.T, config.prior)  # [S, draws]
    j = next(j for j, e in enumerate(config.epsilons) if e == 0)
    column = Reference(np.repeat(raw.accuracy[:, j:j + 1], draws, 1), np.repeat(raw.bound[:, j:j + 1], draws, 1))
    scores = synbench_scores(accuracy, bound, column, dataclasses.replace(config, epsilons=(0.0,) * draws))
    return scores.std(axis=1, ddof=1)


def _too_few(samples: int, k: int) -> str:
    return (f"n1 + n2 - k - 3 = {samples - k - 3} <= 0 ({samples} samples over both splits, k = {k}): the "
            f"unbiased distance needs more samples than dimensions; use n >= {n_for_width(k)} per split")


def eps0_scores(accuracy, bound, raw: Reference, config: Config) -> np.ndarray:
    """SynBench-Score [A] at eps = 0 of per-scale accuracies and expected bounds [S] against the
    raw reference's eps = 0 column: the plug-in score's integration (``synbench_scores``)."""
    j = next(j for j, e in enumerate(config.epsilons) if e == 0)
    column = Reference(raw.accuracy[:, j:j + 1], raw.bound[:, j:j + 1])
    one = dataclasses.replace(config, epsilons=(0.0,))
    return synbench_scores(np.asarray(accuracy)[:, None], np.asarray(bound)[:, None], column, one)[:, 0]


def population_scores(half_distances, config: Config, spec: gaussian.GaussianSpec | None = None) -> np.ndarray:
    """True SynBench-Score [A] at eps = 0 of a representation whose classes are Gaussian with
    Mahalanobis half-distance ``half_distances`` [S] (Delta / 2 per scale; the identity: the raw
    data's own) against the raw reference of ``spec`` (default: identity covariance)."""
    spec = spec or gaussian.GaussianSpec((1,), config.covariance, tuple(config.band), None, config.prior)
    zero = dataclasses.replace(config, epsilons=(0.0,))
    accuracy, bound = bayes_accuracy_bound(4.0 * np.square(np.asarray(half_distances, np.float64)), config.prior)
    return eps0_scores(accuracy, bound, raw_reference(zero, spec), zero)


def n_for_width(width: int, ratio: float = DEFAULT_N_RATIO) -> int:
    """Samples per split that hold n / width at ``ratio`` (>= 8, Config's minimum): compare
    models of different widths at one ratio, since both scores drift with width / n."""
    if width < 1 or not ratio > 0:
        raise LmprobeError(f"n_for_width: width={width} must be >= 1 and ratio={ratio} > 0")
    return max(8, math.ceil(ratio * width))


def check_sample_size(width: int, config: Config) -> None:
    """LmprobeError unless the bias-corrected score is defined for representations of ``width``
    (2 n - width - 3 > 0 over both splits of n samples)."""
    if 2 * config.n - width - 3 <= 0:
        raise LmprobeError(f"n={config.n} samples per split is too few for SynBench's bias-corrected score at width "
                           f"{width}: {_too_few(2 * config.n, width)}")


def check_reference(raw: Reference, config: Config) -> None:
    """Every a_t needs raw scales above it, else the score's denominator is 0."""
    best = raw.accuracy.max(axis=0)
    if max(config.a_t) >= best.min():
        raise LmprobeError(f"a_t={max(config.a_t)} is not below the best raw-data accuracy {best.min():.6f} "
                           f"of the scale grid (largest s={max(config.scales)}): lower a_t or add larger scales")


@dataclasses.dataclass
class Result:
    model: str
    scores: list[dict]
    curves: dict
    representation: dict
    timings: dict
    config: Config
    robust_probe: dict | None = None  # Table 6 layout (Config.robust_probe)
    baselines: dict | None = None  # App. G loss-data baselines (Config.baselines)
    cached_stages: dict = dataclasses.field(default_factory=dict)  # stage -> {"hits", "entries"} read from the cache

    def to_json(self) -> dict:
        out = {"method": "synbench", "model": self.model, "scores": self.scores, "curves": self.curves,
               "representation": self.representation, "timings_s": self.timings,
               "cached_stages": self.cached_stages, "config": dataclasses.asdict(self.config)}
        out.update({k: v for k, v in (("robust_probe", self.robust_probe), ("baselines", self.baselines))
                    if v is not None})
        return out


def represent(rep: Representation, config: Config, scale: float, split: str, on_batch: Callable = lambda: None):
    """Representations [n, k] and labels [n] of one (scale, split), generated batch by batch
    (``on_batch()`` after each)."""
    zs, ys = [], []
    for x, y in gaussian.batches(rep.spec(config), scale, seed=config.seed, split=split, n=config.n,
                                 batch_size=config.batch_size, normalize=rep.normalize):
        zs.append(np.asarray(rep.fn(x), np.float32))
        ys.append(np.asarray(y))
        on_batch()
    return np.concatenate(zs), np.concatenate(ys).astype(np.int32)


def run(rep: Representation, config: Config, *, cache_dir: str | None = None,
        progress: Callable = no_progress) -> Result:
    """SynBench on representation ``rep``; representations cached under ``cache_dir``, their
    batches counted by one ``progress`` bar."""
    config.check()
    spec = rep.spec(config)
    spec.check()
    stages = Stages()
    with stages("reference"):
        raw = raw_reference(config, spec)
        check_reference(raw, config)

    with stages("representations", f"{rep.name}: representations"):
        z = {"train": [], "test": []}
        y = {"train": [], "test": []}
        per_split = -(-config.n // config.batch_size)
        ticker, target = Ticker(progress, 2 * per_split * len(config.scales), f"{rep.name}: representations"), 0
        for scale in config.scales:
            for split in ("train", "test"):
                reps, labels = _cached_split(rep, config, spec, scale, split, cache_dir, ticker.advance)
                target += per_split
                ticker.advance_to(target)  # a split read from the cache moves the bar at once
                check_representations(rep.name, reps, scale)
                z[split].append(reps)
                y[split].append(labels.astype(np.int32))

    with stages("metric"):
        z_train, z_test = np.stack(z["train"]), np.stack(z["test"])
        y_train, y_test = np.stack(y["train"]), np.stack(y["test"])
        degenerate = _check_budgets(rep.name, z_train, y_train, config)
        summary = representation_summary(z_train, y_train, z_test, y_test, config)
        rep_acc = np.asarray(summary.accuracy, np.float64)
        rep_bound = np.asarray(summary.mean_scaled_margin, np.float64)
        scores = synbench_scores(rep_acc, rep_bound, raw, config)
        curves = threshold_curves(rep_acc, rep_bound, raw, config)
        corrected = corrected_summary(z_train, y_train, z_test, y_test, config) if 0.0 in config.epsilons else None

    rows = [{"eps": e, "a_t": a, "score": float(scores[i, j])}
            for i, a in enumerate(config.a_t) for j, e in enumerate(config.epsilons)]
    info = {"dim": int(z_train.shape[-1]), "input_shape": list(spec.input_shape), "channel_axis": spec.channel_axis,
            "offset": spec.offset, "degenerate_scales": degenerate, **rep.settings}
    if corrected is not None:
        defined = corrected.reason is None
        fixed = eps0_scores(corrected.accuracy, corrected.bound, raw, config) if defined else None
        errors = corrected_stderr(corrected, raw, config, seed=config.seed) if defined else None
        for row in rows:
            if row["eps"] == 0:
                i = config.a_t.index(row["a_t"])
                row["score_corrected"] = float(fixed[i]) if defined else None
                row["score_corrected_stderr"] = float(errors[i]) if defined else None
        info["corrected"] = {"samples": corrected.samples, "k": corrected.k, "reason": corrected.reason}
        clean = lambda a: np.where(np.isfinite(a), a, 0.0).tolist()
        curves.update(rep_accuracy_corrected=clean(corrected.accuracy), rep_bound_corrected=clean(corrected.bound))

    baselines = None
    if config.baselines:
        with stages("baselines", f"{rep.name}: loss-data baselines"):
            i = next(i for i, s in enumerate(config.scales) if math.isclose(s, config.baseline_scale))
            baselines = baseline_metrics(rep, config, spec, z_train[i], y_train[i], cache_dir, progress)
    probe = None
    if config.robust_probe:
        with stages("robust_probe"):
            eps = robust_probe.suggest_epsilon(rows, config.probe_a_t)
            probe = {"a_t": config.probe_a_t, "argmax_eps": eps, "scale": config.probe_scale,
                     **robust_linear_probing(rep, config, eps)}
    return Result(rep.name, rows, curves, info, stages.seconds, config, probe, baselines, stages.cached)


def ceiling(width: int, config: Config, *, cache_dir: str | None = None, progress: Callable = no_progress) -> Result:
    """The identity representation of ``width`` under ``config`` (same n, scales, seed): what a
    representation that loses nothing scores with this n, the plug-in's width-matched ceiling
    (the corrected score's is about 1). No model; its representations are cached like any, and drawn
    in batches of at least CEILING_BATCH (the samples do not depend on the batch size)."""
    config = dataclasses.replace(config, batch_size=max(config.batch_size, CEILING_BATCH))
    return run(identity_representation((width,), batch_size=config.batch_size), config, cache_dir=cache_dir,
               progress=progress)


def input_scale_sweep(scorer, name: str, config: Config, input_scales=DEFAULT_INPUT_SCALES, *,
                      cache_dir: str | None = None, progress: Callable = no_progress, **kwargs) -> dict[float, Result]:
    """{input_scale: Result} of a language model at each factor on its Gaussian inputs
    (``scorer_representation``'s ``input_scale``; ``kwargs``: its other options, inputs included).
    The embedding moments are computed once."""
    if kwargs.get("inputs", "embedding") == "embedding" and "moments" not in kwargs:
        kwargs["moments"] = embedding_moments(scorer, name=name)
    return {float(c): run(scorer_representation(scorer, name, input_scale=c, **kwargs), config, cache_dir=cache_dir,
                          progress=progress) for c in input_scales}


def downstream_task(rep: Representation, config: Config) -> tuple[np.ndarray, ...]:
    """The robust probe's labelled task: raw inputs (before the model's normalisation) and labels
    {+1, -1} of a Gaussian task at ``probe_scale`` from the held-out seed, (x_train, y_train,
    x_test, y_test), ``probe_n`` (default n) samples each."""
    spec, n = rep.spec(config), config.probe_n or config.n
    out = []
    for split in ("train", "test"):
        parts = list(gaussian.batches(spec, config.probe_scale, seed=config.seed + DOWNSTREAM_SEED_OFFSET,
                                      split=split, n=n, batch_size=config.batch_size))
        out += [np.concatenate([np.asarray(x, np.float32) for x, _ in parts]),
                np.concatenate([np.asarray(y) for _, y in parts]).astype(np.int32)]
    return tuple(out)


def _represent_inputs(rep: Representation, x: np.ndarray, batch_size: int) -> np.ndarray:
    """rep.fn of raw inputs (normalised first), batch by batch."""
    norm = rep.normalize or (lambda v: v)
    return np.concatenate([np.asarray(rep.fn(norm(jnp.asarray(x[i:i + batch_size]))), np.float32)
                           for i in range(0, len(x), batch_size)])


def robust_linear_probing(rep: Representation, config: Config, epsilon: float) -> dict:
    """Standard and ``epsilon``-robust linear probes on the downstream task (Table 6 / 9), eps
    in the score's convention (relative: eps * ||mu|| of the attacked space)."""
    probe_config = robust_probe.ProbeConfig(epsilon=epsilon, relative_epsilon=config.relative_epsilon,
                                            attack=config.probe_attack, steps=config.probe_steps, seed=config.seed)
    x_train, y_train, x_test, y_test = downstream_task(rep, config)
    encoder = rep.input_encoder()
    if encoder is None:
        if config.probe_attack == "input":
            raise LmprobeError(f"{rep.name} is not a differentiable JAX function of its inputs, so the robust "
                               "probe cannot attack the input: use --probe_attack=representation")
        x_train, x_test = (_represent_inputs(rep, v, config.batch_size) for v in (x_train, x_test))
        return robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, probe_config)
    fn, params = encoder
    if params is None:  # a function of the inputs alone
        fn = functools.partial(fn, None)
    return robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, probe_config, encoder=fn,
                                              encoder_params=params)


def baseline_metrics(rep: Representation, config: Config, spec, z, y, cache_dir, progress) -> dict:
    """App. G: Val loss, MDL, SDL_1, eSC_1 (nats) of the loss-data curve on one scale's train
    representations z [n, k] (labels {+1, -1}), cached next to them."""
    compute = lambda: {"scale": config.baseline_scale, "n": int(len(z)), "steps": config.baseline_steps,
                       **loss_data.loss_data_metrics(loss_data.loss_data_curves(
                           z, y, steps=config.baseline_steps, seed=config.seed, progress=progress,
                           desc=f"{rep.name}: loss-data baselines"))}
    if cache_dir is None:
        return compute()
    key = cache_key(split=_split_key(rep, config, spec, config.baseline_scale, "train"),
                    steps=config.baseline_steps, seed=config.seed, version=CACHE_VERSION)
    return cached_json(join(cache_dir, f"baselines-{key}.json"), compute)


def _split_key(rep, config, spec, scale, split) -> str:
    return cache_key(model=rep.name, identity=rep.identity, settings=rep.settings, spec=dataclasses.asdict(spec),
                     seed=config.seed, n=config.n, scale=scale, split=split, version=CACHE_VERSION)


def _cached_split(rep, config, spec, scale, split, cache_dir, on_batch):
    """(representations, labels) of one (scale, split), from the cache when a run saved them."""
    if cache_dir is None:
        return represent(rep, config, scale, split, on_batch)
    key = _split_key(rep, config, spec, scale, split)
    fresh = {}

    def compute():
        fresh["reps"], fresh["labels"] = represent(rep, config, scale, split, on_batch)
        return fresh["reps"]

    def labels():  # saved with the representations; regenerated exactly if only those survived
        if "labels" in fresh:
            return fresh["labels"]
        return np.concatenate([np.asarray(y) for _, y in gaussian.batches(
            spec, scale, seed=config.seed, split=split, n=config.n, batch_size=config.batch_size)])

    reps = cached(join(cache_dir, f"{key}.npy"), compute)
    return reps, cached(join(cache_dir, f"{key}-labels.npy"), labels).astype(np.int32)


def _check_budgets(name, z_train, y_train, config: Config) -> dict:
    """Absolute budgets: scales where eps >= ||mu||_p have no robust classifier (counted);
    an eps that is too large at every scale is an error."""
    if config.relative_epsilon:
        return {str(e): 0 for e in config.epsilons}
    norms = mean_difference_norms(z_train, y_train, config.norm)
    for e in config.epsilons:
        if e > 0 and e >= norms.max():
            raise LmprobeError(f"eps={e} exceeds the class-mean half-distance ||mu|| of {name}'s representations "
                               f"at every scale (largest {norms.max():.4g}): use eps < {norms.max():.4g} or "
                               "relative budgets")
    return {str(e): int(np.sum((e > 0) & (norms <= e))) for e in config.epsilons}


def threshold_curves(rep_acc, rep_bound, raw: Reference, config: Config) -> dict:
    """E(a) on a grid of thresholds for the raw data and the representations (Fig. 3), and
    the per-scale accuracies and bounds they come from."""
    grid = jnp.asarray(CURVE_GRID, jnp.float32)
    e_raw = np.asarray(kernels.threshold_curve(grid, jnp.asarray(raw.accuracy.T), jnp.asarray(raw.bound.T)))
    e_rep = np.asarray(kernels.threshold_curve(grid, jnp.asarray(rep_acc.T), jnp.asarray(rep_bound.T)))
    clean = lambda a: np.where(np.isfinite(a), a, 0.0).tolist()
    return {"a": list(CURVE_GRID), "epsilons": list(config.epsilons), "scales": list(config.scales),
            "E_raw": clean(e_raw), "E_rep": clean(e_rep),
            "raw_accuracy": clean(raw.accuracy.T), "raw_bound": clean(raw.bound.T),
            "rep_accuracy": clean(rep_acc.T), "rep_bound": clean(rep_bound.T)}
