"""lmprobe: label-free evaluation of pretrained language models in JAX/Flax."""

from lmprobe import log as _log

_log.quiet_third_party()  # before anything imports transformers (see lmprobe.log)

__version__ = "0.1.0"
