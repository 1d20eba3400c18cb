"""Epsilon-robust linear probing with eps chosen by SynBench (Ko et al., arXiv:2210.02989 Sec. 4, Table 6, Table 9).

A linear head g(z) = z W + b on a frozen representation f is trained by adversarial training,

    min_g  E max_{||delta||_2 <= r}  CE(g(f(x + delta)), y)        (attack="input", the paper's)
    min_g  E max_{||delta||_2 <= r}  CE(g(f(x) + delta), y)        (attack="representation")

with the inner max approximated by a PGD-l2 attack (Madry et al. 2018) run at every step, as
the paper's 10-step PGDL2 of Torchattacks: random start in the ball, steps of size alpha along
the l2-normalised gradient, projection back onto the ball. ``encoder`` is f (a JAX function of
the inputs, differentiated through for the input attack); without it the data is the
representation and both attacks coincide.

One eps convention end to end, SynBench's (lmprobe.methods.synbench, Config.relative_epsilon):
eps is RELATIVE by default, r = eps * ||mu|| of the attacked space, with ||mu|| the mean distance
of the class means to the grand mean of the training split (for two balanced classes, half the
class-mean distance: SynBench's ||mu||). So the eps of argmax SynBench-Score (suggest_epsilon)
is a probe budget as it stands: the input attack reads it against the inputs' ||mu|| as the
raw-data reference does, the representation attack against the representations' ||mu|| as the
score's representation side does. ``relative_epsilon=False`` reads eps as the radius itself.

Choices (* the paper leaves them open):
* alpha = 0.2 r per step, Torchattacks' PGDL2 default ratio (eps=1.0, alpha=0.2).
* ||mu|| from the class means of the training split (plug-in, biased up by about
  sqrt(d / n) for isotropic noise, as SynBench's own representation side).
* Adam, full label set (any integer labels, mapped to 0..C-1), minibatches from a seeded
  permutation; fixed number of steps. Evaluation: clean accuracy and accuracy under a fresh
  PGD-l2 attack of the same radius, in batches.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lmprobe.engine.runner import run_here
from lmprobe.errors import LmprobeError

PGD_STEP_RATIO = 0.2  # alpha / r, Torchattacks PGDL2 defaults
ATTACKS = ("input", "representation")


@dataclasses.dataclass(frozen=True)
class RobustProbeConfig:
    epsilon: float = 0.0
    relative_epsilon: bool = True  # eps * ||mu|| of the attacked space (SynBench's convention)
    attack: str = "input"  # input: delta on x through the encoder (the paper); representation: on f(x)
    pgd_steps: int = 10
    steps: int = 1000
    batch_size: int = 256
    learning_rate: float = 1e-2
    weight_decay: float = 0.0
    seed: int = 0

    def check(self) -> None:
        if not self.epsilon >= 0:
            raise LmprobeError(f"probe epsilon={self.epsilon} must be >= 0")
        if self.relative_epsilon and self.epsilon >= 1:
            raise LmprobeError(f"probe epsilon={self.epsilon} is relative (eps * ||mu||): it must be < 1")
        if self.attack not in ATTACKS:
            raise LmprobeError(f"probe attack={self.attack!r}: choose one of {', '.join(ATTACKS)}")
        if self.pgd_steps < 1 or self.steps < 1 or self.batch_size < 1:
            raise LmprobeError("pgd_steps, steps and batch_size of the robust probe must be >= 1")
        if not self.learning_rate > 0:
            raise LmprobeError(f"learning_rate={self.learning_rate} must be > 0")


class LinearProbe(NamedTuple):
    weight: jax.Array  # [k, C]
    bias: jax.Array  # [C]
    radius: float  # l2 radius it was trained against (absolute, in the attacked space)
    classes: np.ndarray  # [C] original label of each output
    attack: str = "input"  # the space the radius lives in (with an encoder)


@dataclasses.dataclass(frozen=True)
class _Unary:
    """f(x) as the two-argument f(params, x) the jitted code calls (hashable: one compile per f)."""

    fn: Callable

    def __call__(self, params, x):
        return self.fn(x)


def _identity(params, x):
    return x


def _encoder(encoder, encoder_params):
    """(fn(params, x), params): ``encoder`` is f(x), or f(params, x) when ``encoder_params`` is given
    (large models: their weights travel as arguments, never as constants of the compiled step)."""
    if encoder is None:
        return _identity, None
    return (encoder, encoder_params) if encoder_params is not None else (_Unary(encoder), None)


def _logits(params, feats):
    return feats @ params[0] + params[1]


def _loss(params, x, labels, encoder, eparams):
    logits = _logits(params, encoder(eparams, x))
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _l2_normalise(v):
    flat = v.reshape(v.shape[0], -1)
    norm = jnp.linalg.norm(flat, axis=1).reshape((-1,) + (1,) * (v.ndim - 1))
    return v / jnp.maximum(norm, 1e-12), norm


@functools.partial(jax.jit, static_argnames=("steps", "encoder"))
def pgd_l2(params, x, labels, radius, key, *, steps: int = 10, encoder: Callable = _identity, eparams=None):
    """PGD-l2 perturbations delta [n, ...] with ||delta_i||_2 <= radius against head ``params``
    on ``encoder(eparams, x + delta)``."""
    direction, _ = _l2_normalise(jax.random.normal(key, x.shape, x.dtype))
    start_radius = jax.random.uniform(jax.random.fold_in(key, 1), (x.shape[0],) + (1,) * (x.ndim - 1))
    delta = direction * start_radius * radius
    grad_fn = jax.grad(lambda d: _loss(params, x + d, labels, encoder, eparams) * x.shape[0])
    alpha = PGD_STEP_RATIO * radius

    def step(delta, _):
        unit, _ = _l2_normalise(grad_fn(delta))
        delta = delta + alpha * unit
        _, norm = _l2_normalise(delta)
        return delta * jnp.minimum(1.0, radius / jnp.maximum(norm, 1e-12)), None

    delta, _ = jax.lax.scan(step, delta, None, length=steps)
    return jnp.where(radius > 0, delta, 0.0)


def _labels(labels) -> tuple[np.ndarray, np.ndarray]:
    classes, index = np.unique(np.asarray(labels), return_inverse=True)
    if len(classes) < 2:
        raise LmprobeError(f"robust probing needs labels of at least two classes, got {classes.tolist()}")
    return classes, index.astype(np.int32)


def class_radius(z, labels) -> float:
    """Mean distance of the class means to the grand mean (= ||mu|| for two balanced classes)."""
    z = np.asarray(z, np.float64).reshape(len(z), -1)
    classes, index = _labels(labels)
    means = np.stack([z[index == c].mean(0) for c in range(len(classes))])
    return float(np.mean(np.linalg.norm(means - means.mean(0), axis=1)))


def encode(x, encoder: Callable | None = None, *, encoder_params=None, batch_size: int = 256) -> np.ndarray:
    """f(x) [n, k] in batches of ``batch_size`` (x itself without an encoder)."""
    fn, eparams = _encoder(encoder, encoder_params)
    x = np.asarray(x, np.float32)
    if fn is _identity:
        return x
    call = jax.jit(fn)
    return np.concatenate([np.asarray(call(eparams, jnp.asarray(x[i:i + batch_size])), np.float32)
                           for i in range(0, len(x), batch_size)])


def _attacked(x, labels, config: RobustProbeConfig, encoder, encoder_params):
    """(data, encoder, params) of the space the attack acts on: the inputs through the encoder
    (attack="input"), or the encoded representations with no encoder (attack="representation")."""
    if encoder is not None and config.attack == "representation":
        return encode(x, encoder, encoder_params=encoder_params, batch_size=config.batch_size), None, None
    return np.asarray(x, np.float32), encoder, encoder_params


def attack_radius(x, labels, config: RobustProbeConfig) -> float:
    """The l2 radius of ``config.epsilon`` for data x of the attacked space: eps * ||mu||
    (relative) or eps."""
    return config.epsilon * (class_radius(x, labels) if config.relative_epsilon and config.epsilon > 0 else 1.0)


def train_robust_probe(z, labels, config: RobustProbeConfig = RobustProbeConfig(), *, encoder: Callable | None = None,
                       encoder_params=None, radius: float | None = None, program: Callable = run_here) -> LinearProbe:
    """An eps-robust linear head on labelled inputs z [n, ...] through ``encoder`` (the
    representations themselves without one). ``radius`` overrides the one of ``config.epsilon``; the
    training program runs through ``program`` (a Scorer's ``runner.program``: compiled, not run, in a
    compile-only run)."""
    config.check()
    x = np.asarray(z, np.float32)
    if len(x) != len(labels) or len(x) == 0 or not np.all(np.isfinite(x)):
        raise LmprobeError(f"robust probing needs {len(labels)} finite samples, one per label; got an array "
                           f"of shape {x.shape}{'' if np.all(np.isfinite(x)) else ' with NaN/inf entries'}")
    classes, y = _labels(labels)
    x, encoder, encoder_params = _attacked(x, labels, config, encoder, encoder_params)
    if radius is None:
        radius = attack_radius(x, labels, config)
    enc, eparams = _encoder(encoder, encoder_params)
    width = int(jax.eval_shape(enc, eparams, jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.float32)).shape[-1])
    params = (jnp.zeros((width, len(classes)), jnp.float32), jnp.zeros((len(classes),), jnp.float32))
    optimizer = _adamw(config.learning_rate, config.weight_decay)
    rng = np.random.default_rng(config.seed)
    batch = min(config.batch_size, len(x))
    order = np.concatenate([rng.permutation(len(x)) for _ in range(math.ceil(config.steps * batch / len(x)) + 1)])
    idx = order[: config.steps * batch].reshape(config.steps, batch)
    params = program("robust_probe_fit", _fit, params, optimizer.init(params), jnp.asarray(x), jnp.asarray(y),
                     jnp.asarray(idx), jnp.float32(radius), jax.random.PRNGKey(config.seed), eparams,
                     optimizer=optimizer, pgd_steps=config.pgd_steps, encoder=enc)
    return LinearProbe(params[0], params[1], float(radius), classes, config.attack)


@functools.cache
def _adamw(learning_rate: float, weight_decay: float):
    """One optimizer object per setting: ``_fit`` takes it as a static argument, so the standard and the
    robust probe share one compiled program."""
    return optax.adamw(learning_rate, weight_decay=weight_decay)


@functools.partial(jax.jit, static_argnames=("optimizer", "pgd_steps", "encoder"))
def _fit(params, opt_state, x, y, idx, radius, key, eparams, *, optimizer, pgd_steps, encoder):
    def step(carry, i):
        params, opt_state = carry
        xb, yb = x[idx[i]], y[idx[i]]
        delta = pgd_l2(params, xb, yb, radius, jax.random.fold_in(key, i), steps=pgd_steps, encoder=encoder,
                       eparams=eparams)
        grads = jax.grad(_loss)(params, xb + jax.lax.stop_gradient(delta), yb, encoder, eparams)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    (params, _), _ = jax.lax.scan(step, (params, opt_state), jnp.arange(idx.shape[0]))
    return params


@functools.partial(jax.jit, static_argnames=("steps", "encoder"))
def _correct(params, x, y, radius, key, eparams, *, steps, encoder):
    """(clean, robust) correct counts of one batch."""
    clean = jnp.sum(jnp.argmax(_logits(params, encoder(eparams, x)), -1) == y)
    delta = pgd_l2(params, x, jnp.maximum(y, 0), radius, key, steps=steps, encoder=encoder, eparams=eparams)
    robust = jnp.sum(jnp.argmax(_logits(params, encoder(eparams, x + delta)), -1) == y)
    return clean, robust


def evaluate_probe(probe: LinearProbe, z, labels, *, radius: float | None = None, pgd_steps: int = 10,
                   seed: int = 0, encoder: Callable | None = None, encoder_params=None,
                   batch_size: int = 1024, program: Callable = run_here) -> dict:
    """Clean accuracy and accuracy under a PGD-l2 attack of ``radius`` (default: the training one),
    in the probe's attacked space (the inputs through ``encoder``, or their encodings)."""
    x = np.asarray(z, np.float32)
    if encoder is not None and probe.attack == "representation":
        x = encode(x, encoder, encoder_params=encoder_params, batch_size=batch_size)
        encoder, encoder_params = None, None
    enc, eparams = _encoder(encoder, encoder_params)
    lookup = {c: i for i, c in enumerate(probe.classes.tolist())}
    y = np.asarray([lookup.get(v, -1) for v in np.asarray(labels).tolist()], np.int32)
    params = (probe.weight, probe.bias)
    r = probe.radius if radius is None else float(radius)
    clean = robust = 0
    for i in range(0, len(x), batch_size):
        c, rb = program("robust_probe_correct", _correct, params, jnp.asarray(x[i:i + batch_size]),
                        jnp.asarray(y[i:i + batch_size]), jnp.float32(r),
                        jax.random.fold_in(jax.random.PRNGKey(seed), i), eparams, steps=pgd_steps, encoder=enc)
        clean, robust = clean + int(c), robust + int(rb)
    return {"accuracy": clean / len(x), "robust_accuracy": robust / len(x), "radius": r}


