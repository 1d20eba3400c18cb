"""Every checkpoint of a training run scored through the stages (lmprobe.methods.stages), one row per
step: what ``lmprobe sweep`` runs, and the same from Python or beside a trainer.

    names = expand(["byod"])                                          # BYOD's metrics, each a stage
    job = Sweep("runs/train/ckpt", names, settings, load_inputs(names, settings), "runs/sweep",
                load=lambda found: Scorer.load(found.path))
    steps = run(job, listing(job.checkpoints, allow_empty=False))     # results.json after every step

The checkpoints (``listing``: lmprobe.checkpoints.discover, or a finder of your own such as
lmprobe.integrations.own_model's) are read by ``load(found) -> Scorer``. A step's row holds each
number's value, standard error and 95% interval and the seconds, and is cached under
RUN_DIR/steps keyed by the step's files' fingerprint and the settings (``scored``: a cached row
that is not what ``score`` writes, ROW_SCHEMA, is named, discarded and rescored), so a rerun
(``Steps`` starts empty; the cache resumes it) scores only new steps. A step not finished yet, or
one that fails to read or score with an LmprobeError, is a row marked ``failed`` with the reason
(``Steps.fail``, one line through ``tell``) and the sweep goes on; a step deleted while it is read
(checkpoint rotation) is skipped. Watching (``run(..., watch=True)``) polls every ``poll_s``
seconds: a step not finished yet is scored once it is; one that failed to read is tried at up to
TRIES polls, and again whenever its files change; it stops once a step at or past ``until_step``
is done and no step before it waits, or after ``watch_s`` seconds.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import time
from collections.abc import Callable

import jax
import numpy as np

from lmprobe import log as logging_lib
from lmprobe.checkpoints import discover as discover_lib
from lmprobe.checkpoints.base import reason, unreadable
from lmprobe.data import corpus as corpus_lib
from lmprobe.errors import LmprobeError
from lmprobe.methods import no_progress
from lmprobe.methods import stages as stages_lib
from lmprobe.methods.result import Number
from lmprobe.store import cache_key, cached_json, exists, join, read_json, write_results

CACHE_VERSION = 2  # in every row's key: raised when a row's layout changes, so that older rows are rescored
TRIES = 3  # watching: polls at which a step that fails to read is tried while its files stay the same
log = logging_lib.get(__name__)


def to_stderr(line: str) -> None:
    """The default ``tell``: ``line`` on stderr, from process 0 only."""
    if jax.process_index() == 0:
        print(line, file=sys.stderr)


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What a sweep scores and how: the checkpoints ``checkpoints`` (a directory or a glob, listed by
    ``find``), each read by ``load(found) -> Scorer`` and scored with ``stages`` at ``settings`` on
    ``inputs`` (lmprobe.methods.stages.load_inputs); rows cached under ``run_dir``/steps and
    ``run_dir``/results.json written by ``write(path, results)``; ``tell(line)``: a step's
    problem, ``progress``: a tqdm-like progress for the stages."""

    checkpoints: str
    stages: tuple[str, ...]  # stage names (lmprobe.methods.stages.expand: a group such as byod is its stages)
    settings: stages_lib.Settings
    inputs: stages_lib.Inputs
    run_dir: str
    load: Callable
    find: Callable = discover_lib.discover
    write: Callable = write_results
    tell: Callable[[str], None] = to_stderr
    progress: Callable = no_progress


def listing(spec: str, *, allow_empty: bool, find=discover_lib.discover) -> list[discover_lib.Found]:
    """The checkpoints of ``spec`` as process 0 sees them (``find``: discover, or a UserModel's), on
    every process (one list for the job); ``allow_empty``: a directory with no checkpoint yet (a
    trainer's, watched) is an empty list rather than an error."""
    if jax.process_index() == 0:
        try:
            text = json.dumps([list(f) for f in find(spec)])
        except LmprobeError as e:
            text = json.dumps({"error": str(e)})
    else:
        text = ""
    data = json.loads(_broadcast(text))
    if isinstance(data, dict):
        if allow_empty and os.path.isdir(os.path.expanduser(spec)):
            return []  # watching a directory the trainer has not written to yet
        raise LmprobeError(data["error"])
    return [discover_lib.Found(int(s), *rest) for s, *rest in data]


