"""SynBench cost: the metric side against the reference's convex solves, and model throughput.

    python -m experiments.bench.synbench [--scales=49 --n=2048 --dim=768 --reference_budget=120
                                          --models=smollm2-135m,minilm-l6 --rep_samples=256]
    python -m experiments.bench.synbench --finite_sample [--widths=64,256,1024 --known_widths=384,768
                                          --n=2048 --fraction=0.074 --a_t=0.7 --grid=paper|0.2,0.4,...
                                          --epsilons=0,0.2]

1. Metric side (everything but the model's forward passes) for 49 scales x 5 epsilons x 2048
   test samples at representation size 768: raw reference, class moments, eigendecompositions,
   eps-robust directions, margins, scores and curves (lmprobe.methods.synbench), first call
   (with compilation) and warm.
2. The reference approach in the same run: per scale numpy covariance + eigh, then one convex
   solve per (scale, eps) of min (mu - z)^T D^-1 (mu - z) s.t. ||z||_2 <= eps ||mu|| with scipy
   SLSQP on the d = 768 problem, then numpy margins. Solves stop after --reference_budget
   seconds; the time of the full 245 is then an EXTRAPOLATION from the mean per solve, labelled so.
3. Representations per second of language models fed Gaussian input embeddings
   (Scorer.embed_inputs, --seq_len tokens), after one warm-up batch.

--finite_sample instead: SynBench's finite-sample bias. The identity (true score 1 at every eps) at
each of --widths, and signal_fraction_representation (true score at eps = 0 from its population
distance, ``synbench.population_scores``) at each of --known_widths, through the whole pipeline
(Gaussian samples, --n per split): the plug-in score at each of --epsilons, the bias-corrected eps = 0
score with its standard error, beside the truth, and seconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.optimize import minimize

from lmprobe.data import gaussian
from lmprobe.methods import synbench

EPSILONS = synbench.PAPER_EPSILONS


def synthetic_representations(scales, n, dim, seed=0):
    """Gaussian classes with mean difference s along a random direction and a random covariance
    (random rotation, eigenvalues spread over [0.5, 2]: well conditioned, like real features)."""
    rng = np.random.default_rng(seed)
    rotation = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    mixing = (np.sqrt(np.linspace(0.5, 2.0, dim))[:, None] * rotation.T).astype(np.float32)
    direction = rng.normal(size=dim).astype(np.float32)
    direction /= np.linalg.norm(direction)
    out = []
    for _ in range(2):
        y = np.where(rng.random((len(scales), n)) < 0.5, 1, -1).astype(np.int32)
        z = rng.normal(size=(len(scales), n, dim)).astype(np.float32) @ mixing
        z += y[..., None] * np.asarray(scales, np.float32)[:, None, None] * direction
        out += [z, y]
    return out


def metric_side(z_train, y_train, z_test, y_test, config):
    start = time.perf_counter()
    raw = synbench.raw_reference(config, gaussian.GaussianSpec((int(z_train.shape[-1]),)))
    summary = synbench.representation_summary(z_train, y_train, z_test, y_test, config)
    acc, bound = np.asarray(summary.accuracy, np.float64), np.asarray(summary.mean_scaled_margin, np.float64)
    scores = synbench.synbench_scores(acc, bound, raw, config)
    synbench.threshold_curves(acc, bound, raw, config)
    return time.perf_counter() - start, acc, scores


def reference_solve(mean_diff, eigvals, eps):
    """The public code's convex problem in the eigenbasis, solved with scipy SLSQP."""
    precision = 1.0 / eigvals
    radius2 = (eps * np.linalg.norm(mean_diff)) ** 2
    result = minimize(lambda z: np.sum(precision * (mean_diff - z) ** 2), np.zeros_like(mean_diff),
                      jac=lambda z: -2.0 * precision * (mean_diff - z), method="SLSQP",
                      constraints=[{"type": "ineq", "fun": lambda z: radius2 - z @ z, "jac": lambda z: -2.0 * z}],
                      options={"maxiter": 200, "ftol": 1e-10})
    return result.x


def reference_side(z_train, y_train, z_test, y_test, budget: float):
    """Reference pipeline per (scale, eps) until ``budget`` seconds: (solves done, seconds, accuracies)."""
    start, done, acc = time.perf_counter(), 0, {}
    for i in range(len(z_train)):
        zt, yt = z_train[i].astype(np.float64), y_train[i]
        mu1, mu2 = zt[yt > 0].mean(0), zt[yt < 0].mean(0)
        centred = np.where((yt > 0)[:, None], zt - mu1, zt - mu2)
        vals, vecs = np.linalg.eigh(centred.T @ centred / (len(zt) - 2))
        keep = vals > 1e-6
        vals, vecs = vals[keep], vecs[:, keep]
        mean_diff = vecs.T @ (0.5 * (mu1 - mu2))
        projected = (z_test[i] - 0.5 * (mu1 + mu2)) @ vecs
        for j, eps in enumerate(EPSILONS):
            z = reference_solve(mean_diff, vals, eps)
            w = (mean_diff - z) / vals
            acc[(i, j)] = float(np.mean(np.sign(projected @ w) == y_test[i]))
            done += 1
            if time.perf_counter() - start > budget:
                return done, time.perf_counter() - start, acc
    return done, time.perf_counter() - start, acc


