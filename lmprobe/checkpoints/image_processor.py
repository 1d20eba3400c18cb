"""A checkpoint's image preprocessing (preprocessor_config.json): the normalisation its pixels expect."""

from __future__ import annotations

import os

import numpy as np

from lmprobe.checkpoints.base import read_json
from lmprobe.errors import CheckpointError

PREPROCESSOR_CONFIG = "preprocessor_config.json"
# transformers' ViTImageProcessor defaults (IMAGENET_STANDARD_MEAN / _STD)
DEFAULT_MEAN, DEFAULT_STD = 0.5, 0.5


def image_normalization(location: str, num_channels: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(mean [C], std [C]) of a checkpoint's image processor: pixels enter as (x - mean) / std.

    Read from ``preprocessor_config.json`` (image_mean, image_std; identity when do_normalize is
    false) in the checkpoint directory; transformers' ViTImageProcessor defaults (0.5, 0.5) when
    absent.
    """
    path = os.path.join(location, PREPROCESSOR_CONFIG)
    conf = read_json(path, "image preprocessor config") if os.path.isfile(path) else {}
    if not isinstance(conf, dict):
        raise CheckpointError(f"image preprocessor config '{path}' is not a JSON object: re-download it")
    if not conf.get("do_normalize", True):
        return np.zeros(num_channels, np.float32), np.ones(num_channels, np.float32)

    def per_channel(key, default):
        value = np.asarray(conf.get(key, default), np.float32).reshape(-1)
        if value.size == 1:
            value = np.repeat(value, num_channels)
        if value.size != num_channels or (key == "image_std" and np.any(value <= 0)):
            raise CheckpointError(f"{key} {conf[key]} in '{path}' is not {num_channels} per-channel values"
                                  f"{' > 0' if key == 'image_std' else ''}: fix or re-download the file")
        return value

    return per_channel("image_mean", DEFAULT_MEAN), per_channel("image_std", DEFAULT_STD)
