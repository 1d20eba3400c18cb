"""Process-level setup: joining a multi-host launch, and the persistent compilation cache."""

from __future__ import annotations

import os

import jax

_MULTIPROCESS_ENV = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS")


def initialize_distributed() -> None:
    """Join the other processes of a multi-process launch (a TPU pod, SLURM, ...), once.

    Single-process runs (a laptop, one GPU, one TPU host) are left alone. On Cloud TPU pods and
    SLURM, JAX discovers the coordinator itself; elsewhere set JAX_COORDINATOR_ADDRESS,
    JAX_NUM_PROCESSES and JAX_PROCESS_ID.
    """
    if jax.distributed.is_initialized():
        return
    pod = len(os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",")) > 1
    slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1
    if pod or slurm or any(os.environ.get(v) for v in _MULTIPROCESS_ENV):
        jax.distributed.initialize()


def enable_compilation_cache(directory: str | None = None) -> None:
    """Keep compiled programs on disk so a rerun (or another process) skips compilation.

    The directory is $LMPROBE_COMPILATION_CACHE, else ~/.cache/lmprobe/jax; a cache the user
    configured through JAX itself is left alone.
    """
    if jax.config.jax_compilation_cache_dir:
        return
    directory = directory or os.environ.get("LMPROBE_COMPILATION_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "lmprobe", "jax")
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
