"""Each front end's smallest job, run as a user's install runs it: the first hour's checks.

    python -m tests.user_jobs                  # every job; a table of job, seconds, exit status
    python -m tests.user_jobs --no_torch       # the same with the test extra hidden (torch, lm_eval, ...)
    python -m tests.user_jobs byod-decoder     # some jobs
    python -m tests.user_jobs --install_check  # the smoke job, the listings and every front end's --help

The jobs run once, in the suite: tests/test_no_torch.py runs each with the test extra's packages
(setup.cfg; torch, lm_eval, nltk, scikit-learn, ...) made unimportable, as a user's install lacks
them, and fails on any attempt to import one. CI's first step checks the user's install itself, a
fresh virtual environment with only README's first command's install (no test extra: this module
needs none of it): that the smoke job computes with both embedded models and every front end
imports its method and parses its flags there (--install_check, about a minute). Each job uses the
embedded models (smollm2-135m, minilm-l6) and the data that README's first command installs, at
settings that take seconds; a job is one command line, as a user types it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# job -> front end and its flags (--output_dir is added per run)
JOBS = {
    "smoke": ["smoke"],
    # both embedded models in one run: an encoder, a decoder with in-context accuracy, the baselines
    "syntextbench": ["syntextbench", "--model=minilm-l6,smollm2-135m", "--n=200", "--levels=0.2",
                     "--baseline_steps=10", "--icl_examples=4"],
    "byod-decoder": ["byod", "--model=smollm2-135m", "--max_examples=8", "--examples=toxicity:4"],
    "scope-decoder": ["scope", "--reference=smollm2-135m", "--model=smollm2-135m@bf16", "--max_examples=4",
                      "--trials=1", "--capability=typo"],
    "scope-encoder": ["scope", "--reference=minilm-l6", "--model=minilm-l6@int8", "--head=probe", "--max_train=64",
                      "--max_examples=4", "--trials=1", "--capability=typo"],
    "synbench-encoder": ["synbench", "--model=minilm-l6", "--n=400", "--scales=1,5", "--eps=0", "--a_t=0.7"],
    "synbench-decoder": ["synbench", "--model=smollm2-135m", "--n=600", "--scales=1,5", "--eps=0", "--a_t=0.7"],
    "mstemp-decoder": ["mstemp", "--model=smollm2-135m", "--evaluator=smollm2-135m", "--max_examples=4",
                       "--n_templates=1", "--m_samples=1", "--label_names=negative,positive"],
    "validate": ["validate", "--models=minilm-l6,minilm-l6@noise=0.05,minilm-l6@noise=0.1",
                 "--proxies=syntextbench", "--tasks=probes", "--syntextbench_n=200", "--syntextbench_levels=0.5",
                 "--syntextbench_trials=1", "--probe_train=40", "--probe_test=30"],
    "train": ["train", "--preset=tiny"],
    "sweep": ["sweep", "--checkpoints={jobs}/train/checkpoints", "--methods=byod", "--byod_examples=8",
              "--heldout=fortunes", "--heldout_texts=8"],  # the train job's checkpoints
    "throughput": ["throughput", "--forward=2x32", "--generation=1x8x8", "--repeats=1"],
    "plan": ["plan", "--model=smollm2-135m"],
    "models": ["models"],
    "datasets": ["datasets"],
    "assets": ["assets", "--list"],
}
NEEDS = {"sweep": "train"}  # job -> the job whose output it reads (run first, into the same folder)
NO_OUTPUT_DIR = {"smoke", "plan", "models", "datasets", "assets"}
WRITES = {"syntextbench": "comparison.json"}  # job -> the file it writes last, where not results.json

INSTALL_CHECK = ["smoke", "plan", "models", "datasets", "assets"]  # seconds each; with every front end's --help
HELP = "--help"  # a job "<front end> --help" (install_check_jobs)


def install_check_jobs() -> list[str]:
    """What CI's user install runs: the smoke job, the listings and "<front end> --help" for each front end."""
    front_ends = dict.fromkeys(JOBS[job][0] for job in JOBS if job not in INSTALL_CHECK)
    return [*INSTALL_CHECK, *(f"{name} {HELP}" for name in front_ends)]


