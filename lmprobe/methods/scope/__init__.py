"""SCoPE: shared invariances of two language models through perturbed examples (Rawal & Toneva, arXiv:2311.04166v1).

capabilities (transformation + constraints), search (goal function + batched greedy search),
models (classifier / zero-shot / next-token / black-box views of a model), training (fine-tuning,
linear probes), build (each named model as the task and classifier head ask), metrics (accuracy
gap, agreements, Hard-/Soft-SCoPE with bootstrap intervals), run (end to end), plots (the paper's
figures). Model variants (NAME@int8, @noise=...) are lmprobe.checkpoints.variants'.
"""

from lmprobe.methods.scope.run import NAMES, TASKS, Comparison, Config, Result, lm_examples, matrix, run

__all__ = ["NAMES", "TASKS", "Comparison", "Config", "Result", "lm_examples", "matrix", "run"]
