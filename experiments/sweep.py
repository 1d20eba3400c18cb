"""Score every checkpoint of a training run with the cheap label-free proxies: one row per step.

    lmprobe sweep --checkpoints=runs/train/ckpt --methods=syntextbench,synbench,byod --heldout=notes.txt
    lmprobe sweep --checkpoints='out/checkpoint-*' --output_dir=runs/sweep
    lmprobe sweep --checkpoints=runs/train/ckpt --watch --until_step=10000   # as a trainer writes them

--checkpoints is a directory or a glob: lmprobe Orbax steps (orbax_io.save), MaxText steps,
Hugging Face directories (step from a step_123 / checkpoint-123 name, else their order) and .gguf
files (lmprobe.checkpoints.discover). With --model_fn=MODULE:FUNCTION and --tokenizer, a model of
your own: checkpoints of orbax's standard API, FUNCTION(params) -> a CallableLM or nnx.Module
(lmprobe.integrations.own_model; --params_key where the parameters sit), one Scorer whose weights
each step swaps in. Each row's ``metrics`` holds its numbers under the in-loop callback's names.
Each checkpoint gets --methods (lmprobe.methods.proxies: BYOD on
decoders only) and, with --heldout (a text file or a corpus name: lmprobe.data.corpus), the
held-out loss (nats per token) and bits per byte (decoders). Writes OUTPUT_DIR/results.json (rows
sorted by step: value, stderr and 95% interval of each proxy where the method gives one, held-out
loss, seconds) after every step, and OUTPUT_DIR/step-<number>.png per number against step.
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

from experiments import cli, flags
from experiments.cli import log, main_guard, output_dir, progress, say
from lmprobe.checkpoints import discover as discover_lib
from lmprobe.checkpoints import orbax_io
from lmprobe.data import corpus as corpus_lib
from lmprobe.errors import LmprobeError
from lmprobe.integrations.own_model import OwnModel
from lmprobe.methods import proxies, realtask
from lmprobe.report import plots
from lmprobe.store import cache_key, cached_json, join
from lmprobe.text import number, plural

CACHE_VERSION = 1
Z95 = 1.959964  # a 95% normal interval: value +- Z95 x stderr
HELDOUT_LOSS = "heldout_loss"


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    checkpoints: str = ""  # a checkpoint directory (a trainer's output) or a glob ('out/checkpoint-*')
    methods: tuple[str, ...] = proxies.PROXIES  # label-free proxies: syntextbench, synbench, byod (decoders)
    heldout: str | None = None  # held-out text: a .txt/.jsonl file or a corpus name; none: no held-out loss
    heldout_texts: int = 200  # held-out documents scored (the first ones)
    heldout_chars: int = 1500  # characters of each document, cut at a word boundary
    output_dir: str = "runs/sweep"  # results.json, step-*.png, per-step and per-stage caches
    watch: bool = False  # keep polling for new checkpoints (until --until_step or Ctrl-C)
    until_step: int | None = None  # stop once a step at or past this is done; steps past it are not scored
    poll_s: float = 30.0  # seconds between looks for new checkpoints (--watch)
    model_fn: str | None = None  # MODULE:FUNCTION, FUNCTION(params) -> CallableLM or nnx.Module: your own model
    tokenizer: str | None = None  # with --model_fn: the tokenizer, a model name or a directory
    params_key: str | None = None  # with --model_fn: the parameters' path in the saved tree (default: params, or all)


def build_parser():
    p = cli.parser(__doc__, "sweep")
    cli.front_end(p, FrontEnd, convert={"heldout_texts": flags.bounded(1), "heldout_chars": flags.bounded(1),
                                        "until_step": flags.bounded(0), "poll_s": flags.bounded(0, base=float)})
    cli.front_end(p, proxies.Settings, shared=("seed", "batch_size"),
                  convert={"syntextbench_n": flags.bounded(1), "byod_examples": flags.bounded(1),
                           "synbench_n": flags.bounded(8), "synbench_scales": flags.bounded(0, base=float,
                                                                                           strict=True)})
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


def score(found, args, inputs, heldout, run_dir: str, run: cli.Run) -> dict:
    """One row: every method (and the held-out loss) on the checkpoint ``found``."""
    start = time.perf_counter()
    user = run.user if found.format == orbax_io.STANDARD else None
    scorer = run.loaded(found.path, user.scorer(found) if user else cli.load_scorer(args, found.path))
    load_s = time.perf_counter() - start
    settings = proxies.Settings.of(args)
    values, seconds = proxies.run(scorer, found.path, args.methods, settings, inputs, run_dir, progress=progress)
    values, stderr = proxies.split_stderr(values)
    row = {"step": found.step, "checkpoint": found.path, "format": found.format,
           "proxies": {k: _interval(v, stderr.get(k)) for k, v in values.items()}, "heldout": None,
           "seconds": {"load": load_s, **seconds}}
    if heldout is not None and scorer.is_decoder:
        t = time.perf_counter()
        got = proxies.cached_stage(run_dir, "heldout", dict(texts=heldout[1], chars=args.heldout_chars), scorer,
                                   lambda: realtask.perplexity(scorer, heldout[0], max_chars=args.heldout_chars,
                                                               progress=progress))
        row["heldout"] = {"loss": got["nll_per_token"], "bits_per_byte": got["bits_per_byte"],
                          "tokens": got["tokens"], "texts": got["texts"]}
        row["seconds"]["heldout"] = time.perf_counter() - t
    row["seconds"]["total"] = time.perf_counter() - start
    return row


def _interval(value, stderr) -> dict:
    out = {"value": value, "stderr": stderr, "low": None, "high": None}
    if value is not None and stderr is not None:
        out.update(low=value - Z95 * stderr, high=value + Z95 * stderr)
    return out


def scored(found, args, inputs, heldout, run_dir: str, run: cli.Run) -> dict | None:
    """``found``'s row, from OUTPUT_DIR/steps when an earlier run scored the same files with the
    same settings; None (one line on stderr) when the checkpoint vanished while it was read."""
    try:
        key = cache_key(step=found.step, files=found.fingerprint(), methods=list(args.methods),
                        settings=dataclasses.asdict(proxies.Settings.of(args)), heldout=heldout and heldout[1],
                        chars=args.heldout_chars, version=CACHE_VERSION)
        row = cached_json(join(run_dir, "steps", f"step-{found.step}-{key}.json"),
                          lambda: _guarded(found, args, inputs, heldout, run_dir, run))
    except (Vanished, OSError) as e:
        if not _gone(found.path):
            raise
        if jax.process_index() == 0:
            print(f"step {found.step}: checkpoint '{found.path}' was deleted while it was read "
                  f"({type(e).__name__}): skipped", file=sys.stderr)
        return None
    return {**row, "checkpoint": found.path, "metrics": metrics(row)}  # where it is now (a moved run keeps its rows)


def metrics(row: dict) -> dict:
    """A row's numbers under the names of the in-loop callback's rows (proxies.jsonl), so that one
    plot joins a run's in-loop history and its sweep: each proxy, heldout_loss, heldout_bits_per_byte."""
    out = {k: v["value"] for k, v in row["proxies"].items()}
    out.update({f"{k}_stderr": v["stderr"] for k, v in row["proxies"].items() if v["stderr"] is not None})
    if row["heldout"]:
        out.update({HELDOUT_LOSS: row["heldout"]["loss"], "heldout_bits_per_byte": row["heldout"]["bits_per_byte"]})
    return out