def _broadcast(text: str) -> str:
    if jax.process_count() == 1:
        return text
    from jax.experimental import multihost_utils

    data = np.frombuffer(text.encode(), dtype=np.uint8)
    size = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
    padded = np.zeros(size, np.uint8)
    padded[:min(size, data.size)] = data[:size]
    return bytes(np.asarray(multihost_utils.broadcast_one_to_all(padded))).decode()


def load_heldout(spec: str | None, texts: int) -> list[str] | None:
    """The first ``texts`` non-blank documents of ``spec`` (a .txt/.jsonl file or a corpus name:
    lmprobe.data.corpus), or None without ``spec``."""
    if not spec:
        return None
    found = [t for t in corpus_lib.load_corpus(spec).documents if t.strip()][:texts]
    if not found:
        raise LmprobeError(f"`heldout={spec}` holds no text: give a UTF-8 text file or a corpus name")
    return found


class Vanished(Exception):
    """The checkpoint was deleted while it was read."""


class Failed(Exception):
    """The checkpoint cannot be read or scored now: the message says why."""


@dataclasses.dataclass
class Failure:
    """A step not scored: its results.json row (step, checkpoint, format, ``failed``: why), the
    fingerprint of its files when it failed to read (None: not finished, never read) and the tries
    at that fingerprint."""

    row: dict
    files: str | None = None
    tries: int = 0


@dataclasses.dataclass
class Steps:
    """Where a sweep stands, by step: the rows scored, the steps not scored (``Failure``) and those
    that vanished."""

    rows: dict = dataclasses.field(default_factory=dict)
    failed: dict = dataclasses.field(default_factory=dict)
    skipped: set = dataclasses.field(default_factory=set)

    def fail(self, found, why: str, files: str | None, watch: bool, tell: Callable[[str], None] = to_stderr) -> bool:
        """Record ``found`` as not scored (``files``: its fingerprint when it failed to read, None when it is
        not finished); one line through ``tell`` when it is new, or goes from not finished to failing to
        read (``watch``: whether a later poll tries it). Whether its row changed."""
        old = self.failed.get(found.step)
        tries = (old.tries if old is not None and old.files == files else 0) + (files is not None)
        self.failed[found.step] = Failure({"step": found.step, "checkpoint": found.path, "format": found.format,
                                           "failed": why}, files, tries)
        if old is None or (old.files is None) != (files is None):
            if files is None:
                line = f"{why}; {'scored' if watch else 'a rerun scores it'} once it is finished"
            else:
                line = f"not scored: {why}; {'tried again at the next poll' if watch else 'a rerun tries it again'}"
            tell(f"step {found.step}: {line}")
        return old is None or old.row != self.failed[found.step].row

    def due(self, found) -> bool:
        """Whether to read ``found`` now: never failed to read, tried at fewer than TRIES polls, or its
        files changed since (process 0 decides)."""
        failure = self.failed.get(found.step)
        if failure is None or failure.files is None or failure.tries < TRIES:
            return True
        text = ""
        if jax.process_index() == 0:
            try:
                text = json.dumps(found.fingerprint() != failure.files)
            except OSError:
                text = "false"  # unreadable still (a step gone from the listing is dropped at the next poll)
        return json.loads(_broadcast(text))

    def settled(self, step: int) -> bool:
        """Whether ``step`` is scored, vanished, or failed to read at TRIES polls (nothing to wait for)."""
        failure = self.failed.get(step)
        return step in self.rows or step in self.skipped or (failure is not None and failure.tries >= TRIES)

    def record(self, step: int, row: dict | None) -> None:
        """``step``'s row (None: the step vanished)."""
        self.failed.pop(step, None)
        if row is None:
            self.skipped.add(step)
        else:
            self.rows[step] = row

    def listed(self, found) -> None:
        """Steps not scored that are gone from the listing ``found`` (rotated, or renamed) count as vanished."""
        steps = {f.step for f in found}
        for step in [s for s in self.failed if s not in steps]:
            self.record(step, None)

    def results(self, checkpoints: str, started: float) -> dict:
        """results.json of a sweep of ``checkpoints`` begun at ``started`` (time.perf_counter): every row
        by step, the failed ones marked, and the steps that vanished."""
        rows = {**{s: f.row for s, f in self.failed.items()}, **self.rows}
        return {"method": "sweep", "checkpoints": checkpoints, "rows": [rows[s] for s in sorted(rows)],
                "skipped_steps": sorted(self.skipped), "lower_is_better": sorted(stages_lib.LOWER_IS_BETTER),
                "wall_s": time.perf_counter() - started}

    def scored_rows(self) -> list[dict]:
        return [self.rows[s] for s in sorted(self.rows)]

    def failed_rows(self) -> list[dict]:
        return [self.failed[s].row for s in sorted(self.failed)]


