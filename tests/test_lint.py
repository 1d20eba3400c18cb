"""The repository passes ruff (configured in pyproject.toml), so CI fails on a lint error."""

import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_check_passes():
    ruff = shutil.which("ruff") or shutil.which("ruff", path=os.path.dirname(sys.executable))
    assert ruff, "ruff is a test dependency: pip install -e '.[test]'"
    done = subprocess.run([ruff, "check", "--no-cache", "--output-format=concise", REPO], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
