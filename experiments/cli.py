"""What every front end shares: the common flags and turning bad input into one clear line."""

from __future__ import annotations

import argparse
import functools
import sys

import jax.numpy as jnp

from lmprobe.errors import LmprobeError

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def parser(description: str, *, default_model: str = "smollm2-135m") -> argparse.ArgumentParser:
    """An argument parser with the flags named the same across experiments."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default=default_model,
                   help="local HF directory, hub id, alias (opt-13b, pythia-70m, ...), .gguf file, "
                        "or an embedded default (smollm2-135m, minilm-l6)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                   help="parameter and compute dtype (logits and softmax stay float32)")
    p.add_argument("--offline", action="store_true", help="never contact the model hub")
    p.add_argument("--allow_pickle", action="store_true",
                   help="allow loading pickled .bin/.pt weights (runs code from the file: trusted files only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=16, help="sequences per batch (per bucket length)")
    p.add_argument("--model_parallel", type=int, default=1,
                   help="devices that share one model copy (the mesh's 'model' axis); the rest split the data")
    p.add_argument("--sharding", choices=["fsdp", "tp"], default="fsdp",
                   help="fsdp: every weight split over all devices; tp: heads/MLP/vocab split over 'model' only")
    return p


def load_scorer(args, **kwargs):
    """The Scorer the common flags describe."""
    from lmprobe.engine import Scorer

    return Scorer.load(args.model, dtype=DTYPES[args.dtype], model_parallel=args.model_parallel,
                       strategy=args.sharding, offline=args.offline, allow_pickle=args.allow_pickle,
                       batch_size=args.batch_size, **kwargs)


def main_guard(fn):
    """Run ``fn``; an LmprobeError prints as one line on stderr and exits with status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LmprobeError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper
