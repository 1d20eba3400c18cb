"""The repository passes ruff and the import contract (both configured in pyproject.toml), so CI fails on a
lint error, on a layer importing upward, on an import cycle, and on a module using another's private names."""

import ast
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("lmprobe", "experiments", "kernels")


def tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path=os.path.dirname(sys.executable))
    assert path, f"{name} is a test dependency: pip install -e '.[test]'"
    return path


def test_ruff_check_passes():
    done = subprocess.run([tool("ruff"), "check", "--no-cache", "--output-format=concise", REPO], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_layers_import_one_way_without_cycles():
    done = subprocess.run([tool("lint-imports"), "--no-cache"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr


def test_no_module_imports_another_modules_private_names():
    """ruff's SLF001 catches ``module._name``; this catches ``from module import _name``."""
    found = []
    for package in PACKAGES:
        for root, _, files in os.walk(os.path.join(REPO, package)):
            for f in (f for f in files if f.endswith(".py")):
                path = os.path.join(root, f)
                with open(path) as fh:
                    tree = ast.parse(fh.read(), path)
                found += [f"{os.path.relpath(path, REPO)}:{node.lineno}: from {node.module} import {alias.name}"
                          for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                          and node.module.split(".")[0] in PACKAGES
                          for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert not found, "private names imported from another module (make them public):\n" + "\n".join(found)
