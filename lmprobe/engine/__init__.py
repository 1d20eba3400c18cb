"""The engine: pure jitted steps (steps), a Runner that batches and dispatches them over the device
mesh (runner), and the Scorer's queries on top (scorer; encoder-decoders: seq2seq)."""

from lmprobe.engine.mesh import default_devices, make_mesh, placement, set_default_devices
from lmprobe.engine.runner import Runner
from lmprobe.engine.runtime import enable_compilation_cache, initialize_distributed
from lmprobe.engine.scorer import HiddenMemo, Scorer, Scores, model_identity
from lmprobe.engine.seq2seq import Seq2SeqScorer  # registers the Scorer of encoder-decoders

__all__ = [
    "HiddenMemo",
    "Runner",
    "Scorer",
    "Scores",
    "Seq2SeqScorer",
    "default_devices",
    "enable_compilation_cache",
    "initialize_distributed",
    "make_mesh",
    "model_identity",
    "placement",
    "set_default_devices",
]
