"""Measuring models for validate: which models (``entries``: names, variants on a ladder of known
order, a training run's checkpoints) and each one's record (``measure``: every stage of
lmprobe.methods.stages that applies, its numbers split into values, standard errors, degrees of
freedom and per-item values). lmprobe.report.validation compares the records.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from lmprobe.checkpoints import discover as discover_lib
from lmprobe.checkpoints import orbax_io, variants
from lmprobe.errors import LmprobeError
from lmprobe.evaluate import FALLS, RISES
from lmprobe.methods import no_progress
from lmprobe.methods import stages as stages_lib

TRAINER_HELDOUT_LOSS = stages_lib.TRAINER_HELDOUT_LOSS


@dataclasses.dataclass(frozen=True)
class Entry:
    """One model to measure: what loads (``model``), how it is shown, and where it sits."""

    model: str  # a name or variant for Scorer.load, or a checkpoint path
    label: str  # shown in tables: the name, or RUN@step=N
    base: str  # the base model (one point per base in cross-model correlations), or the run
    ladder: tuple | None = None  # (ladder name, level, direction) or None (a base model, @int8, @bf16)
    trainer_heldout_loss: float | None = None  # a run's own held-out loss at this step (Orbax metadata)


def model_entry(name: str) -> Entry:
    """A model's entry: its base (lmprobe.checkpoints.variants.split_name) and, for a noise or
    drop-layer variant, its place on the ladder that starts at the model without that variant."""
    base, _ = variants.split_name(name)
    position = variants.ladder_position(name)
    if position is None:
        return Entry(name, name, base)
    start, kind, level = position
    return Entry(name, name, base, (f"{start} @{kind}", level, FALLS))


def run_name(spec: str) -> str:
    """A training run's short name: its checkpoint directory's (a glob's directory), or the parent's
    when that is a generic name such as 'checkpoints'."""
    path = os.path.normpath(os.path.expanduser(spec))
    if any(c in spec for c in "*?["):
        path = os.path.dirname(path)
    name = os.path.basename(path)
    if name in ("checkpoints", "checkpoint", "ckpt"):
        name = os.path.basename(os.path.dirname(path)) or name
    return name


def checkpoint_entries(spec: str) -> list[Entry]:
    """The checkpoints of one training run (lmprobe.checkpoints.discover), a ladder by step: quality
    rises with training; each lmprobe Orbax step's own held-out loss is kept."""
    run = run_name(spec)
    out = []
    for found in discover_lib.discover(spec):
        loss = None
        if found.format == discover_lib.ORBAX:
            step = orbax_io.find(found.path)
            loss = ((step.meta.get("metadata") or {}) if step else {}).get("heldout_loss")  # the trainer's
        out.append(Entry(found.path, f"{run}@step={found.step}", run, (f"{run} training steps", found.step, RISES),
                         loss))
    return out


def entries(models, checkpoints: str | None = None) -> list[Entry]:
    """Every model to measure: ``models`` (names checked) and the checkpoints of a training run."""
    out = [model_entry(name) for name in models]  # bad variant names fail before any work
    if checkpoints:
        out += checkpoint_entries(checkpoints)
    return out


def check_synbench_widths(widths: dict, group: str, settings: stages_lib.Settings) -> None:
    """A fixed ``synbench_n`` must give every model of a group the same n / width (SynBench's
    finite-sample bias depends on it): one error naming the models and widths otherwise."""
    if settings.synbench_n is None or len(set(widths.values())) < 2:
        return
    n = settings.synbench_n
    shown = ", ".join(f"{m} (width {w}, n / width {n / w:.1f})" for m, w in widths.items())
    raise LmprobeError(f"`synbench_n={n}` gives the {group} different n / width: {shown}. SynBench's plug-in score "
                       "falls as width / n grows, so it would rank widths, not models: leave `synbench_n` unset "
                       f"(n = `synbench_n_per_width={settings.synbench_n_per_width}` x each width)")


def measure(entry: Entry, scorer, stages, settings: stages_lib.Settings, inputs: stages_lib.Inputs, run_dir: str,
            widths: dict, *, load_s: float = 0.0, progress: Callable = no_progress) -> dict:
    """One model's record: every stage of ``stages`` that applies to it (lmprobe.methods.stages.run,
    cached under ``run_dir``), its numbers split into values, standard errors, degrees of freedom and
    per-item values; ``widths``: group -> {label: width} so far (a fixed synbench_n is checked)."""
    group = "decoders" if scorer.is_decoder else "encoders"
    width = int(scorer.config.hidden_size)
    widths.setdefault(group, {})[entry.label] = width
    if "synbench" in stages:
        check_synbench_widths(widths[group], group, settings)
    record = {"model": entry.model, "label": entry.label, "base": entry.base,
              "ladder": list(entry.ladder) if entry.ladder else None, "group": group, "width": width,
              "synbench_n": stages_lib.synbench_n(settings, width) if "synbench" in stages else None,
              "numbers": {}, "stderr": {}, "df": {}, "items": {}, "seconds": {}, "load_s": load_s}
    if entry.trainer_heldout_loss is not None:
        record["numbers"][TRAINER_HELDOUT_LOSS] = float(entry.trainer_heldout_loss)
    found, record["seconds"] = stages_lib.run(stages, scorer, settings, inputs, name=entry.model, run_dir=run_dir,
                                              progress=progress)
    for name, number in found.items():
        record["numbers"][name] = number.value
        for field in ("stderr", "df", "items"):
            if getattr(number, field) is not None:
                record[field][name] = getattr(number, field)
    return record
