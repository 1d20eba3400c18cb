"""Process-level setup: joining a multi-host launch, who writes and prints, the compilation cache.

A run is one program on every process of a pod (or of a localhost test). Every process computes
the same numbers; process 0 alone writes files and prints (``is_main``). Decisions that steer
computation, such as "is this cache already on disk?", are taken by process 0 and shared
(``agree``), so that every process runs the same collectives.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

import jax
import jax.numpy as jnp

from lmprobe import log

_log = log.get("engine")
_MULTIPROCESS_ENV = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS")


def initialize_distributed() -> None:
    """Join the other processes of a multi-process launch (a TPU pod, SLURM, ...), once.

    Single-process runs (a laptop, one GPU, one TPU host) are left alone. On Cloud TPU pods and
    SLURM, JAX discovers the coordinator itself; elsewhere JAX_COORDINATOR_ADDRESS,
    JAX_NUM_PROCESSES and JAX_PROCESS_ID (and optionally JAX_LOCAL_DEVICE_IDS) describe the job.
    """
    if jax.distributed.is_initialized():
        return
    pod = len(os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",")) > 1
    slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1
    address = next((os.environ[v] for v in _MULTIPROCESS_ENV if os.environ.get(v)), None)
    if address is not None:
        from lmprobe.errors import LmprobeError

        missing = [v for v in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID") if v not in os.environ]
        if missing:
            raise LmprobeError(f"{' and '.join(missing)} must be set beside JAX_COORDINATOR_ADDRESS "
                               "(the number of processes and this process's index, 0-based)")
        local = os.environ.get("JAX_LOCAL_DEVICE_IDS")
        # CPU devices (a localhost test, a CPU cluster) need a collectives backend; it leaves
        # accelerators alone.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            address, int(os.environ["JAX_NUM_PROCESSES"]), int(os.environ["JAX_PROCESS_ID"]),
            local_device_ids=[int(x) for x in local.split(",")] if local else None)
    elif pod or slurm:
        jax.distributed.initialize()


def is_main() -> bool:
    """True on the one process that writes files and prints (process 0)."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier ``name`` (a no-op in a single process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def agree(flag: bool) -> bool:
    """Process 0's ``flag``, on every process: one decision for the whole job."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(jnp.asarray(bool(flag))))


def main_print(*args, sep: str = " ", level: int = logging.INFO, **_) -> None:
    """Log ``args`` (joined like ``print``) on process 0 only, at INFO: on stderr where a program
    set up lmprobe's logging (``lmprobe.log.setup``; every front end does), nowhere otherwise."""
    if is_main():
        _log.log(level, sep.join(map(str, args)))


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


def release_free_memory() -> None:
    """Give the memory the C heap holds free back to the system (glibc's malloc_trim; elsewhere a no-op).

    What XLA's compilations and the loader's dequantisation free, glibc keeps mapped (smollm2-135m: 30 MB
    after loading, 100 MB after compiling its generation step)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    library = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(library), "malloc_trim", None) if library else None


DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_dtype(name: str = "auto"):
    """The parameter / compute dtype ``name`` means here: 'auto' is bfloat16 on GPU and TPU
    (softmax, norms and logits stay float32 in the models) and float32 on CPU."""
    from lmprobe.errors import LmprobeError

    if name not in DTYPES:
        raise LmprobeError(f"`dtype={name}` is not one of {', '.join(DTYPES)}")
    if name == "auto":
        initialize_distributed()  # before the first backend query, which would fix a 1-process job
        name = "float32" if jax.default_backend() == "cpu" else "bfloat16"
    return jnp.dtype(name)
