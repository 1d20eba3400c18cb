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
settings: a rerun loads and scores only new steps. --watch polls every --poll_s seconds for new
steps until one at or past --until_step is done, or Ctrl-C (results.json then holds every step
done). A step deleted while it is read (checkpoint rotation) is skipped with one line on stderr.
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
from lmprobe.cli import common, flags
from lmprobe.cli.common import log, main_guard, output_dir, progress, say
from lmprobe.data import corpus as corpus_lib
from lmprobe.errors import LmprobeError
from lmprobe.integrations.own_model import OwnModel
from lmprobe.methods import stages as stages_lib
from lmprobe.report import plots
from lmprobe.store import cache_key, cached_json, exists, join, read_json
from lmprobe.text import number, plural

CACHE_VERSION = 2  # 2: rows hold every stage's numbers under one name each (``numbers``)


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    checkpoints: str = ""  # a checkpoint directory (a trainer's output) or a glob ('out/checkpoint-*')
    methods: tuple[str, ...] = stages_lib.PROXIES  # stages: syntextbench, synbench, byod (decoders), probes, ...
    heldout: str | None = None  # held-out text: a .txt/.jsonl file or a corpus name; none: no held-out loss
    output_dir: str = "runs/sweep"  # results.json, step-*.png, per-step and per-stage caches
    watch: bool = False  # keep polling for new checkpoints (until --until_step or Ctrl-C)
    until_step: int | None = None  # stop once a step at or past this is done; steps past it are not scored
    poll_s: float = 30.0  # seconds between looks for new checkpoints (--watch)
    # MODULE:FUNCTION, FUNCTION(params) -> CallableLM or nnx.Module: your own model; runs that code (imports
    # MODULE from the current directory or PYTHONPATH, calls FUNCTION): name only code you trust
    model_fn: str | None = None
    tokenizer: str | None = None  # with --model_fn: the tokenizer, a model name or a directory
    params_key: str | None = None  # with --model_fn: the parameters' path in the saved tree (default: params, or all)


def build_parser():
    p = common.parser(__doc__, "sweep")
    common.front_end(p, FrontEnd, convert={"until_step": flags.bounded(0), "poll_s": flags.bounded(0, base=float)})
    counts = ("syntextbench_n", "byod_examples", "heldout_texts", "heldout_chars", "probe_train", "probe_test",
              "zero_shot_examples")
    common.front_end(p, stages_lib.Settings, shared=("seed", "batch_size"), defaults={"heldout_texts": 200},
                  help={"heldout_texts": "held-out documents scored (the first ones of --heldout)"},
                  convert={**dict.fromkeys(counts, flags.bounded(1)), "synbench_n": flags.bounded(8),
                           "synbench_scales": flags.bounded(0, base=float, strict=True)})
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
    return [discover_lib.Found(int(s), p, k) for s, p, k in data]


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


def score(found, args, stages, inputs, run_dir: str, run: common.Run) -> dict:
    """One row: every stage on the checkpoint ``found``."""
    start = time.perf_counter()
    user = run.user if found.format == orbax_io.STANDARD else None
    scorer = run.loaded(found.path, user.scorer(found) if user else common.load_scorer(args, found.path))
    load_s = time.perf_counter() - start
    found_numbers, seconds = stages_lib.run(stages, scorer, stages_lib.Settings.of(args), inputs, name=found.path,
                                            run_dir=run_dir, progress=progress)
    row = {"step": found.step, "checkpoint": found.path, "format": found.format,
           "numbers": {k: _interval(n) for k, n in stages_lib.numbers(found_numbers).items()},
           "seconds": {"load": load_s, **seconds}}
    row["seconds"]["total"] = time.perf_counter() - start
    return row


def _interval(number: stages_lib.Number) -> dict:
    low, high = number.interval() or (None, None)
    return {"value": number.value, "stderr": number.stderr, "low": low, "high": high}


