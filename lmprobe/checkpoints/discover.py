"""Every checkpoint of a training run, with its step, found without reading any weights.

``discover(spec)``: ``spec`` is a directory or a glob. Found are lmprobe Orbax steps (a
CheckpointManager directory's numbered ``<step>/`` with meta/), MaxText steps (``<step>/items/``,
lmprobe.checkpoints.maxtext: a config.json beside them or in the run directory), Levanter steps
(``step-<n>/`` with model/: lmprobe.checkpoints.levanter), Hugging Face directories (config.json beside
safetensors or pickled weights; the step from a ``step_123`` / ``checkpoint-123`` / ``global_step123``
/ ``123`` name, else the order index) and GGUF files (the same). A step is finished only when its
writer says so: orbax's own check for Orbax and MaxText steps (orbax_io.not_finished: not under
orbax's temporary name, and ``commit_success.txt`` where the writer puts one in its finished steps),
``metadata.json`` for Levanter's (written after every array). A step its writer has not finished is
found with why (``Found.unfinished``); steps under a temporary name (orbax's
``<step>.orbax-checkpoint-tmp-*``, the HF Trainer's ``tmp-checkpoint-*``) are not found at all. Each
found checkpoint has a ``fingerprint()`` of its files (lmprobe.checkpoints.fingerprint) for cache keys.
"""

from __future__ import annotations

import glob
import os
import re
from typing import NamedTuple

from lmprobe.checkpoints import fingerprint, levanter, orbax_io
from lmprobe.checkpoints.base import listing
from lmprobe.errors import CheckpointError

HF, ORBAX, MAXTEXT, LEVANTER, GGUF = "hf", "orbax", "maxtext", "levanter", "gguf"
_STEP = re.compile(r"(?:^|.*[^0-9a-z])(?:global_?step|checkpoint|ckpt|step|iter)[-_]?(\d+)(?:\.gguf)?|(\d+)(?:\.gguf)?",
                   re.I)
# steps still being written: orbax's '<step>.orbax-checkpoint-tmp-*', the HF Trainer's 'tmp-checkpoint-*'
_PARTIAL = re.compile(r"orbax-checkpoint-tmp|^tmp[-_]", re.I)
_ITEMS = "items"  # a MaxText step's Orbax PyTree (lmprobe.checkpoints.maxtext)
_LEVANTER_UNFINISHED = f"it has no {levanter.META} yet, which Levanter writes after every array"
_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
               "pytorch_model.bin.index.json")

__all__ = ["Found", "discover", "fingerprint_of"]


class Found(NamedTuple):
    """One checkpoint of a sweep."""

    step: int
    path: str  # what Scorer.load takes: a step directory, an HF directory or a .gguf file
    format: str  # HF, ORBAX, MAXTEXT, LEVANTER, GGUF or orbax_io.STANDARD
    unfinished: str = ""  # why its writer has not finished it yet ('' when it has): not read until then

    def fingerprint(self) -> str:
        """A digest of the checkpoint's files (size, mtime, both ends): changes whenever they do."""
        return fingerprint_of(self)


def fingerprint_of(found: Found) -> str:
    if found.format == ORBAX:
        return fingerprint.tree_digest(os.path.join(found.path, orbax_io.PARAMS))
    if found.format == MAXTEXT:
        return fingerprint.tree_digest(os.path.join(found.path, _ITEMS))
    if found.format == LEVANTER:
        return fingerprint.tree_digest(os.path.join(found.path, levanter.ROOT))
    files = fingerprint.weight_files(found.path)
    return fingerprint.tree_digest(found.path) if not files else "|".join(
        fingerprint.file_digest(f) for f in files)


def discover(spec) -> list[Found]:
    """The checkpoints ``spec`` (a directory or a glob) names, sorted by step; CheckpointError with
    what was looked for and what is there when there are none (or two share a step)."""
    spec = os.path.expanduser(os.fspath(spec))
    if glob.has_magic(spec):
        candidates = sorted(glob.glob(spec))
        where = f"no path matches '{spec}'" if not candidates else f"matches: {_names(candidates)}"
    elif os.path.isdir(spec):
        candidates = [spec, *(os.path.join(spec, n) for n in sorted(os.listdir(spec)))]
        where = listing(spec)
    elif os.path.isfile(spec):
        candidates, where = [spec], spec
    else:
        raise CheckpointError(f"checkpoint directory '{spec}' does not exist: give the directory a trainer "
                              "writes its checkpoints to, or a glob such as 'run/checkpoint-*'")
    found = _collect([os.path.abspath(c) for c in candidates])
    if not found:
        raise CheckpointError(
            f"'{spec}' holds no checkpoint ({where}): looked for lmprobe Orbax steps (numbered directories with "
            "params/ and meta/), MaxText steps (<step>/items/), Levanter steps (step-<n>/ with model/), Hugging "
            "Face directories (config.json + model.safetensors) named like step_123 or checkpoint-123, and .gguf "
            "files")
    return _number(found)