def score(found, job: Sweep) -> dict:
    """One row: every stage of ``job`` on the checkpoint ``found``."""
    start = time.perf_counter()
    with unreadable(f"checkpoint '{found.path}'"):  # a reader's own error (a damaged file) in one line
        scorer = job.load(found)
    load_s = time.perf_counter() - start
    found_numbers, seconds = stages_lib.run(job.stages, scorer, job.settings, job.inputs, name=found.path,
                                            run_dir=job.run_dir, progress=job.progress)
    row = {"step": found.step, "checkpoint": found.path, "format": found.format,
           "numbers": {k: _interval(n) for k, n in found_numbers.items()},
           "seconds": {"load": load_s, **seconds}}
    row["seconds"]["total"] = time.perf_counter() - start
    return row


INTERVAL_SCHEMA = {"value": (float, None), "stderr": (float, None), "low": (float, None), "high": (float, None)}
ROW_SCHEMA = {"step": int, "checkpoint": str, "format": str, "numbers": {str: INTERVAL_SCHEMA},
              "seconds": {str: float}}  # a step's row as ``score`` writes it (lmprobe.store.json_problem)


def _interval(number: Number) -> dict:
    low, high = number.interval() or (None, None)
    return {"value": number.value, "stderr": number.stderr, "low": low, "high": high}


def same_step(row: dict, step: int) -> dict:
    """``row`` read back from RUN_DIR/steps (its layout checked: ROW_SCHEMA), when it is step ``step``'s;
    ValueError (the cache then names the file, discards it and the step is scored again) otherwise."""
    if row["step"] != step:
        raise ValueError(f"not a sweep row of step {step}")
    return row


def scored(found, job: Sweep) -> dict | None:
    """``found``'s row, from RUN_DIR/steps when an earlier run scored the same files with the
    same settings; None (one line through ``job.tell``) when the checkpoint vanished while it was
    read; ``Failed`` when it cannot be read or scored."""
    try:
        files = found.fingerprint()
    except OSError as e:
        if _gone(found.path):
            return _vanished(found, e, job.tell)
        raise Failed(f"its files cannot be read ({reason(e)})") from e
    key = cache_key(step=found.step, files=files, stages=list(job.stages), settings=job.settings.flat(),
                    heldout=job.inputs.heldout and cache_key(texts=job.inputs.heldout), version=CACHE_VERSION)
    try:
        row = cached_json(join(job.run_dir, "steps", f"step-{found.step}-{key}.json"),
                          lambda: _guarded(found, job), expect=ROW_SCHEMA, decode=lambda r: same_step(r, found.step))
    except (Vanished, OSError) as e:
        if not _gone(found.path):
            raise
        return _vanished(found, e, job.tell)
    return {**row, "checkpoint": found.path, "metrics": metrics(row)}  # where it is now (a moved run keeps its rows)


