"""The exceptions lmprobe raises for bad input.

Each message names the offending input and says how to fix it; front ends print the message
alone (no traceback) and exit with status 2.
"""


class LmprobeError(Exception):
    """Bad input from the user: the message names the input and the fix."""


class CheckpointError(LmprobeError):
    """A model argument that cannot be resolved or a checkpoint that cannot be read."""


class NonFinite(LmprobeError):
    """A model's output (embeddings, logits, scores) with NaN or infinite values: the run stops
    with this one error, naming the model and the stage; nothing of it is cached or scored."""
