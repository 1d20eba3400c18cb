"""SynBench on one representation: representations of the Gaussian tasks (cached per scale and split), the
eps-robust Bayes classifier fitted on them (Sec. 3.2.2), the plug-in and bias-corrected scores with
the corrected score's standard error, and the optional robust probe and loss-data baselines."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from lmprobe import kernels
from lmprobe.data import gaussian
from lmprobe.engine.runner import run_here
from lmprobe.errors import LmprobeError
from lmprobe.methods import Ticker, loss_data, no_progress, result, robust_probe
from lmprobe.methods.result import Number
from lmprobe.methods.synbench.config import (
    CACHE_VERSION,
    CEILING_BATCH,
    CURVE_GRID,
    DEFAULT_INPUT_SCALES,
    DEFAULT_N_RATIO,
    DOWNSTREAM_SEED_OFFSET,
    STDERR_DRAWS,
    Config,
)
from lmprobe.methods.synbench.representations import (
    Representation,
    embedding_moments,
    identity_representation,
    scorer_representation,
)
from lmprobe.methods.synbench.theory import (
    Reference,
    bayes_accuracy_bound,
    check_reference,
    eps0_scores,
    raw_reference,
    synbench_scores,
    unbiased_squared_distance,
)
from lmprobe.store import Array, StageTimes, cache_key, cached, cached_json, join, require_finite

# --------------------------------------------------------------------------------------
# Representation side (Sec. 3.2.2)
# --------------------------------------------------------------------------------------


@jax.jit
def _within_class_basis(z, labels):
    """Orthonormal basis [k, n] of the span of the within-class-centred rows (zero columns
    where the span has fewer dimensions), from the n x n Gram matrix."""
    means = kernels.class_means(z, labels)
    centred = z - jnp.where((labels > 0)[:, None], means[0], means[1]) * (labels != 0)[:, None]
    vals, vecs = kernels.symmetric_eigh(centred @ centred.T)
    keep = vals > vals[-1] * z.shape[0] * float(jnp.finfo(jnp.float32).eps)
    return jnp.where(keep, (centred.T @ vecs) / jnp.sqrt(jnp.where(keep, vals, 1.0)), 0.0)


def check_representations(name: str, z: np.ndarray, scale: float) -> None:
    """NaN / infinite / constant representations are errors, never a silent score of 0."""
    if not np.all(np.isfinite(z)):
        raise LmprobeError(f"representation of {name} at scale s={scale} has NaN or infinite entries "
                           f"({int(np.sum(~np.isfinite(z)))} of {z.size}): check the model's dtype "
                           "(try `dtype=float32`) and its input normalisation")
    if float(np.max(np.ptp(z, axis=0))) == 0.0:
        raise LmprobeError(f"representation of {name} at scale s={scale} has zero variance (every sample "
                           "maps to the same vector): the model ignores its input, so SynBench is undefined")


def representation_summary(z_train, y_train, z_test, y_test, config: Config, *,
                           program: Callable = run_here) -> kernels.MarginSummary:
    """Accuracy and mean scaled bound [S, E] of the eps-robust Bayes classifiers of the
    representations z_* [S, n, k] (one task per scale), labels [S, n] in {+1, -1}; the l2 path's
    programs through ``program`` (a Scorer's ``runner.program``: compiled, not run, in a compile-only run)."""
    z_train, z_test = jnp.asarray(z_train, jnp.float32), jnp.asarray(z_test, jnp.float32)
    y_train, y_test = jnp.asarray(y_train, jnp.int32), jnp.asarray(y_test, jnp.int32)
    eps = jnp.asarray(config.epsilons, jnp.float32)
    if config.norm == 2:
        if z_train.shape[-1] > z_train.shape[-2]:  # wider than the sample: work in the support
            basis = program("support_basis", jax.vmap(_within_class_basis), z_train, y_train)
            z_train, z_test = (program("to_support", jnp.matmul, z, basis) for z in (z_train, z_test))
        out = [program("accuracy_bound", kernels.synbench_accuracy_bound, z_train[i], y_train[i], z_test[i],
                       y_test[i], eps, tau=config.prior, relative_epsilon=config.relative_epsilon, eig_atol=0.0)
               for i in range(z_train.shape[0])]  # per scale: keeps [E, n, k] off the memory peak
        return kernels.MarginSummary(*(jnp.stack(parts) for parts in zip(*out)))
    check_lp_width(z_train.shape[-2], z_train.shape[-1], config)
    return program("lp_accuracy_bound", _lp_summary, z_train, y_train, z_test, y_test, eps, p=config.norm,
                   tau=config.prior, relative_epsilon=config.relative_epsilon)


@functools.partial(jax.jit, static_argnames=("p", "tau", "relative_epsilon"))
def _lp_summary(z_train, y_train, z_test, y_test, eps, *, p: float, tau: float,
                relative_epsilon: bool) -> kernels.MarginSummary:
    """Thm 2: l_p-robust directions by FISTA on the pooled precision (pseudo-inverse)."""
    moments = kernels.class_moments(z_train, y_train)
    vals, vecs = kernels.descending_eigh(kernels.pooled_covariance(moments))
    support = kernels.numerical_support(vals, None, 0.0)
    precision = jnp.einsum("sij,sj,skj->sik", vecs, jnp.where(support, 1.0 / jnp.where(support, vals, 1.0), 0.0), vecs)
    mean_diff = 0.5 * (moments.means[:, 0] - moments.means[:, 1])
    midpoint = 0.5 * (moments.means[:, 0] + moments.means[:, 1])
    out = []
    for e in eps:
        robust = kernels.robust_direction_lp(mean_diff, precision, e, p=p, relative_epsilon=relative_epsilon)
        margins = kernels.linear_margins(z_test, y_test, midpoint, robust.weight, mean_diff, tau=tau,
                                         norm_ord=kernels.dual_exponent(p))
        out.append(kernels.summarize_margins(margins, y_test))
    return kernels.MarginSummary(*(jnp.stack(parts, axis=-1) for parts in zip(*out)))


def mean_difference_norms(z_train, y_train, norm: float) -> np.ndarray:
    """||mu||_p per scale, mu = half the class-mean difference of the representations."""
    means = kernels.class_means(jnp.asarray(z_train, jnp.float32), jnp.asarray(y_train, jnp.int32))
    return np.asarray(jnp.linalg.norm(0.5 * (means[..., 0, :] - means[..., 1, :]), ord=norm, axis=-1))


@dataclasses.dataclass
class CorrectedSummary:
    """The eps = 0 Bayes classifier of every scale at the unbiased Mahalanobis distance."""

    accuracy: np.ndarray  # [S] Phi(D_u / 2) (Thm 3(iii) at the prior; NaN where undefined)
    bound: np.ndarray  # [S] expected scaled bound of correct samples at the same distance (Thm 1(iv) / 3(iv))
    samples: int  # n = n1 + n2 per scale (both splits)
    k: int  # dimension of the pooled covariance's support (the width, unless rank-deficient)
    reason: str | None  # why the corrected score is undefined; None when it is defined
    distances: tuple[np.ndarray, ...] | None = None  # (D^2, n1, n2, k) [S] behind it (``squared_distances``)


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


def n_for_width(width: int, ratio: float = DEFAULT_N_RATIO) -> int:
    """Samples per split that hold n / width at ``ratio`` (>= 8, Config's minimum): compare
    models of different widths at one ratio, since both scores drift with width / n."""
    if width < 1 or not ratio > 0:
        raise LmprobeError(f"n_for_width: width={width} must be >= 1 and ratio={ratio} > 0")
    return max(8, math.ceil(ratio * width))


def check_lp_width(n: int, width: int, config: Config) -> None:
    """LmprobeError when l_p budgets (p != 2), which act in the representation's own coordinates, get fewer
    samples ``n`` than the representation's ``width``."""
    if config.norm != 2 and width > n:
        raise LmprobeError(f"l_p budgets with p={config.norm} act in the representation's own coordinates "
                           f"and need n >= representation size: n={n}, size {width}; raise `n` or use `norm=2`")


def check_sample_size(width: int, config: Config) -> None:
    """LmprobeError unless the bias-corrected score is defined for representations of ``width``
    (2 n - width - 3 > 0 over both splits of n samples)."""
    if 2 * config.n - width - 3 <= 0:
        raise LmprobeError(f"n={config.n} samples per split is too few for SynBench's bias-corrected score at width "
                           f"{width}: {_too_few(2 * config.n, width)}")


@dataclasses.dataclass
class Result(result.Result):
    """SynBench of one representation: SynBench-Score per (a_t, eps) (``scores``: results.json's rows, the
    bias-corrected eps = 0 score with its standard error beside the plug-in one), the curves behind them,
    and the robust probe and loss-data baselines where the config asks for them."""

    model: str
    scores: list[dict]
    curves: dict
    representation: dict
    timings: dict
    config: Config
    robust_probe: dict | None = None  # Table 6 layout (Config.robust_probe)
    baselines: dict | None = None  # App. G loss-data baselines (Config.baselines)
    cached_stages: dict = dataclasses.field(default_factory=dict)  # stage -> {"hits", "entries"} read from the cache

    def to_dict(self) -> dict:
        out = {"method": "synbench", "model": self.model, "scores": self.scores, "curves": self.curves,
               "representation": self.representation, "timings_s": self.timings,
               "cached_stages": self.cached_stages, "config": dataclasses.asdict(self.config)}
        out.update({k: v for k, v in (("robust_probe", self.robust_probe), ("baselines", self.baselines))
                    if v is not None})
        return out

    def numbers(self, a_t: float | None = None) -> dict[str, Number]:
        """At threshold ``a_t`` (default: the config's first): the plug-in score at eps = 0 (``synbench``),
        the bias-corrected one with its standard error (``synbench_corrected``) and the score at each
        other eps (``synbench_eps0.2``, ...)."""
        a_t = self.config.a_t[0] if a_t is None else a_t
        out = {}
        for row in (r for r in self.scores if r["a_t"] == a_t):
            if row["eps"] == 0:
                out["synbench"] = Number(row["score"])
                if "score_corrected" in row:
                    out["synbench_corrected"] = Number(row["score_corrected"], row["score_corrected_stderr"])
            else:
                out[f"synbench_eps{row['eps']:g}"] = Number(row["score"])
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
    return require_finite(np.concatenate(zs), model=rep.name, stage="representations"), np.concatenate(ys).astype(
        np.int32)


def run(rep: Representation, config: Config, *, cache_dir: str | None = None,
        progress: Callable = no_progress) -> Result:
    """SynBench on representation ``rep``; representations cached under ``cache_dir``, their
    batches counted by one ``progress`` bar."""
    config.check()
    spec = rep.spec(config)
    spec.check()
    stages = StageTimes()
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
                width = z["train"][0].shape[-1] if z["train"] else None  # the first split's: every split's
                reps, labels = _cached_split(rep, config, spec, scale, split, cache_dir, ticker.advance, width)
                target += per_split
                ticker.advance_to(target)  # a split read from the cache moves the bar at once
                if not rep.compile_only:  # a compile-only Scorer's zeros: constant by construction
                    check_representations(rep.name, reps, scale)
                check_lp_width(config.n, reps.shape[-1], config)  # after the first split, not all of them
                z[split].append(reps)
                y[split].append(labels.astype(np.int32))

    with stages("metric"):
        z_train, z_test = np.stack(z["train"]), np.stack(z["test"])
        y_train, y_test = np.stack(y["train"]), np.stack(y["test"])
        degenerate = ({str(e): 0 for e in config.epsilons} if rep.compile_only else
                      _check_budgets(rep.name, z_train, y_train, config))
        summary = representation_summary(z_train, y_train, z_test, y_test, config, program=rep.program)
        rep_acc = np.asarray(summary.accuracy, np.float64)
        rep_bound = np.asarray(summary.mean_scaled_margin, np.float64)
        scores = synbench_scores(rep_acc, rep_bound, raw, config)
        curves = threshold_curves(rep_acc, rep_bound, raw, config)
        # host-side statistics (nothing compiled), undefined on a compile-only Scorer's zeros: left out there
        corrected = (corrected_summary(z_train, y_train, z_test, y_test, config)
                     if 0.0 in config.epsilons and not rep.compile_only else None)

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
            # compile-only: no scores to choose from; the largest budget trains the robust probe as well
            eps = max(config.epsilons) if rep.compile_only else robust_probe.suggest_epsilon(rows, config.probe_a_t)
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
    probe_config = _probe_config(config, epsilon)
    x_train, y_train, x_test, y_test = downstream_task(rep, config)
    encoder = rep.input_encoder()
    if encoder is None:
        if config.probe_attack == "input":
            raise LmprobeError(f"{rep.name} is not a differentiable JAX function of its inputs, so the robust "
                               "probe cannot attack the input: use `probe_attack=representation`")
        x_train, x_test = (_represent_inputs(rep, v, config.batch_size) for v in (x_train, x_test))
        # compile-only: zeros have no class distance to scale eps by (the programs are the same at any radius > 0)
        return robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, probe_config, program=rep.program,
                                                  radius=epsilon if rep.compile_only else None)
    fn, params = encoder
    if params is None:  # a function of the inputs alone
        fn = functools.partial(fn, None)
    return robust_probe.robust_linear_probing(x_train, y_train, x_test, y_test, probe_config, encoder=fn,
                                              encoder_params=params, program=rep.program)


