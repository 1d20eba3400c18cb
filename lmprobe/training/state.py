"""The resumable train state: parameters, AdamW moments and the elapsed seconds, in an orbax
CheckpointManager directory that keeps the latest step only (``RUN_DIR/train_state/<step>/``: a
StandardSave item ``state`` {"params", "opt_state"} and a JSON item ``meta`` {"step", "seconds"}).

Kept apart from the checkpoints of the checkpoint schedule (``RUN_DIR/checkpoints/<step>/``,
lmprobe.checkpoints.orbax_io), which hold the model alone for evaluation and keep every scheduled step.
"""

from __future__ import annotations

import os

import orbax.checkpoint as ocp


class TrainState:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=1, enable_async_checkpointing=False))

    def latest(self) -> int:
        """The step of the saved state; 0 when there is none."""
        return self.manager.latest_step() or 0

    def restore(self, step: int, params, opt_state):
        """(params, opt_state, seconds) saved at ``step``, in the structure of the given ones."""
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore({"params": params, "opt_state": opt_state}), meta=ocp.args.JsonRestore()))
        return restored.state["params"], restored.state["opt_state"], float(restored.meta["seconds"])

    def save(self, step: int, params, opt_state, seconds: float) -> None:
        """The state after ``step`` optimizer steps (the previous one is then deleted)."""
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
            meta=ocp.args.JsonSave({"step": step, "seconds": seconds})), force=True)
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()
