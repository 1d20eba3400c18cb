"""SynTextBench's embedding stage, the engine's batch geometry A/B: the real synthetic sentences of
every level, embedded with the paper's pooling (encoders first_last_avg, decoders last) as the method
embeds them (calls of ``EMBED_CHUNK`` sentences), under the runner's plain geometry ("old":
``embed_batching = "runner"``, calls of ``OLD_CHUNK``) and under ``Scorer.embed_geometry``'s rule
("new"), interleaved and repeated in one process.

    python -m experiments.bench.embedding [MODEL=minilm-l6] [N=512] [REPEATS=3]
    python -m experiments.bench.embedding shapes [MODEL=minilm-l6]   # tokens/s of one batch by (length, rows)
    python -m experiments.bench.embedding floor [MODEL=minilm-l6]    # the main job's embedding at matmul speed

``N`` sentences per level (20 levels). Prints per pass sentences/s, real tokens/s and the GFLOP/s
they achieve (linear layers and attention over real tokens), the padded tokens each geometry runs,
beside a plain jnp matmul of the model's MLP shape ([tokens, hidden] x [hidden, mlp]) at each
geometry's token budget (what XLA reaches on this machine), then the largest absolute and relative
difference between the two geometries' embeddings and the SynTextBench score of both.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe.engine import Scorer, steps
from lmprobe.methods import syntextbench

OLD_CHUNK = 2048  # sentences per engine call before the geometry rule


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if argv[:1] in (["shapes"], ["floor"]):
        (shape_sweep if argv[0] == "shapes" else floor)(argv[1] if len(argv) > 1 else "minilm-l6")
        return
    model = argv[0] if argv else "minilm-l6"
    n = int(argv[1]) if len(argv) > 1 else 512
    repeats = int(argv[2]) if len(argv) > 2 else 3
    config = syntextbench.Config(n=n, baselines=False, icl_examples=0)
    tasks = syntextbench.build_tasks(config)
    splits = [s for pair in tasks.levels for s in pair]
    texts = [t for s in splits for t in s.sentences]
    scorer = Scorer.load(model, dtype=jnp.float32)
    pooling = syntextbench.default_pooling(scorer)
    ids = scorer.encode(texts)
    real = np.asarray([len(s) for s in ids])
    flops = _flops_per_sentence(scorer.config, real)
    setups = {"old": ("runner", OLD_CHUNK), "new": ("auto", syntextbench.EMBED_CHUNK)}
    print(f"{model}: {len(texts)} sentences ({n} x {len(config.levels)} levels), {real.sum()} real tokens "
          f"(mean {real.mean():.1f}, median {np.median(real):.0f}, p90 {np.percentile(real, 90):.0f}, "
          f"max {real.max()}), {flops.sum() / real.sum() / 1e6:.1f} MFLOP a token; XLA CPU threads: "
          f"{jax.local_devices()[0].platform} x {jax.device_count()} device(s)")
    for name, (batching, chunk) in setups.items():
        scorer.embed_batching = batching
        batches = [b for s in range(0, len(ids), chunk) for b in scorer.runner.batches(
            ids[s:s + chunk], **scorer.embed_geometry())]
        padded = sum(b.ids.size for b in batches)
        shapes = sorted({b.shape for b in batches})
        geometry = scorer.embed_geometry()
        about = (f"max_tokens {geometry['max_tokens']}, {len(geometry.get('buckets', scorer.buckets))} buckets"
                 if geometry else f"the runner's, {len(scorer.buckets)} buckets")
        print(f"  {name}: geometry {about} (batch_size {scorer.batch_size}), "
              f"{chunk} sentences a call: {len(batches)} batches, {len(shapes)} shapes, padded tokens "
              f"{padded} ({padded / real.sum():.3f}x real), median batch {np.median([b.ids.size for b in batches]):.0f}"
              " tokens")
    out, seconds = {}, {name: [] for name in setups}
    for name, (batching, chunk) in setups.items():  # first pass: compiles (the persistent cache may hold them)
        scorer.embed_batching = batching
        start, compiled = time.perf_counter(), scorer.compilations["embed"]
        out[name] = _embed(scorer, ids, pooling, chunk)
        print(f"  {name} first pass (with compilation): {time.perf_counter() - start:.1f} s, "
              f"{scorer.compilations['embed'] - compiled} traces")
    budgets = {"old": 16 * int(np.median([b.shape[1] for b in scorer.runner.batches(ids)])),
               "new": scorer.embed_geometry().get("max_tokens", 512)}
    matmul = {name: [] for name in setups}
    for r in range(repeats):
        order = list(setups) if r % 2 == 0 else list(reversed(setups))
        for name in order:
            batching, chunk = setups[name]
            scorer.embed_batching = batching
            start = time.perf_counter()
            _embed(scorer, ids, pooling, chunk)
            seconds[name].append(time.perf_counter() - start)
            matmul[name].append(_matmul_gflops(budgets[name], scorer.config))
        print(f"  pass {r + 1}: " + ", ".join(f"{name} {seconds[name][-1]:.1f} s" for name in setups))
    for name in setups:
        s = np.asarray(seconds[name])
        sent, tok, gf = len(texts) / s, real.sum() / s, flops.sum() / s / 1e9
        print(f"  {name}: {sent.min():.0f}-{sent.max():.0f} sentences/s (median {np.median(sent):.0f}), "
              f"{tok.min():.0f}-{tok.max():.0f} real tokens/s, {gf.min():.1f}-{gf.max():.1f} GFLOP/s achieved; "
              f"matmul [{budgets[name]}, {scorer.config.hidden_size}] x [{scorer.config.hidden_size}, "
              f"{_width(scorer.config)}]: {min(matmul[name]):.1f}-{max(matmul[name]):.1f} GFLOP/s")
    ratio = np.asarray(seconds["old"]) / np.asarray(seconds["new"])
    print(f"  new/old speed, pass by pass: {', '.join(f'{x:.2f}' for x in ratio)}")
    a, b = out["old"], out["new"]
    diff = np.abs(a - b)
    rel = diff.max(1) / np.maximum(np.abs(a).max(1), 1e-30)
    print(f"  embeddings new vs old: max abs diff {diff.max():.3g} (|old| max {np.abs(a).max():.3g}), "
          f"max relative diff per sentence {rel.max():.3g}, mean {rel.mean():.3g}")
    scores = {name: _score(out[name], splits, tasks, config) for name in setups}
    print("  score: " + ", ".join(f"{name} {s!r}" for name, s in scores.items())
          + f"; difference {abs(scores['new'] - scores['old']):.3g}")


def shape_sweep(model, repeats=3):
    """Tokens/s and GFLOP/s of the embedding step on one batch of random ids, by (length, rows), from 128 to
    8192 tokens a batch; the shapes interleaved, ``repeats`` rounds (the range over rounds)."""
    scorer = Scorer.load(model, dtype=jnp.float32)
    step = scorer.runner.jit("embed", steps.pooled_embedding, pooling=syntextbench.default_pooling(scorer), layer=-1)
    rng, grid = np.random.default_rng(0), {}
    for length in (8, 24, 64, 128, 256):
        for rows in (2, 4, 8, 16, 32, 64, 128, 256):
            if 128 <= length * rows <= 8192:
                ids = rng.integers(1000, 20000, (rows, length)).astype(np.int32)
                grid[length, rows] = scorer.runner.put(ids, np.ones_like(ids))
                jax.block_until_ready(step(*grid[length, rows]))
    rates = {shape: [] for shape in grid}
    for _ in range(repeats):
        for (length, rows), args in grid.items():
            calls = max(2, 16384 // (length * rows))
            start = time.perf_counter()
            for _ in range(calls):
                y = step(*args)
            jax.block_until_ready(y)
            rates[length, rows].append(length * rows * calls / (time.perf_counter() - start))
    per_token = _flops_per_sentence(scorer.config, np.ones(1)).item()  # the linear layers' share
    for (length, rows), r in rates.items():
        print(f"length {length:4d} x rows {rows:4d} = {length * rows:5d} tokens: {min(r):6.0f}-{max(r):6.0f} "
              f"tokens/s, up to {max(r) * per_token / 1e9:.0f} GFLOP/s (linear layers)")


def _embed(scorer, ids, pooling, chunk):
    return np.concatenate([scorer.embed(ids[s:s + chunk], pooling=pooling) for s in range(0, len(ids), chunk)])


def _score(embeddings, splits, tasks, config):
    ends = np.cumsum([len(s.sentences) for s in splits])
    parts = np.split(embeddings, ends[:-1])
    _, _, score, _ = syntextbench.level_scores(tasks.levels, parts[0::2], parts[1::2], config)
    return score


def _width(cfg) -> int:
    return getattr(cfg, "intermediate_size", None) or 4 * cfg.hidden_size


def floor(model: str) -> None:
    """The main job's embedding FLOPs (its 20 levels x 8,192 sentences, real tokens) and the time they take at
    the best rate of a plain jitted matmul of the model's MLP shape on this machine: the stage's floor here."""
    tasks = syntextbench.build_tasks(syntextbench.Config(baselines=False, icl_examples=0))
    texts = [t for pair in tasks.levels for s in pair for t in s.sentences]
    scorer = Scorer.load(model, dtype=jnp.float32)
    real = np.asarray([len(s) for s in scorer.encode(texts)])
    flops = _flops_per_sentence(scorer.config, real).sum()
    rates = {tokens: _matmul_gflops(tokens, scorer.config) for tokens in (512, 2048, 8192)}
    print(f"{model}: {len(texts)} sentences, {real.sum()} real tokens, {flops / 1e12:.1f} TFLOP; plain matmul "
          f"[tokens, {scorer.config.hidden_size}] x [{scorer.config.hidden_size}, {_width(scorer.config)}]: "
          + ", ".join(f"{t} tokens {r:.1f} GFLOP/s" for t, r in rates.items())
          + f"; at the best rate the stage takes {flops / max(rates.values()) / 1e9 / 60:.1f} min")


def _flops_per_sentence(cfg, lengths) -> np.ndarray:
    """Multiply-adds x 2 of the blocks over a sentence's real tokens: q, k, v, o and the MLP, and
    attention's scores and values (4 T^2 D a layer)."""
    d, layers = cfg.hidden_size, cfg.num_hidden_layers
    linear = 2 * (4 * d * d + 2 * d * _width(cfg))
    return layers * (lengths * linear + 4 * lengths.astype(np.float64) ** 2 * d)


def _matmul_gflops(tokens, cfg, reps=20) -> float:
    """GFLOP/s of a jitted [tokens, hidden] x [hidden, mlp] matmul, best of 3 runs of ``reps``."""
    x = jnp.ones((tokens, cfg.hidden_size), jnp.float32)
    w = jnp.ones((cfg.hidden_size, _width(cfg)), jnp.float32)
    f = jax.jit(jnp.matmul)
    f(x, w).block_until_ready()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            y = f(x, w)
        y.block_until_ready()
        best = min(best, (time.perf_counter() - start) / reps)
    return 2 * tokens * cfg.hidden_size * _width(cfg) / best / 1e9


if __name__ == "__main__":
    main()