def _guarded(found, args, inputs, heldout, run_dir, run) -> dict:
    try:
        return score(found, args, inputs, heldout, run_dir, run)
    except Exception as e:
        if _gone(found.path):
            raise Vanished(str(e)) from e
        raise


def _gone(path: str, wait_s: float = 1.0) -> bool:
    """Whether ``path`` is deleted (waiting ``wait_s`` for a deletion under way to finish)."""
    if os.path.exists(path):
        time.sleep(wait_s)
    return not os.path.exists(path)


def load_heldout(args):
    """(texts, their cache identity) of --heldout, or None."""
    if not args.heldout:
        return None
    texts = [t for t in corpus_lib.load_corpus(args.heldout).documents if t.strip()][:args.heldout_texts]
    if not texts:
        raise LmprobeError(f"--heldout={args.heldout} holds no text: give a UTF-8 text file or a corpus name")
    return texts, cache_key(texts=texts)


def plot(rows: list[dict], run_dir: str) -> None:
    """step-<number>.png: each proxy (with its interval) and the held-out loss against step."""
    series = {}
    for r in rows:
        numbers = {**r["proxies"]}
        if r["heldout"] is not None:
            numbers[HELDOUT_LOSS] = {"value": r["heldout"]["loss"], "low": None, "high": None}
        for name, v in numbers.items():
            series.setdefault(name, []).append((r["step"], v["value"], v["low"], v["high"]))
    for name, points in series.items():
        steps, values, low, high = (list(c) for c in zip(*points, strict=True))
        plots.against_step(steps, values, join(run_dir, f"step-{name}.png"), name=name, low=low, high=high,
                           lower_is_better=name in proxies.LOWER_IS_BETTER | {HELDOUT_LOSS})


