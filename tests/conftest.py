"""Test session setup: CPU only, no network, fp32 matmuls; 8 virtual devices, of which a test's default
mesh spans one unless the test is marked ``multi_device``; one compilation cache that every test shares;
tiny random stand-ins of the embedded models (tiny_smollm2_dir, tiny_minilm_dir); transformers' SmolLM2, the
parity reference, kept between sessions (smollm2_reference).

jax fixes its device count when the backend starts, so the 8 CPU devices exist for the whole session
(tests that name devices, ``make_mesh(devices=jax.devices()[:2])``, get them). What differs per test
is the mesh built when none is named (``make_mesh()``, ``Scorer(model)``, ``Scorer.load``, the front
ends): lmprobe.engine.set_default_devices makes it one device, so a method's test compiles and runs
one unpadded program instead of an 8-way one padded to 8x the rows; a test marked ``multi_device``
(and every test under tests/engine/ and tests/planning/) gets the mesh over all 8. Module-level code runs
at collection, outside any test, and sees all 8.

Compiled programs are shared across tests (and with the front ends the tests run in subprocesses)
through a persistent compilation cache with no minimum compile time: a new Runner of the same model
and shapes loads its programs instead of compiling them (and, in one process, uses the steps that
Runners of its structure traced: lmprobe.engine.runner). The folder is $LMPROBE_COMPILATION_CACHE, else
~/.cache/lmprobe/jax-tests (apart from the user's runs' cache, which keeps only programs that took
0.5 s to compile); it outlives the session, as the library's own does, so that a rerun of the suite
compiles only what changed, and is pruned to 2 GiB when a session starts (least recently used programs
go first). Where a test module ends with the process past MAPPINGS_BOUND memory mappings (XLA:CPU maps
each program it holds), jax's in-memory caches are cleared.

The user jobs (tests/test_no_torch.py: each front end in its own interpreter, minutes together) start with
the session's first test and run beside it at its own priority (a busy machine cannot starve them), using
what the suite's process leaves idle, with a compilation cache of their own (JOBS_CACHE); so do the jobs that
a ``starts_early`` marker names (the two-process job of tests/engine/test_multiprocess.py; EARLY_CACHE). A job
is ended only when it fails or writes nothing for minutes (tests.user_jobs.wait_while_progressing), never for
being slow.
"""

import logging
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import jax  # noqa: E402
import pytest  # noqa: E402

from lmprobe import log  # noqa: E402
from lmprobe.engine.mesh import set_default_devices  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_default_matmul_precision", "highest")

MULTI_DEVICE_DIRS = ("tests/engine/", "tests/planning/")  # the engine's and planning's tests: the mesh is their subject

CACHE = os.environ.get("LMPROBE_COMPILATION_CACHE") or os.path.join(
    os.path.expanduser("~"), ".cache", "lmprobe", "jax-tests")
jax.config.update("jax_compilation_cache_dir", CACHE)  # lmprobe's enable_compilation_cache leaves it alone
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
CACHE_BYTES = 2 << 30


def prune(folder: str, max_bytes: int) -> None:
    """Delete the least recently used files of ``folder`` until it holds at most ``max_bytes``.

    Done once a session, not by jax (``jax_compilation_cache_max_size``): jax's eviction scans the whole folder
    on every write, and fails every write once the folder holds an entry written without it (as the front
    ends' subprocesses write them), so that nothing new was cached any more."""
    if not os.path.isdir(folder):
        return
    files = [e for e in os.scandir(folder) if e.is_file()]
    used = sorted(files, key=lambda e: max(e.stat().st_atime, e.stat().st_mtime))
    total = sum(e.stat().st_size for e in files)
    for entry in used:
        if total <= max_bytes:
            break
        total -= entry.stat().st_size
        os.remove(entry.path)


# the user jobs' own (tests.user_jobs.Background): they run beside the suite's process, and jax writes an entry in
# place, not by rename: a test's front end reading a program a job is writing would warn of a bad entry
JOBS_CACHE = CACHE + "-jobs"
EARLY_CACHE = CACHE + "-early"  # likewise the jobs a starts_early marker starts (they run beside both)
for folder in (CACHE, JOBS_CACHE, EARLY_CACHE):
    prune(folder, CACHE_BYTES)
os.environ["LMPROBE_COMPILATION_CACHE"] = CACHE  # the front ends the tests run in subprocesses share it


