"""Train a small decoder from scratch on offline text, writing checkpoints on a log-spaced schedule.

    from lmprobe.training import preset, train
    result = train(preset("tiny", steps=64), "runs/tiny")   # checkpoints/<step>/ with their held-out losses
    result.curve  # [{"step", "train_loss", "heldout_loss", "tokens", "seconds", "learning_rate"}, ...]

The front end is experiments/train.py; lmprobe.training.loop documents the run directory.
"""

from lmprobe.training.config import PRESETS, Config, checkpoint_steps, hf_config, preset
from lmprobe.training.loop import Result, train

__all__ = ["PRESETS", "Config", "Result", "checkpoint_steps", "hf_config", "preset", "train"]
