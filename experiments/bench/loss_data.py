"""Loss-data baselines' cost: the jobs of short prefixes trained on their rows (weighted by their draws,
lmprobe.methods.loss_data) against every job gathering its drawn batch, in one run, at the main job's geometry.

    python -m experiments.bench.loss_data [--n=8192 --dim=384 --steps=400 --repeats=2]

Gaussian features (two classes, means apart along one axis) of --n rows and --dim columns stand in
for SynTextBench's embeddings at p = 0.2 (the main job: 8192 sentences, MiniLM's 384 dimensions):
the cost does not depend on the values. Both ways train the paper's 50 probes (10 sizes x 5 seeds,
384 -> 512 -> 512 -> 2, batch 256) for --steps steps, interleaved, --repeats times each; the
figures are the fastest run's seconds per step (compilation excluded: one untimed run first), the
4000-step stage they imply, and the largest difference between the two ways' validation losses.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from lmprobe.methods import loss_data


def gaussian_features(n: int, dim: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    x[:, 0] += (2 * y - 1) * 1.5
    return x, y


def train(x, y, steps: int, weighted_prefixes: bool) -> tuple[float, np.ndarray]:
    n_train = math.floor(0.9 * len(x) + 1e-9)
    sizes = loss_data.training_sizes(n_train)
    seeds = 5
    config = loss_data.MLPProbeConfig((512, 512), 2, steps, 256, 1e-4)
    keys = np.tile(np.asarray(loss_data.seed_keys(0, seeds)), (len(sizes), 1))
    start = time.perf_counter()
    losses = loss_data.train_jobs(keys, np.repeat(sizes, seeds), x[:n_train], y[:n_train], x[n_train:], y[n_train:],
                                  config, weighted_prefixes=weighted_prefixes)
    return time.perf_counter() - start, losses


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    x, y = gaussian_features(args.n, args.dim)
    ways = {"gathered batches": False, "weighted prefixes": True}
    for weighted in ways.values():  # compile
        train(x, y, 100, weighted)
    seconds, losses = {name: [] for name in ways}, {}
    for _ in range(args.repeats):
        for name, weighted in ways.items():
            took, losses[name] = train(x, y, args.steps, weighted)
            seconds[name].append(took)
    print(f"50 probes, {args.n} rows x {args.dim}, {args.steps} steps, fastest of {args.repeats} (all: seconds)")
    for name in ways:
        best = min(seconds[name])
        runs = ", ".join(f"{s:.1f}" for s in seconds[name])
        print(f"  {name:18s} {1e3 * best / args.steps:7.1f} ms/step   "
              f"4000 steps: {4000 * best / args.steps / 60:5.1f} min   runs: {runs}")
    ratio = min(seconds["gathered batches"]) / min(seconds["weighted prefixes"])
    diff = np.abs(losses["gathered batches"] - losses["weighted prefixes"])
    print(f"  speed-up {ratio:.2f}x; validation losses differ by at most {diff.max():.2e} nats "
          f"(largest loss {losses['gathered batches'].max():.3f})")


if __name__ == "__main__":
    main()
