"""Find, read and load checkpoints: HF directories, the hub cache, GGUF files, embedded defaults."""

from lmprobe.checkpoints.fingerprint import identity
from lmprobe.checkpoints.load import Loaded, build, load

__all__ = ["Loaded", "build", "identity", "load"]
