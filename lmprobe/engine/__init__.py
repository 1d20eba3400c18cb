"""Device mesh, length-bucketed batching, and the jitted entry points every method uses."""

from lmprobe.engine.mesh import make_mesh, placement
from lmprobe.engine.runtime import enable_compilation_cache, initialize_distributed
from lmprobe.engine.scorer import HiddenMemo, Scorer, Scores

__all__ = [
    "HiddenMemo",
    "Scorer",
    "Scores",
    "enable_compilation_cache",
    "initialize_distributed",
    "make_mesh",
    "placement",
]