def _probe_config(config: Config, epsilon: float) -> robust_probe.RobustProbeConfig:
    return robust_probe.RobustProbeConfig(epsilon=epsilon, relative_epsilon=config.relative_epsilon,
                                    attack=config.probe_attack, steps=config.probe_steps, seed=config.seed)


def baseline_metrics(rep: Representation, config: Config, spec, z, y, cache_dir, progress) -> dict:
    """App. G: Val loss, MDL, SDL_1, eSC_1 (nats) of the loss-data curve on one scale's train
    representations z [n, k] (labels {+1, -1}), cached next to them."""
    compute = lambda: {"scale": config.baseline_scale, "n": int(len(z)), "steps": config.baseline_steps,
                       **loss_data.loss_data_metrics(loss_data.loss_data_curves(
                           z, y, steps=config.baseline_steps, seed=config.seed, progress=progress,
                           desc=f"{rep.name}: loss-data baselines", program=rep.program))}
    if cache_dir is None:
        return compute()
    key = cache_key(split=_split_key(rep, config, spec, config.baseline_scale, "train"),
                    steps=config.baseline_steps, seed=config.seed, version=CACHE_VERSION)
    return cached_json(join(cache_dir, f"baselines-{key}.json"), compute,
                       expect={"scale": float, "n": int, "steps": int, **loss_data.METRICS_SCHEMA})


def _split_key(rep, config, spec, scale, split) -> str:
    return cache_key(model=rep.name, identity=rep.identity, settings=rep.settings, spec=dataclasses.asdict(spec),
                     seed=config.seed, n=config.n, scale=scale, split=split, version=CACHE_VERSION)


def _cached_split(rep, config, spec, scale, split, cache_dir, on_batch, width: int | None = None):
    """(representations [n, width], labels) of one (scale, split), from the cache when a run saved them."""
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

    reps = cached(join(cache_dir, f"{key}.npy"), compute, expect=Array((config.n, width)))
    return reps, cached(join(cache_dir, f"{key}-labels.npy"), labels, expect=Array((config.n,), np.integer)).astype(
        np.int32)


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
