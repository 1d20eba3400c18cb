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
while it is read (checkpoint rotation) is skipped with one line on stderr. The sweep itself is
lmprobe.evaluate.sweep (the same from Python); this front end reads the flags, prints and draws.
"""

from __future__ import annotations

import dataclasses
import os
import time

from lmprobe.checkpoints import discover as discover_lib
from lmprobe.checkpoints import orbax_io
from lmprobe.cli import common, flags
from lmprobe.cli.common import main_guard, output_dir, progress, say
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.evaluate import sweep as sweep_lib
from lmprobe.integrations.own_model import OwnModel
from lmprobe.methods import stages as stages_lib
from lmprobe.report import plots
from lmprobe.store import exists, join
from lmprobe.text import number, plural


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


def summary(rows: list[dict], failed: list[dict] = ()) -> str:
    names = list(dict.fromkeys(k for r in rows for k in r["numbers"]))
    lines = ["step".rjust(10) + " " + " ".join(n[:16].rjust(16) for n in names) + "  seconds"]
    for r in rows:
        got = {k: v["value"] for k, v in r["numbers"].items()}
        lines.append(f"{r['step']:>10} " + " ".join(number(got.get(n), ".4f").rjust(16) for n in names)
                     + f"  {r['seconds']['total']:7.1f}")
    lines += [f"{r['step']:>10}  not scored: {r['failed']}" for r in failed]
    return "\n".join(lines)


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
    find = run.user.discover if run.user else discover_lib.discover
    found = sweep_lib.listing(args.checkpoints, allow_empty=args.watch, find=find)  # a bad directory fails first
    if run.user:  # the model builds on the first step that reads and can run --methods, before any write
        check_own_model(run.user, found, stages)
    run_dir = output_dir(args.output_dir)
    drawn = sweep_lib.earlier_rows(join(run_dir, "results.json"))
    settings = stages_lib.Settings.of(args)
    inputs = stages_lib.load_inputs(stages, settings, heldout=sweep_lib.load_heldout(args.heldout, args.heldout_texts),
                                    load_model=lambda name: run.loaded(name, common.load_scorer(args, name)))

    def load(f):
        scorer = run.user.scorer(f) if f.format == orbax_io.STANDARD else common.load_scorer(args, f.path)
        return run.loaded(f.path, scorer)

    job = sweep_lib.Sweep(args.checkpoints, stages, settings, inputs, run_dir, load, find=find, write=run.write,
                          progress=progress)
    steps = sweep_lib.Steps()
    try:
        with common.one_model_at_a_time():
            sweep_lib.run(job, found, steps, watch=args.watch, until_step=args.until_step, poll_s=args.poll_s,
                          watch_s=args.watch_s, started=started)
    finally:  # Ctrl-C too: the plots of the steps done
        plot(steps.scored_rows(), run_dir, drawn)
    failed = steps.failed_rows()
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