def multi_device(item) -> bool:
    path = os.path.relpath(str(item.path), str(item.config.rootpath)).replace(os.sep, "/")
    return item.get_closest_marker("multi_device") is not None or path.startswith(MULTI_DEVICE_DIRS)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures (module-scoped ones included) are made: its default devices."""
    set_default_devices(None if multi_device(item) else jax.devices()[:1])


# XLA:CPU maps 10-250 memory regions for each program it holds, and jax's caches hold every program the session
# ran: the suite's process reached 59,322 of the 65,530 mappings Linux allows (vm.max_map_count; past it, loading
# the next program crashes), and one module added 33,000 (tests/engine/test_scorer.py's 8-device programs). Past
# this many, jax's caches are cleared where a test module ends.
MAPPINGS_BOUND = 20_000


def memory_mappings() -> int:
    """The process's memory mappings (0 where /proc is not there)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


def pytest_runtest_teardown(item, nextitem):
    """Undo what a test's front end set for the process: the default devices, and ``log.setup``'s handler
    (the 'lmprobe' logger stops propagating, so a later test's caplog would see none of its records). Where a
    test module ends with the process past MAPPINGS_BOUND memory mappings: jax's caches cleared."""
    set_default_devices(None)
    if nextitem is not None and nextitem.module is not item.module and memory_mappings() > MAPPINGS_BOUND:
        jax.clear_caches()
    logger = logging.getLogger(log.ROOT)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True


USER_JOBS = pytest.StashKey()  # the session's tests.user_jobs.Background


@pytest.fixture(scope="session", autouse=True)
def user_jobs_running(request, tmp_path_factory):
    """The user jobs that the session's tests name (``user_jobs`` markers: tests/test_no_torch.py), started with
    its first test and run one after another beside the suite, at its priority (tests.user_jobs.Background);
    None when no selected test names one."""
    jobs = [job for item in request.session.items for marker in item.iter_markers("user_jobs") for job in marker.args]
    if not jobs:
        yield None
        return
    from tests.user_jobs import Background

    running = Background(jobs, str(tmp_path_factory.mktemp("jobs")), env={"LMPROBE_COMPILATION_CACHE": JOBS_CACHE})
    request.config.stash[USER_JOBS] = running
    yield running
    running.stop()


def pytest_collection_modifyitems(session, config, items):
    """The tests that read early-started jobs (``starts_early``) run last, by when their jobs are done."""
    items.sort(key=lambda item: item.get_closest_marker("starts_early") is not None)  # stable: else as collected


@pytest.fixture(scope="session", autouse=True)
def started_early(request, tmp_path_factory):
    """Subprocess jobs that selected tests read, started with the session's first test to run beside the suite:
    a test's ``starts_early("module:function")`` marker names a function(request, folder) that starts them and
    returns an object with ``stop()``. The fixture gives ``started(name)``: that object, or the error that
    starting it raised (raised in the test that reads it, not in every test)."""
    import importlib

    names = dict.fromkeys(m.args[0] for item in request.session.items for m in item.iter_markers("starts_early"))
    started = {}
    for name in names:
        module, function = name.split(":")
        try:
            started[name] = getattr(importlib.import_module(module), function)(request, tmp_path_factory.mktemp(
                function))
        except Exception as e:  # the test that reads it fails with it
            started[name] = e

    def get(name: str):
        if name not in started:
            raise KeyError(f"{name} was not started: mark the test @pytest.mark.starts_early({name!r})")
        if isinstance(started[name], Exception):
            raise started[name]
        return started[name]

    yield get
    for job in started.values():
        if not isinstance(job, Exception):
            job.stop()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """How long each user job took in the background (its test's own time is only the wait)."""
    running = config.stash.get(USER_JOBS, None)
    if running is not None and running.seconds:
        terminalreporter.write_sep("=", "user jobs, run beside the suite (tests/test_no_torch.py)")
        for job, seconds in running.seconds.items():
            terminalreporter.write_line(f"{seconds:7.1f} s  {job}  (exit {running.results[job].returncode})")


@pytest.fixture(scope="session")
def tiny_smollm2_dir(tmp_path_factory) -> str:
    """A tiny random SmolLM2 (its tokenizer, 2 layers of width 64): tests/tiny_models.py."""
    from tests.tiny_models import tiny_smollm2

    return tiny_smollm2(tmp_path_factory.mktemp("tiny_smollm2"))


@pytest.fixture(scope="session")
def smollm2_reference():
    """(transformers' SmolLM2-135M from the embedded GGUF, fp32; its tokenizer): tests/references.py,
    kept between sessions beside the compilation cache."""
    pytest.importorskip("torch")
    from tests.references import smollm2_transformers

    return smollm2_transformers(os.path.join(os.path.dirname(CACHE), "tests-references"))


@pytest.fixture(scope="session")
def tiny_minilm_dir(tmp_path_factory) -> str:
    """A tiny random MiniLM (its tokenizer and pooling, 2 layers of width 64): tests/tiny_models.py."""
    from tests.tiny_models import tiny_minilm

    return tiny_minilm(tmp_path_factory.mktemp("tiny_minilm"))
