"""Restoring a model from lmprobe's Orbax checkpoint vs loading the same weights from safetensors.

    python -m experiments.bench.orbax [--model=smollm2-135m] [--dir=DIR] [--repeats=2]

The model's weights (fp32) are exported once to DIR as a Hugging Face directory (config.json +
model.safetensors) and as an Orbax checkpoint (lmprobe.checkpoints.orbax_io.save). Each load then
runs in a fresh subprocess (``lmprobe.checkpoints.load(path, tokenizer=False)``, fp32, the default
device), which reports its wall time and peak host RSS (ru_maxrss) above its RSS before loading.
On CPU the model itself lives in host memory, so "beyond model" is the peak increase minus the
model's bytes: what the loader holds on top (for comparison: the largest parameter's bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

LOADERS = ("safetensors", "orbax")


def child(path: str) -> None:
    """Load ``path`` once; print one JSON line of seconds, RSS before and peak (bytes), model bytes."""
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint  # noqa: F401  (imported, and the backend started, before measuring: both loaders)
    from flax import nnx

    from lmprobe.checkpoints import load

    jnp.zeros(1).block_until_ready()
    before = _rss_now()
    start = time.perf_counter()
    model = load(path, tokenizer=False, dtype=jnp.float32).model
    params = [v.get_value() for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    jax.block_until_ready(params)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "rss_before": before, "peak": peak,
                      "model_bytes": sum(p.nbytes for p in params), "largest": max(p.nbytes for p in params)}))


def _rss_now() -> int:
    """Current resident set size in bytes (Linux /proc), which ru_maxrss's peak started from."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def export(model: str, directory: str) -> dict[str, str]:
    """``model``'s fp32 weights as a safetensors directory and an Orbax checkpoint under ``directory``."""
    from safetensors.numpy import save_file

    from lmprobe.checkpoints import load
    from lmprobe.checkpoints.orbax_io import save, steps
    from lmprobe.checkpoints.resolve import resolve

    paths = {"safetensors": os.path.join(directory, "hf"), "orbax": os.path.join(directory, "orbax")}
    if not os.path.isfile(os.path.join(paths["safetensors"], "model.safetensors")):
        ckpt = resolve(model)
        os.makedirs(paths["safetensors"], exist_ok=True)
        save_file({n: ckpt.tensors.read(n) for n in ckpt.tensors.names()},
                  os.path.join(paths["safetensors"], "model.safetensors"))
        with open(os.path.join(paths["safetensors"], "config.json"), "w") as f:
            json.dump(ckpt.config, f)
    if not steps(paths["orbax"]):
        loaded = load(paths["safetensors"], tokenizer=False)
        save(paths["orbax"], 0, loaded.model, hf_config=loaded.checkpoint.config)
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dir", default=None, help="where the exports go (default: a temporary directory)")
    parser.add_argument("--repeats", type=int, default=2, help="loads per format, alternating")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    with tempfile.TemporaryDirectory() as tmp:
        paths = export(args.model, args.dir or tmp)
        runs = {name: [] for name in LOADERS}
        for _ in range(args.repeats):
            for name in LOADERS:
                done = subprocess.run([sys.executable, "-m", "experiments.bench.orbax", f"--child={paths[name]}"],
                                      capture_output=True, text=True, check=True)
                runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    mib = 1 << 20
    print(f"{args.model}, fp32, {os.cpu_count()} CPUs; each load in a fresh process, best of {args.repeats}")
    print(f"{'format':<12} {'seconds':>8} {'peak RSS increase MiB':>22} {'model MiB':>10} {'beyond model MiB':>17} "
          f"{'largest array MiB':>18}")
    for name, rows in runs.items():
        best = min(rows, key=lambda r: r["seconds"])
        grew = min(r["peak"] - r["rss_before"] for r in rows)
        print(f"{name:<12} {best['seconds']:>8.2f} {grew / mib:>22.0f} {best['model_bytes'] / mib:>10.0f} "
              f"{(grew - best['model_bytes']) / mib:>17.0f} {best['largest'] / mib:>18.0f}")


if __name__ == "__main__":
    main()
