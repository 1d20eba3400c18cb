"""Each front end's smallest job, run as a user's install runs it: the first hour's checks.

    python -m tests.user_jobs                # every job; a table of job, seconds, exit status
    python -m tests.user_jobs --no_torch     # the same with torch made unimportable (a dev machine)
    python -m tests.user_jobs byod-decoder   # some jobs

CI runs them in a fresh virtual environment that has only README's first command's install (no
torch, no pytest: this module needs neither). tests/test_no_torch.py runs them in the suite with
torch hidden, and fails on any attempt to import it. Each job uses the embedded models
(smollm2-135m, minilm-l6) and the data that README's first command installs, at settings that take
seconds; a job is one command line, as a user types it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

# job -> front end and its flags (--output_dir is added per run)
JOBS = {
    "smoke": ["smoke"],
    "syntextbench-encoder": ["syntextbench", "--model=minilm-l6", "--n=256", "--levels=0,0.5", "--no_baselines"],
    "syntextbench-decoder": ["syntextbench", "--model=smollm2-135m", "--n=200", "--levels=0,0.5", "--no_baselines",
                             "--icl_examples=4"],
    "byod-decoder": ["byod", "--model=smollm2-135m", "--max_examples=8", "--examples=toxicity:4"],
    "scope-decoder": ["scope", "--reference=smollm2-135m", "--target=smollm2-135m@bf16", "--max_examples=4",
                      "--trials=1", "--capability=typo"],
    "scope-encoder": ["scope", "--reference=minilm-l6", "--target=minilm-l6@int8", "--head=probe", "--max_train=64",
                      "--max_examples=4", "--trials=1", "--capability=typo"],
    "synbench-encoder": ["synbench", "--model=minilm-l6", "--n=400", "--scales=1,5", "--eps=0", "--a_t=0.7"],
    "synbench-decoder": ["synbench", "--model=smollm2-135m", "--n=600", "--scales=1,5", "--eps=0", "--a_t=0.7"],
    "mstemp-decoder": ["mstemp", "--model=smollm2-135m", "--evaluator=smollm2-135m", "--max_examples=4",
                       "--n_templates=1", "--m_samples=1", "--label_names=negative,positive"],
    "validate": ["validate", "--models=minilm-l6,minilm-l6@noise=0.05,minilm-l6@noise=0.1",
                 "--proxies=syntextbench", "--tasks=probes", "--syntextbench_n=200", "--syntextbench_levels=0,0.5",
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

TORCH_MARK = "user_jobs: an import of torch was attempted"
# Run first in the job's interpreter: torch looks absent to availability checks (importlib.util.find_spec),
# and an import statement for it fails and writes TORCH_MARK with the importing stack to stderr.
NO_TORCH = f"""\
import importlib.abc, importlib.util, sys, traceback
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.partition(".")[0] == "torch" else _find_spec(name, package))
class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] != "torch":
            return None
        sys.stderr.write({TORCH_MARK!r} + " (" + name + "):\\n" + "".join(traceback.format_stack()))
        raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by tests.user_jobs)", name=name)
sys.meta_path.insert(0, _NoTorch())
"""


def argv(job: str, output_dir: str) -> list[str]:
    """The job's command line after ``python -m experiments.``; ``{jobs}`` in a flag is the folder that
    holds every job's output directory."""
    name, *flags = (a.replace("{jobs}", os.path.dirname(output_dir)) for a in JOBS[job])
    return [name, *flags, *([] if job in NO_OUTPUT_DIR else [f"--output_dir={output_dir}"])]


def run(job: str, output_dir: str, *, no_torch: bool = False, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``job`` in a fresh interpreter (torch hidden with ``no_torch``); its output captured."""
    name, *flags = argv(job, output_dir)
    module = f"experiments.{name}" if name not in ("models", "datasets") else "experiments"
    args = flags if module != "experiments" else [name, *flags]
    if no_torch:
        code = NO_TORCH + f"import runpy; sys.argv = {[module, *args]!r}; runpy.run_module({module!r}, " \
                          "run_name='__main__', alter_sys=True)"
        command = [sys.executable, "-c", code]
    else:
        command = [sys.executable, "-m", module, *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def main(argv_: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv_ is None else argv_
    no_torch = "--no_torch" in args
    jobs = [a for a in args if not a.startswith("--")] or list(JOBS)
    jobs = list(dict.fromkeys(j for job in jobs for j in (NEEDS.get(job), job) if j))  # prerequisites first
    unknown = [j for j in jobs if j not in JOBS]
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
                  f"{' '.join(argv(job, os.path.join('DIR', job)))}", flush=True)
            if done.returncode != 0 or torch:
                failed.append(job)
                print(done.stdout[-3000:] + done.stderr[-6000:], file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
