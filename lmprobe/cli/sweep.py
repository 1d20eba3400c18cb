"""Score every checkpoint of a training run with the cheap label-free proxies: one row per step.

    lmprobe sweep --checkpoints=runs/train/ckpt --methods=syntextbench,synbench,byod --heldout=notes.txt
    lmprobe sweep --checkpoints='out/checkpoint-*' --output_dir=runs/sweep
    lmprobe sweep --checkpoints=runs/train/ckpt --watch --until_step=10000   # as a trainer writes them

--checkpoints is a directory or a glob: lmprobe Orbax steps (orbax_io.save), MaxText steps,
Hugging Face directories (step from a step_123 / checkpoint-123 name, else their order) and .gguf
files (lmprobe.checkpoints.discover). With --model_fn=MODULE:FUNCTION and --tokenizer, a model of
your own: checkpoints of orbax's standard API, FUNCTION(params) -> a CallableLM or nnx.Module
(lmprobe.integrations.own_model; --params_key where the parameters sit), one Scorer whose weights
each step swaps in. Each checkpoint gets --methods (stages of lmprobe.methods.stages: proxies,
``byod`` for its four metrics, real tasks; BYOD, zero-shot and held-out loss on decoders only) and,
with --heldout (a text file or a corpus name: lmprobe.data.corpus), the held-out loss (nats per
token) and bits per byte (decoders). Writes OUTPUT_DIR/results.json (rows sorted by step: each
number's value, standard error and 95% interval where the method gives one, under the names the
in-loop callback's rows use, and seconds) after every step, and OUTPUT_DIR/step-<number>.png per
number against step.
A checkpoint's row is cached under OUTPUT_DIR/steps, keyed by its files' fingerprint and the
settings (a cached row that is not what this program writes is named, discarded and rescored): a
rerun loads and scores only new steps. A step is read only once its writer has finished it
(lmprobe.checkpoints.discover: orbax's own check and commit_success.txt, Levanter's metadata.json);
a step not finished yet, or one that fails to read or score (a truncated array file, missing arrays,
damaged metadata), gets one line on stderr and a row marked ``failed`` with the reason in
results.json, and the sweep goes on; the run then ends with one error line naming them (exit 2),
and a rerun tries them again. --watch polls every --poll_s seconds: a step not finished yet is
scored once it is; one that failed to read is tried at up to 3 polls, and again whenever its files
change. It stops once a step at or past --until_step is done and no step before it is waiting,
after --watch_s seconds, or at Ctrl-C (results.json then holds every step done). A step deleted
while it is read (checkpoint rotation) is skipped with one line on stderr.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import time

import jax
import numpy as np

from lmprobe.checkpoints import discover as discover_lib
from lmprobe.checkpoints import orbax_io
from lmprobe.checkpoints.base import reason, unreadable
from lmprobe.cli import common, flags
from lmprobe.cli.common import log, main_guard, output_dir, progress, say
from lmprobe.data import corpus as corpus_lib
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.integrations.own_model import OwnModel
from lmprobe.methods import stages as stages_lib
from lmprobe.methods.result import Number
from lmprobe.report import plots
from lmprobe.store import cache_key, cached_json, exists, join, read_json
from lmprobe.text import number, plural

CACHE_VERSION = 2  # in every row's key: raised when a row's layout changes, so that older rows are rescored
TRIES = 3  # --watch: polls at which a step that fails to read is tried while its files stay the same


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    checkpoints: str = ""  # a checkpoint directory (a trainer's output) or a glob ('out/checkpoint-*')
    methods: tuple[str, ...] = stages_lib.PROXIES  # stages: syntextbench, synbench, byod (decoders), probes, ...
    heldout: str | None = None  # held-out text: a .txt/.jsonl file or a corpus name; none: no held-out loss
    output_dir: str = "runs/sweep"  # results.json, step-*.png, per-step and per-stage caches
    watch: bool = False  # keep polling for new checkpoints (until --until_step or Ctrl-C)
    until_step: int | None = None  # stop once a step at or past this is done; steps past it are not scored
    poll_s: float = 30.0  # seconds between looks for new checkpoints (--watch)
    watch_s: float | None = None  # stop watching after this many seconds (none: at --until_step, or Ctrl-C)
    # MODULE:FUNCTION, FUNCTION(params) -> CallableLM or nnx.Module: your own model; runs that code (imports
    # MODULE from the current directory or PYTHONPATH, calls FUNCTION): name only code you trust
    model_fn: str | None = None
    tokenizer: str | None = None  # with --model_fn: the tokenizer, a model name or a directory
    params_key: str | None = None  # with --model_fn: the parameters' path in the saved tree (default: params, or all)


def build_parser():
    p = common.parser(__doc__, "sweep")
    common.front_end(p, FrontEnd, convert={"until_step": flags.bounded(0), "poll_s": flags.bounded(0, base=float),
                                             "watch_s": flags.bounded(0, base=float)})
    common.stage_settings(p, defaults={"heldout_texts": 200},
                          help={"heldout_texts": "held-out documents scored (the first ones of --heldout)"})
    return p


def listing(spec: str, *, allow_empty: bool, find=discover_lib.discover) -> list[discover_lib.Found]:
    """The checkpoints of ``spec`` as process 0 sees them (``find``: discover, or a UserModel's), on
    every process (one list for the job)."""
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
            return []  # --watch on a directory the trainer has not written to yet
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

    def fail(self, found, why: str, files: str | None, watch: bool) -> bool:
        """Record ``found`` as not scored (``files``: its fingerprint when it failed to read, None when it is
        not finished); one line on stderr when it is new, or goes from not finished to failing to read.
        Whether its row changed."""
        old = self.failed.get(found.step)
        tries = (old.tries if old is not None and old.files == files else 0) + (files is not None)
        self.failed[found.step] = Failure({"step": found.step, "checkpoint": found.path, "format": found.format,
                                           "failed": why}, files, tries)
        if (old is None or (old.files is None) != (files is None)) and jax.process_index() == 0:
            if files is None:
                line = f"{why}; {'scored' if watch else 'a rerun scores it'} once it is finished"
            else:
                line = f"not scored: {why}; {'tried again at the next poll' if watch else 'a rerun tries it again'}"
            print(f"step {found.step}: {line}", file=sys.stderr)
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

    def results(self, args, started: float) -> dict:
        rows = {**{s: f.row for s, f in self.failed.items()}, **self.rows}
        return {"method": "sweep", "checkpoints": args.checkpoints, "rows": [rows[s] for s in sorted(rows)],
                "skipped_steps": sorted(self.skipped), "lower_is_better": sorted(stages_lib.LOWER_IS_BETTER),
                "wall_s": time.perf_counter() - started}

    def scored_rows(self) -> list[dict]:
        return [self.rows[s] for s in sorted(self.rows)]


def score(found, args, stages, inputs, run_dir: str, run: common.Run) -> dict:
    """One row: every stage on the checkpoint ``found``."""
    start = time.perf_counter()
    with unreadable(f"checkpoint '{found.path}'"):  # a reader's own error (a damaged file) in one line
        scorer = run.user.scorer(found) if found.format == orbax_io.STANDARD else common.load_scorer(args, found.path)
    scorer = run.loaded(found.path, scorer)
    load_s = time.perf_counter() - start
    found_numbers, seconds = stages_lib.run(stages, scorer, stages_lib.Settings.of(args), inputs, name=found.path,
                                            run_dir=run_dir, progress=progress)
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
    """``row`` read back from OUTPUT_DIR/steps (its layout checked: ROW_SCHEMA), when it is step ``step``'s;
    ValueError (the cache then names the file, discards it and the step is scored again) otherwise."""
    if row["step"] != step:
        raise ValueError(f"not a sweep row of step {step}")
    return row


def scored(found, args, stages, inputs, run_dir: str, run: common.Run) -> dict | None:
    """``found``'s row, from OUTPUT_DIR/steps when an earlier run scored the same files with the
    same settings; None (one line on stderr) when the checkpoint vanished while it was read;
    ``Failed`` when it cannot be read or scored."""
    try:
        files = found.fingerprint()
    except OSError as e:
        if _gone(found.path):
            return _vanished(found, e)
        raise Failed(f"its files cannot be read ({reason(e)})") from e
    key = cache_key(step=found.step, files=files, stages=list(stages),
                    settings=stages_lib.Settings.of(args).flat(),
                    heldout=inputs.heldout and cache_key(texts=inputs.heldout), version=CACHE_VERSION)
    try:
        row = cached_json(join(run_dir, "steps", f"step-{found.step}-{key}.json"),
                          lambda: _guarded(found, args, stages, inputs, run_dir, run), expect=ROW_SCHEMA,
                          decode=lambda r: same_step(r, found.step))
    except (Vanished, OSError) as e:
        if not _gone(found.path):
            raise
        return _vanished(found, e)
    return {**row, "checkpoint": found.path, "metrics": metrics(row)}  # where it is now (a moved run keeps its rows)


def _vanished(found, error: Exception) -> None:
    if jax.process_index() == 0:
        print(f"step {found.step}: checkpoint '{found.path}' was deleted while it was read "
              f"({type(error).__name__}): skipped", file=sys.stderr)


def metrics(row: dict) -> dict:
    """A row's numbers flat, as the in-loop callback's rows (proxies.jsonl) hold them, so that one
    plot joins a run's in-loop history and its sweep: {name: value, name_stderr: standard error}."""
    out = {k: v["value"] for k, v in row["numbers"].items()}
    out.update({f"{k}{stages_lib.STDERR}": v["stderr"] for k, v in row["numbers"].items() if v["stderr"] is not None})
    return out


def _guarded(found, args, stages, inputs, run_dir, run) -> dict:
    try:
        return score(found, args, stages, inputs, run_dir, run)
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


def load_heldout(args) -> list[str] | None:
    """The first --heldout_texts documents of --heldout, or None."""
    if not args.heldout:
        return None
    texts = [t for t in corpus_lib.load_corpus(args.heldout).documents if t.strip()][:args.heldout_texts]
    if not texts:
        raise LmprobeError(f"--heldout={args.heldout} holds no text: give a UTF-8 text file or a corpus name")
    return texts


def plot(rows: list[dict], run_dir: str, drawn: list[dict] | None = None) -> None:
    """step-<number>.png: each number (with its interval) against step; none redrawn when ``rows`` are the rows
    ``drawn`` (an earlier run's results.json: a rerun that scored nothing new) and every plot is there."""
    series = {}
    for r in rows:
        for name, v in r["numbers"].items():
            series.setdefault(name, []).append((r["step"], v["value"], v["low"], v["high"]))
    if rows == drawn and all(exists(join(run_dir, f"step-{name}.png")) for name in series):
        return
    for name, points in series.items():
        steps, values, low, high = (list(c) for c in zip(*points, strict=True))
        plots.draw(plots.against_step, steps, values, join(run_dir, f"step-{name}.png"), name=name, low=low,
                   high=high, lower_is_better=name in stages_lib.LOWER_IS_BETTER)


def _earlier_rows(path: str) -> list[dict] | None:
    """The scored rows of an earlier run's results.json at ``path``, or None."""
    try:
        rows = read_json(path)["rows"] if exists(path) else None
    except (ValueError, KeyError, TypeError):  # not a sweep's results: the plots are drawn afresh
        return None
    return [r for r in rows if isinstance(r, dict) and "failed" not in r] if isinstance(rows, list) else None


def summary(rows: list[dict], failed: list[dict] = ()) -> str:
    names = list(dict.fromkeys(k for r in rows for k in r["numbers"]))
    lines = ["step".rjust(10) + " " + " ".join(n[:16].rjust(16) for n in names) + "  seconds"]
    for r in rows:
        got = {k: v["value"] for k, v in r["numbers"].items()}
        lines.append(f"{r['step']:>10} " + " ".join(number(got.get(n), ".4f").rjust(16) for n in names)
                     + f"  {r['seconds']['total']:7.1f}")
    lines += [f"{r['step']:>10}  not scored: {r['failed']}" for r in failed]
    return "\n".join(lines)


def _loop(found, steps: Steps, args, stages, inputs, run_dir: str, run: common.Run, started: float):
    """Score every step not scored yet and rewrite results.json after each; with --watch, look again
    every --poll_s seconds until a step at or past --until_step is done and none before it waits."""
    while True:
        for f in found:
            if f.step in steps.rows or f.step in steps.skipped or (args.until_step is not None
                                                                    and f.step > args.until_step):
                continue
            if f.unfinished:
                if not steps.fail(f, f"not finished: {f.unfinished}", None, args.watch):
                    continue  # as it was: results.json holds it
            elif not steps.due(f):
                continue
            else:
                try:
                    row = scored(f, args, stages, inputs, run_dir, run)
                    steps.record(f.step, row)
                    if row is not None:
                        log.info(f"step {f.step}: done in {row['seconds']['total']:.1f} s")
                except Failed as e:
                    steps.fail(f, str(e), _fingerprint(f), args.watch)
                gc.collect()  # the checkpoint's weights go before the next one loads
            run.write(join(run_dir, "results.json"), steps.results(args, started))
        if _stop_watching(found, steps, args, started):
            break
        left = None if args.watch_s is None else args.watch_s - (time.perf_counter() - started)
        time.sleep(args.poll_s if left is None else max(0.0, min(args.poll_s, left)))
        found = listing(args.checkpoints, allow_empty=True, find=run.user.discover if run.user else
                        discover_lib.discover)
        steps.listed(found)


def _fingerprint(found) -> str:
    """``found``'s fingerprint, or '' when its files cannot be read now (the next poll's differs)."""
    try:
        return found.fingerprint()
    except OSError:
        return ""


def _stop_watching(found, steps: Steps, args, started: float) -> bool:
    if not args.watch or (args.watch_s is not None and time.perf_counter() - started >= args.watch_s):
        return True
    if args.until_step is None:
        return False
    waiting = [f.step for f in found if f.step <= args.until_step and not steps.settled(f.step)]
    return max((f.step for f in found), default=-1) >= args.until_step and not waiting


def check_own_model(user: OwnModel, found, stages) -> None:
    """``user.check`` (its model builds and can run ``stages``) on the first step that reads; a damaged
    step is named when the sweep comes to it."""
    for f in found:
        if not f.unfinished:
            try:
                user.check(f, stages)
                return
            except CheckpointError:
                continue


def own_model(args) -> OwnModel:
    """--model_fn's OwnModel (imported, its tokenizer loaded), before any checkpoint is read."""
    if not args.tokenizer:
        raise LmprobeError(f"--model_fn={args.model_fn} needs --tokenizer=NAME|DIR: the tokenizer the model was "
                           "trained with (a model name, e.g. smollm2-135m, or a directory)")
    return OwnModel(args.model_fn, args.tokenizer, params_key=args.params_key, model_parallel=args.model_parallel,
                    batch_size=args.batch_size)


@main_guard
def main(argv=None):
    run = common.Run(argv)
    args = run.parse(build_parser())
    stages = tuple(dict.fromkeys(stages_lib.expand(args.methods, "methods") + (("heldout",) if args.heldout else ())))
    if not args.checkpoints:
        raise LmprobeError("give the checkpoints to sweep: --checkpoints=DIR (a trainer's output) or a glob")
    if args.watch_s is not None and not args.watch:
        raise LmprobeError("--watch_s goes with --watch: how long to keep looking for new checkpoints")
    started = time.perf_counter()
    run.user = own_model(args) if args.model_fn else None  # importable, with its tokenizer
    if not args.model_fn and (args.tokenizer or args.params_key):
        raise LmprobeError("--tokenizer and --params_key go with --model_fn=MODULE:FUNCTION (your own model)")
    found = listing(args.checkpoints, allow_empty=args.watch,  # a bad directory fails before any data loads
                    find=run.user.discover if run.user else discover_lib.discover)
    if run.user:  # the model builds on the first step that reads and can run --methods, before any write
        check_own_model(run.user, found, stages)
    run_dir = output_dir(args.output_dir)
    drawn = _earlier_rows(join(run_dir, "results.json"))
    inputs = stages_lib.load_inputs(stages, stages_lib.Settings.of(args), heldout=load_heldout(args),
                                    load_model=lambda name: run.loaded(name, common.load_scorer(args, name)))
    steps = Steps()
    try:
        with common.one_model_at_a_time():
            _loop(found, steps, args, stages, inputs, run_dir, run, started)
    finally:  # Ctrl-C too: the plots of the steps done
        plot(steps.scored_rows(), run_dir, drawn)
    failed = [steps.failed[s].row for s in sorted(steps.failed)]
    if not steps.rows and not failed:
        raise LmprobeError(f"no checkpoint of '{args.checkpoints}' could be scored "
                           f"({plural(len(steps.skipped), 'step')} vanished while read)")
    say(summary(steps.scored_rows(), failed))
    say(f"\n{plural(len(steps.rows), 'step')} scored in {time.perf_counter() - started:.0f} s; results in "
        f"{os.path.abspath(run_dir) if '://' not in run_dir else run_dir}")
    if failed:
        raise LmprobeError(f"{plural(len(failed), 'step')} of '{args.checkpoints}' not scored "
                           f"({', '.join(str(r['step']) for r in failed)}: why is above and in results.json, whose "
                           "rows mark them failed): the same command tries them again")
