"""What every front end shares: the shared flags, parsing (flags from dataclasses, experiments.flags),
logging, one writer and one printer in multi-process runs, progress bars, provenance, and turning
bad input into one clear line.

A front end runs unchanged as N processes of one ``jax.distributed`` job (a TPU pod, or N
processes on localhost): ``parse`` joins the job before anything touches a device, every process
computes the same numbers, and process 0 alone logs (on stderr), prints the summary (``say``, on
stdout), shows progress and writes (lmprobe.store does nothing on the other processes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import os
import shlex
import signal
import socket
import sys
import threading
import time
import types

from tqdm.auto import tqdm

from lmprobe import log as _logging
from lmprobe import store
from lmprobe.cli import flags, lock
from lmprobe.engine import runtime
from lmprobe.errors import LmprobeError
from lmprobe.text import plural

log = _logging.get("experiments")
SHARED, FRONT_END = "shared (the same in every front end)", "front end"
FLAGS: dict[str, str] = {}  # the parsed front end's settings -> flag names: its errors speak in flags
EPILOG = """\
lists: repeat the flag or use commas (--model=a,b --model=c); optional values take 'none'; booleans
are --flag / --no_flag. --config=FILE reads flags from YAML or JSON (the same names; lists as lists);
flags on the command line override it. Log lines (--verbosity) go to stderr, the summary to stdout.
"""


@dataclasses.dataclass(frozen=True)
class Shared:
    """Flags that mean the same thing in every front end."""

    # parameter and compute dtype; auto: bfloat16 on GPU/TPU, float32 on CPU (logits, softmax stay float32)
    dtype: str = "auto"
    batch_size: int = 16  # sequences per device per batch (global = batch_size x data-parallel devices)
    model_parallel: int = 1  # devices sharing one model copy (the mesh's 'model' axis); the rest split the data
    sharding: str = "fsdp"  # fsdp: every weight split over all devices; tp: heads/MLP/vocab over 'model' only
    revision: str | None = None  # hub revision (branch, tag or commit) of hub models; none: the default branch
    offline: bool = False  # never contact the model hub (as HF_HUB_OFFLINE=1 does)
    allow_pickle: bool = False  # allow pickled .bin/.pt weights (runs the file's code: trusted files only)
    seed: int = 0  # every random choice flows from it
    verbosity: str = "info"  # log messages shown on stderr: debug, info, warning or error


@dataclasses.dataclass(frozen=True)
class Compile:
    """Compile before you rent: every jitted step the run would execute, compiled ahead of time at its
    batch geometry, nothing run and no weight read (lmprobe.planning.aot)."""

    # compile for this TPU slice (v4-8, v5e-8, v5e-16, v5e-256, v5p-8, v6e-8, ...) with libtpu's compiler on
    # this host, no TPU needed (pip install 'lmprobe-jax[tpu]'); with --compile_only
    target: str | None = None
    num_slices: int = 1  # slices of --target joined over the data-center network
    # compile every step the run would execute (per step: shapes, memory per device and fit, the TPU cost
    # model's time with --target) into results.json; run nothing
    compile_only: bool = False
    hbm: str | None = None  # memory per device for the fit (16GiB, 80GB); none: the target chip's (the devices' own)


COMPILE = "compile before you rent (lmprobe.planning.aot)"
# --batch_size's bound: sequences per device per batch; a batch larger than its work costs no more (the engine
# sizes batches by the work), but a real workload this many rows wide fits no device
MAX_BATCH_SIZE = 1 << 16
COMPILE_FRONT_ENDS = ("plan", "syntextbench", "byod", "synbench", "mstemp", "scope")  # the front ends with --target


def compile_flags(p: flags.Parser, *, moved: str | None = None) -> flags.Flags:
    """--target, --num_slices, --compile_only, --hbm (``Compile``). ``moved``: the flag that took over what
    --target meant in this front end before (SCoPE's models: '--model'), named when --target is no TPU slice."""
    p.compiles = True  # parse prepares libtpu for --target before jax starts
    p.target_moved = moved
    return flags.add(p, Compile, group=COMPILE, convert={"num_slices": flags.bounded(1)})


def _check_moved_target(p: flags.Parser, args) -> None:
    """An old --target=<model> (before --target named TPU slices) in a run that does not compile only: one
    line naming the flag that took it over."""
    moved = getattr(p, "target_moved", None)
    if moved is None or args.target is None or args.compile_only:
        return
    from lmprobe.planning.targets import target

    try:
        target(args.target)
    except LmprobeError:
        raise LmprobeError(f"--target={args.target} is not a TPU slice: the models it named are now "
                           f"{moved}={args.target} (repeat it or use commas); --target names the TPU slice that "
                           "--compile_only compiles for (v5e-8, ...)") from None


def compile_only_scorer(args, name: str):
    """The compile-only Scorer (lmprobe.planning.aot) of ``name`` as the shared and compile flags describe
    it: --target's devices (else this host's), --dtype ('auto': bfloat16 on a target), mesh, batch."""
    from lmprobe.planning import aot
    from lmprobe.planning.plan import parse_bytes
    from lmprobe.planning.targets import target

    slice_ = None if args.target is None else target(args.target, args.num_slices)
    dtype = None if args.dtype == "auto" else args.dtype
    return aot.compile_only_scorer(name, target=slice_, dtype=dtype, model_parallel=args.model_parallel,
                                   strategy=args.sharding, batch_size=args.batch_size,
                                   hbm_bytes=None if args.hbm is None else parse_bytes(args.hbm, flag="hbm"),
                                   offline=offline(args), revision=args.revision)


def compile_only(run: Run, args, queries, run_dir: str, *, notes=(), out_for=None) -> list:
    """A compile-only run (--compile_only) of each --model: ``queries(scorer, name)`` asks what the real run
    asks of a compile-only Scorer (lmprobe.planning.aot; its steps compiled, never run: the answers are zeros)
    and may return more notes on that model, then each model's report goes to results.json (``out_for(name)``:
    its directory, default ``run_dir``) and stdout; a step that does not fit ends the run with one line naming
    the flags that fix it."""
    from lmprobe.planning.aot import compile_report
    from lmprobe.store import join

    reports = []
    for name in args.model if isinstance(args.model, list | tuple) else [args.model]:
        scorer = compile_only_scorer(args, name)
        said = queries(scorer, name)
        report = compile_report(scorer, [*notes, *(said or ())])
        path = join(out_for(name) if out_for else run_dir, "results.json")
        run.write(path, {"model": name, **report.to_dict()}, names=[])
        say(report.table())
        reports.append(report)
        _refuse_unfit(name, report, path)
    say(f"\nreport in {run_dir}")
    return reports


def compile_only_models(run: Run, args, queries, run_dir: str, *, notes=()) -> dict:
    """A compile-only run (--compile_only) of a method that uses several models at once (MSTemp's target,
    evaluators and filter; SCoPE's reference and targets): ``queries(scorer_for)`` asks what the real run asks,
    ``scorer_for(name)`` giving each name's compile-only Scorer (made once, as a run loads each model once).
    One results.json holds every model's report (``models``, in the order first asked for) and the verdict
    over all of them; a step that does not fit ends the run as in ``compile_only``."""
    from lmprobe.planning.aot import compile_report
    from lmprobe.store import join

    scorers = {}

    def scorer_for(name: str):
        if name not in scorers:
            scorers[name] = compile_only_scorer(args, name)
        return scorers[name]

    queries(scorer_for)
    reports = {name: compile_report(scorer, notes) for name, scorer in scorers.items()}
    verdicts = [r.fits for r in reports.values()]
    fits = False if False in verdicts else True if verdicts and all(verdicts) else None
    path = join(run_dir, "results.json")
    run.write(path, {"compile_only": True, "fits": fits,
                     "estimate": "times are the TPU cost model's estimates, not measurements",
                     "models": {name: {"model": name, **r.to_dict()} for name, r in reports.items()}}, names=[])
    for report in reports.values():
        say(report.table())
    for name, report in reports.items():
        _refuse_unfit(name, report, path)
    say(f"\nreport in {run_dir}")
    return reports


def _refuse_unfit(name: str, report, path: str) -> None:
    """A model with a step that does not fit: one line naming the step and the flags that fix it."""
    if report.fits is False:
        bad = next(s for s in report.steps if s.fits(report.hbm_bytes) is False)
        if not bad.model_step:  # a method's own program on one device: neither batch nor mesh changes it
            raise LmprobeError(
                f"{name}'s run does not fit {report.target or 'these devices'}: its {bad.name} program (on one "
                f"device, as a run puts it) at {' '.join(bad.shapes)} needs more than the "
                f"{report.hbm_bytes / 2**30:.2f} GiB of a device (report in {path}), whatever the batch or mesh: "
                "give the method fewer samples (`n`) or levels, or leave out its loss-data baselines "
                "(`baselines=False`)")
        raise LmprobeError(
            f"{name} does not fit {report.target or 'these devices'} at this geometry: its {bad.name} step at "
            f"{' '.join(bad.shapes)} needs more than the {report.hbm_bytes / 2**30:.2f} GiB of a device "
            f"(report in {path}): pass a smaller `batch_size`, more devices (a larger `target` or "
            "`num_slices`), `model_parallel`, or `dtype=bfloat16`")


def _refuse_compile_flags(p: flags.Parser, argv) -> None:
    """--target / --compile_only given to a front end without them: one line naming the ones that have them."""
    given = [a.split("=", 1)[0] for a in argv if a.split("=", 1)[0] in ("--target", "--compile_only")]
    if given and not p.has_flag(given[0]):
        raise LmprobeError(f"{given[0]} compiles a model's steps for a TPU slice ahead of time, and {p.prog} has "
                           f"no such flag: drop it, or use a front end that has it "
                           f"({', '.join(f'lmprobe {n}' for n in COMPILE_FRONT_ENDS)})")


def check_compile_flags(args) -> bool:
    """Whether this is a compile-only run; --target without --compile_only is refused (one line)."""
    if args.target is not None and not args.compile_only:
        raise LmprobeError(f"--target={args.target} compiles for a TPU slice this run is not on: add --compile_only "
                           "(compile every step and report, run nothing), or drop --target to run here")
    return bool(args.compile_only)


def parser(doc: str, name: str | None = None) -> flags.Parser:
    """A parser with the shared flags; the front end adds its own (``front_end``) and its method's
    (``method``) from their dataclasses. ``doc`` (the module docstring) is shown as written;
    ``name``: the front end's (``python -m experiments.NAME``, ``lmprobe NAME``)."""
    p = flags.Parser(flags.PROG.format(name=name) if name else None, description=doc, epilog=EPILOG)
    p.group(FRONT_END)  # listed first, the shared flags last
    p.trailing = (SHARED,)
    flags.add(p, Shared, group=SHARED, choices={"dtype": runtime.DTYPES, "sharding": ("fsdp", "tp"),
                                                "verbosity": tuple(_logging.LEVELS)},
              convert={"batch_size": flags.bounded(1, MAX_BATCH_SIZE), "model_parallel": flags.bounded(1),
                       "seed": flags.bounded(0)})
    return p


def method_group(cls) -> str:
    """'method (MODULE.Config)', MODULE the shortest package that exports ``cls`` (methods.syntextbench, not .run)."""
    module = cls.__module__
    while "." in module:
        parent = module.rsplit(".", 1)[0]
        if getattr(sys.modules.get(parent), cls.__qualname__, None) is not cls:
            break
        module = parent
    return f"method ({module}.{cls.__qualname__})"


METHOD_SHARED = ("seed",)  # method Config fields that read the shared flag of their name (every seed is --seed)


def method(p: flags.Parser, cls, **kwargs) -> flags.Flags:
    """The flags of a method's Config. Its ``seed`` reads the shared --seed (METHOD_SHARED); any
    other field named as a shared flag must get its own flag name (``names={"batch_size": ...}``):
    flags.add raises otherwise."""
    return flags.add(p, cls, group=method_group(cls), **{"shared": METHOD_SHARED, **kwargs})


def front_end(p: flags.Parser, cls, **kwargs) -> flags.Flags:
    """The flags of a front end's own dataclass (model names, data, output directory)."""
    return flags.add(p, cls, group=FRONT_END, **kwargs)


STAGE_SETTINGS = "stage settings (lmprobe.methods.stages.Settings: each method's Config, as the stages run it)"


def stage_settings(p: flags.Parser, *, defaults: dict | None = None, help: dict | None = None) -> None:
    """The flags of lmprobe.methods.stages.Settings by their flat names (``stages.FLAT``: a field of a method's
    Config, its type and meaning declared there, at the stages' default; and the stages' own fields), for
    ``stages.Settings.of(args)``. ``defaults`` / ``help``: by flat name."""
    from lmprobe.methods import stages

    defaults, help, base = defaults or {}, help or {}, stages.Settings()
    by_method: dict[str, dict[str, str]] = {}
    for name, (method, field) in stages.FLAT.items():
        by_method.setdefault(method, {})[field] = name
    for method, names in by_method.items():
        config = getattr(base, method)
        notes = flags.comments(type(config))
        flags.add(p, type(config), group=STAGE_SETTINGS, fields=tuple(names), names=names,
                  defaults={f: defaults.get(name, getattr(config, f)) for f, name in names.items()},
                  help={f: help.get(name) or f"{method}: {notes.get(f, f)}" for f, name in names.items()})
    own = tuple(f.name for f in dataclasses.fields(stages.Settings) if f.name not in stages.METHODS)
    flags.add(p, stages.Settings, group=STAGE_SETTINGS, fields=own, shared=("seed", "batch_size"),
              defaults={k: v for k, v in defaults.items() if k in own},
              help={k: v for k, v in help.items() if k in own})


def parse(p: flags.Parser, argv=None):
    """``p.parse_args(argv)``, then join the multi-process job if this is one (before any device
    is touched: a device query first would fix a one-process job), then set up logging."""
    _refuse_compile_flags(p, sys.argv[1:] if argv is None else [str(a) for a in argv])
    args = p.parse_args(argv)
    FLAGS.clear()
    FLAGS.update(p.settings)
    _check_moved_target(p, args)
    if getattr(p, "compiles", False) and args.target is not None:  # libtpu told it only compiles, before jax starts
        from lmprobe.planning.targets import prepare_host, target

        prepare_host(target(args.target, getattr(args, "num_slices", 1)))
    runtime.initialize_distributed()
    _logging.setup(args.verbosity, is_main=runtime.is_main)
    return args


def dtype(args):
    """The dtype --dtype names here ('auto' resolved for the hardware, after distributed init)."""
    return runtime.resolve_dtype(args.dtype)


def offline(args) -> bool | None:
    """--offline, else None: HF_HUB_OFFLINE decides."""
    return True if args.offline else None


def scorer_kwargs(args) -> dict:
    """Scorer.load's keyword arguments from the shared flags (and the weights' ``progress``)."""
    return dict(dtype=dtype(args), model_parallel=args.model_parallel, strategy=args.sharding, revision=args.revision,
                offline=offline(args), allow_pickle=args.allow_pickle, batch_size=args.batch_size, progress=progress)


def load_scorer(args, name: str | None = None, **kwargs):
    """The Scorer of ``name`` (default --model) as the shared flags describe it; variants
    (NAME@noise=SIGMA, @drop-layer=K, @int8, @bf16: lmprobe.checkpoints.variants) applied."""
    from lmprobe.engine import Scorer

    return Scorer.load(name or args.model, **{**scorer_kwargs(args), **kwargs})


def load_checkpoint(args, name: str, **kwargs):
    """``lmprobe.checkpoints.load`` as the shared flags describe it: dtype, revision, and the
    parameters placed on the mesh of --model_parallel / --sharding, as Scorer.load places them."""
    from lmprobe.checkpoints import load
    from lmprobe.engine import make_mesh, placement

    place = placement(make_mesh(args.model_parallel), args.sharding)
    return load(name, dtype=dtype(args), place=place, offline=offline(args), allow_pickle=args.allow_pickle,
                revision=args.revision, **{"progress": progress, **kwargs})


def require_kind(args, names, what: str, accepted) -> None:
    """Refuse, before any weight is read, each model of ``names`` whose kind (causal LM, encoder,
    encoder-decoder: the family its config.json names) ``what`` cannot use (``accepted``)."""
    from lmprobe.checkpoints import variants
    from lmprobe.checkpoints.model_config import hf_config
    from lmprobe.methods import require_kind as check
    from lmprobe.models import family_for

    for name in names:
        config, where = hf_config(variants.split_name(name)[0], offline=offline(args), revision=args.revision)
        check(what, name, family_for(config, where=where).kind, accepted)


_saved_in: list[str] = []  # the run directory (output_dir) of this program, for main_guard's Ctrl-C line


def output_dir(path) -> str:
    """``path`` checked writable by process 0 (one clear error on every process otherwise), as a
    string; join files under it with ``lmprobe.store.join`` (local paths and gs:// URLs). This run
    then holds its lock (lmprobe.cli.lock: a second run on it stops with one line naming this one;
    ``main_guard`` lets it go), and the temporary files of writes killed in an earlier run are
    removed. Ctrl-C (``main_guard``) then names it as where the finished work is."""
    store.check_writable(path)
    lock.take(path)
    if runtime.is_main() and (removed := store.remove_leftovers(path)):
        log.info(f"{path}: removed {plural(removed, 'temporary file')} of writes an earlier run did not finish")
    _saved_in[:] = [str(path)]
    return str(path)


def say(*args, **kwargs) -> None:
    """The result (a front end's summary) on stdout, from process 0 only; messages go to ``log``."""
    if runtime.is_main():
        print(*args, **kwargs)


def progress(iterable, desc: str = "", **kwargs):
    """Progress over ``iterable`` on process 0 where --verbosity shows info: a bar when stderr is a
    terminal, log lines (start, every 30 s with rate and ETA, end: lmprobe.log.Progress) when it is
    a file or a job log; the bare iteration elsewhere."""
    if not runtime.is_main() or not _logging.enabled(logging.INFO):
        return iterable
    if sys.stderr.isatty():
        return tqdm(iterable, desc=desc, **kwargs)
    return _logging.Progress(iterable, desc=desc, **kwargs)


@contextlib.contextmanager
def one_model_at_a_time():
    """Around a loop that loads one model after another and calls ``gc.collect()`` after each (reference cycles
    hold its weights): the objects from before the loop are frozen meanwhile, so each collection scans only what
    the loop made. A full scan of a large process (a notebook's, or a test session's million objects) takes
    a second or more each time. A caller's own ``gc.freeze()`` is kept: nothing is unfrozen then."""
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


class Run:
    """A front end's run: when it started, its command line, its flags and the models it loaded,
    for the ``run_info`` of every results.json it writes."""

    def __init__(self, argv=None):
        self.started = time.time()
        self.given, self.argv = argv, list(sys.argv)
        self.args, self.models, self.checkpoints = None, {}, []

    def parse(self, p: flags.Parser):
        self.args = parse(p, self.given)
        self.argv = list(sys.argv) if self.given is None else [*shlex.split(p.prog), *map(str, self.given)]
        return self.args

    def loaded(self, name: str, scorer):
        """Record ``scorer``'s identity and mesh (not the scorer: its weights may be freed); returns it."""
        self.models[name] = types.SimpleNamespace(
            name=name, identity=getattr(scorer, "identity", None) or {"name": name},
            mesh=getattr(scorer, "mesh", None), strategy=getattr(scorer, "strategy", None))
        return scorer

    def info(self, names=None, **extra) -> dict:
        from lmprobe.report.provenance import run_info

        models = [self.models[n] for n in (self.models if names is None else names) if n in self.models]
        return run_info(scorers=models, checkpoints=self.checkpoints, seed=getattr(self.args, "seed", None),
                        started=self.started, argv=self.argv,
                        extra={"flags": dict(vars(self.args)) if self.args else {}, **extra})

    def write(self, path, result: dict, names=None) -> None:
        """``result`` with its ``run_info`` to ``path``; an earlier run's file there is kept aside."""
        result["run_info"] = self.info(names)
        store.write_results(path, result)


def main_guard(fn):
    """Run ``fn``; an LmprobeError prints as one line on stderr and exits with status 2; Ctrl-C
    (SIGINT) or SIGTERM (a pod's preemption) as one line saying what is saved, with status 128 + signal,
    within STOP_GRACE_S seconds of the signal (``StopWatchdog``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        restore = _stop_on_signals()
        try:
            return fn(*args, **kwargs)
        except LmprobeError as e:
            print(f"error: {flags.as_flags(str(e), FLAGS)}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt as e:
            print(interrupted_line(), file=sys.stderr)
            if isinstance(e, Stopped):  # a signal: the interpreter's exit would wait for XLA's running programs
                _exit_now(128 + e.signum)
            sys.exit(128 + signal.SIGINT)
        finally:
            lock.release_all()
            restore()

    return wrapper


class Stopped(KeyboardInterrupt):
    """A stop signal (SIGTERM, SIGINT), raised where the program is, so that it ends as Ctrl-C does."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, _frame):
    raise Stopped(signum)


STOP_GRACE_S = 20.0  # seconds from a stop signal to the exit, at the latest (a pod's grace: 30 s, then SIGKILL)


def _stop_on_signals():
    """Turn SIGTERM, and SIGINT unless it is ignored or handled by the program, into ``Stopped``, and arm
    ``StopWatchdog`` (main thread only); a function that puts back what was there before."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_stopped)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_stopped)
    watchdog = StopWatchdog.arm(tuple(previous))

    def restore():
        watchdog.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def _exit_now(status: int) -> None:
    """Exit with ``status`` at once, the output flushed: no interpreter shutdown, which waits for the
    programs XLA is running (a run took 82 s to end after SIGTERM). What is saved stays saved: every stage's
    results and caches are written atomically when it ends; the unfinished stage's work is lost, as a
    kill -9 would lose it, and the same command resumes. The output directory's lock is released first."""
    with contextlib.suppress(Exception):
        lock.release_all()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


class StopWatchdog(threading.Thread):
    """Ends the process ``STOP_GRACE_S`` seconds after a stop signal, if the main thread has not by then.

    Python runs a signal's handler in the main thread between bytecodes: while that thread waits in one
    long XLA call (a compilation, a program's execution, a readback), ``Stopped`` waits with it. The
    C-level handler does write the signal's number to the wakeup fd at once (``signal.set_wakeup_fd``):
    this thread reads it, gives the main thread the grace period to stop as usual, and otherwise prints
    what is saved and exits (``_exit_now``: the XLA call is not waited for).
    """

    def __init__(self, signals: tuple, reader: socket.socket, writer: socket.socket):
        super().__init__(name="lmprobe-stop-watchdog", daemon=True)
        self.signals, self.reader, self.writer = signals, reader, writer
        self.previous_fd = -1
        self.signalled = threading.Event()

    @classmethod
    def arm(cls, signals: tuple) -> StopWatchdog:
        """A started watchdog of ``signals``, the wakeup fd its socket (main thread only)."""
        reader, writer = socket.socketpair()
        writer.setblocking(False)  # set_wakeup_fd's requirement
        watchdog = cls(signals, reader, writer)
        watchdog.previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        watchdog.start()
        return watchdog

    def run(self) -> None:
        try:
            while data := self.reader.recv(64):  # empty: disarmed, the guarded function returned
                signum = next((s for s in data if s in self.signals), None)
                if signum is not None:
                    self.signalled.set()
                    time.sleep(STOP_GRACE_S)  # as a rule the main thread has ended the process by then
                    print(f"{signal.Signals(signum).name}: the running computation did not return within "
                          f"{STOP_GRACE_S:.0f} s; exiting without it\n{interrupted_line()}", file=sys.stderr)
                    _exit_now(128 + signum)
        except OSError:
            return
        finally:
            self.reader.close()

    def stop(self) -> None:
        """Disarm, unless a stop signal came: then the process is ending, and the watchdog sees that it does."""
        if self.signalled.is_set():
            return
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self.previous_fd)
        self.writer.close()


def interrupted_line() -> str:
    """What Ctrl-C leaves: the run directory's finished work (caches), and how to resume."""
    start = "\n" if sys.stderr.isatty() else ""  # off the progress bar's line
    if not _saved_in:
        return f"{start}interrupted: nothing was saved yet"
    return (f"{start}interrupted: the finished stages are saved under {_saved_in[0]} (results, cache); "
            "the same command resumes from them")
