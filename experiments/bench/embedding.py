"""SynTextBench's embedding stage in sentences/s: the real synthetic sentences of two levels,
embedded with the paper's pooling (encoders first_last_avg, decoders last token).

    python -m experiments.bench.embedding [MODEL=minilm-l6] [N=2048]

Prints the best of two timed passes after a warm-up that compiles the common buckets. To compare
two versions of lmprobe, run it from each checkout (PYTHONPATH=CHECKOUT) in the same hour.
"""

from __future__ import annotations

import sys
import time

import jax.numpy as jnp

from lmprobe.engine import Scorer
from lmprobe.methods import syntextbench


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    model = argv[0] if argv else "minilm-l6"
    n = int(argv[1]) if len(argv) > 1 else 2048
    tasks = syntextbench.build_tasks(syntextbench.Config(n=n, levels=(0.2, 0.8), baselines=False, icl_examples=0))
    texts = [s for train, test in tasks.levels for s in train.sentences + test.sentences]
    scorer = Scorer.load(model, dtype=jnp.float32, batch_size=16)
    pooling = "last" if scorer.is_decoder else "first_last_avg"
    scorer.embed(texts[:256], pooling=pooling)
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        scorer.embed(texts, pooling=pooling)
        best = min(best, time.perf_counter() - start)
    print(f"{model}: {len(texts)} sentences, {len(texts) / best:.1f} sentences/s (best of 2, {best:.1f} s)")


if __name__ == "__main__":
    main()
