"""What every front end shares: the common flags, one writer and one printer in multi-process
runs, progress bars, and turning bad input into one clear line.

A front end runs unchanged as N processes of one ``jax.distributed`` job (a TPU pod, or N
processes on localhost): ``parse`` joins the job before anything touches a device, every process
computes the same numbers, and process 0 alone prints (``say``, ``progress``) and writes
(lmprobe.report.artifacts does nothing on the other processes).
"""

from __future__ import annotations

import argparse
import functools
import sys

from tqdm.auto import tqdm

from lmprobe.engine import runtime
from lmprobe.errors import LmprobeError
from lmprobe.report import artifacts


def parser(description: str, *, default_model: str = "smollm2-135m") -> argparse.ArgumentParser:
    """An argument parser with the flags named the same across experiments."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default=default_model,
                   help="local HF directory, hub id, alias (opt-13b, pythia-70m, ...), .gguf file, "
                        "or an embedded default (smollm2-135m, minilm-l6)")
    p.add_argument("--dtype", choices=runtime.DTYPES, default="auto",
                   help="parameter and compute dtype; auto: bfloat16 on GPU/TPU, float32 on CPU "
                        "(logits and softmax stay float32)")
    p.add_argument("--offline", action="store_true", help="never contact the model hub")
    p.add_argument("--allow_pickle", action="store_true",
                   help="allow loading pickled .bin/.pt weights (runs code from the file: trusted files only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=16,
                   help="sequences per device per batch (global batch = batch_size x data-parallel devices)")
    p.add_argument("--model_parallel", type=int, default=1,
                   help="devices that share one model copy (the mesh's 'model' axis); the rest split the data")
    p.add_argument("--sharding", choices=["fsdp", "tp"], default="fsdp",
                   help="fsdp: every weight split over all devices; tp: heads/MLP/vocab split over 'model' only")
    return p


def parse(p: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """``p.parse_args(argv)``, then join the multi-process job if this is one (before any device
    is touched: a device query first would fix a one-process job)."""
    args = p.parse_args(argv)
    runtime.initialize_distributed()
    return args


def dtype(args):
    """The dtype --dtype names here ('auto' resolved for the hardware, after distributed init)."""
    return runtime.resolve_dtype(args.dtype)


def load_scorer(args, **kwargs):
    """The Scorer the common flags describe."""
    from lmprobe.engine import Scorer

    return Scorer.load(args.model, dtype=dtype(args), model_parallel=args.model_parallel,
                       strategy=args.sharding, offline=args.offline, allow_pickle=args.allow_pickle,
                       batch_size=args.batch_size, **kwargs)


def output_dir(path) -> str:
    """``path`` checked writable by process 0 (one clear error on every process otherwise), as a
    string; join files under it with ``lmprobe.report.artifacts.join`` (local paths and gs:// URLs)."""
    artifacts.check_writable(path)
    return str(path)


say = runtime.main_print  # print on process 0 only


def progress(iterable, desc: str = "", **kwargs):
    """A progress bar over ``iterable`` on process 0; the bare iteration elsewhere."""
    return tqdm(iterable, desc=desc, disable=not runtime.is_main(), **kwargs)


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