def robust_linear_probing(x_train, y_train, x_test, y_test, config: RobustProbeConfig, *,
                          encoder: Callable | None = None, encoder_params=None, program: Callable = run_here,
                          radius: float | None = None) -> dict:
    """Table 6 / 9: a standard (eps = 0) and an eps-robust linear probe (eps = ``config.epsilon``)
    trained on (x_train, y_train), both evaluated on the test split, clean and under a PGD-l2
    attack of the same radius r (eps * ||mu|| of the attacked space's training split if relative;
    ``radius`` overrides it); their programs through ``program`` (``train_robust_probe``)."""
    config.check()
    data, enc, eparams = _attacked(x_train, y_train, config, encoder, encoder_params)
    radius = attack_radius(data, y_train, config) if radius is None else float(radius)
    scale = class_radius(data, y_train)
    standard = train_robust_probe(data, y_train, dataclasses.replace(config, attack="input"), encoder=enc,
                                  encoder_params=eparams, radius=0.0, program=program)
    robust = train_robust_probe(data, y_train, dataclasses.replace(config, attack="input"), encoder=enc,
                                encoder_params=eparams, radius=radius, program=program) if radius > 0 else standard
    test = encode(x_test, encoder, encoder_params=encoder_params, batch_size=config.batch_size) \
        if enc is None and encoder is not None else np.asarray(x_test, np.float32)
    out = {"epsilon": config.epsilon, "relative_epsilon": config.relative_epsilon, "attack": config.attack,
           "radius": radius, "mu_norm": scale, "n_train": len(data), "n_test": len(test)}
    for name, probe in (("standard", standard), ("robust", robust)):
        got = evaluate_probe(probe, test, y_test, radius=radius, pgd_steps=config.pgd_steps, seed=config.seed + 1,
                             encoder=enc, encoder_params=eparams, batch_size=config.batch_size, program=program)
        out[name] = {"accuracy": got["accuracy"], "robust_accuracy": got["robust_accuracy"]}
    return out


def suggest_epsilon(scores: list[dict], a_t: float) -> float:
    """argmax_eps SynBench-Score(theta, eps, a_t) (Table 6); the smallest eps among ties.

    ``scores`` is results.json's list of {"eps", "a_t", "score"}.
    """
    rows = [r for r in scores if math.isclose(r["a_t"], a_t)]
    if not rows:
        raise LmprobeError(f"no SynBench scores at a_t={a_t}; available: {sorted({r['a_t'] for r in scores})}")
    best = max(r["score"] for r in rows)
    return min(r["eps"] for r in rows if r["score"] >= best - 1e-9)
