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
    return p


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
