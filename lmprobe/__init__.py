"""lmprobe: label-free evaluation of pretrained language models in JAX/Flax."""

__version__ = "0.1.0"
