"""Loss-data baselines: Val loss, MDL, SDL and eSC (SynTextBench 000 Sec. 3.1, Tables 1, 2, 7, 9).

SynTextBench compares its score with the loss-data-curve metrics of Whitney et al. (2020),
computed on one synthetic data set (p = 0.2) of embeddings. The curve L(n) is the validation
cross-entropy of a probe trained on the first n training examples, averaged over seeds:

    Val loss = L(n_P)                                     (loss at the largest training size)
    MDL      = sum_i (n_i - n_{i-1}) L(n_i),   n_0 = 0
    SDL_eps  = sum_i (n_i - n_{i-1}) max(L(n_i) - eps, 0)
    eSC_eps  = min{ n_i : L(n_i) <= eps }                 (None, reported "> n_P", if none)

Probe (reference recipe): MLP D -> 512 -> 512 -> C with ReLU, softmax cross-entropy, Adam
lr 1e-4, batch 256, a fixed number of steps without early stopping, 5 seeds. The last 10% of
the rows are the validation set; sizes n_i = ceil(logspace(1, log10(N_train), n_points)).
The (size, seed) jobs train vmapped, one jitted Adam step over many jobs, each job drawing its
minibatches uniformly (with replacement) from its own prefix of the training rows. The jobs whose
prefix holds at most half a batch (n <= 128 of 256; all of them when the training rows are fewer
than a batch) compute their steps on the first R rows, R the longest of their prefixes, with each
row weighted by how often the batch drew it (0: not drawn): the same mean loss and gradient as on
the drawn rows, up to float rounding, in R/256 of the FLOPs. They share one program, the other jobs
another; the programs run one after another.

Resolved from the paper's tables (000 App. A.10, Tables 7 and 9):
- n_points = 10 and N_train = floor(0.9 N): eSC_1 equals 3686 / 7372 / 14745 / 29491 for
  N = 4096 / 8192 / 16384 / 32768 (= floor(0.9 N)), and MDL - SDL_1 = 1912 and 3540 at
  N = 4096 and 8192 are exactly the 9th point of the 10-point grid (so n_0 = 0, L(n_9) > 1).
- eps = 1 for SDL and eSC ("SDL, eps=1", "eSC, eps=1").
- "Val loss" is the validation loss at the largest size, as above: at N = 32768,
  MDL - SDL_1 = 12139 + 17352 L(n_10) gives L(n_10) = 6.4e-3, the reported Val loss (the
  text's "validation accuracy (Val loss)" is a slip: the tables report a loss).
- Units: the paper does not say; the reference uses the natural-log cross-entropy, so all
  losses, MDL and SDL here are in nats (divide by ln 2 for bits). eps is in the same unit.
- The steps are not in the paper; the reference trains 4000-5000 steps: default 4000.
Duplicate grid sizes (small N_train) are trained once. The rows must be in random order:
each size uses a prefix. Initialisation and minibatch keys depend on the seed index only, so
sizes of one seed share them (common random numbers give a smoother curve).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lmprobe.engine.runner import run_here
from lmprobe.errors import LmprobeError
from lmprobe.methods import no_progress
from lmprobe.text import plural

PAPER_N_POINTS = 10
PAPER_EPS = 1.0
MIN_SAMPLES = 20
FIRST_SIZE = 10
_VAL_CHUNK = 1024
_STEPS_PER_CALL = 100  # Adam steps per jitted call: one step of the progress bar


@dataclasses.dataclass(frozen=True)
class LossDataResult:
    """The loss-data curve: ``losses[i, s]`` is the validation loss (nats) of seed s trained on
    the first ``sizes[i]`` training rows."""

    sizes: np.ndarray  # [P] int, strictly increasing
    losses: np.ndarray  # [P, S] float
    n_train: int
    n_val: int
    num_classes: int

    @property
    def mean_losses(self) -> np.ndarray:
        """L(n_i): the loss averaged over seeds, [P]."""
        return np.asarray(self.losses, np.float64).mean(axis=1)


def training_sizes(n_train: int, n_points: int = PAPER_N_POINTS) -> np.ndarray:
    """ceil(logspace(1, log10(n_train), n_points)), clipped to n_train, duplicates removed."""
    grid = np.ceil(np.logspace(1.0, math.log10(n_train), n_points) - 1e-9).astype(np.int64)
    return np.unique(np.clip(grid, FIRST_SIZE, n_train))


def mdl(sizes, losses) -> float:
    """MDL = sum_i (n_i - n_{i-1}) L(n_i), n_0 = 0 (online code length, in the unit of L)."""
    sizes, losses = _curve(sizes, losses)
    return float(np.sum(np.diff(sizes, prepend=0) * losses))


def sdl(sizes, losses, eps: float = PAPER_EPS) -> float:
    """SDL_eps = sum_i (n_i - n_{i-1}) max(L(n_i) - eps, 0); a lower bound if L(n_P) > eps."""
    sizes, losses = _curve(sizes, losses)
    return float(np.sum(np.diff(sizes, prepend=0) * np.maximum(losses - eps, 0.0)))


def esc(sizes, losses, eps: float = PAPER_EPS) -> int | None:
    """eSC_eps = the smallest n_i with L(n_i) <= eps, or None when no size reaches eps."""
    sizes, losses = _curve(sizes, losses)
    hit = np.flatnonzero(losses <= eps)
    return int(sizes[hit[0]]) if hit.size else None


# the JSON of loss_data_metrics (lmprobe.store.json_problem): what a cache entry of it must hold
METRICS_SCHEMA = {"val_loss": float, "mdl": float, "sdl": float, "sdl_is_lower_bound": bool, "esc": (int, None),
                  "esc_text": str, "eps": float, "max_n": int, "units": str}


def loss_data_metrics(result: LossDataResult, eps: float = PAPER_EPS) -> dict:
    """Val loss, MDL, SDL_eps and eSC_eps of a loss-data curve (all in nats, eps too).

    ``sdl_is_lower_bound`` is True when L(n_P) > eps (the curve would keep adding beyond n_P);
    ``esc`` is None and ``esc_text`` reads "> n_P" when no size reaches eps."""
    if not (isinstance(eps, numbers.Real) and math.isfinite(eps) and eps >= 0):
        raise LmprobeError(f"eps={eps!r} must be a finite number >= 0 (the paper uses eps = 1 nat).")
    sizes, losses = _curve(result.sizes, result.mean_losses)
    n_esc = esc(sizes, losses, eps)
    return {
        "val_loss": float(losses[-1]),
        "mdl": mdl(sizes, losses),
        "sdl": sdl(sizes, losses, eps),
        "sdl_is_lower_bound": bool(losses[-1] > eps),
        "esc": n_esc,
        "esc_text": str(n_esc) if n_esc is not None else f"> {int(sizes[-1])}",
        "eps": float(eps),
        "max_n": int(sizes[-1]),
        "units": "nats",
    }


def loss_data_curves(
    x: np.ndarray,
    y: np.ndarray,
    *,
    n_points: int = PAPER_N_POINTS,
    seeds: int = 5,
    steps: int = 4000,
    batch_size: int = 256,
    lr: float = 1e-4,
    hidden: tuple[int, ...] = (512, 512),
    val_fraction: float = 0.1,
    seed: int = 0,
    progress: Callable = no_progress,
    desc: str = "loss-data baselines",
    program: Callable = run_here,
) -> LossDataResult:
    """Train the probe on every (size, seed) job at once and return the loss-data curve.

    x: [N, D] features (rows in random order), y: [N] integer labels (any values, >= 2
    classes). The last ``val_fraction`` of the rows (ceil) is the validation set. The training
    steps go through ``progress`` (tqdm-like), _STEPS_PER_CALL at a time; the jitted programs through
    ``program`` (a Scorer's ``runner.program``: compiled, not run, in a compile-only run)."""
    x, y, num_classes = _check_inputs(x, y, n_points, seeds, steps, batch_size, lr, hidden, val_fraction)
    n_train = int(math.floor((1.0 - val_fraction) * len(x) + 1e-9))
    sizes = training_sizes(n_train, n_points)
    config = MLPProbeConfig(tuple(int(h) for h in hidden), num_classes, steps, batch_size, float(lr))
    job_sizes = np.repeat(sizes, seeds)
    job_keys = jnp.tile(seed_keys(seed, seeds), (len(sizes), 1))
    losses = train_jobs(job_keys, job_sizes, x[:n_train], y[:n_train], x[n_train:], y[n_train:], config,
                        progress=progress, desc=desc, program=program)
    return LossDataResult(sizes, np.asarray(losses, np.float64).reshape(len(sizes), seeds),
                          n_train, len(x) - n_train, num_classes)


@dataclasses.dataclass(frozen=True)
class MLPProbeConfig:
    """The probe and its training: hidden widths, classes C, Adam steps, batch size, lr."""

    hidden: tuple[int, ...]
    num_classes: int
    steps: int
    batch_size: int
    lr: float


def seed_keys(seed: int, seeds: int) -> jax.Array:
    """One PRNG key per seed index: fold_in(PRNGKey(seed), s), [seeds, 2]."""
    base = jax.random.PRNGKey(seed)
    return jnp.stack([jax.random.fold_in(base, s) for s in range(seeds)])


def train_jobs(
    keys, sizes, x_train, y_train, x_val, y_val, config: MLPProbeConfig, *, batched: bool = True,
    weighted_prefixes: bool = True, progress: Callable = no_progress, desc: str = "loss-data baselines",
    program: Callable = run_here,
) -> np.ndarray:
    """Validation loss (nats) of each job j = (keys[j], sizes[j]) after ``config.steps`` steps.

    batched=True runs all jobs at once (jitted steps vmapped over the jobs of one program), its steps
    through ``progress``; the jobs of short prefixes run on the first rows, weighted by their draws (as the
    module says), unless ``weighted_prefixes`` is False. batched=False runs the jobs one by one through the
    step without vmap, on the drawn rows: the reference for both."""
    x_train, y_train = jnp.asarray(x_train, jnp.float32), jnp.asarray(y_train, jnp.int32)
    val = _chunk_validation(x_val, y_val)
    keys, sizes = jnp.asarray(keys), np.asarray(sizes, np.int32)
    fns = _job_functions(config, int(x_train.shape[1]), batched)
    if not batched:
        return np.array([_run(fns, [(config.batch_size, keys[j], sizes[j])], x_train, y_train, val, config)[0]
                         for j in range(len(sizes))])
    rows = np.full(len(sizes), config.batch_size)
    short = (sizes <= config.batch_size // 2) | (len(x_train) < config.batch_size)
    if weighted_prefixes and short.any():
        rows[short] = sizes[short].max()
    groups = {int(r): np.flatnonzero(rows == r) for r in np.unique(rows)}
    losses = _run(fns, [(r, keys[jobs], jnp.asarray(sizes[jobs])) for r, jobs in groups.items()],
                  x_train, y_train, val, config, progress, desc, program)
    out = np.empty(len(sizes), np.float32)
    for jobs, loss in zip(groups.values(), losses, strict=True):
        out[jobs] = np.asarray(loss)
    return out


def _run(fns, groups, x_train, y_train, val, config, progress=no_progress, desc="", program=run_here) -> list:
    """For each group (rows, keys, sizes) of jobs that one program trains on ``rows`` rows a step, one group after
    another (one group's probes in memory at a time): init, ``config.steps`` Adam steps in calls of at most
    _STEPS_PER_CALL, validation loss. One bar over all the calls."""
    starts = range(0, config.steps, _STEPS_PER_CALL)
    calls = [(group, start) for group in groups for start in starts]
    programs = f", {len(groups)} programs" if len(groups) > 1 else ""
    losses = []
    for (rows, keys, sizes), start in progress(calls, desc=f"{desc} ({plural(config.steps, 'step')}{programs})",
                                               total=len(calls)):
        if start == 0:
            init_keys, data_keys = program("probe_keys", fns.split, keys)
            params, opt_state = program("probe_init", fns.init, init_keys)
        count = min(_STEPS_PER_CALL, config.steps - start)
        params, opt_state = program("probe_train", fns.train, params, opt_state, sizes, data_keys, x_train, y_train,
                                    start, count, rows)
        jax.block_until_ready(params)  # the bar follows the device, not the dispatch
        if start + count == config.steps:
            losses.append(program("probe_loss", fns.val_loss, params, *val))
    return losses


@dataclasses.dataclass(frozen=True)
class _JobFunctions:
    split: Callable
    init: Callable
    train: Callable
    val_loss: Callable


@functools.lru_cache(maxsize=16)
def _job_functions(config: MLPProbeConfig, dim: int, batched: bool) -> _JobFunctions:
    """Jitted per-job functions, vmapped over a leading job axis when ``batched``."""
    dims = (dim, *config.hidden, config.num_classes)
    optimizer = optax.adam(config.lr)

    def split(key):
        init_key, data_key = jax.random.split(key)
        return init_key, data_key

    def init(key):
        params = []
        for k, (fan_in, fan_out) in zip(jax.random.split(key, len(dims) - 1), zip(dims[:-1], dims[1:])):
            params.append({"w": jax.nn.initializers.lecun_normal()(k, (fan_in, fan_out), jnp.float32),
                           "b": jnp.zeros((fan_out,), jnp.float32)})
        return params, optimizer.init(params)

    def train(params, opt_state, size, data_key, x_train, y_train, start, count, rows):
        def step(carry, t):
            params, opt_state = carry
            idx = jax.random.randint(jax.random.fold_in(data_key, t), (config.batch_size,), 0, size)
            if rows == config.batch_size:  # the drawn rows
                grads = jax.grad(_mean_cross_entropy)(params, x_train[idx], y_train[idx])
            else:  # size <= rows < batch: the first rows, each weighted by its share of the draws (0: not drawn)
                weights = jnp.zeros(rows, jnp.float32).at[idx].add(1.0 / config.batch_size)
                grads = jax.grad(_weighted_cross_entropy)(params, x_train[:rows], y_train[:rows], weights)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        steps = start + jnp.arange(count)
        return jax.lax.scan(step, (params, opt_state), steps)[0]

    def val_loss(params, x_val, y_val, mask):
        def chunk(args):
            x, y, m = args
            return jnp.sum(_cross_entropy(_forward(params, x), y) * m)

        return jnp.sum(jax.lax.map(chunk, (x_val, y_val, mask))) / jnp.sum(mask)

    if batched:
        split = jax.vmap(split)
        init = jax.vmap(init)
        train = jax.vmap(train, in_axes=(0, 0, 0, 0, None, None, None, None, None))
        val_loss = jax.vmap(val_loss, in_axes=(0, None, None, None))
    return _JobFunctions(jax.jit(split), jax.jit(init), jax.jit(train, static_argnums=(7, 8)), jax.jit(val_loss))


def _forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def _cross_entropy(logits, labels):
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=-1)[:, 0]


def _mean_cross_entropy(params, x, labels):
    return jnp.mean(_cross_entropy(_forward(params, x), labels))


def _weighted_cross_entropy(params, x, labels, weights):
    return jnp.sum(_cross_entropy(_forward(params, x), labels) * weights)


def _chunk_validation(x_val, y_val):
    """Validation rows padded to [K, chunk, D] / [K, chunk] with a 0/1 mask (bounded memory)."""
    x_val, y_val = np.asarray(x_val, np.float32), np.asarray(y_val, np.int32)
    n = len(x_val)
    chunk = min(_VAL_CHUNK, n)
    k = -(-n // chunk)
    pad = k * chunk - n
    mask = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
    x_val = np.concatenate([x_val, np.zeros((pad, x_val.shape[1]), np.float32)])
    y_val = np.concatenate([y_val, np.zeros(pad, np.int32)])
    return (jnp.asarray(x_val.reshape(k, chunk, -1)), jnp.asarray(y_val.reshape(k, chunk)),
            jnp.asarray(mask.reshape(k, chunk)))


def _curve(sizes, losses):
    sizes, losses = np.asarray(sizes), np.asarray(losses, np.float64)
    if sizes.ndim != 1 or sizes.shape != losses.shape or len(sizes) == 0:
        raise LmprobeError(f"a loss-data curve needs 1-D sizes and losses of one length; got shapes "
                           f"{sizes.shape} and {losses.shape}: pass sizes [P] and seed-averaged losses [P].")
    if np.any(np.diff(sizes) <= 0) or sizes[0] <= 0:
        raise LmprobeError(f"loss-data sizes {sizes.tolist()} must be positive and strictly increasing.")
    if not np.all(np.isfinite(losses)):
        raise LmprobeError("the loss-data curve has non-finite losses: the probe diverged; lower lr.")
    return sizes, losses


def _check_inputs(x, y, n_points, seeds, steps, batch_size, lr, hidden, val_fraction):
    """Validate the arguments; return float32 x, labels mapped to 0..C-1, and C."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != 2 or not np.issubdtype(x.dtype, np.number):
        raise LmprobeError(f"x must be a numeric [N, D] array of features; got shape {x.shape}, "
                           f"dtype {x.dtype}.")
    if not np.all(np.isfinite(x)):
        raise LmprobeError("x has NaN or infinite features: drop or fix those rows.")
    if y.ndim != 1 or len(y) != len(x) or not (np.issubdtype(y.dtype, np.integer) or y.dtype == bool):
        raise LmprobeError(f"y must be a 1-D integer label array with one label per row of x ({len(x)}); "
                           f"got shape {y.shape}, dtype {y.dtype}.")
    if len(x) < MIN_SAMPLES:
        raise LmprobeError(f"loss-data curves need at least {MIN_SAMPLES} examples; got {len(x)}: "
                           "generate a larger data set (the paper uses 4096-32768).")
    classes, labels = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise LmprobeError(f"y has a single class ({classes[0]}): the probe needs at least two classes.")
    counts = {"n_points": n_points, "seeds": seeds, "steps": steps, "batch_size": batch_size}
    for name, value in counts.items():
        if not (isinstance(value, (int, np.integer)) and value >= 1):
            raise LmprobeError(f"{name}={value!r} must be a positive integer.")
    if not (isinstance(lr, numbers.Real) and math.isfinite(lr) and lr > 0):
        raise LmprobeError(f"lr={lr!r} must be a positive number (the paper's probe uses 1e-4).")
    if not (len(hidden) >= 1 and all(isinstance(h, (int, np.integer)) and h >= 1 for h in hidden)):
        raise LmprobeError(f"hidden={hidden!r} must list at least one positive layer width, e.g. (512, 512).")
    n_train = math.floor((1.0 - val_fraction) * len(x) + 1e-9) if 0 < val_fraction < 1 else -1
    if n_train < FIRST_SIZE or n_train >= len(x):
        raise LmprobeError(f"val_fraction={val_fraction!r} must leave at least one validation row and "
                           f"at least {FIRST_SIZE} training rows of the {len(x)}; the paper uses 0.1.")
    return x.astype(np.float32), labels.astype(np.int32), len(classes)