def test_extra_modules() -> list[str]:
    """The import names of the test extra's packages (setup.cfg) that are no run-time requirement and are
    installed here: what a user's install lacks and --no_torch hides."""
    import configparser
    import re
    from importlib import metadata

    def names(text):
        return {re.split(r"[\s\[<>=!~;]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
                for line in text.splitlines() if line.strip() and not line.strip().startswith("#")}

    setup = configparser.ConfigParser()
    setup.read(os.path.join(REPO, "setup.cfg"))
    test_only = names(setup["options.extras_require"]["test"]) - names(setup["options"]["install_requires"])
    return sorted(module for module, dists in metadata.packages_distributions().items()
                  if any(d.lower().replace("_", "-") in test_only for d in dists))


TORCH_MARK = "user_jobs: an import of torch was attempted"
# Run first in the job's interpreter: the test extra's packages (torch and HIDDEN) look absent to
# availability checks (importlib.util.find_spec) and an import of one raises ModuleNotFoundError, as in a
# user's install. An import of torch, guarded or not, also writes TORCH_MARK with the importing stack to
# stderr (no code path may try it); the others may be tried (optional: nltk's tagger, jax's libtpu) and
# the job must then run without them.
HIDDEN_CODE = """\
import importlib.abc, importlib.util, sys, traceback
_HIDDEN = set({hidden!r})
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.partition(".")[0] in _HIDDEN else _find_spec(name, package))
class _NoTestExtra(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in _HIDDEN:
            return None
        if name.partition(".")[0] == "torch":
            sys.stderr.write({mark!r} + " (" + name + "):\\n" + "".join(traceback.format_stack()))
        raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by tests.user_jobs)", name=name)
sys.meta_path.insert(0, _NoTestExtra())
"""


def no_torch_code() -> str:
    """Python run first in a job's interpreter that hides torch and the rest of the test extra."""
    return HIDDEN_CODE.format(hidden=sorted({"torch", *test_extra_modules()}), mark=TORCH_MARK)


def argv(job: str, output_dir: str) -> list[str]:
    """The job's command line after ``python -m experiments.``; ``{jobs}`` in a flag is the folder that
    holds every job's output directory."""
    name, *flags = (a.replace("{jobs}", os.path.dirname(output_dir)) for a in JOBS[job])
    return [name, *flags, *([] if job in NO_OUTPUT_DIR else [f"--output_dir={output_dir}"])]


def command(job: str, output_dir: str, *, no_torch: bool = False) -> list[str]:
    """The interpreter command line of ``job`` (a key of JOBS or "<front end> --help"), the test extra hidden
    with ``no_torch``."""
    name, *flags = argv(job, output_dir) if job in JOBS else job.split()
    module = f"experiments.{name}" if name not in ("models", "datasets") else "experiments"
    args = flags if module != "experiments" else [name, *flags]
    if no_torch:
        code = no_torch_code() + f"import runpy; sys.argv = {[module, *args]!r}; runpy.run_module({module!r}, " \
                          "run_name='__main__', alter_sys=True)"
        return [sys.executable, "-c", code]
    return [sys.executable, "-m", module, *args]


STALL_S = 600  # a job that writes nothing (stdout, stderr) for this long has stopped making progress: it is ended


def wait_while_progressing(processes: list[subprocess.Popen], logs: list[str], *, stall_s: float = STALL_S,
                           poll_s: float = 1.0) -> bool:
    """Wait for ``processes`` to exit, as long as they make progress: any growth of the files ``logs`` (their
    output; a long stage logs a progress line every 30 s) is progress, however slow the machine. Once none grew
    for ``stall_s`` seconds, every process is killed and False returned. A job is never ended for being slow."""
    sizes, last = None, time.monotonic()
    while any(p.poll() is None for p in processes):
        now = [os.path.getsize(f) if os.path.exists(f) else 0 for f in logs]
        if now != sizes:
            sizes, last = now, time.monotonic()
        elif time.monotonic() - last > stall_s:
            for p in processes:
                p.kill()
            for p in processes:
                p.wait()
            return False
        time.sleep(poll_s)
    return True


def run(job: str, output_dir: str, *, no_torch: bool = False, env: dict | None = None,
        started: Callable[[subprocess.Popen], None] = lambda process: None) -> subprocess.CompletedProcess:
    """Run ``job`` in a fresh interpreter in REPO (the test extra hidden with ``no_torch``), its output captured
    through files beside ``output_dir``; ended only when it stops making progress (``wait_while_progressing``).
    ``started`` is given the process as soon as it runs (to kill it from elsewhere)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    logs = [f"{output_dir}.stdout", f"{output_dir}.stderr"]
    os.makedirs(os.path.dirname(output_dir) or ".", exist_ok=True)
    with open(logs[0], "w") as out, open(logs[1], "w") as err:
        process = subprocess.Popen(command(job, output_dir, no_torch=no_torch), stdout=out, stderr=err,
                                   text=True, env=env, cwd=REPO)
    started(process)
    progressed = wait_while_progressing([process], logs)
    with open(logs[0]) as out, open(logs[1]) as err:
        stdout, stderr = out.read(), err.read()
    if not progressed:
        stderr += f"\nuser_jobs: killed after {STALL_S:.0f} s without output"
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


class Background:
    """``jobs`` (and the jobs they need) run one after another, with the test extra hidden, in a thread, while
    the caller goes on: the suite starts them with its first test, so that they use what its own process leaves
    idle (much of a test is one core's Python, tracing and compiling). They run at the suite's own priority, so
    that neither the suite nor other work on a busy machine can starve them, and end only when they fail or stop
    making progress (``run``). ``result(job)`` waits for one; ``stop()`` ends the run, killing a job under way."""

    def __init__(self, jobs, folder: str, *, env: dict | None = None):
        self.folder, self.env = folder, env
        self.order = list(dict.fromkeys(j for job in jobs for j in (NEEDS.get(job), job) if j))
        self.results: dict[str, subprocess.CompletedProcess] = {}
        self.seconds: dict[str, float] = {}
        self._done = {job: threading.Event() for job in self.order}
        self._process: subprocess.Popen | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run_all, name="user jobs", daemon=True)
        self._thread.start()

    def output_dir(self, job: str) -> str:
        return os.path.join(self.folder, job)

    def result(self, job: str) -> subprocess.CompletedProcess:
        """``job``'s finished process (its output captured), once it ran."""
        if job not in self._done:
            raise KeyError(f"user job {job!r} was not started: mark the test that reads it "
                           f"@pytest.mark.user_jobs({job!r})")
        self._done[job].wait()
        return self.results[job]

    def stop(self) -> None:
        self._stopped = True
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        self._thread.join()

    def _run_all(self) -> None:
        for job in self.order:
            start = time.perf_counter()
            try:
                self.results[job] = self._run_one(job)
            except Exception as error:  # a job that cannot start fails its test instead of hanging it
                self.results[job] = subprocess.CompletedProcess(job, -1, "", f"user_jobs: {error!r}")
            finally:
                self.seconds[job] = time.perf_counter() - start
                self._done[job].set()

    def _run_one(self, job: str) -> subprocess.CompletedProcess:
        if self._stopped:
            return subprocess.CompletedProcess(job, -9, "", "stopped before it started")
        return run(job, self.output_dir(job), no_torch=True, env=self.env, started=self._started)

    def _started(self, process: subprocess.Popen) -> None:
        self._process = process
        if self._stopped:
            process.kill()


def main(argv_: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv_ is None else argv_
    no_torch = "--no_torch" in args
    jobs = [a for a in args if not a.startswith("--")] or (install_check_jobs() if "--install_check" in args
                                                           else list(JOBS))
    jobs = list(dict.fromkeys(j for job in jobs for j in (NEEDS.get(job), job) if j))  # prerequisites first
    unknown = [j for j in jobs if j not in JOBS and j not in install_check_jobs()]
    if unknown:
        print(f"error: unknown job(s) {', '.join(unknown)}; jobs: {', '.join(JOBS)}", file=sys.stderr)
        return 2
    failed = []
    with tempfile.TemporaryDirectory(prefix="lmprobe-user-jobs-") as tmp:
        for job in jobs:
            start = time.perf_counter()
            done = run(job, os.path.join(tmp, job), no_torch=no_torch)
            seconds = time.perf_counter() - start
            torch = TORCH_MARK in done.stderr
            print(f"{job:<22} {seconds:7.1f} s  exit {done.returncode}{'  TORCH IMPORTED' if torch else ''}  "
                  f"python -m experiments{'.' if job not in ('models', 'datasets') else ' '}"
                  f"{' '.join(argv(job, os.path.join('DIR', job)) if job in JOBS else job.split())}", flush=True)
            if done.returncode != 0 or torch:
                failed.append(job)
                print(done.stdout[-3000:] + done.stderr[-6000:], file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
