"""What README's commands and CI install agree: constraints.txt pins every requirement within
setup.cfg's ranges, and README's first bash block has the two commands .ci/run runs."""

from __future__ import annotations

import configparser
import os
import re

from packaging.requirements import Requirement
from packaging.version import Version

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, Version]:
    with open(os.path.join(REPO, "constraints.txt"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    return {_key(name): Version(version) for name, version in (line.split("==") for line in lines)}


def _requirements() -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in ("test", "lm_eval"):
        lines += cfg["options.extras_require"][extra].splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.strip().startswith("#")]


def test_constraints_pin_every_requirement_inside_its_range():
    pins = _pins()
    for req in _requirements():
        assert _key(req.name) in pins, f"constraints.txt has no pin for {req.name}: python .ci/constraints.py"
        assert req.specifier.contains(pins[_key(req.name)], prereleases=True), (req, pins[_key(req.name)])


def _runtime_requirements() -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    return [Requirement(line) for line in cfg["options"]["install_requires"].splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_runtime_requirements_have_upper_bounds():
    runtime = _runtime_requirements()
    assert runtime and all(any(s.operator in ("<", "<=", "==") for s in r.specifier) for r in runtime), runtime


def test_readme_commands_are_what_ci_runs():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        block = f.read().split("```bash\n", 1)[1].split("\n```", 1)[0].splitlines()
    user, developer = block[:2]
    assert user.endswith(" && python -m experiments.syntextbench") and "[test]" not in user
    assert developer.endswith(" && python -m pytest") and '".[test]"' in developer
    for command in (user, developer):
        assert "-c constraints.txt" in command
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert "readme_command 1" in ci and "readme_command 2" in ci and "python -m tests.user_jobs" in ci


def test_lowest_environment_pins_every_runtime_requirement_at_its_lower_bound():
    """tests.install_envs' lowest environment: every install_requires name, pinned at its own lower bound."""
    from tests.install_envs import lowest_constraints

    runtime = _runtime_requirements()
    lower = {_key(r.name): Version(next(s.version for s in r.specifier if s.operator == ">=")) for r in runtime}
    pins = [Requirement(line) for line in lowest_constraints().splitlines()]
    assert all(len(p.specifier) == 1 and next(iter(p.specifier)).operator == "==" and not p.extras
               for p in pins), pins
    assert {_key(p.name): Version(next(iter(p.specifier)).version) for p in pins} == lower
    assert len(pins) == len(runtime)
    for r in runtime:  # each lower bound is inside its own range
        assert r.specifier.contains(lower[_key(r.name)]), r


def test_wheel_check_names_every_top_level_name_but_lmprobe(tmp_path):
    import zipfile

    from tests.install_envs import foreign_top_level

    wheel = tmp_path / "lmprobe_jax-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in ("lmprobe/__init__.py", "lmprobe/kernels/bayes.py", "lmprobe_jax-0.1.0.dist-info/RECORD",
                     "lmprobe_jax-0.1.0.data/scripts/x"):
            z.writestr(name, "")
    assert foreign_top_level(str(wheel)) == []
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr("kernels/__init__.py", "")
        z.writestr("experiments/byod.py", "")
    assert foreign_top_level(str(wheel)) == ["experiments", "kernels"]
