"""The resumable train state: parameters, AdamW moments and the elapsed seconds, in an orbax
CheckpointManager directory that keeps the latest step only (``RUN_DIR/train_state/<step>/``: a
StandardSave item ``state`` {"params", "opt_state"} and a JSON item ``meta`` {"step", "seconds"}).

Kept apart from the checkpoints of the checkpoint schedule (``RUN_DIR/checkpoints/<step>/``,
lmprobe.checkpoints.orbax_io), which hold the model alone for evaluation and keep every scheduled step.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import sys

import orbax.checkpoint as ocp

from lmprobe.errors import LmprobeError


class TrainState:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=1, enable_async_checkpointing=False))

    def latest(self) -> int:
        """The step of the saved state; 0 when there is none."""
        return self.manager.latest_step() or 0

    def restore(self, step: int, params, opt_state):
        """(params, opt_state, seconds) saved at ``step``, in the structure of the given ones; one
        LmprobeError naming the state and the fix when it cannot be read."""
        try:
            with _held_output():
                    restored = self.manager.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore({"params": params, "opt_state": opt_state}),
                    meta=ocp.args.JsonRestore()))
            return restored.state["params"], restored.state["opt_state"], float(restored.meta["seconds"])
        except Exception as e:  # noqa: BLE001 - orbax raises whatever its readers do (tensorstore, json, OS)
            raise LmprobeError(
                f"the train state of step {step} in {self.directory} cannot be read ({_first_line(e)}): it is damaged "
                f"(a truncated or partly copied file); delete {self.directory} and rerun: training starts again "
                "from step 0, keeping the checkpoints saved so far") from None

    def save(self, step: int, params, opt_state, seconds: float) -> None:
        """The state after ``step`` optimizer steps (the previous one is then deleted); one LmprobeError
        naming the state, the disk's free space and the fix when it cannot be written."""
        try:
            with _held_output():
                self.manager.save(step, args=ocp.args.Composite(
                    state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
                    meta=ocp.args.JsonSave({"step": step, "seconds": seconds})), force=True)
                self.manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - orbax raises whatever its writers do (tensorstore, OS)
            kept = self.latest()
            why = "the disk is full" if "No space left on device" in str(e) else _first_line(e)
            raise LmprobeError(
                f"the train state of step {step} could not be saved in {self.directory} ({why}; "
                f"{_free(self.directory)} free there): free disk space and rerun: the run resumes from "
                + (f"the state of step {kept}" if kept else "step 0")) from None

    def close(self) -> None:
        self.manager.close()


@contextlib.contextmanager
def _held_output():
    """What orbax prints on stderr and logs (absl) in the block, shown only when the block succeeds: a failed
    save or restore logs a traceback per writer thread, which the one-line error replaces."""
    records, absl = [], logging.getLogger("absl")
    held = logging.Handler()
    held.emit = records.append
    propagate, absl.propagate = absl.propagate, False
    absl.addHandler(held)
    try:
        with contextlib.redirect_stderr(io.StringIO()) as text:
            yield
    finally:
        absl.removeHandler(held)
        absl.propagate = propagate
    sys.stderr.write(text.getvalue())
    for record in records:
        absl.handle(record)


def _first_line(e: Exception, limit: int = 200) -> str:
    """``e`` as one line: its type and the start of its message's first line."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:limit]}{'...' if len(first) > limit else ''}"


def _free(directory: str) -> str:
    """The free space of the disk holding ``directory``, in MB ('unknown' when it cannot be read)."""
    try:
        return f"{shutil.disk_usage(directory).free / 1e6:,.1f} MB"
    except OSError:
        return "unknown"