def summary(rows: list[dict]) -> str:
    names = list(dict.fromkeys(k for r in rows for k in r["proxies"]))
    names += [HELDOUT_LOSS] if any(r["heldout"] for r in rows) else []
    lines = ["step".rjust(10) + " " + " ".join(n[:16].rjust(16) for n in names) + "  seconds"]
    for r in rows:
        got = {k: v["value"] for k, v in r["proxies"].items()}
        got[HELDOUT_LOSS] = r["heldout"]["loss"] if r["heldout"] else None
        lines.append(f"{r['step']:>10} " + " ".join(number(got.get(n), ".4f").rjust(16) for n in names)
                     + f"  {r['seconds']['total']:7.1f}")
    return "\n".join(lines)


def _loop(found, rows: dict, skipped: set, args, inputs, heldout, run_dir: str, run: cli.Run, started: float):
    """Score every new step (rows: step -> row) and rewrite results.json after each; with --watch,
    look again every --poll_s seconds until a step at or past --until_step is done."""
    while True:
        last = max((f.step for f in found), default=-1)
        for f in found:
            if f.step in rows or f.step in skipped or (args.until_step is not None and f.step > args.until_step):
                continue
            row = scored(f, args, inputs, heldout, run_dir, run)
            gc.collect()  # the checkpoint's weights go before the next one loads
            if row is None:
                skipped.add(f.step)
            else:
                rows[f.step] = row
                log.info(f"step {f.step}: done in {row['seconds']['total']:.1f} s")
            run.write(join(run_dir, "results.json"), {
                "method": "sweep", "checkpoints": args.checkpoints, "rows": [rows[s] for s in sorted(rows)],
                "skipped_steps": sorted(skipped), "lower_is_better": sorted(proxies.LOWER_IS_BETTER | {HELDOUT_LOSS}),
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
    run = cli.Run(argv)
    args = run.parse(build_parser())
    proxies.check(args.methods, "methods")
    if not args.checkpoints:
        raise LmprobeError("give the checkpoints to sweep: --checkpoints=DIR (a trainer's output) or a glob")
    started = time.perf_counter()
    run.user = own_model(args) if args.model_fn else None  # importable, with its tokenizer
    if not args.model_fn and (args.tokenizer or args.params_key):
        raise LmprobeError("--tokenizer and --params_key go with --model_fn=MODULE:FUNCTION (your own model)")
    found = listing(args.checkpoints, allow_empty=args.watch,  # a bad directory fails before any data loads
                    find=run.user.discover if run.user else discover_lib.discover)
    if run.user and found:  # the model builds on the first step's weights and can run --methods, before any write
        run.user.check(found[0], args.methods, heldout=bool(args.heldout))
    run_dir = output_dir(args.output_dir)
    inputs = proxies.load_inputs(args.methods, proxies.Settings.of(args))
    heldout = load_heldout(args)
    rows, skipped = {}, set()
    try:
        _loop(found, rows, skipped, args, inputs, heldout, run_dir, run, started)
    finally:  # Ctrl-C too: the plots of the steps done
        plot([rows[s] for s in sorted(rows)], run_dir)
    if not rows:
        raise LmprobeError(f"no checkpoint of '{args.checkpoints}' could be scored "
                           f"({plural(len(skipped), 'step')} vanished while read)")
    done = [rows[s] for s in sorted(rows)]
    say(summary(done))
    say(f"\n{plural(len(done), 'step')} in {time.perf_counter() - started:.0f} s; results in "
        f"{os.path.abspath(run_dir) if '://' not in run_dir else run_dir}")


if __name__ == "__main__":
    main()