def _collect(candidates: list[str]) -> list[tuple[int | None, str, str, str]]:
    """(step or None, path, format, why it is unfinished) of every checkpoint among ``candidates`` and
    their children."""
    out, seen = [], set()
    for path in candidates:
        if path in seen:  # a step its directory's listing found
            continue
        for item in _at(path):
            if item[1] not in seen:
                seen.add(item[1])
                out.append(item)
    return out


def _at(path: str) -> list[tuple[int | None, str, str, str]]:
    if os.path.isfile(path):
        return [(_step_of(path), path, GGUF, "")] if path.lower().endswith(".gguf") else []
    if not os.path.isdir(path) or _PARTIAL.search(os.path.basename(path)):
        return []  # a step still being written
    orbax = orbax_io.step_dirs(path)
    if orbax:
        return [(s, os.path.join(path, str(s)), ORBAX, why) for s, why in orbax]
    if os.path.isdir(os.path.join(path, orbax_io.META)) and os.path.isdir(os.path.join(path, orbax_io.PARAMS)):
        return [(_step_of(path), path, ORBAX, orbax_io.not_finished(path))]  # one step given by itself (or a glob)
    if levanter.is_step(path):
        return [(_step_of(path), path, LEVANTER, "")]
    runs = sorted((int(n[5:]), os.path.join(path, n)) for n in os.listdir(path) if re.fullmatch(r"step-\d+", n)
                  and os.path.isdir(os.path.join(path, n, levanter.ROOT)))
    if runs:  # a Levanter run directory
        return [(s, p, LEVANTER, "" if levanter.is_step(p) else _LEVANTER_UNFINISHED) for s, p in runs]
    if _is_maxtext_step(path):
        return [(_step_of(path), path, MAXTEXT, orbax_io.not_finished(path))]
    numbered = sorted(int(n) for n in os.listdir(path) if n.isdigit() and _is_maxtext_step(os.path.join(path, n)))
    if numbered:  # a MaxText run's checkpoints/ directory
        commit_file = orbax_io.commit_files(path)
        return [(s, os.path.join(path, str(s)), MAXTEXT, orbax_io.not_finished(os.path.join(path, str(s)), commit_file))
                for s in numbered]
    if os.path.isfile(os.path.join(path, "config.json")) and any(
            os.path.isfile(os.path.join(path, w)) for w in _HF_WEIGHTS):
        return [(_step_of(path), path, HF, "")]
    return []


def _is_maxtext_step(path: str) -> bool:
    return os.path.isfile(os.path.join(path, _ITEMS, "_METADATA"))


def _step_of(path: str) -> int | None:
    match = _STEP.fullmatch(os.path.basename(path.rstrip(os.sep)))
    return int(match.group(1) or match.group(2)) if match else None


def _number(found: list[tuple[int | None, str, str, str]]) -> list[Found]:
    """Steps from names; without one in every name, the order index (names sorted naturally)."""
    if any(step is None for step, *_ in found):
        ordered = sorted(found, key=lambda f: _natural(f[1]))
        return [Found(i, *rest) for i, (_, *rest) in enumerate(ordered)]
    out = sorted((Found(*f) for f in found), key=lambda f: (f.step, f.path))
    for a, b in zip(out, out[1:], strict=False):
        if a.step == b.step:
            raise CheckpointError(f"two checkpoints have step {a.step}: '{a.path}' and '{b.path}': sweep one "
                                  "run at a time (narrow the glob to one run's checkpoints)")
    return out


def _natural(path: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def _names(paths: list[str], most: int = 8) -> str:
    shown = ", ".join(os.path.basename(p) for p in paths[:most])
    return shown + (f", ... ({len(paths)} in all)" if len(paths) > most else "")