def _vanished(found, error: Exception, tell: Callable[[str], None]) -> None:
    tell(f"step {found.step}: checkpoint '{found.path}' was deleted while it was read "
         f"({type(error).__name__}): skipped")


def metrics(row: dict) -> dict:
    """A row's numbers flat, as the in-loop callback's rows (proxies.jsonl) hold them, so that one
    plot joins a run's in-loop history and its sweep: {name: value, name_stderr: standard error}."""
    return stages_lib.flat({k: Number(v["value"], v["stderr"]) for k, v in row["numbers"].items()})


def _guarded(found, job: Sweep) -> dict:
    try:
        return score(found, job)
    except Exception as e:
        if _gone(found.path):
            raise Vanished(str(e)) from e
        if isinstance(e, LmprobeError):  # this checkpoint's own problem: the sweep goes on
            raise Failed(str(e)) from e
        raise


def _gone(path: str, wait_s: float = 1.0) -> bool:
    """Whether ``path`` is deleted (waiting ``wait_s`` for a deletion under way to finish)."""
    if os.path.exists(path):
        time.sleep(wait_s)
    return not os.path.exists(path)


def earlier_rows(path: str) -> list[dict] | None:
    """The scored rows of an earlier run's results.json at ``path``, or None (none there, or not a
    sweep's)."""
    try:
        rows = read_json(path)["rows"] if exists(path) else None
    except (ValueError, KeyError, TypeError):  # not a sweep's results
        return None
    return [r for r in rows if isinstance(r, dict) and "failed" not in r] if isinstance(rows, list) else None


def run(job: Sweep, found: list, steps: Steps | None = None, *, watch: bool = False, until_step: int | None = None,
        poll_s: float = 30.0, watch_s: float | None = None, started: float | None = None) -> Steps:
    """``steps`` (default: a new Steps) with every step of ``found`` (``listing``) not scored yet,
    results.json rewritten after each; steps past ``until_step`` are not scored. With ``watch``, the
    checkpoints are listed again every ``poll_s`` seconds until a step at or past ``until_step`` is
    done and none before it waits, or ``watch_s`` seconds from ``started`` (time.perf_counter;
    default: now). ``steps`` holds every step done when an exception (Ctrl-C) ends it."""
    steps = Steps() if steps is None else steps
    started = time.perf_counter() if started is None else started
    while True:
        for f in found:
            if f.step in steps.rows or f.step in steps.skipped or (until_step is not None and f.step > until_step):
                continue
            if f.unfinished:
                if not steps.fail(f, f"not finished: {f.unfinished}", None, watch, job.tell):
                    continue  # as it was: results.json holds it
            elif not steps.due(f):
                continue
            else:
                try:
                    row = scored(f, job)
                    steps.record(f.step, row)
                    if row is not None:
                        log.info(f"step {f.step}: done in {row['seconds']['total']:.1f} s")
                except Failed as e:
                    steps.fail(f, str(e), _fingerprint(f), watch, job.tell)
                gc.collect()  # the checkpoint's weights go before the next one loads
            job.write(join(job.run_dir, "results.json"), steps.results(job.checkpoints, started))
        if _stop_watching(found, steps, watch, until_step, watch_s, started):
            return steps
        left = None if watch_s is None else watch_s - (time.perf_counter() - started)
        time.sleep(poll_s if left is None else max(0.0, min(poll_s, left)))
        found = listing(job.checkpoints, allow_empty=True, find=job.find)
        steps.listed(found)


def _fingerprint(found) -> str:
    """``found``'s fingerprint, or '' when its files cannot be read now (the next poll's differs)."""
    try:
        return found.fingerprint()
    except OSError:
        return ""


def _stop_watching(found, steps: Steps, watch: bool, until_step: int | None, watch_s: float | None,
                   started: float) -> bool:
    if not watch or (watch_s is not None and time.perf_counter() - started >= watch_s):
        return True
    if until_step is None:
        return False
    waiting = [f.step for f in found if f.step <= until_step and not steps.settled(f.step)]
    return max((f.step for f in found), default=-1) >= until_step and not waiting
