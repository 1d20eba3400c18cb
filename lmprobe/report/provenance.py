"""What produced a results.json: command, models and checkpoints, devices, mesh, versions, times.

    info = run_info(scorers=[scorer], seed=args.seed, started=started)   # started = time.time() at start
    write_results(join(out, "results.json"), {**result, "run_info": info})

Local facts only (no collectives): every process may call it; process 0 writes it.
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import os
import shlex
import socket
import subprocess
import sys
import time

import jax

import lmprobe

_IMPORTED = time.time()  # the default ``started``: the same value for every call of one process
_PACKAGES = ("jax", "jaxlib", "flax", "numpy", "transformers")
_GIT_TIMEOUT_S = 5


def run_info(*, scorers=(), checkpoints=(), seed=None, started: float | None = None, argv=None,
             extra: dict | None = None) -> dict:
    """A JSON-able description of this run.

    ``scorers``: the models scored (their ``identity``; mesh and sharding come from the first).
    ``checkpoints``: identities of models that are not Scorers (a ViT representation).
    ``started``: ``time.time()`` taken by the front end at start (default: when lmprobe's report
    package was imported); ``ended`` is now."""
    argv = list(sys.argv if argv is None else argv)
    scorers = list(scorers)
    first = next((s for s in scorers if getattr(s, "mesh", None) is not None), None)
    return {
        "command": {"argv": argv, "line": shlex.join(argv), "cwd": os.getcwd(), "python": sys.executable},
        "started": iso_utc(_IMPORTED if started is None else started),
        "ended": iso_utc(time.time()),
        "models": [_identity(s) for s in scorers] + [dict(c) for c in checkpoints],
        "devices": devices(),
        "mesh": {str(k): int(v) for k, v in first.mesh.shape.items()} if first is not None else None,
        "sharding": getattr(first, "strategy", None) if first is not None else None,
        "versions": versions(),
        "seed": seed,
        "hostname": socket.gethostname(),
        **(extra or {}),
    }


def iso_utc(seconds: float) -> str:
    """``time.time()`` seconds as UTC ISO-8601 with microseconds (distinct runs, distinct stamps)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()


def _identity(scorer) -> dict:
    identity = getattr(scorer, "identity", None)
    return dict(identity) if identity is not None else {"name": getattr(scorer, "name", type(scorer).__name__)}


def devices() -> dict:
    """Platform, device kind, global and local device counts, processes (no collectives)."""
    local = jax.local_devices()
    return {"platform": jax.default_backend(), "kind": local[0].device_kind if local else None,
            "count": jax.device_count(), "local_count": len(local), "processes": jax.process_count()}


def versions() -> dict:
    """Python, package versions, lmprobe's version and, for a git checkout, its commit."""
    commit, dirty = git_state()
    return {"python": sys.version.split()[0], **{p: _version(p) for p in _PACKAGES},
            "lmprobe": lmprobe.__version__, "git_commit": commit, "git_dirty": dirty}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, has uncommitted changes) of lmprobe's source checkout; (None, None) outside one."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(lmprobe.__file__)))
    if not os.path.exists(os.path.join(root, ".git")):
        return None, None
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit or None, (bool(status) if status is not None else None)


def _git(root: str, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
