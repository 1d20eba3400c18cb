"""Times the kernels/ package against numpy/scipy references at realistic sizes.

    python -m experiments.bench.kernels [--quick] [--json=PATH] [--repeats=5] [--seed=0]

JAX times are the median of --repeats runs after one compiling call (block_until_ready);
reference times are the median of fewer runs (one for the slow ones). Where a reference is
too slow to run in full, a subset is timed and extrapolated linearly; the row says so.
Peak memory: XLA's compiled temporary buffers for the JAX JSD (chunked vs unchunked) and
tracemalloc's peak for the numpy/scipy JSD.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
import tracemalloc
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import NonlinearConstraint, brentq, minimize
from scipy.spatial.distance import jensenshannon
from scipy.special import log_softmax, softmax
from scipy.stats import entropy as scipy_entropy
from scipy.stats import norm

from lmprobe import kernels as K
from lmprobe.store import json_text

FULL = {
    "pairs": 256, "vocab": 50_000, "chunk": K.DEFAULT_CHUNK_SIZE,  # JSD and friends
    "tasks": 20, "samples": 8192, "dim": 768,  # whitening; the robust solver also uses dim
    "scales": 49, "epsilons": 5, "synbench_samples": 2048, "synbench_dim": 768,
    "reference_budget_s": 8.0,  # slow references: time a subset for this long, extrapolate
    "candidates": (4096, 64),
}
QUICK = {
    "pairs": 16, "vocab": 2_000, "chunk": 512,
    "tasks": 2, "samples": 256, "dim": 32,
    "scales": 49, "epsilons": 5, "synbench_samples": 256, "synbench_dim": 16,
    "reference_budget_s": 0.5,
    "candidates": (256, 16),
}


@dataclass
class Row:
    kernel: str
    size: str
    jax_ms: float
    reference_ms: float
    reference: str

    @property
    def speedup(self) -> float:
        return self.reference_ms / self.jax_ms


PAUSE_S = 0.3  # lets the other library's worker threads go idle before a timed phase (full mode)


def time_jax(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    time.sleep(PAUSE_S)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def time_numpy(fn, *args, repeats: int) -> float:
    time.sleep(PAUSE_S)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def time_subset(fn, items, budget_s: float) -> tuple[float, int]:
    """Runs fn(item) over items until budget_s has passed (at least once); returns the
    extrapolation to all items in ms and how many were run."""
    time.sleep(PAUSE_S)
    start, done = time.perf_counter(), 0
    for item in items:
        fn(item)
        done += 1
        if time.perf_counter() - start > budget_s:
            break
    return 1e3 * (time.perf_counter() - start) / done * len(items), done


# --------------------------------------------------------------------------------------
# Divergences
# --------------------------------------------------------------------------------------


def numpy_jsd(a, b):
    return jensenshannon(softmax(a, axis=-1), softmax(b, axis=-1), axis=-1) ** 2


def bench_divergences(cfg, rng, repeats):
    shape = (cfg["pairs"], cfg["vocab"])
    a = (rng.normal(size=shape) * 3).astype(np.float32)
    b = (rng.normal(size=shape) * 3).astype(np.float32)
    ids = rng.integers(0, cfg["vocab"], size=cfg["pairs"])
    token_set = rng.random(cfg["vocab"]) < 0.01
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    size = f"{cfg['pairs']} x {cfg['vocab']:,}"
    chunk = cfg["chunk"]
    slow = max(1, repeats // 2)
    rows = []

    def add(name, jax_fn, jax_args, ref_fn, ref_args, ref_name):
        reference_ms = time_numpy(ref_fn, *ref_args, repeats=slow)
        rows.append(Row(name, size, time_jax(jax_fn, *jax_args, repeats=repeats), reference_ms, ref_name))

    jsd = functools.partial(K.js_divergence, chunk_size=chunk)
    add(f"js_divergence (chunk {chunk})", jsd, (ja, jb), numpy_jsd, (a, b),
        "scipy softmax + jensenshannon**2")
    add("js_divergence (unchunked)", functools.partial(K.js_divergence, chunk_size=None), (ja, jb),
        numpy_jsd, (a, b), "scipy softmax + jensenshannon**2")
    add("kl_divergence", functools.partial(K.kl_divergence, chunk_size=chunk), (ja, jb),
        lambda x, y: scipy_entropy(softmax(x, -1), softmax(y, -1), axis=-1), (a, b),
        "scipy softmax + stats.entropy(p, q)")
    add("entropy", functools.partial(K.entropy, chunk_size=chunk), (ja,),
        lambda x: scipy_entropy(softmax(x, -1), axis=-1), (a,), "scipy softmax + stats.entropy")
    add("token_log_probs", functools.partial(K.token_log_probs, chunk_size=chunk), (ja, jnp.asarray(ids)),
        lambda x, i: np.take_along_axis(log_softmax(x, -1), i[:, None], -1), (a, ids),
        "scipy log_softmax + take_along_axis")
    add("token_set_mass (1% of vocab)", functools.partial(K.token_set_mass, chunk_size=chunk),
        (ja, jnp.asarray(token_set)), lambda x, m: softmax(x, -1)[:, m].sum(-1), (a, token_set),
        "scipy softmax + masked sum")

    spec = jax.ShapeDtypeStruct(shape, jnp.float32)

    def temp_mb(chunk_size):
        fn = functools.partial(K.js_divergence, chunk_size=chunk_size)
        return jax.jit(fn).lower(spec, spec).compile().memory_analysis().temp_size_in_bytes / 2**20

    tracemalloc.start()
    numpy_jsd(a, b)
    numpy_peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    memory = {
        "size": size,
        "input_mb_each": a.nbytes / 2**20,
        f"jax_chunked_{chunk}_temp_mb": temp_mb(chunk),
        "jax_unchunked_temp_mb": temp_mb(None),
        "scipy_peak_mb": numpy_peak,
    }
    return rows, memory


# --------------------------------------------------------------------------------------
# Whitening (SynTextBench Sec. 2.3)
# --------------------------------------------------------------------------------------


def numpy_fit_whitening(z, y, energy=0.99):
    """np.cov + np.linalg.svd per class, energy truncation; placement of the whitened classes."""
    means = {c: z[y == c].mean(0) for c in (1, -1)}
    diff = means[1] - means[-1]
    d_intra = np.mean(np.linalg.norm(z - np.where((y > 0)[:, None], means[1], means[-1]), axis=1))
    r = np.linalg.norm(diff) / d_intra
    params = {}
    for c in (1, -1):
        F, S, _ = np.linalg.svd(np.cov(z[y == c].T))
        k = int(np.argmax(np.cumsum(S) / S.sum() >= energy)) + 1
        params[c] = (means[c], F[:, :k], np.sqrt(S[:k]), c * (r / 2) * diff / np.linalg.norm(diff))
    return params


def numpy_apply_whitening(params, z, y):
    """F^T S^{-1/2} (z - b_y) (the paper's K coordinates), mapped back with F, plus the centre."""
    out = np.empty_like(z)
    for c, (mean, F, sqrt_s, centre) in params.items():
        out[y == c] = ((z[y == c] - mean) @ (F / sqrt_s)) @ F.T + centre
    return out


def numpy_syntextbench_task(z_train, y_train, z_test, y_test):
    params = numpy_fit_whitening(z_train, y_train)
    z_hat = numpy_apply_whitening(params, z_test, y_test)
    mu_1, mu_2 = params[1][3], params[-1][3]  # whitened training means = centres
    mu = (mu_1 - mu_2) / 2
    score = (z_hat - (mu_1 + mu_2) / 2) @ mu
    correct = np.sign(score) == y_test
    return correct.mean(), (np.abs(score) / (mu @ mu))[correct].mean()


def bench_whitening(cfg, rng, repeats):
    t, n, d = cfg["tasks"], cfg["samples"], cfg["dim"]
    mixing = rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d)
    y = np.where(rng.random((t, n)) < 0.5, 1, -1)
    z = (rng.normal(size=(t, n, d)).astype(np.float32) @ mixing + 0.1 * y[..., None]).astype(np.float32)
    jz, jy = jnp.asarray(z), jnp.asarray(y)
    size = f"{t} tasks x {n:,} x {d}"
    budget = cfg["reference_budget_s"]

    reference_ms, done = time_subset(
        lambda i: numpy_apply_whitening(numpy_fit_whitening(z[i], y[i]), z[i], y[i]), range(t), budget)

    @jax.jit
    def whiten(z, y):
        return K.apply_class_whitening(K.fit_class_whitening(z, y), z, y)

    rows = [Row("class whitening (fit + apply)", size, time_jax(whiten, jz, jy, repeats=max(1, repeats // 2)),
                reference_ms, f"numpy cov + linalg.svd per class; {done} of {t} tasks timed, extrapolated")]
    split = n // 2
    reference_ms, done = time_subset(
        lambda i: numpy_syntextbench_task(z[i, :split], y[i, :split], z[i, split:], y[i, split:]), range(t), budget)
    jax_ms = time_jax(K.syntextbench_accuracy_margin, jz[:, :split], jy[:, :split], jz[:, split:], jy[:, split:],
                      repeats=max(1, repeats // 2))
    rows.append(Row("SynTextBench Alg.1 l.4-7", f"{t} tasks x {split:,}+{split:,} x {d}", jax_ms, reference_ms,
                    f"numpy whitening + Bayes classifier; {done} of {t} tasks timed, extrapolated"))
    return rows


# --------------------------------------------------------------------------------------
# Robust classifier (SynBench Thm 1)
# --------------------------------------------------------------------------------------


def brentq_robust(mean_diff, eigvals, radius):
    if radius <= 0:
        return np.zeros_like(mean_diff)
    kappa = brentq(lambda k: np.linalg.norm(k * mean_diff / (eigvals + k)) - radius, 1e-14, 1e14,
                   xtol=1e-300, rtol=1e-12)
    return kappa * mean_diff / (eigvals + kappa)


def trust_constr_robust(mean_diff, eigvals, radius):
    d = mean_diff.shape[0]
    precision = 1.0 / eigvals
    ball = NonlinearConstraint(lambda z: z @ z, -np.inf, radius**2, jac=lambda z: 2 * z[None],
                               hess=lambda z, v: 2 * v[0] * np.eye(d))
    return minimize(lambda z: np.sum(precision * (mean_diff - z) ** 2), np.zeros(d),
                    jac=lambda z: -2 * precision * (mean_diff - z), hess=lambda z: np.diag(2 * precision),
                    constraints=[ball], method="trust-constr",
                    options={"gtol": 1e-10, "xtol": 1e-12, "maxiter": 2000}).x


def bench_robust(cfg, rng, repeats):
    s, e, d = cfg["scales"], cfg["epsilons"], cfg["dim"]
    scales = np.arange(1, s + 1) * 0.1
    eigvals = np.stack([np.sort(rng.exponential(size=d) * np.arange(1, d + 1) ** -1.2)[::-1] for _ in range(s)])
    mean_diff = scales[:, None] * rng.normal(size=(s, d)) * np.sqrt(eigvals)
    epsilons = np.linspace(0.0, 0.8, e)  # relative to ||mu||, as the SynBench code
    jm, jl, je = (jnp.asarray(x, jnp.float32) for x in (mean_diff[:, None], eigvals[:, None], epsilons))
    problems = [(i, j) for i in range(s) for j in range(e)]
    radius = lambda i, j: epsilons[j] * np.linalg.norm(mean_diff[i])

    def run_brentq():
        for i, j in problems:
            brentq_robust(mean_diff[i], eigvals[i], radius(i, j))

    size = f"{s} scales x {e} eps x {d}"
    brentq_ms = time_numpy(run_brentq, repeats=1)
    shuffled = [problems[k] for k in rng.permutation(len(problems))]
    trust_ms, done = time_subset(lambda ij: trust_constr_robust(mean_diff[ij[0]], eigvals[ij[0]], radius(*ij)),
                                 shuffled, cfg["reference_budget_s"])
    solve = functools.partial(K.robust_direction, relative_epsilon=True)
    jax_ms = time_jax(solve, jm, jl, je, repeats=repeats)
    return [
        Row("robust_direction (l2)", size, jax_ms, brentq_ms, "numpy eigenbasis + scipy brentq per (scale, eps)"),
        Row("robust_direction (l2)", size, jax_ms, trust_ms,
            f"scipy trust-constr; {done} of {len(problems)} random solves timed, extrapolated"),
    ]


def numpy_synbench_scale(z, y, zt, yt, epsilons):
    z, zt = z.astype(np.float64), zt.astype(np.float64)
    means = [z[y == c].mean(0) for c in (1, -1)]
    centred = np.concatenate([z[y == c] - m for c, m in zip((1, -1), means)])
    lam, F = np.linalg.eigh(centred.T @ centred / (len(z) - 2))
    keep = lam > max(1e-6, lam.max() * len(lam) * np.finfo(np.float32).eps)
    lam, F = lam[keep], F[:, keep]
    mu = F.T @ (means[0] - means[1]) / 2
    projected = (zt - (means[0] + means[1]) / 2) @ F
    for eps in epsilons:
        r = eps * np.linalg.norm(mu)
        w = mu / lam if r == 0 else (mu - brentq_robust(mu, lam, r)) / lam
        score = projected @ w
        correct = np.sign(score) == yt
        _ = correct.mean(), (np.abs(score) / abs(mu @ w))[correct].mean()


def bench_synbench(cfg, rng, repeats):
    s, n, d = cfg["scales"], cfg["synbench_samples"], cfg["synbench_dim"]
    mixing = rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d)

    def draw():
        y = np.where(rng.random((s, n)) < 0.5, 1, -1)
        direction = np.ones(d, np.float32) / np.sqrt(d)
        scales = (np.arange(1, s + 1) * 0.1).astype(np.float32)
        x = rng.normal(size=(s, n, d)).astype(np.float32) + y[..., None] * scales[:, None, None] * direction
        return np.tanh(x @ mixing).astype(np.float32), y  # a nonlinear "representation"

    (z, y), (zt, yt) = draw(), draw()
    epsilons = np.linspace(0.0, 0.8, cfg["epsilons"])
    fn = functools.partial(K.synbench_accuracy_bound, relative_epsilon=True)
    args = [jnp.asarray(v) for v in (z, y, zt, yt, epsilons)]
    reference_ms, done = time_subset(
        lambda i: numpy_synbench_scale(z[i], y[i], zt[i], yt[i], epsilons), range(s), cfg["reference_budget_s"])
    jax_ms = time_jax(fn, *args, repeats=max(1, repeats // 2))
    return [Row("SynBench representation side", f"{s} scales x {n:,}+{n:,} x {d}, {len(epsilons)} eps",
                jax_ms, reference_ms, f"numpy eigh + brentq per scale; {done} of {s} scales timed, extrapolated")]


# --------------------------------------------------------------------------------------
# Theory + integrals, selection
# --------------------------------------------------------------------------------------


def bench_scores(cfg, rng, repeats):
    s, e = cfg["scales"], cfg["epsilons"]
    scales = np.arange(1, s + 1) * 0.1
    rep_acc = np.clip(norm.cdf(scales)[:, None] - rng.uniform(0, 0.1, (s, e)), 0.5, 1.0).T
    rep_bound = 1 + rng.exponential(size=(e, s))
    thresholds = np.linspace(0.6, 0.95, 8)

    @jax.jit
    def scores(rep_acc, rep_bound, thresholds):
        raw_acc = K.gaussian_accuracy(scales)
        raw_bound = K.expected_scaled_bound(raw_acc)
        return K.synbench_score(rep_acc[:, None], rep_bound[:, None], raw_acc, raw_bound, thresholds)

    def numpy_riemann():  # the public code: Riemann sum on linspace(a_t, 1, 100)
        raw_acc = norm.cdf(scales)
        r = norm.ppf(raw_acc)
        raw_bound = 1 + norm.pdf(r) / (raw_acc * r)
        for k in range(e):
            for a_t in thresholds:
                grid = np.linspace(a_t, 1, 100)
                rep = [(rep_bound[k] * (rep_acc[k] > a)).mean() for a in grid]
                raw = [(raw_bound * (raw_acc > a)).mean() for a in grid]
                _ = sum(rep) / sum(raw)

    reference_ms = time_numpy(numpy_riemann, repeats=repeats)
    jax_ms = time_jax(scores, jnp.asarray(rep_acc), jnp.asarray(rep_bound), jnp.asarray(thresholds), repeats=repeats)
    rows = [Row("Thm 1(iv) + SynBench score (exact)", f"{e} eps x {len(thresholds)} a_t x {s} scales", jax_ms,
                reference_ms, "numpy/scipy.stats, Riemann sum (public code)")]
    b, c = cfg["candidates"]
    objectives = rng.normal(size=(b, c)).astype(np.float32)
    valid = rng.random((b, c)) < 0.5

    def numpy_select(o, v):
        masked = np.where(v, o, -np.inf)
        index = masked.argmax(-1)
        return np.where(v.any(-1), index, -1)

    reference_ms = time_numpy(numpy_select, objectives, valid, repeats=repeats)
    rows.append(Row("select_best_candidate", f"{b:,} examples x {c} candidates",
                    time_jax(K.select_best_candidate, jnp.asarray(objectives), jnp.asarray(valid), repeats=repeats),
                    reference_ms, "numpy where + argmax"))
    return rows


# --------------------------------------------------------------------------------------


def print_table(rows, memory):
    header = f"{'kernel':<46} {'size':<38} {'JAX ms':>10} {'ref ms':>11} {'speedup':>8}  reference"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r.kernel:<46} {r.size:<38} {r.jax_ms:>10.2f} {r.reference_ms:>11.1f} {r.speedup:>7.1f}x  "
              f"{r.reference}")
    print()
    print(f"Peak memory of JSD over {memory['size']} (inputs {memory['input_mb_each']:.1f} MiB each):")
    for key, value in memory.items():
        if key.endswith("_mb"):
            print(f"  {key:<32} {value:>9.1f} MiB")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m experiments.bench.kernels", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    p.add_argument("--json", default=None, help="also write the figures to this path")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per JAX kernel (median)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    global PAUSE_S
    PAUSE_S = 0.0 if args.quick else 0.3
    rng = np.random.default_rng(args.seed)
    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}, {os.cpu_count()} CPU cores, "
        f"{'quick' if args.quick else 'full'} sizes\n"
    )
    rows, memory = bench_divergences(cfg, rng, args.repeats)
    rows += bench_whitening(cfg, rng, args.repeats)
    rows += bench_robust(cfg, rng, args.repeats)
    rows += bench_synbench(cfg, rng, args.repeats)
    rows += bench_scores(cfg, rng, args.repeats)
    print_table(rows, memory)
    if args.json:
        payload = {
            "mode": "quick" if args.quick else "full",
            "environment": {
                "jax": jax.__version__,
                "device": jax.devices()[0].device_kind,
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
            },
            "rows": [asdict(r) | {"speedup": r.speedup} for r in rows],
            "jsd_memory": memory,
        }
        with open(args.json, "w") as f:
            f.write(json_text(payload))  # strict JSON: a NaN or infinite speedup as null
    return rows, memory


if __name__ == "__main__":
    main()