def representations_per_second(name: str, samples: int, seq_len: int, batch_size: int) -> float:
    from lmprobe.engine import Scorer

    scorer = Scorer.load(name, batch_size=batch_size)
    rep = synbench.scorer_representation(scorer, name, seq_len=seq_len)
    config = synbench.Config(n=samples, batch_size=batch_size)
    synbench.represent(rep, synbench.Config(n=batch_size, batch_size=batch_size), 1.0, "train")  # compile
    start = time.perf_counter()
    synbench.represent(rep, config, 1.0, "test")
    return samples / (time.perf_counter() - start)


def finite_sample(args) -> None:
    grid = gaussian.PAPER_SCALES if args.grid == "paper" else tuple(float(v) for v in args.grid.split(","))
    epsilons = tuple(float(v) for v in args.epsilons.split(","))
    if 0.0 not in epsilons:
        epsilons = (0.0, *epsilons)
    config = synbench.Config(n=args.n, a_t=(args.a_t,), epsilons=epsilons, scales=grid, batch_size=512)
    known = synbench.population_scores(np.sqrt(args.fraction) * np.asarray(grid), config)[0]
    print(f"\nSynBench, a_t = {args.a_t}, n = {args.n} per split, {len(grid)} scales ({grid[0]:g} .. {grid[-1]:g}); "
          "true: the eps = 0 score (the identity's is 1 at every eps)")
    plug = " ".join(f"{f'plug-in {e:g}':>12}" for e in epsilons)
    print(f"{'representation':<32} {'width':>6} {'true':>6} {plug} {'corrected ± se':>16} {'seconds':>8}")
    cases = [(w, "identity", 1.0) for w in _ints(args.widths)]
    cases += [(w, f"signal fraction {args.fraction:g}", known) for w in _ints(args.known_widths)]
    for width, label, truth in cases:
        start = time.perf_counter()
        rep = (synbench.identity_representation((width,), batch_size=512) if label == "identity" else
               synbench.signal_fraction_representation(width, args.fraction, batch_size=512))
        rows = synbench.run(rep, config).scores
        zero = next(r for r in rows if r["eps"] == 0)
        fixed = ("n/a" if zero["score_corrected"] is None
                 else f"{zero['score_corrected']:.3f} ± {zero['score_corrected_stderr']:.3f}")
        plug = " ".join(f"{r['score']:>12.3f}" for r in rows)
        print(f"{label:<32} {width:>6} {truth:>6.3f} {plug} {fixed:>16} {time.perf_counter() - start:>8.1f}",
              flush=True)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m experiments.bench.synbench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", type=int, default=49)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--reference_budget", type=float, default=120.0, help="seconds of reference solves")
    p.add_argument("--models", default="smollm2-135m,minilm-l6")
    p.add_argument("--rep_samples", type=int, default=256)
    p.add_argument("--seq_len", type=int, default=synbench.DEFAULT_SEQ_LEN)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--finite_sample", action="store_true", help="only the finite-sample bias table (docstring)")
    p.add_argument("--widths", default="64,256,1024", help="--finite_sample: identity widths")
    p.add_argument("--known_widths", default="384,768", help="--finite_sample: signal-fraction widths")
    p.add_argument("--fraction", type=float, default=0.074, help="--finite_sample: signal kept (true score 0.40)")
    p.add_argument("--a_t", type=float, default=0.7)
    p.add_argument("--grid", default="paper", help="--finite_sample: paper (0.1 .. 5) or comma-separated scales")
    p.add_argument("--epsilons", default="0", help="--finite_sample: the plug-in score's budgets (0 always)")
    args = p.parse_args(argv)
    if args.finite_sample:
        return finite_sample(args)

    scales = tuple(round(0.1 * i, 1) for i in range(1, args.scales + 1))
    config = synbench.Config(scales=scales, n=args.n, epsilons=EPSILONS)
    z_train, y_train, z_test, y_test = synthetic_representations(scales, args.n, args.dim)
    cold, acc, _ = metric_side(z_train, y_train, z_test, y_test, config)
    warm, _, _ = metric_side(z_train, y_train, z_test, y_test, config)
    total = len(scales) * len(EPSILONS)
    done, seconds, ref_acc = reference_side(z_train, y_train, z_test, y_test, args.reference_budget)
    full = seconds / done * total
    agree = max(abs(ref_acc[k] - acc[k]) for k in ref_acc)

    print(f"\nSynBench metric side: {len(scales)} scales x {len(EPSILONS)} eps x {args.n} test samples, "
          f"representation size {args.dim}")
    print(f"{'approach':<58} {'seconds':>10}")
    print(f"{'lmprobe (closed form + root find, JAX), first call':<58} {cold:>10.2f}")
    print(f"{'lmprobe, warm':<58} {warm:>10.2f}")
    label = "measured" if done == total else f"EXTRAPOLATED from {done} of {total} solves"
    print(f"{'reference (numpy eigh + scipy SLSQP per scale x eps), ' + label:<58} {full:>10.1f}")
    print(f"speed-up (reference / lmprobe warm): {full / warm:.0f}x; max |accuracy difference| on the solved "
          f"tasks: {agree:.4f}")

    print(f"\nrepresentations per second (Gaussian inputs_embeds [{args.seq_len}, hidden], Scorer.embed_inputs, "
          f"batch {args.batch_size}, {args.rep_samples} samples, CPU)")
    for name in [m for m in args.models.split(",") if m]:
        print(f"{name:<20} {representations_per_second(name, args.rep_samples, args.seq_len, args.batch_size):>10.1f}")


if __name__ == "__main__":
    main()