def scored(found, args, stages, inputs, run_dir: str, run: common.Run) -> dict | None:
    """``found``'s row, from OUTPUT_DIR/steps when an earlier run scored the same files with the
    same settings; None (one line on stderr) when the checkpoint vanished while it was read."""
    try:
        key = cache_key(step=found.step, files=found.fingerprint(), stages=list(stages),
                        settings=dataclasses.asdict(stages_lib.Settings.of(args)),
                        heldout=inputs.heldout and cache_key(texts=inputs.heldout), version=CACHE_VERSION)
        row = cached_json(join(run_dir, "steps", f"step-{found.step}-{key}.json"),
                          lambda: _guarded(found, args, stages, inputs, run_dir, run))
    except (Vanished, OSError) as e:
        if not _gone(found.path):
            raise
        if jax.process_index() == 0:
            print(f"step {found.step}: checkpoint '{found.path}' was deleted while it was read "
                  f"({type(e).__name__}): skipped", file=sys.stderr)
        return None
    return {**row, "checkpoint": found.path, "metrics": metrics(row)}  # where it is now (a moved run keeps its rows)


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
    """The rows of an earlier run's results.json at ``path``, or None."""
    try:
        return read_json(path)["rows"] if exists(path) else None
    except (ValueError, KeyError, TypeError):  # not a sweep's results: the plots are drawn afresh
        return None


def summary(rows: list[dict]) -> str:
    names = list(dict.fromkeys(k for r in rows for k in r["numbers"]))
    lines = ["step".rjust(10) + " " + " ".join(n[:16].rjust(16) for n in names) + "  seconds"]
    for r in rows:
        got = {k: v["value"] for k, v in r["numbers"].items()}
        lines.append(f"{r['step']:>10} " + " ".join(number(got.get(n), ".4f").rjust(16) for n in names)
                     + f"  {r['seconds']['total']:7.1f}")
    return "\n".join(lines)


def _loop(found, rows: dict, skipped: set, args, stages, inputs, run_dir: str, run: common.Run, started: float):
    """Score every new step (rows: step -> row) and rewrite results.json after each; with --watch,
    look again every --poll_s seconds until a step at or past --until_step is done."""
    while True:
        last = max((f.step for f in found), default=-1)
        for f in found:
            if f.step in rows or f.step in skipped or (args.until_step is not None and f.step > args.until_step):
                continue
            row = scored(f, args, stages, inputs, run_dir, run)
            gc.collect()  # the checkpoint's weights go before the next one loads
            if row is None:
                skipped.add(f.step)
            else:
                rows[f.step] = row
                log.info(f"step {f.step}: done in {row['seconds']['total']:.1f} s")
            run.write(join(run_dir, "results.json"), {
                "method": "sweep", "checkpoints": args.checkpoints, "rows": [rows[s] for s in sorted(rows)],
                "skipped_steps": sorted(skipped), "lower_is_better": sorted(stages_lib.LOWER_IS_BETTER),
                "wall_s": time.perf_counter() - started})
        if not args.watch or (args.until_step is not None and last >= args.until_step):
            break
        time.sleep(args.poll_s)
        found = listing(args.checkpoints, allow_empty=True, find=run.user.discover if run.user else
                        discover_lib.discover)


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
    started = time.perf_counter()
    run.user = own_model(args) if args.model_fn else None  # importable, with its tokenizer
    if not args.model_fn and (args.tokenizer or args.params_key):
        raise LmprobeError("--tokenizer and --params_key go with --model_fn=MODULE:FUNCTION (your own model)")
    found = listing(args.checkpoints, allow_empty=args.watch,  # a bad directory fails before any data loads
                    find=run.user.discover if run.user else discover_lib.discover)
    if run.user and found:  # the model builds on the first step's weights and can run --methods, before any write
        run.user.check(found[0], stages)
    run_dir = output_dir(args.output_dir)
    drawn = _earlier_rows(join(run_dir, "results.json"))
    inputs = stages_lib.load_inputs(stages, stages_lib.Settings.of(args), heldout=load_heldout(args))
    rows, skipped = {}, set()
    try:
        with common.one_model_at_a_time():
            _loop(found, rows, skipped, args, stages, inputs, run_dir, run, started)
    finally:  # Ctrl-C too: the plots of the steps done
        plot([rows[s] for s in sorted(rows)], run_dir, drawn)
    if not rows:
        raise LmprobeError(f"no checkpoint of '{args.checkpoints}' could be scored "
                           f"({plural(len(skipped), 'step')} vanished while read)")
    done = [rows[s] for s in sorted(rows)]
    say(summary(done))
    say(f"\n{plural(len(done), 'step')} in {time.perf_counter() - started:.0f} s; results in "
        f"{os.path.abspath(run_dir) if '://' not in run_dir else run_dir}")
